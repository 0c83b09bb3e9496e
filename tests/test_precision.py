"""train.precision: bf16 autocast with float32 master weights, tf32 on CUDA only, recorded in the
spec (fp32 leaves every older id as it was), exact stacks and resumes in bf16 as in fp32."""

import json
from pathlib import Path

import pytest
import torch
from conftest import PreemptAt, as_cells, cli, metrics_text, stack_of

from suite.engine.precision import autocast, check, cpu_bf16_units
from suite.engine.train import Preempted, train, train_step
from suite.errors import SuiteError
from suite.leaderboard.collect import collect
from suite.specs.spec import default_run_dir, resolve, spec_id

CPU = torch.device("cpu")
SMALL = {"p": 11, "train_frac": 0.5, "test_frac": 0.3, "batch_size": 16, "train.steps": 60, "eval_every": 10}
MLP = {"d": 16, "hidden": 32}
BF16 = {"train.precision": "bf16"}


pytestmark = pytest.mark.usefixtures("one_thread")


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in metrics_text(run_dir).splitlines()]


def test_an_fp32_spec_keeps_the_id_it_had_before_precision_existed_and_bf16_gets_its_own():
    spec = resolve({}, MLP, 0)
    assert spec["train"]["precision"] == "fp32"  # recorded: the spec alone says what ran
    older = {**spec, "train": {k: v for k, v in spec["train"].items() if k != "precision"}}
    assert spec_id(spec) == spec_id(older)
    bf16 = resolve({}, {**MLP, **BF16}, 0)
    assert spec_id(bf16) != spec_id(spec)
    assert default_run_dir(bf16) != default_run_dir(spec)


def test_bf16_runs_the_products_in_bfloat16_and_keeps_weights_optimizer_state_and_loss_in_float32():
    stack = stack_of([resolve({}, {**SMALL, **MLP, **BF16}, 0)])
    x, _ = stack.next_batch()
    with autocast("bf16", CPU):
        assert stack.model(x).dtype == torch.bfloat16
    train_step(stack, 0, stack.model)
    params = list(stack.model.parameters())
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in params)
    state = [t for s in stack.update.states() for t in s["optimizer"]["state"].values()]
    assert state and all(v.dtype == torch.float32 for s in state for v in s.values() if v.is_floating_point())


def test_bf16_trains_other_numbers_than_fp32(tmp_path):
    spec = resolve({}, {**SMALL, **MLP}, 0)
    train(as_cells([spec], [tmp_path / "fp32"]), CPU)
    train(as_cells([resolve({}, {**SMALL, **MLP, **BF16}, 0)], [tmp_path / "bf16"]), CPU)
    fp32, bf16 = _records(tmp_path / "fp32"), _records(tmp_path / "bf16")
    assert [r["step"] for r in fp32] == [r["step"] for r in bf16]
    assert fp32[-1]["train_loss"] != bf16[-1]["train_loss"]
    assert abs(fp32[-1]["train_loss"] - bf16[-1]["train_loss"]) < 0.5  # the same run, rounded otherwise


@pytest.mark.parametrize(
    "choices,settings",
    [({}, MLP), ({"model": "transformer", "opt": "adamw"}, {"d_model": 16, "d_mlp": 32, "n_heads": 2})],
)
def test_each_member_of_a_bf16_stack_equals_its_separate_bf16_run_bit_for_bit(tmp_path, choices, settings):
    specs = [resolve(choices, {**SMALL, **settings, **BF16}, seed) for seed in range(3)]
    together = train(as_cells(specs, [tmp_path / "stack" / str(i) for i in range(3)]), CPU)
    assert {r["stack_size"] for r in together} == {3}
    for i, spec in enumerate(specs):
        train(as_cells([spec], [tmp_path / "alone" / str(i)]), CPU)
        assert _records(tmp_path / "stack" / str(i)) == _records(tmp_path / "alone" / str(i))


def test_a_preempted_bf16_run_resumes_to_the_same_numbers(tmp_path):
    spec = resolve({"opt": "adamlr"}, {**SMALL, **MLP, **BF16, "patience": None}, 0)
    (whole,) = train(as_cells([spec], [tmp_path / "whole"]), CPU)
    with pytest.raises(Preempted):
        train(as_cells([spec], [tmp_path / "cut"], [PreemptAt(30)]), CPU)
    assert (tmp_path / "cut" / "checkpoint.pt").exists()
    (resumed,) = train(as_cells([spec], [tmp_path / "cut"]), CPU)
    assert _records(tmp_path / "cut") == _records(tmp_path / "whole")
    assert resumed["final_val_loss"] == whole["final_val_loss"]


