"""Stacks: K seeds of a cell in one process equal K separate runs, seed for seed.

On CPU with one thread (how the local backend runs every process) the equality is exact, bit
for bit: each member of a stack makes the matrix products its separate run makes (MKL
computes a batch of them apart from one, for some shapes). With several threads, or on a GPU, a
kernel may split a sum differently for another batch shape; members then agree to float32
rounding (~1e-7 relative per step), which the dynamics after memorization can amplify over a
long run.
"""

import copy
import json
from pathlib import Path

import pytest
import torch
from conftest import TINY, TINY_FIXED, PreemptAt, as_args, as_cells, cli, metrics_text, stack_of
from torch import nn

from suite.engine.plan import blocker
from suite.engine.stacked import split_state, stack_states
from suite.engine.train import Preempted, train
from suite.specs.spec import canonical, resolve

CPU = torch.device("cpu")
SMALL = {"p": 11, "train_frac": 0.5, "test_frac": 0.3, "batch_size": 16, "train.steps": 60, "eval_every": 10}


pytestmark = pytest.mark.usefixtures("one_thread")


def _specs(choices, settings, seeds=(0, 1, 2)):
    return [resolve(choices, settings, seed) for seed in seeds]


def _metrics(run_dir: Path) -> str:
    return metrics_text(run_dir)


def _bit_for_bit(a: torch.Tensor, b: torch.Tensor) -> None:
    assert torch.equal(a, b), f"max difference {(a - b).abs().max().item():.3g}"


def _float32_rounding(a: torch.Tensor, b: torch.Tensor) -> None:
    # a sum rounded in another order: 1.2e-5 relative was seen where raw inputs (up to p) cancel in a gradient
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _same_result(a: dict, b: dict) -> bool:
    timing = ("wall_s", "steps_per_s", "stack_size", "created_utc")
    return {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}


@pytest.mark.parametrize(
    "choices,settings",
    [
        ({}, {"d": 16, "hidden": 32}),  # the paper's MLP and Adam
        ({"model": "transformer", "opt": "adamw"}, {"d_model": 16, "d_mlp": 32, "n_heads": 2}),
        ({"opt": "adamlr", "filter": "grokfast_ma", "sampler": "epoch"}, {"d": 16, "hidden": 32, "window": 5}),
        ({"opt": "sgd", "filter": "grokfast_ema", "sampler": "frequency"}, {"d": 16, "hidden": 32}),
        ({}, {"d": 16, "hidden": 32, "grad_clip": 0.05}),  # each member clipped by its own global norm
        ({"sampler": "grad_softmax"}, {"d": 16, "hidden": 32}),  # each member's sampler reads its own gradient
    ],
)
def test_each_member_equals_its_separate_run_bit_for_bit(tmp_path, choices, settings):
    specs = _specs(choices, {**SMALL, **settings})
    together = train(as_cells(specs, [tmp_path / "ens" / str(i) for i in range(3)]), CPU)
    for i, spec in enumerate(specs):
        (alone,) = train(as_cells([spec], [tmp_path / "alone" / str(i)]), CPU)
        assert _metrics(tmp_path / "ens" / str(i)) == _metrics(tmp_path / "alone" / str(i))
        assert _same_result(together[i], alone)
        assert together[i]["stack_size"] == 3 and alone["stack_size"] == 1
        assert json.loads((tmp_path / "ens" / str(i) / "spec.json").read_text()) == canonical(spec)
    assert len({_metrics(tmp_path / "ens" / str(i)) for i in range(3)}) == 3  # the seeds really differ


def test_members_stop_early_on_their_own(tmp_path):
    # A target some seeds reach by chance at different evaluations: each stops when its separate run would.
    specs = _specs(
        {},
        {**SMALL, "d": 16, "hidden": 32, "train.steps": 100, "target": 0.1, "hold": 0, "patience": 0},
        seeds=range(4),
    )
    together = train(as_cells(specs, [tmp_path / "ens" / str(i) for i in range(4)]), CPU)
    alone = [train(as_cells([s], [tmp_path / "alone" / str(i)]), CPU)[0] for i, s in enumerate(specs)]
    assert [r["steps"] for r in together] == [r["steps"] for r in alone]
    assert any(r["stop_reason"] == "target held" for r in together)
    assert len({r["steps"] for r in together}) > 1  # they did stop at different steps
    assert all(_same_result(t, a) for t, a in zip(together, alone))


