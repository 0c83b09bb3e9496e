"""The tests that touch the device a run trains on, marked `device`: on the device SUITE_TEST_DEVICE
names (cpu by default, so CI runs them here; the GPU campaign, suite/bench/campaign.py, sets cuda). On the
CPU the comparisons are exact; on a GPU they hold to float32 rounding (its kernels sum in another
order than the CPU's, and atomics make some sums run-to-run different)."""

import json
import os

import pytest
import torch
from conftest import PreemptAt, as_cells

from suite import build
from suite.engine.train import Preempted, resolve_device, train
from suite.errors import SuiteError
from suite.specs.spec import resolve

pytestmark = [pytest.mark.device, pytest.mark.usefixtures("one_thread")]
DEVICE = resolve_device(os.environ.get("SUITE_TEST_DEVICE", "cpu"))
CPU = torch.device("cpu")
SMALL = {"p": 11, "train_frac": 0.5, "test_frac": 0.3, "batch_size": 16, "train.steps": 60, "eval_every": 10}
MLP = {"d": 16, "hidden": 32}
LOSSES = ("train_loss", "val_loss")


def _records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _agree(a, b, rtol: float) -> None:
    """Every evaluation's losses equal (CPU against CPU) or within rtol (another device)."""
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        for k in LOSSES:
            if DEVICE.type == "cpu":
                assert ra[k] == rb[k], (ra["step"], k)
            else:
                assert ra[k] == pytest.approx(rb[k], rel=rtol), (ra["step"], k)


@pytest.mark.parametrize(
    "choices",
    [{}, {"model": "transformer", "opt": "adamw"}, {"sampler": "grad_softmax"}],
    ids=["mlp", "transformer", "grad_softmax"],
)
def test_a_run_on_the_device_is_the_cpu_run_to_float32_rounding(tmp_path, choices):
    transformer = choices.get("model") == "transformer"
    settings = {**SMALL, **({"d_model": 16, "d_mlp": 32, "n_heads": 2} if transformer else MLP)}
    spec = resolve(choices, settings, 0)
    (result,) = train(as_cells([spec], [tmp_path / "device"]), DEVICE)
    train(as_cells([spec], [tmp_path / "cpu"]), CPU)
    assert result["device"].startswith(DEVICE.type)
    _agree(_records(tmp_path / "device")[:3], _records(tmp_path / "cpu")[:3], rtol=1e-4)  # early: before Adam amplifies


@pytest.mark.parametrize("sampler", ["random", "full", "epoch", "frequency", "grad_softmax"])
def test_a_seed_draws_the_same_batches_on_the_device_as_on_the_cpu(sampler):
    # a generator on the device drew other batches than the CPU's (CUDA's numbers are not the CPU's)
    settings = {k: v for k, v in {**SMALL, **MLP}.items() if not (sampler == "full" and k == "batch_size")}
    spec = resolve({"sampler": sampler}, settings, 0)
    here, there = build(spec, DEVICE), build(spec, CPU)
    for _ in range(12):  # past the epoch sampler's first epoch (116 examples in batches of 16)
        assert torch.equal(here.sampler.next(), there.sampler.next())


def test_each_member_of_a_stack_on_the_device_is_its_separate_run(tmp_path):
    specs = [resolve({"opt": "adamlr"}, {**SMALL, **MLP}, seed) for seed in range(3)]
    together = train(as_cells(specs, [tmp_path / "stack" / str(i) for i in range(3)]), DEVICE)
    assert {r["stack_size"] for r in together} == {3}
    for i, spec in enumerate(specs):
        train(as_cells([spec], [tmp_path / "alone" / str(i)]), DEVICE)
        _agree(_records(tmp_path / "stack" / str(i)), _records(tmp_path / "alone" / str(i)), rtol=1e-3)


def test_a_preempted_bf16_run_on_the_device_resumes_to_the_same_numbers(tmp_path):
    spec = resolve({}, {**SMALL, **MLP, "train.precision": "bf16", "patience": None}, 0)
    train(as_cells([spec], [tmp_path / "whole"]), DEVICE)
    with pytest.raises(Preempted):
        train(as_cells([spec], [tmp_path / "cut"], [PreemptAt(30)]), DEVICE)
    train(as_cells([spec], [tmp_path / "cut"]), DEVICE)
    _agree(_records(tmp_path / "cut"), _records(tmp_path / "whole"), rtol=1e-2)


def test_tf32_trains_on_cuda_and_is_refused_elsewhere(tmp_path):
    spec = resolve({}, {**SMALL, **MLP, "train.precision": "tf32"}, 0)
    if DEVICE.type != "cuda":
        with pytest.raises(SuiteError, match="CUDA only"):
            train(as_cells([spec], [tmp_path / "run"]), DEVICE)
        assert not (tmp_path / "run").exists()
        return
    (result,) = train(as_cells([spec], [tmp_path / "run"]), DEVICE)
    assert result["steps"] == 60 and not torch.backends.cuda.matmul.allow_tf32  # the flag restored after the run


def test_the_bench_profiles_a_stack_on_the_device():
    from suite.bench.measure import Options
    from suite.bench.profile_section import profile_section

    p = profile_section(DEVICE, Options(quick=True, stacks="1,4"))
    assert p["k"] == 4 and p["randperm_per_step"] == 4  # the batches drawn on the CPU, one per member
    if DEVICE.type == "cuda":  # its kernels' time and the launches that issued them
        assert p["kernel_launches_per_step"] > 0 and p["top_device"] and 0 < p["device_busy_fraction"] < 2