def test_tf32_is_refused_off_cuda_in_one_line_with_nothing_written(tmp_path):
    with pytest.raises(SuiteError, match="tf32 runs on CUDA only"):
        check("tf32", CPU)
    check("bf16", CPU)
    out = tmp_path / "run"
    proc = cli("run", "--set", "train.precision=tf32", "--device", "cpu", "--out", out)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "tf32" in proc.stderr and not out.exists()
    grid = tmp_path / "g.toml"
    grid.write_text('name = "g"\n[fixed]\n"train.precision" = "tf32"\n"train.steps" = 10\neval_every = 5\n')
    proc = cli("grid", grid, "--root", tmp_path / "root", "--device", "cpu")
    assert proc.returncode == 2 and "tf32" in proc.stderr and not (tmp_path / "root").exists()
    proc = cli("run", "--set", "train.precision=fp16", "--out", out)
    assert proc.returncode == 2 and "fp16" in proc.stderr and "bf16" in proc.stderr


def test_a_run_folder_of_a_spec_written_before_precision_existed_is_the_same_run(tmp_path):
    spec = resolve({}, {**SMALL, **MLP}, 0)
    out = tmp_path / "run"
    out.mkdir()
    older = {**spec, "train": {k: v for k, v in spec["train"].items() if k != "precision"}}
    (out / "spec.json").write_text(json.dumps(older))
    args = [f"--set={k}={v}" for k, v in {**SMALL, **MLP}.items()]
    proc = cli("run", *args, "--out", out)
    assert proc.returncode == 0, proc.stderr
    proc = cli("run", *args, "--set", "train.precision=bf16", "--out", out)
    assert proc.returncode == 2 and "different spec" in proc.stderr


def test_the_leaderboard_reads_an_older_spec_as_fp32_and_keeps_bf16_a_method_of_its_own(tmp_path):
    for name, settings in (("fp32", {}), ("bf16", BF16), ("older", {})):
        train(
            as_cells([resolve({}, {**SMALL, **MLP, **settings}, 1 if name == "older" else 0)], [tmp_path / name]), CPU
        )
    result = json.loads((tmp_path / "older" / "result.json").read_text())
    del result["spec"]["train"]["precision"]
    (tmp_path / "older" / "result.json").write_text(json.dumps(result))
    runs = collect(tmp_path).runs.set_index("dir")
    assert runs.loc["older", "method_id"] == runs.loc["fp32", "method_id"] != runs.loc["bf16", "method_id"]
    assert runs.loc["older", "problem_id"] == runs.loc["bf16", "problem_id"]


def test_native_bf16_units_are_read_from_the_cpu_flags():
    assert cpu_bf16_units("processor: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n") == [
        "amx_bf16",
        "avx512_bf16",
    ]
    assert cpu_bf16_units("flags\t\t: fpu sse2 avx2 fma\n") == []
    assert cpu_bf16_units("") == []


def test_a_board_pairs_each_bf16_method_with_its_fp32_twin_and_a_board_of_one_precision_has_no_such_page(tmp_path):
    import pandas as pd

    # a task every run learns for good within a few dozen steps, each at its own step
    settings = {**MLP, "n_bits": 8, "k": 2, "n_examples": 256, "batch_size": 32, "train.steps": 100, "eval_every": 10}
    settings |= {"target": 0.9, "hold": 0, "patience": None}
    grok = {"fp32": [], "bf16": []}
    for name in grok:
        for seed in (0, 1):
            spec = resolve({"task": "sparse_parity"}, {**settings, "train.precision": name}, seed)
            (result,) = train(as_cells([spec], [tmp_path / "runs" / f"{name}{seed}"]), CPU)
            grok[name].append(result["grok_step"])
    assert all(step is not None for steps in grok.values() for step in steps)
    proc = cli("leaderboard", tmp_path / "runs", "--out", tmp_path / "board")
    assert proc.returncode == 0, proc.stderr
    (row,) = pd.read_csv(tmp_path / "board" / "precision.csv").to_dict("records")
    assert (row["method"], row["precision"], row["fp32_seeds"], row["bf16_seeds"]) == ("adam", "bf16", 2, 2)
    assert row["fp32_time"] == sum(grok["fp32"]) / 2 and row["bf16_time"] == sum(grok["bf16"]) / 2  # medians of 2
    assert row["verdict"] == "not resolved (n = 2)"
    assert "[precision](precision.md)" in (tmp_path / "board" / "index.md").read_text()
    for seed in (0, 1):
        (tmp_path / "runs" / f"bf16{seed}" / "result.json").unlink()
    proc = cli("leaderboard", tmp_path / "runs", "--out", tmp_path / "fp32-board")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "fp32-board" / "precision.md").exists()