def test_a_preempted_stack_resumes_to_the_same_numbers_and_its_members_can_resume_alone(tmp_path):
    specs = _specs({"opt": "adamlr", "filter": "grokfast_ema"}, {**SMALL, "d": 16, "hidden": 32, "patience": None})
    whole = train(as_cells(specs, [tmp_path / "whole" / str(i) for i in range(3)]), CPU)
    cut = [tmp_path / "cut" / str(i) for i in range(3)]
    with pytest.raises(Preempted):
        train(as_cells(specs, cut, [PreemptAt(30), None, None]), CPU)
    assert all((d / "checkpoint.pt").exists() and not (d / "result.json").exists() for d in cut)
    # seed 2 resumes on its own from the stack's checkpoint (same format as a separate run's)
    (alone,) = train(as_cells([specs[2]], [cut[2]]), CPU)
    resumed = train(as_cells(specs[:2], cut[:2]), CPU)
    for i, result in enumerate(resumed + [alone]):
        assert _metrics(cut[i]) == _metrics(tmp_path / "whole" / str(i))
        assert result["final_val_loss"] == whole[i]["final_val_loss"]


@pytest.mark.parametrize(
    "choices, settings",
    [
        ({"opt": "adamlr_adaptive"}, {"every": 5}),  # sigma_max of each member's whole E and W
        ({"filter": "orthograd"}, {}),  # norms over each member's whole tensors
        ({"filter": "egd"}, {}),  # an SVD of each member's whole gradient matrices
        ({"opt": "muon"}, {}),  # Newton-Schulz on each member's whole hidden matrix
    ],
)
def test_an_optimizer_or_filter_of_whole_tensors_stacks_one_per_member_and_each_is_its_separate_run(
    tmp_path, capsys, choices, settings
):
    specs = _specs(choices, {**SMALL, "d": 16, "hidden": 32, **settings}, seeds=(0, 1))
    together = train(as_cells(specs, [tmp_path / "a", tmp_path / "b"]), CPU)
    assert "one after the other" not in capsys.readouterr().err
    assert [r["stack_size"] for r in together] == [2, 2]
    for i, seed_dir in enumerate(("a", "b")):
        (alone,) = train(as_cells([specs[i]], [tmp_path / f"alone{i}"]), CPU)
        assert _metrics(tmp_path / seed_dir) == _metrics(tmp_path / f"alone{i}") and alone["stack_size"] == 1


PER_MEMBER = {  # a setting that differs from member to member of one stack
    "learning rate": ({}, "lr", [1e-2, 3e-3, 3e-2]),
    "weight decay": ({}, "weight_decay", [1e-3, 0.0, 1e-1]),
    "Adam-LR's c": ({"opt": "adamlr"}, "c", [10.0, 1.0, 30.0]),
    "AdamW's lr": ({"opt": "adamw"}, "lr", [1e-3, 3e-3, 1e-2]),
    "Grokfast's strength": ({"filter": "grokfast_ema"}, "lamb", [2.0, 0.5, 5.0]),
    "Grokfast's alpha": ({"filter": "grokfast_ema"}, "alpha", [0.98, 0.9, 0.5]),
}


@pytest.mark.parametrize("kind", PER_MEMBER)
def test_members_with_different_hyperparameters_stack_and_each_equals_its_separate_run(tmp_path, capsys, kind):
    choices, key, values = PER_MEMBER[kind]
    specs = [resolve(choices, {**SMALL, "d": 16, "hidden": 32, key: value}, seed) for seed, value in enumerate(values)]
    together = train(as_cells(specs, [tmp_path / "stack" / str(i) for i in range(3)]), CPU)
    assert "one after the other" not in capsys.readouterr().err and together[0]["stack_size"] == 3
    for i, spec in enumerate(specs):
        (alone,) = train(as_cells([spec], [tmp_path / "alone" / str(i)]), CPU)
        assert _metrics(tmp_path / "stack" / str(i)) == _metrics(tmp_path / "alone" / str(i))
        assert _same_result(together[i], alone)
    assert len({_metrics(tmp_path / "stack" / str(i)) for i in range(3)}) == 3


