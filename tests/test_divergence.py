"""Runs whose parameters blow up stop as "diverged" with their last finite metrics, each member of
a stack on its own, and grids go on; the per-member gradient-norm clip (train.grad_clip)."""

import csv
import json
import math

import pytest
import torch
from conftest import TINY, TINY_FIXED, as_args, as_cells, cli, metrics_text

from suite import TaskData, register_task
from suite.cli import main
from suite.engine.stacked import Alone, Stacked, clip_grad_norms
from suite.engine.train import train
from suite.specs.spec import resolve

CPU = torch.device("cpu")


def metrics(run_dir):
    return [json.loads(line) for line in metrics_text(run_dir).splitlines()]


def test_a_run_that_blows_up_stops_as_diverged_with_its_last_finite_metrics(tmp_path):
    out = tmp_path / "run"
    args = as_args({k: v for k, v in TINY.items() if k != "train.steps"})
    proc = cli("run", "--opt", "sgd", "--set", "lr=1e8", "--steps", "200", *args, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "DIVERGED" in proc.stderr
    result = json.loads((out / "result.json").read_text())
    records = metrics(out)
    assert result["stop_reason"] == "diverged" and result["grok_step"] is None
    assert all(math.isfinite(v) for r in records for v in r.values())  # no non-finite line was written
    assert result["steps"] == records[-1]["step"] + TINY["eval_every"] < 200  # stopped at the next evaluation
    assert result["final_val_acc"] == records[-1]["val_acc"] and result["final_train_loss"] == records[-1]["train_loss"]
    assert not (out / "error.json").exists() and not (out / "checkpoint.pt").exists()


@register_task("_loud_for_seed_1", override=True)
def loud_for_seed_1(seed: int, *, n: int = 64) -> TaskData:
    """Random 2x2 'images', two classes; seed 1's inputs are 1e30 times larger: finite at first, then SGD blows up."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 2, 2, generator=g) * (1e30 if seed == 1 else 1.0)
    y = (x.flatten(1).sum(1) > x.flatten(1).sum(1).median()).long()
    return TaskData(x[: n // 2], y[: n // 2], x[n // 2 :], y[n // 2 :], kind="image", n_classes=2)


def test_a_diverging_member_stops_alone_and_the_others_equal_their_separate_runs(tmp_path, one_thread):
    settings = {
        "n": 64,
        "hidden": 16,
        "batch_size": 16,
        "lr": 0.1,
        "train.steps": 60,
        "eval_every": 10,
        "patience": None,
    }
    specs = [resolve({"task": "_loud_for_seed_1", "opt": "sgd"}, settings, seed) for seed in range(3)]
    together = train(as_cells(specs, [tmp_path / "ens" / str(i) for i in range(3)]), CPU)
    assert [r["stack_size"] for r in together] == [3] * 3
    assert [r["stop_reason"] for r in together] == ["budget", "diverged", "budget"]
    assert together[1]["steps"] < 60
    for i, spec in enumerate(specs):
        (alone,) = train(as_cells([spec], [tmp_path / "alone" / str(i)]), CPU)
        assert metrics(tmp_path / "ens" / str(i)) == metrics(tmp_path / "alone" / str(i))
        assert (alone["stop_reason"], alone["steps"]) == (together[i]["stop_reason"], together[i]["steps"])


def test_a_grid_goes_on_past_a_diverged_cell_and_the_leaderboard_counts_it_a_failure(
    tmp_path, capsys, chunks_in_process
):
    grid = tmp_path / "g.toml"
    grid.write_text(TINY_FIXED + 'opt = "sgd"\n[axes]\n"opt.lr" = [1e8, 0.1]\n')
    root = tmp_path / "runs"
    assert main(["grid", str(grid), "--root", str(root)]) == 0
    assert "2 done" in capsys.readouterr().err
    results = {r["spec"]["opt"]["lr"]: r for r in (json.loads(p.read_text()) for p in root.rglob("result.json"))}
    assert results[1e8]["stop_reason"] == "diverged" and results[0.1]["stop_reason"] == "budget"
    assert main(["status", str(grid), "--root", str(root)]) == 0
    assert capsys.readouterr().out.strip() == "2 cells: 2 done"

    board = cli("leaderboard", root, "--out", tmp_path / "board")
    assert board.returncode == 0, board.stderr
    rows = list(csv.DictReader((tmp_path / "board/modular-mlp.csv").read_text().splitlines()))
    (diverged,) = [r for r in rows if "lr=1" in r["method"] and "lr=0.1" not in r["method"]]
    assert (diverged["seeds"], diverged["grokked"], float(diverged["success_rate"])) == ("1", "0", 0.0)
    assert len(rows) == 2


def _grads_with_norms(stack: Stacked, norms: list[float]) -> None:
    """Random gradients whose per-member global norms are `norms`."""
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=g) for p in stack.parameters()]
    member = torch.stack([torch.stack([x[i].norm() for x in grads]).norm() for i in range(len(norms))])
    for p, x in zip(stack.parameters(), grads):
        p.grad = x * (torch.tensor(norms) / member).view(-1, *[1] * (x.dim() - 1))


def test_grad_clip_scales_each_member_by_its_own_global_norm():
    from suite.models.mlp import MLP

    data = loud_for_seed_1(0)
    stack = Stacked([MLP(data, hidden=8) for _ in range(3)])
    _grads_with_norms(stack, [10.0, 0.5, 3.0])
    before = [p.grad.clone() for p in stack.parameters()]
    clip_grad_norms(stack, 1.0)
    after = list(stack.parameters())
    norms = [torch.stack([p.grad[i].norm() for p in after]).norm().item() for i in range(3)]
    assert norms[0] == pytest.approx(1.0, rel=1e-5) and norms[2] == pytest.approx(1.0, rel=1e-5)
    assert all(torch.equal(p.grad[1], b[1]) for p, b in zip(after, before))  # under the limit: untouched
    for p, b in zip(after, before):  # a member's tensors are all scaled by one factor (its direction is kept)
        assert torch.allclose(p.grad[0], b[0] / 10.0, rtol=1e-5) and torch.allclose(p.grad[2], b[2] / 3.0, rtol=1e-5)


def test_grad_clip_of_a_plain_model_is_torchs(one_thread):
    from suite.models.mlp import MLP

    data = loud_for_seed_1(0)
    torch.manual_seed(0)
    plain = MLP(data, hidden=8)
    torch.manual_seed(0)
    ours = Alone(MLP(data, hidden=8))
    for model in (plain, ours.model):
        torch.nn.functional.cross_entropy(model(data.x_train) * 100, data.y_train).backward()
    torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.01)
    clip_grad_norms(ours, 0.01)
    for a, b in zip(plain.parameters(), ours.model.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-6, atol=0)


def test_grad_clip_is_a_train_setting_recorded_in_the_spec_and_changes_the_run(tmp_path, one_thread):
    free, clipped = (resolve({}, {**TINY, **extra}) for extra in ({}, {"grad_clip": 0.05}))
    assert free["train"]["grad_clip"] is None and clipped["train"]["grad_clip"] == 0.05
    train(as_cells([free], [tmp_path / "free"]), CPU)
    train(as_cells([clipped], [tmp_path / "clipped"]), CPU)
    assert json.loads((tmp_path / "clipped/spec.json").read_text())["train"]["grad_clip"] == 0.05
    assert metrics(tmp_path / "free")[0] == metrics(tmp_path / "clipped")[0]  # same start
    assert metrics(tmp_path / "free")[1:] != metrics(tmp_path / "clipped")[1:]  # the clip acted
