"""suite/bench/cost.py: a spec's ms per training step and its parameter groups' decay per step.
No speed is asserted: only that a time was taken, that time off the CPU is not counted, and what the groups say."""

import json
import math
import time

import pytest
import torch

from suite import SuiteError, build
from suite.bench import cost
from suite.engine.precision import flushing_denormals
from suite.specs.spec import resolve

TINY = {"task.p": 11, "train_frac": 0.5, "test_frac": 0.3, "batch_size": 32, "d": 16, "hidden": 32}
QUICK = {"steps": 3, "warmup": 1}


def tiny(opt: str, **settings) -> dict:
    return resolve({"opt": opt}, {**TINY, **settings}, 0)


def groups(opt: str, **settings) -> dict:
    return {g["name"]: g for g in cost.measure(tiny(opt, **settings), **QUICK)["groups"]}


@pytest.fixture
def two_threads():
    """torch on 2 threads for the test (what measure() must give back), as it was after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_a_step_is_timed_on_one_thread_and_torchs_threads_and_rng_are_as_they_were(two_threads):
    rng = torch.get_rng_state()
    measured = cost.measure(tiny("adam"), **QUICK)
    assert measured["ms_per_step"] > 0 and math.isfinite(measured["ms_per_step"])
    assert {k: measured[k] for k in ("steps", "threads", "device", "clock")} == {
        "steps": 3, "threads": 1, "device": "cpu", "clock": "thread CPU time"
    }  # fmt: skip
    assert torch.get_num_threads() == 2 and torch.equal(torch.get_rng_state(), rng)


def test_on_a_cpu_a_step_costs_what_it_computes_not_how_long_it_waited(monkeypatch):
    """A shared machine makes a step wait for a core: 10 ms off the CPU each step (a sleep here)
    must not count, or rows measured under different loads would not compare."""
    stepped = cost.train_step

    def waits(*args):
        stepped(*args)
        time.sleep(0.01)

    monkeypatch.setattr(cost, "train_step", waits)
    assert cost.measure(tiny("adam"), steps=5, warmup=1)["ms_per_step"] < 10


def test_adam_is_one_group_coupled_by_default_and_decays_lr_x_weight_decay_a_step_when_decoupled():
    coupled = groups("adam")["all"]
    n = sum(p.numel() for p in build(tiny("adam")).model.parameters())
    assert coupled == {
        "name": "all",
        "params": n,
        "lr": 1e-2,
        "weight_decay": 1e-3,
        "coupled": True,
        "decay_per_step": None,
    }
    decoupled = groups("adam", decoupled_weight_decay=True)["all"]
    assert decoupled["coupled"] is False and decoupled["decay_per_step"] == pytest.approx(1e-2 * 1e-3)


def test_adamlr_runs_its_embedding_group_at_c_x_lr_and_decays_it_c_x_lr_x_weight_decay():
    found = groups("adamlr", c=4.0, lr=2e-3, weight_decay=0.5, decoupled_weight_decay=True)
    assert list(found) == ["embedding", "rest"]
    assert found["embedding"]["params"] == (11 + 2) * 16  # p numbers, op and "=" tokens, d = 16
    assert found["embedding"]["lr"] == pytest.approx(8e-3) and found["rest"]["lr"] == pytest.approx(2e-3)
    assert found["embedding"]["decay_per_step"] == pytest.approx(4.0 * 2e-3 * 0.5)
    assert found["rest"]["decay_per_step"] == pytest.approx(2e-3 * 0.5)


def test_muons_hidden_matrices_decay_at_muon_lr_and_coupled_muon_reports_its_weight_decay_alone():
    found = groups("muon", muon_lr=0.03, lr=1e-3, weight_decay=0.2)
    assert list(found) == ["hidden", "rest"]
    assert found["hidden"]["params"] == 32 * 4 * 16  # the hidden layer's weight reads 4 embeddings of d = 16
    assert found["hidden"]["lr"] == pytest.approx(0.03) and found["rest"]["lr"] == pytest.approx(1e-3)
    assert found["hidden"]["decay_per_step"] == pytest.approx(0.03 * 0.2)
    assert found["rest"]["decay_per_step"] == pytest.approx(1e-3 * 0.2)
    coupled = groups("muon", decoupled_weight_decay=False)
    assert all(g["coupled"] and g["decay_per_step"] is None and g["weight_decay"] == 0.1 for g in coupled.values())


def test_threads_and_denormal_flushing_are_given_back_when_a_step_fails(monkeypatch, two_threads):
    def fails(*args):
        raise RuntimeError("a step that fails")

    monkeypatch.setattr(cost, "train_step", fails)
    flushing = flushing_denormals()
    with pytest.raises(RuntimeError, match="a step that fails"):
        cost.measure(tiny("adam"), **QUICK)
    assert torch.get_num_threads() == 2 and flushing_denormals() == flushing


@pytest.mark.parametrize(
    "spec, settings, message",
    [
        ({"task": {"name": "modular"}}, {}, "resolved spec of a task that trains"),
        (None, {"steps": 0}, "steps must be a positive integer"),
        (None, {"warmup": -1}, "warmup must be a non-negative integer"),
        (None, {"device": "tpu"}, "device 'tpu'"),
    ],
)
def test_bad_input_is_one_line(spec, settings, message):
    with pytest.raises(SuiteError, match=message) as caught:
        cost.measure(spec or tiny("adam"), **settings)
    assert "\n" not in str(caught.value)


def test_measure_all_refuses_bad_input_before_it_writes_anything(tmp_path):
    with pytest.raises(SuiteError, match="steps must be a positive integer"):
        cost.measure_all({"adam": tiny("adam")}, tmp_path / "cost.json", steps=0)
    assert not (tmp_path / "cost.json").exists()


def counting(monkeypatch) -> list[str]:
    """measure() replaced by one that records which spec it was asked for (by its optimizer)."""
    asked = []

    def measure(spec, steps, warmup, device):
        asked.append(spec["opt"]["name"])
        return {"ms_per_step": 1.0, "steps": steps, "threads": 1, "device": device, "groups": []}

    monkeypatch.setattr(cost, "measure", measure)
    return asked


def test_measure_all_resumes_measuring_only_what_the_file_lacks(tmp_path, monkeypatch):
    asked, path = counting(monkeypatch), tmp_path / "cost.json"
    cost.measure_all({"adam": tiny("adam")}, path, **QUICK)
    report = cost.measure_all({"adam": tiny("adam"), "muon": tiny("muon")}, path, **QUICK)
    assert asked == ["adam", "muon"]
    assert json.loads(path.read_text()) == report and list(report["specs"]) == ["adam", "muon"]
    assert report["machine"] == cost.machine(torch.device("cpu")) and report["steps"] == 3
    cost.measure_all({"adam": tiny("adam", lr=3e-3)}, path, **QUICK)  # another spec under the name: measured again
    assert asked == ["adam", "muon", "adam"]
    assert [p.name for p in tmp_path.iterdir()] == ["cost.json"]  # each write replaced the file whole


def test_measure_all_keeps_what_it_measured_when_stopped_and_refuses_a_file_measured_otherwise(tmp_path, monkeypatch):
    asked, path = counting(monkeypatch), tmp_path / "cost.json"
    measured = cost.measure

    def stops_at_muon(spec, *args):
        if spec["opt"]["name"] == "muon":
            raise KeyboardInterrupt
        return measured(spec, *args)

    monkeypatch.setattr(cost, "measure", stops_at_muon)
    with pytest.raises(KeyboardInterrupt):
        cost.measure_all({"adam": tiny("adam"), "muon": tiny("muon")}, path, **QUICK)
    assert list(json.loads(path.read_text())["specs"]) == ["adam"] and asked == ["adam"]
    with pytest.raises(SuiteError, match=r"measured otherwise \(steps differ\)"):
        cost.measure_all({"adam": tiny("adam")}, path, steps=4, warmup=1)
    elsewhere = json.loads(path.read_text()) | {"machine": {"cpu": "another"}}
    path.write_text(json.dumps(elsewhere))
    with pytest.raises(SuiteError, match=r"machine differ"):
        cost.measure_all({"adam": tiny("adam")}, path, **QUICK)
    wall = json.loads(path.read_text()) | {"machine": cost.machine(torch.device("cpu"))}
    wall.pop("clock")  # a file from before the clock was the thread's: wall time
    path.write_text(json.dumps(wall))
    with pytest.raises(SuiteError, match=r"clock differ"):
        cost.measure_all({"adam": tiny("adam")}, path, **QUICK)
    report = cost.measure_all({"adam": tiny("adam")}, path, **QUICK, replace_other=True)  # as tune does
    assert report["clock"] == "thread CPU time" and asked == ["adam", "adam"]