def test_a_preempted_stack_of_different_hyperparameters_resumes_to_the_same_numbers(tmp_path):
    specs = [resolve({"opt": "adamlr"}, {**SMALL, "d": 16, "hidden": 32, "c": c, "patience": None}, 0) for c in (1, 10)]
    whole = train(as_cells(specs, [tmp_path / "whole" / str(i) for i in range(2)]), CPU)
    cut = [tmp_path / "cut" / str(i) for i in range(2)]
    with pytest.raises(Preempted):
        train(as_cells(specs, cut, [PreemptAt(30), None]), CPU)
    resumed = train(as_cells(specs, cut), CPU)
    for i in range(2):
        assert _metrics(cut[i]) == _metrics(tmp_path / "whole" / str(i))
        assert resumed[i]["final_val_loss"] == whole[i]["final_val_loss"]


def test_blocker_names_each_reason():
    mlp = _specs({}, SMALL, seeds=(0, 1))
    assert blocker(mlp, [nn.Linear(2, 2)]) is None
    other_model = resolve({}, {**SMALL, "hidden": 64}, 1)
    assert blocker([mlp[0], other_model], [nn.Linear(2, 2)]) == (
        "the specs differ in more than the seed and the task's, optimizer's and filter's settings"
    )
    for own in ({"p": 13}, {"lr": 0.5}, {"weight_decay": 0.0}):  # each member's own settings: the shapes decide
        assert blocker([mlp[0], resolve({}, {**SMALL, **own}, 1)], [nn.Linear(2, 2)]) is None
    assert "optimizer" in blocker([mlp[0], resolve({"opt": "sgd"}, SMALL, 1)], [nn.Linear(2, 2)])  # another optimizer
    assert "optimizer" in blocker([mlp[0], resolve({"filter": "orthograd"}, SMALL, 1)], [nn.Linear(2, 2)])
    assert "BatchNorm" in blocker(mlp, [nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))])
    assert "dropout" in blocker(mlp, [nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1))])
    assert "Hessian" in blocker(_specs({}, {**SMALL, "hessian_every": 2}, (0, 1)), [nn.Linear(2, 2)])


def test_split_and_stack_are_inverse_on_an_optimizer_state():
    p = nn.Parameter(torch.randn(3, 4, 5))
    opt = torch.optim.Adam([p])
    p.grad = torch.randn_like(p)
    opt.step()
    state = opt.state_dict()
    members = split_state(state, 3)
    assert members[1]["state"][0]["exp_avg"].shape == (4, 5)
    assert torch.equal(members[1]["state"][0]["exp_avg"], state["state"][0]["exp_avg"][1])
    back = stack_states(members)
    assert torch.equal(back["state"][0]["exp_avg_sq"], state["state"][0]["exp_avg_sq"])
    assert back["state"][0]["step"] == state["state"][0]["step"] and back["param_groups"] == state["param_groups"]


@pytest.mark.filterwarnings("ignore:grad and param do not obey")  # the transposed layout set below, on purpose
def test_stacked_weights_take_their_gradients_without_a_copy_and_keep_that_layout():
    # Each stacked weight is stored in the layout its gradient leaves the backward in (contiguous
    # on CPU, out of the cat that joins the members; transposed from a GPU's batched product), so
    # autograd hands the gradient over as it is (no copy into another layout); and dropping members
    # or restacking saved states keeps a layout, here a transposed one.
    b = stack_of(_specs({}, {**SMALL, "d": 16, "hidden": 32}))
    grads = {}
    for name in b.model._names:
        b.model.stacked(name).register_hook(lambda g, name=name: grads.__setitem__(name, g.stride()))
    b.model(b.x_train).square().sum().backward()
    assert all(grads[n] == b.model.stacked(n).stride() for n in b.model._names)
    W = b.model.stacked("hidden.weight")
    W.data = W.data.transpose(1, 2).contiguous().transpose(1, 2)  # [K, hidden, 4 * d] stored transposed
    assert W.stride() == (32 * 64, 1, 32)
    b.update = type(b.update)(b.spec, b.model)  # the optimizer over the parameter as it now is
    b.model(b.x_train).square().sum().backward()
    b.update.step()
    exp_avg = b.update.optimizer.state[W]["exp_avg"]
    assert exp_avg.stride() == W.stride()
    assert stack_states(split_state(exp_avg, 3)).stride() == W.stride()
    b.model.keep([0, 2])
    kept = b.model.stacked("hidden.weight")
    assert kept.stride() == (32 * 64, 1, 32) and torch.equal(kept[1], W[2])


