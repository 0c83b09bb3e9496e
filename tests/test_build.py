"""The typed spec and suite.build: one way to read a spec and to build what it describes."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import REPO, TINY

import suite
from suite import Spec, SuiteError, build
from suite.engine.member import Member
from suite.engine.plan import stacks
from suite.engine.train import train_step
from suite.specs.config import TrainConfig
from suite.specs.spec import Part, resolve, spec_id

CHOICES = [
    {},
    {"opt": "adamlr", "filter": "grokfast_ema"},
    {"model": "transformer", "opt": "muon", "sampler": "frequency"},
    {"task": "number_probe"},  # a task with its own runner: no optimizer, sampler, filter or train block
]


@pytest.mark.parametrize("choices", CHOICES, ids=lambda c: "+".join(c.values()) or "default")
def test_a_spec_reads_typed_and_writes_back_its_json_key_for_key(choices):
    stored = resolve(choices, {}, 3)
    spec = Spec.of(stored)
    assert json.dumps(spec.to_json()) == json.dumps(stored)  # spec.json and result.json stay byte for byte
    assert spec.id == spec_id(stored) and spec.seed == 3 and Spec.of(spec) is spec
    assert spec.task == Part(stored["task"]["name"], {k: v for k, v in stored["task"].items() if k != "name"})
    if "train" in stored:
        assert isinstance(spec.train, TrainConfig) and spec.train.steps == stored["train"]["steps"]
        assert spec.opt.name == stored["opt"]["name"] and spec.opt.settings["lr"] == stored["opt"]["lr"]
    else:
        assert (spec.opt, spec.sampler, spec.filter, spec.train) == (None, None, None, None)


def test_an_older_spec_reads_as_its_runs_trained_and_keeps_its_id():
    stored = resolve({}, TINY)
    old = json.loads(json.dumps(stored))
    for key in ("precision", "chance_patience", "learn_patience"):  # settings added after runs were stored
        del old["train"][key]
    spec = Spec.of(old)
    assert spec.train.chance_patience is None  # those runs went on at chance to their budget
    assert spec.train.precision == "fp32" and spec.id == spec_id(old)


def test_bad_train_settings_are_refused_when_the_spec_is_read():
    stored = resolve({}, TINY)
    stored["train"]["eval_every"] = 0
    with pytest.raises(SuiteError, match="must be positive"):
        Spec.of(stored)


def test_build_gives_a_runs_parts_and_the_loop_trains_the_same_numbers():
    spec = resolve({"opt": "adamw", "filter": "grokfast_ema"}, TINY, 1)
    run = build(spec)  # from the JSON form; a Spec builds the same
    again = build(Spec.of(spec))
    assert all(torch.equal(a, b) for a, b in zip(run.model.parameters(), again.model.parameters()))
    assert isinstance(run.optimizer, torch.optim.AdamW) and run.filter is not None and run.spec == Spec.of(spec)
    assert suite.build is build

    # One step by hand with the built parts, and the loop's train_step on a stack of one member
    batch = run.sampler.next()
    loss = torch.nn.functional.cross_entropy(run.model(run.data.x_train[batch]), run.data.y_train[batch])
    run.optimizer.zero_grad()
    loss.backward()
    run.filter.apply()
    run.optimizer.step()
    (stack,) = stacks([Member.of(build(spec, updates=False))], torch.device("cpu"))
    stack.start()
    train_step(stack, 0, stack.model)
    for name, p in run.model.named_parameters():  # the stack's member 0, to rounding (its loss sums members' means)
        torch.testing.assert_close(stack.model.stacked(name)[0], p, rtol=1e-6, atol=1e-7)


def test_build_leaves_the_callers_random_state_as_it_found_it():
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    build(resolve({}, TINY, 7))
    assert torch.equal(torch.get_rng_state(), before)


def test_bad_input_is_one_line_from_the_build():
    with pytest.raises(SuiteError, match=r"^batch_size 32 is larger than the training set \(1 examples\)"):
        build(resolve({}, {**TINY, "train_frac": 0.01}))  # p = 11: one pair left to train on


def test_readmes_example_builds_and_reads_the_spec_typed(capsys):
    code = (REPO / "README.md").read_text().split("<!-- example build -->")[1].split("```python")[1].split("```")[0]
    exec(code, {})
    spec_id_, steps, c, optimizer = capsys.readouterr().out.split()[:4]
    assert (spec_id_, steps, c, optimizer) == (
        spec_id(resolve({"opt": "adamlr"}, {"train.steps": 100})),
        "100",
        "10.0",
        "Adam",
    )
