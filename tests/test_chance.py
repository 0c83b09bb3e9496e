"""A run that fell back to chance after memorizing (suite/engine/chance.py): the progress line says so when it
happens, train.chance_patience stops it ("at chance"), its result says where, and a resume replays it."""

import json

import pytest
import torch
from conftest import TINY, PreemptAt, as_cells, metrics_text

from suite import GradFilter, register_filter
from suite.cli import main
from suite.engine.chance import ChanceWatch
from suite.engine.train import Preempted, train
from suite.specs.spec import resolve, spec_id

pytestmark = pytest.mark.usefixtures("one_thread")


@register_filter("_ascent", elementwise=True)
class Ascent(GradFilter):
    """Gradient ascent from step `after` on: a run that has memorized falls to chance, its loss explodes."""

    def __init__(self, params, *, after: int = 100):
        self.params, self.after, self.steps = list(params), after, 0

    def apply(self):
        self.steps += 1
        if self.steps > self.after:
            for p in self.params:
                p.grad.neg_()

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["steps"]


# a+b mod 11: memorized by step ~70, at chance ~20 steps after the ascent starts at 100
CELL = {**TINY, "train.steps": 400, "filter.after": 100}
CHANCE = 1 / 11 + 0.1 * (1 - 1 / 11)  # within a tenth of the way from chance to 1


def cli_run(out, **extra) -> dict:
    sets = [f"--set={k}={v}" for k, v in (CELL | extra).items()]
    assert main(["run", "--filter", "_ascent", *sets, "--out", str(out)]) == 0
    return json.loads((out / "result.json").read_text())


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in metrics_text(run_dir).splitlines()]


def test_a_run_at_chance_says_so_when_it_falls_and_stops_once_chance_patience_has_passed(tmp_path, capsys):
    stopped = cli_run(tmp_path / "stopped", chance_patience=60)
    err = capsys.readouterr().err
    # where it fell, read from the evaluations alone: after memorizing, train and val both at chance
    evaluations = records(tmp_path / "stopped")
    memorized = next(r["step"] for r in evaluations if r["train_acc"] >= 0.99)
    fell = next(r for r in evaluations if r["step"] > memorized and max(r["train_acc"], r["val_acc"]) <= CHANCE)
    assert stopped["chance_step"] == fell["step"] and fell["train_loss"] > 5  # and its loss exploded
    assert f"train and val fell to chance at step {fell['step']:,} (train loss" in err
    assert stopped["stop_reason"] == "at chance" and stopped["steps"] == fell["step"] + 60
    assert evaluations[-1]["step"] == stopped["steps"] and stopped["grok_step"] is None
    assert f"AT CHANCE: train and val acc fell to chance at step {fell['step']:,}, and stayed there: stopped" in err

    # Without the setting it goes on at chance to its budget: the same evaluations up to the stop
    spent = cli_run(tmp_path / "spent", chance_patience="none")
    assert spent["stop_reason"] == "budget" and spent["steps"] == 400 and spent["chance_step"] == fell["step"]
    assert records(tmp_path / "spent")[: len(evaluations)] == evaluations
    assert "and stayed there" not in capsys.readouterr().err


def test_a_resume_inside_the_stretch_at_chance_stops_where_the_whole_run_stops(tmp_path):
    spec = resolve({"filter": "_ascent"}, CELL | {"chance_patience": 60, "checkpoint_every": 20})
    cpu = torch.device("cpu")
    (whole,) = train(as_cells([spec], [tmp_path / "whole"]), cpu)
    assert whole["chance_step"] < 150 < whole["steps"]  # the cut falls inside the stretch
    with pytest.raises(Preempted):
        train(as_cells([spec], [tmp_path / "cut"], [PreemptAt(150)]), cpu)
    (resumed,) = train(as_cells([spec], [tmp_path / "cut"]), cpu)
    assert (resumed["steps"], resumed["chance_step"]) == (whole["steps"], whole["chance_step"])
    assert metrics_text(tmp_path / "cut") == metrics_text(tmp_path / "whole")


def test_only_a_run_that_had_memorized_is_at_chance_and_climbing_out_ends_the_stretch():
    watch = ChanceWatch(97)
    low, fit = {"train_acc": 0.01, "val_acc": 0.01}, {"train_acc": 1.0, "val_acc": 0.5}
    assert not watch.update({"step": 0} | low, memorized=False) and watch.since is None  # a run that never learned
    assert watch.update({"step": 500} | low, memorized=True) and watch.since == 500
    assert not watch.update({"step": 550} | low, memorized=True) and watch.since == 500
    assert not watch.update({"step": 600, "train_acc": 0.2, "val_acc": 0.01}, memorized=True) and watch.since is None
    assert watch.update({"step": 650} | low, memorized=True) and (watch.since, watch.first_step) == (650, 500)
    assert not watch.update({"step": 700} | fit, memorized=True) and watch.since is None


def test_chance_patience_is_on_for_a_new_run_and_off_keeps_the_ids_of_the_runs_before_it():
    spec = resolve()
    assert spec["train"]["chance_patience"] == 2000  # the spec records it
    off = resolve({}, {"chance_patience": "none"})
    older = {**off, "train": {k: v for k, v in off["train"].items() if k != "chance_patience"}}
    assert spec_id(off) == spec_id(older) != spec_id(spec)


def test_a_run_that_never_leaves_chance_stops_after_learn_patience_and_a_resume_stops_it_alike(tmp_path, capsys):
    # lr 1e-7: nothing moves, train and val stay at chance from the first evaluation
    still = {"lr": 1e-7, "filter.after": 10_000, "learn_patience": 60, "checkpoint_every": 20}
    stopped = cli_run(tmp_path / "still", **still)
    assert stopped["stop_reason"] == "never learned" and stopped["steps"] == 60 and stopped["grok_step"] is None
    assert all(max(r["train_acc"], r["val_acc"]) <= CHANCE for r in records(tmp_path / "still"))
    assert "NEVER LEARNED" in capsys.readouterr().err
    learns = cli_run(tmp_path / "learns", **{"filter.after": 10_000, "learn_patience": 60})
    assert learns["stop_reason"] != "never learned" and learns["steps"] > 60  # it left chance: it goes on
    spec = resolve({"filter": "_ascent"}, CELL | still)
    with pytest.raises(Preempted):
        train(as_cells([spec], [tmp_path / "cut"], [PreemptAt(40)]), torch.device("cpu"))
    (resumed,) = train(as_cells([spec], [tmp_path / "cut"]), torch.device("cpu"))
    assert resumed["steps"] == 60 and metrics_text(tmp_path / "cut") == metrics_text(tmp_path / "still")


def test_learn_patience_is_off_by_default_and_keeps_the_ids_of_the_runs_before_it():
    spec = resolve()
    assert spec["train"]["learn_patience"] is None
    older = {**spec, "train": {k: v for k, v in spec["train"].items() if k != "learn_patience"}}
    assert spec_id(spec) == spec_id(older) != spec_id(resolve({}, {"learn_patience": 2000}))


def test_train_flushes_denormals_while_it_runs_and_leaves_torch_as_it_found_it(tmp_path):
    # a notebook that calls train() keeps its own setting (the loop flushes subnormals for speed)
    from suite.engine.precision import flushing_denormals

    before = flushing_denormals()
    torch.set_flush_denormal(False)
    spec = resolve({"filter": "_ascent"}, CELL | {"train.steps": 20})
    train(as_cells([spec], [tmp_path / "run"]), torch.device("cpu"))
    assert flushing_denormals() is False
    torch.set_flush_denormal(before)