def test_run_with_seeds_writes_one_run_dir_per_seed(tmp_path):
    args = ["run", "--root", tmp_path, *as_args({**TINY, "train.steps": 20})]
    out = cli(*args, "--seeds", "0-1,4")
    assert out.returncode == 0, out.stderr
    paths = [Path(line) for line in out.stdout.splitlines()]
    assert [json.loads(p.read_text())["spec"]["seed"] for p in paths] == [0, 1, 4]
    assert "its share of a stack of 3" in out.stderr
    again = cli(*args, "--seeds", "4,5")  # 4 is done: only 5 runs
    assert again.returncode == 0 and again.stderr.count("already finished") == 1
    for bad, message in (
        (["--seeds", "3-1"], "--seeds takes a list"),
        (["--seeds", "a"], "--seeds takes a list"),
        (["--seeds", "0-1", "--out", tmp_path / "x"], "--out names one run folder"),
    ):
        out = cli(*args, *bad)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr
    assert not (tmp_path / "x").exists()


def test_a_grid_trains_its_seed_axis_as_stacks(tmp_path, chunks_in_process):
    grid = tmp_path / "g.toml"
    grid.write_text('name = "g"\n' + TINY_FIXED + '[axes]\nopt = ["adam", "adamlr"]\nseed = [0, 1, 2]\n')
    out = cli("grid", grid, "--root", tmp_path / "runs", "--workers", "2")
    assert out.returncode == 0, out.stderr
    assert "6 cells in 2 processes" in out.stderr
    (manifest,) = (tmp_path / "runs" / "grids" / "g").glob("*/manifest.json")
    chunks = json.loads(manifest.read_text())["chunks"]
    assert chunks == [[[0, 1, 2]], [[3, 4, 5]]]  # seeds of adam together, seeds of adamlr together
    results = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("result.json")]
    assert sorted(r["stack_size"] for r in results) == [3] * 6
    # the same grid with --stack 1: every cell on its own, the same numbers
    out = cli("grid", grid, "--root", tmp_path / "alone", "--stack", "1", "--workers", "2")
    assert out.returncode == 0 and "6 cells in 6 processes" in out.stderr
    for path in (tmp_path / "runs").rglob("metrics.jsonl"):
        twin = tmp_path / "alone" / path.relative_to(tmp_path / "runs")
        assert metrics_text(path.parent) == metrics_text(twin.parent)


def test_compile_trains_the_same_cell_to_float_rounding_and_is_recorded(tmp_path):
    args = ["run", *as_args({**TINY, "train.steps": 20}), "--seeds", "0-1"]
    eager, compiled = (cli(*args, "--root", tmp_path / name, *flag) for name, flag in (("e", []), ("c", ["--compile"])))
    assert eager.returncode == 0 and compiled.returncode == 0, compiled.stderr
    for e_path, c_path in zip(eager.stdout.split(), compiled.stdout.split()):
        e, c = json.loads(Path(e_path).read_text()), json.loads(Path(c_path).read_text())
        assert (e["compiled"], c["compiled"]) == (False, True)
        assert c["final_train_loss"] == pytest.approx(
            e["final_train_loss"], rel=1e-4
        )  # fused kernels round differently


# Cells that differ in their task's settings (operation, split, data seed) stack like seeds.
CROSS = [
    ({"op": op, "split": split}, seed) for op in ("add", "mul") for split in ("random", "uniform") for seed in (0, 1)
]


def _cross_specs(choices, settings):
    return [resolve(choices, {**settings, **task}, seed) for task, seed in CROSS]


@pytest.mark.parametrize(
    "choices,settings",
    [
        ({}, {"d": 16, "hidden": 32, "train.steps": 100, "target": 0.1, "hold": 0, "patience": 0}),  # with early stops
        ({"model": "transformer", "opt": "adamw"}, {"d_model": 16, "d_mlp": 32, "n_heads": 2}),
    ],
)
def test_cells_that_differ_in_their_task_stack_and_each_equals_its_separate_run(tmp_path, choices, settings):
    specs = _cross_specs(choices, {**SMALL, **settings})
    together = train(as_cells(specs, [tmp_path / "stack" / str(i) for i in range(len(specs))]), CPU)
    assert {r["stack_size"] for r in together} == {len(specs)}
    for i, spec in enumerate(specs):
        (alone,) = train(as_cells([spec], [tmp_path / "alone" / str(i)]), CPU)
        assert _metrics(tmp_path / "stack" / str(i)) == _metrics(tmp_path / "alone" / str(i))
        assert _same_result(together[i], alone)
        assert json.loads((tmp_path / "stack" / str(i) / "spec.json").read_text()) == canonical(spec)
    assert len({_metrics(tmp_path / "stack" / str(i)) for i in range(len(specs))}) == len(specs)
    if "target" in settings:
        assert len({r["steps"] for r in together}) > 1  # members stopped at different steps


def test_a_preempted_cross_cell_stack_resumes_to_the_same_numbers(tmp_path):
    specs = _cross_specs({"opt": "adamlr"}, {**SMALL, "d": 16, "hidden": 32, "patience": None})
    n = len(specs)
    whole = train(as_cells(specs, [tmp_path / "whole" / str(i) for i in range(n)]), CPU)
    cut = [tmp_path / "cut" / str(i) for i in range(n)]
    with pytest.raises(Preempted):
        train(as_cells(specs, cut, [PreemptAt(30)] + [None] * (n - 1)), CPU)
    resumed = train(as_cells(specs, cut), CPU)
    for i in range(n):
        assert _metrics(cut[i]) == _metrics(tmp_path / "whole" / str(i))
        assert resumed[i]["final_val_loss"] == whole[i]["final_val_loss"]


def test_cells_whose_task_changes_a_shape_stack_in_parts_of_equal_shapes(tmp_path, capsys):
    """a/b leaves out b = 0, so its training set is smaller: add and mul stack, div on its own."""
    specs = [resolve({}, {**SMALL, "d": 16, "hidden": 32, "op": op}, 0) for op in ("add", "div", "mul")]
    together = train(as_cells(specs, [tmp_path / op for op in ("add", "div", "mul")]), CPU)
    assert "3 runs train in 2 stacks: the members' data or models differ in shape" in capsys.readouterr().err
    assert [r["stack_size"] for r in together] == [2, 1, 2]
    (alone,) = train(as_cells([specs[1]], [tmp_path / "div-alone"]), CPU)
    assert _metrics(tmp_path / "div") == _metrics(tmp_path / "div-alone")


def test_a_grid_groups_cells_that_differ_in_their_task_or_optimizer_settings_into_one_stack(tmp_path):
    from suite.launch.grid import load
    from suite.launch.manifest import groups

    grid = tmp_path / "g.toml"
    grid.write_text(
        'name = "g"\n[fixed]\np = 11\n[axes]\nop = ["add", "mul"]\nlr = [0.001, 0.01]\n'
        "hidden = [32, 64]\nseed = [0, 1]\n"
    )
    cells = load(grid).cells
    found = groups(cells, stack=8)
    assert sorted(len(g) for g in found) == [8, 8]  # per width: both operations x both lrs x both seeds
    for group in found:
        assert len({cells[i].spec["model"]["hidden"] for i in group}) == 1
        assert len({cells[i].spec["opt"]["lr"] for i in group}) == 2
        assert len({cells[i].spec["task"]["op"] for i in group}) == 2
    assert sorted(len(g) for g in groups(cells, stack=3)) == [2, 2, 3, 3, 3, 3]


def test_running_train_accuracy_is_the_trained_batches_since_the_last_evaluation(tmp_path):
    """Grokking-Insight's train accuracy: the batches as trained on (train mode, before each
    update), here over every step since the last evaluation. With the full batch and an evaluation
    every step it is the previous evaluation's train accuracy (this MLP has no dropout or BatchNorm)."""
    settings = {k: v for k, v in SMALL.items() if k != "batch_size"}
    spec = resolve(
        {"sampler": "full"}, {**settings, "d": 16, "hidden": 32, "eval_every": 1, "train.steps": 30, "patience": None}
    )
    train(as_cells([spec], [tmp_path / "full"]), CPU)
    records = [json.loads(line) for line in _metrics(tmp_path / "full").splitlines()]
    assert "train_acc_running" not in records[0]  # nothing trained yet
    for before, now in zip(records, records[1:]):
        assert now["train_acc_running"] == pytest.approx(before["train_acc"], abs=1e-6)
    assert len({r["train_acc"] for r in records}) > 3  # it did change along the way


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "task,settings",
    [
        ("modular", {"inputs": "embed"}),
        ("modular", {"inputs": "onehot"}),
        ("modular", {"inputs": "scalar"}),
        ("modular", {"inputs": "scalar_raw"}),
        ("polygons", {"resolution": 8, "n_val": 64}),
    ],
)
def test_each_member_of_a_stack_of_mlps_is_the_model_alone(task, settings, threads):
    # On CPU a seed trained inside a stack, or alone, runs the plain model on its slice of the stack
    # (Stacked.forward): it computes what the plain model computes for it (logits and gradients), bit
    # for bit, the same calls on one thread or two, so a run's numbers do not depend on K and a single
    # run follows the plain PyTorch loop of suite/bench/plain.py step for step. The MLP's forward_stacked,
    # a GPU's one batched call for the whole stack, computes it to float32 rounding.
    from torch.func import functional_call

    torch.set_num_threads(threads)
    for k in (1, 3):
        small = SMALL if task == "modular" else {"batch_size": 16, "train.steps": 60, "eval_every": 10}
        b = stack_of(_specs({"task": task}, {**small, "d": 16, "hidden": 32, **settings}, seeds=range(k)))
        e, x = b.model, b.x_train
        params = {n: e.stacked(n) for n in e._names}
        plain = copy.deepcopy(e.base).to_empty(device="cpu")  # the architecture, to be called with member i's weights
        for own, same in ((e(x), _bit_for_bit), (e.base.forward_stacked(params, x), _float32_rounding)):
            grads = torch.autograd.grad(own.square().sum(), list(params.values()))
            for i in range(k):
                alone = {n: p[i].detach().clone().requires_grad_() for n, p in params.items()}
                logits = functional_call(plain, alone, (x[i],))
                same(own[i], logits)
                for g, q in zip(grads, torch.autograd.grad(logits.square().sum(), list(alone.values()))):
                    same(g[i], q)


def test_a_single_run_trains_the_weights_of_the_plain_pytorch_loop_bit_for_bit(tmp_path):
    # suite/bench/plain.py is what `suite bench` times a run against: the same batches, Adam and MLP with
    # nothing else. The suite's run must train exactly those weights; only the evaluation's losses
    # may round differently (a per-example sum where the loop takes F.cross_entropy's mean).
    from suite.bench import plain
    from suite.results.weights import load_model

    spec = resolve(
        {}, {"p": 23, "batch_size": 32, "train.steps": 200, "eval_every": 50, "patience": None, "keep_weights": True}
    )
    train(as_cells([spec], [tmp_path / "run"]), CPU)
    last, model = plain.run(spec)
    suite_model = load_model(tmp_path / "run", "final")
    for (name, ours), (_, theirs) in zip(suite_model.state_dict().items(), model.state_dict().items()):
        assert torch.equal(ours, theirs), name
    record = json.loads(_metrics(tmp_path / "run").splitlines()[-1])
    assert (record["train_acc"], record["val_acc"]) == (last["train_acc"], last["val_acc"])
    assert record["train_loss"] == pytest.approx(last["train_loss"], rel=1e-5)


@pytest.mark.parametrize(
    "choices,settings",
    [({}, {"hidden": 32}), ({}, {"hidden": 64}), ({"model": "transformer"}, {"d_model": 16, "d_mlp": 32})],
)
def test_on_cpu_a_stack_makes_the_matrix_products_of_its_separate_runs(choices, settings):
    # torch hands a batch of K > 1 products to MKL's batched gemm and a batch of one to its plain
    # gemm, and MKL rounds the two apart for some shapes, which shapes depending on the CPU (MLPs of
    # width 32 and 64 on one; a product with one column on an AMD EPYC, the next test). So on CPU a
    # stack makes, forward and backward, the very calls its members' separate runs make.
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    products = (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm, torch.ops.aten.baddbmm)

    class Products(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in products:
                calls.append((str(func), *(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))))
            return func(*args, **(kwargs or {}))

    def products_of(specs) -> Counter:
        calls.clear()
        b = stack_of(specs)
        with Products():
            b.model(b.x_train[:, :16]).square().sum().backward()
        return Counter(calls)

    calls = []
    specs = _specs(choices, {**SMALL, **settings})
    stack, alone = products_of(specs), sum((products_of([spec]) for spec in specs), Counter())
    assert stack and stack == alone


def test_a_stack_of_mlps_with_a_product_of_one_column_equals_its_separate_runs_bit_for_bit(tmp_path):
    # hidden = 1: each member's hidden layer is a product with one column, which MKL's batched and
    # plain gemm round apart on an AMD EPYC (found there as the stack of members differing in lr
    # drifting one float32 unit from its separate runs)
    specs = [resolve({}, {**SMALL, "d": 16, "hidden": 1, "lr": lr}) for lr in (1e-3, 3e-3)]
    train(as_cells(specs, [tmp_path / "stack" / str(i) for i in range(2)]), CPU)
    for i, spec in enumerate(specs):
        train(as_cells([spec], [tmp_path / "alone" / str(i)]), CPU)
        assert _metrics(tmp_path / "stack" / str(i)) == _metrics(tmp_path / "alone" / str(i))


@pytest.mark.parametrize("sampler, shrinks", [("random", True), ("epoch", False)])
def test_batches_drawn_ahead_leave_every_members_numbers_as_drawn_in_the_step(tmp_path, monkeypatch, sampler, shrinks):
    # On a GPU the next step's batches are drawn in a thread while the step runs (suite/engine/draws.py):
    # forced here on the CPU, through checkpoints (the epoch sampler's mid-epoch: 60 examples, batch 16),
    # members leaving at different steps and a preemption.
    from suite.engine import draws

    settings = {**SMALL, "d": 16, "hidden": 32, "train.steps": 100, "target": 0.1, "hold": 0, "patience": 0}
    specs = _specs({"sampler": sampler}, settings | {"checkpoint_every": 30}, seeds=range(4))
    inline = train(as_cells(specs, [tmp_path / "inline" / str(i) for i in range(4)]), CPU)
    steps = [r["steps"] for r in inline]
    assert len(set(steps)) > 1  # members do leave the stack at different steps
    last = steps.index(max(steps))  # preempted where others have left

    drawn, draw_ahead = [], draws.Draws._draw_ahead
    monkeypatch.setattr(draws, "ahead", lambda device: True)
    monkeypatch.setattr(draws.Draws, "_draw_ahead", lambda self, ms: drawn.append(len(ms)) or draw_ahead(self, ms))
    cut = [tmp_path / "ahead" / str(i) for i in range(4)]
    with pytest.raises(Preempted):
        train(as_cells(specs, cut, [PreemptAt(max(steps) - 10) if i == last else None for i in range(4)]), CPU)
    train(as_cells(specs, cut), CPU)
    assert len(drawn) > 90 and (len(set(drawn)) > 1) == shrinks  # drawn ahead, for stacks that shrank
    for i in range(4):
        assert _metrics(cut[i]) == _metrics(tmp_path / "inline" / str(i))
        on_disk = [json.loads((d / "result.json").read_text()) for d in (cut[i], tmp_path / "inline" / str(i))]
        assert _same_result(*on_disk)


def test_a_sampler_that_adapts_to_training_draws_in_the_step(monkeypatch):
    from suite.engine import draws

    monkeypatch.setattr(draws, "ahead", lambda device: True)
    assert stack_of(_specs({}, {**SMALL, "d": 16, "hidden": 32}, seeds=(0, 1))).draws.ahead
    assert not stack_of(_specs({"sampler": "grad_softmax"}, {**SMALL, "d": 16, "hidden": 32}, seeds=(0, 1))).draws.ahead


def test_a_draw_made_ahead_is_undone_even_where_a_sampler_s_state_dict_holds_its_live_tensors(monkeypatch):
    # torch's convention: state_dict() may return the tensors next() updates in place (a plugin's counter)
    from types import SimpleNamespace

    from suite import Sampler
    from suite.engine import draws

    class Counting(Sampler):
        def __init__(self, generator):
            self.generator, self.count = generator, torch.zeros(1, dtype=torch.long)

        def next(self):
            self.count += 1  # in place
            return torch.randperm(10, generator=self.generator)[:2] + 100 * self.count

        def state_dict(self):
            return {"count": self.count}

        def load_state_dict(self, state):
            self.count.copy_(state["count"])

    def member():
        generator = torch.Generator().manual_seed(0)
        return SimpleNamespace(sampler=Counting(generator), generator=generator)

    in_step = draws.Draws([member()], CPU)
    expected = [in_step.next() for _ in range(4)]
    monkeypatch.setattr(draws, "ahead", lambda device: True)
    ahead = draws.Draws([member()], CPU)
    got = [ahead.next(), ahead.next()]
    ahead.rewind()  # as a checkpoint does
    got += [ahead.next(), ahead.next()]
    ahead.close()
    assert ahead.ahead and all(torch.equal(a, b) for a, b in zip(got, expected))
