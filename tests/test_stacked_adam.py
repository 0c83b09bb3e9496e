"""One Adam over a stack whose members differ in their settings (suite/engine/stacked_adam.py).

On CPU with one thread each member's update equals its separate run's bit for bit: the stacked
optimizer makes torch's single-tensor Adam's elementwise ops in its order, a setting that differs
read from a [K] tensor by the same kernels. Here: the kernels themselves, the optimizer against K
torch Adams step by step, whole runs against their separate runs and against the one-optimizer-
per-member path, checkpoints both ways, and the ops of a step, which do not grow with K.
"""

import copy
from collections import Counter

import pytest
import torch
from conftest import PreemptAt, as_cells, metrics_text, stack_of
from torch import nn

from suite.engine import stacked_adam, updates
from suite.engine.stacked import Stacked
from suite.engine.stacked_adam import StackedAdam, fits
from suite.engine.train import Preempted, train
from suite.engine.updates import MemberUpdates, SettingsUpdate, StackedUpdate, _member_view
from suite.specs.spec import resolve

CPU = torch.device("cpu")
SMALL = {"p": 11, "train_frac": 0.5, "test_frac": 0.3, "batch_size": 16, "train.steps": 60, "eval_every": 10}
MLP = {**SMALL, "d": 16, "hidden": 32}

pytestmark = pytest.mark.usefixtures("one_thread")


def _equal(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert torch.equal(a, b), f"{what}: max difference {(a - b).abs().max().item():.3g}"


# --- the kernels -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100])
def test_each_kernel_reads_a_setting_from_a_member_column_as_it_reads_the_scalar(n):
    # Vector loops and the scalar tail of a kernel might round apart (add with alpha is an fma in its
    # vector loop): every length from 1 to past two vectors, each member against its tensor alone.
    gen = torch.Generator().manual_seed(n)
    K = 4

    def draw():
        return torch.randn(K, n, generator=gen) * 10.0 ** torch.randint(-4, 4, (K, n), generator=gen)

    x, y, z = draw(), draw(), draw().abs() + 1e-3
    values = [1e-3, 0.37, 3.0e-2, 0.9]  # none of them a float32 number: each rounds once
    column = torch.tensor(values, dtype=torch.float64).to(torch.float32).view(K, 1)
    stacked = {
        "coupled decay": torch.addcmul(x, y, column),
        "mul": x.mul(column),
        "div": x.div(column),
        "add": x.add(column),
        "lerp": x.lerp(y, column),
        "addcmul value": x.addcmul(y * column, y),
        "addcdiv value": x.addcdiv(y * column, z),
    }
    # a setting the members share, over the whole stack (or a slice of members): the kernel's vector
    # loop and its scalar tail then fall elsewhere than in a member's own tensor
    v = values[1]
    shared = _kernels(x, y, z, v)
    for i in range(K):
        xi, yi, zi = x[i].clone(), y[i].clone(), z[i].clone()
        for name, alone in _kernels(xi, yi, zi, v).items():
            _equal(shared[name][i], alone, f"{name} shared, member {i}, n = {n}")
    for i, v in enumerate(values):
        xi, yi, zi = x[i].clone(), y[i].clone(), z[i].clone()
        alone = _kernels(xi, yi, zi, v)
        for name in alone:
            _equal(stacked[name][i], alone[name], f"{name}, member {i}, n = {n}")


def _kernels(x, y, z, v: float) -> dict:
    """The ops of torch's single-tensor Adam that take a setting, with the setting v as torch passes it."""
    return {
        "coupled decay": x.add(y, alpha=v),
        "mul": x.mul(v),
        "div": x.div(v),
        "add": x.add(v),
        "lerp": x.lerp(y, v),
        "addcmul value": x.addcmul(y, y, value=v),
        "addcdiv value": x.addcdiv(y, z, value=v),
    }


# --- the optimizer against K torch Adams ----------------------------------------------------------


class _Net(nn.Module):
    """Odd sizes (vector tails everywhere) and a token embedding (Adam-LR's group)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Parameter(torch.randn(11, 5))
        self.hidden = nn.Linear(5, 13)
        self.out = nn.Linear(13, 3)

    @property
    def embedding_weight(self):
        return self.embed


BASE = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-3, "decoupled_weight_decay": False}
DIFFER = {  # members differing in one setting, or in all at once; K = 4
    "lr": [{"lr": v} for v in (1e-2, 3e-3, 3e-2, 1e-3)],
    "weight_decay": [{"weight_decay": v} for v in (1e-3, 0.0, 1.0, 0.1)],
    "decoupled weight_decay": [{"weight_decay": v, "decoupled_weight_decay": True} for v in (1e-3, 0.0, 1.0, 0.1)],
    "coupled or decoupled": [{"decoupled_weight_decay": v} for v in (False, True, True, False)],
    "betas": [{"betas": v} for v in ((0.9, 0.999), (0.8, 0.99), (0.9, 0.98), (0.95, 0.999))],
    "eps": [{"eps": v} for v in (1e-8, 1e-6, 1e-8, 1e-7)],
    "c": [{"c": v} for v in (10.0, 1.0, 30.0, 10.0)],
    "all": [
        {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-3, "c": 10.0},
        {"lr": 3e-3, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.0, "c": 1.0},
        {"lr": 3e-2, "betas": (0.9, 0.98), "eps": 1e-8, "weight_decay": 1.0, "decoupled_weight_decay": True},
        {"lr": 1e-3, "betas": (0.95, 0.999), "eps": 1e-7, "weight_decay": 0.1, "c": 3.0},
    ],
}


def _adam(model, settings: dict) -> torch.optim.Adam:
    """Adam, with the embedding in a group of its own at c * lr (Adam-LR) where settings name c."""
    settings = {**BASE, **settings}
    c = settings.pop("c", 1.0)
    E = model.embedding_weight
    rest = [p for p in model.parameters() if p is not E]
    optimizer = torch.optim.Adam([{"params": [E], "lr": c * settings["lr"]}, {"params": rest}], **settings)
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    return optimizer


def _stack_and_alone(members: list[dict]):
    torch.manual_seed(0)
    nets = [_Net() for _ in members]
    alone = [copy.deepcopy(n) for n in nets]
    model = Stacked(nets)
    views = [_member_view(model, i) for i in range(len(members))]
    shells = [_adam(view, s) for view, s in zip(views, members)]
    assert fits(shells, views, model) is None
    return model, StackedAdam(shells, views, model), alone, [_adam(n, s) for n, s in zip(alone, members)]


def _steps(model, stacked, alone, optimizers, steps, gen, warmup=5, start=0):
    names = model._names
    for step in range(start, start + steps):
        factor = min((step + 1) / warmup, 1.0)
        for optimizer in [*stacked.shells, *optimizers]:  # a warmup, as Stack.warm_up sets every member's
            for group in optimizer.param_groups:
                group["lr"] = group["base_lr"] * factor
        grads = {n: torch.randn(model.stacked(n).shape, generator=gen) for n in names}
        for n in names:
            model.stacked(n).grad = grads[n].clone()
            for i, net in enumerate(alone):
                dict(net.named_parameters())[n].grad = grads[n][i].clone()
        stacked.step()
        for optimizer in optimizers:
            optimizer.step()
        for n in names:
            for i, net in enumerate(alone):
                _equal(model.stacked(n)[i], dict(net.named_parameters())[n], f"{n}, member {i}, step {step}")


def _same_state(a: dict, b: dict) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert list(a["state"]) == list(b["state"])
    for index, state in a["state"].items():
        assert list(state) == list(b["state"][index])
        for key, value in state.items():
            _equal(value, b["state"][index][key], f"{key} of {index}")
            assert value.dtype == b["state"][index][key].dtype


@pytest.mark.parametrize("slice_bytes", [stacked_adam.CPU_SLICE_BYTES, 1, 200])  # whole; 1 member; 1 to 10
@pytest.mark.parametrize("differ", DIFFER)
def test_one_stacked_adam_steps_each_member_as_its_own_torch_adam_bit_for_bit(monkeypatch, differ, slice_bytes):
    monkeypatch.setattr(stacked_adam, "CPU_SLICE_BYTES", slice_bytes)
    model, stacked, alone, optimizers = _stack_and_alone(DIFFER[differ])
    gen = torch.Generator().manual_seed(1)
    _steps(model, stacked, alone, optimizers, 30, gen)
    for state, optimizer in zip(stacked.states(), optimizers):  # a separate run's checkpoint format
        _same_state(state, optimizer.state_dict())


def test_a_stacked_adam_resumes_from_its_own_states_and_from_separate_runs():
    members = DIFFER["all"]
    model, stacked, alone, optimizers = _stack_and_alone(members)
    gen = torch.Generator().manual_seed(2)
    _steps(model, stacked, alone, optimizers, 12, gen)
    for source in (stacked.states(), [o.state_dict() for o in optimizers]):
        views = [_member_view(model, i) for i in range(len(members))]
        again = StackedAdam([_adam(view, s) for view, s in zip(views, members)], views, model)
        again.load(copy.deepcopy(source))
        for a, b in zip(again.states(), stacked.states()):
            _same_state(a, b)
    _steps(model, again, alone, optimizers, 12, gen, start=12)  # and trains on as the separate runs do


def test_a_state_of_members_at_different_steps_does_not_load():
    model, stacked, alone, optimizers = _stack_and_alone(DIFFER["lr"])
    gen = torch.Generator().manual_seed(3)
    _steps(model, stacked, alone, optimizers, 2, gen)
    states = stacked.states()
    states[1]["state"][0]["step"] = torch.tensor(7.0)
    with pytest.raises(ValueError, match="different steps"):
        stacked.load(states)


# --- whole runs ------------------------------------------------------------------------------------

RUNS = {  # members of one cell that differ in their optimizer's settings: one stacked Adam trains them
    "adam: lr, decay, betas, eps, coupled or not": (
        {},
        [
            {"lr": 1e-2, "weight_decay": 1e-3},
            {"lr": 3e-3, "weight_decay": 0.0, "betas": (0.8, 0.99)},
            {"lr": 3e-2, "weight_decay": 0.1, "decoupled_weight_decay": True, "eps": 1e-6},
        ],
    ),
    "adamw: lr and decay, with a warmup": (
        {"model": "transformer", "opt": "adamw"},
        [{"lr": 1e-3, "weight_decay": 1.0}, {"lr": 3e-3, "weight_decay": 0.1}, {"lr": 1e-2, "weight_decay": 1.0}],
    ),
    "adamlr: c and lr": ({"opt": "adamlr"}, [{"c": 10.0}, {"c": 1.0, "lr": 3e-3}, {"c": 30.0}]),
    "adamwlr: c and betas": ({"opt": "adamwlr"}, [{"c": 10.0}, {"c": 3.0, "betas": (0.9, 0.999)}, {"c": 1.0}]),
}
MODEL_SETTINGS = {"transformer": {"d_model": 16, "d_mlp": 32, "n_heads": 2, "train.warmup_steps": 10}}


def _run_specs(choices, members, **extra):
    base = {**SMALL, **MODEL_SETTINGS.get(choices.get("model"), {"d": 16, "hidden": 32}), **extra}
    return [resolve(choices, {**base, **own}, seed) for seed, own in enumerate(members)]


def _per_member_path(monkeypatch):
    """Force the old path, one torch optimizer per member (MemberUpdates), for a comparison."""
    monkeypatch.setattr(updates.SettingsUpdate, "build", classmethod(lambda cls, specs, model: None))


@pytest.mark.parametrize("case", RUNS)
def test_members_differing_in_adam_settings_train_through_one_stacked_adam_as_their_separate_runs(
    tmp_path, monkeypatch, case
):
    choices, members = RUNS[case]
    specs = _run_specs(choices, members)
    assert type(stack_of(specs).update) is SettingsUpdate
    n = len(specs)
    together = train(as_cells(specs, [tmp_path / "stack" / str(i) for i in range(n)]), CPU)
    assert [r["stack_size"] for r in together] == [n] * n
    for i, spec in enumerate(specs):
        train(as_cells([spec], [tmp_path / "alone" / str(i)]), CPU)
        assert metrics_text(tmp_path / "stack" / str(i)) == metrics_text(tmp_path / "alone" / str(i))
    assert len({metrics_text(tmp_path / "stack" / str(i)) for i in range(n)}) == n
    _per_member_path(monkeypatch)
    assert type(stack_of(specs).update) is MemberUpdates
    train(as_cells(specs, [tmp_path / "old" / str(i) for i in range(n)]), CPU)
    for i in range(n):
        assert metrics_text(tmp_path / "old" / str(i)) == metrics_text(tmp_path / "stack" / str(i))


def test_a_preempted_stack_resumes_across_the_two_paths_and_a_member_resumes_alone(tmp_path, monkeypatch):
    specs = _run_specs({"opt": "adamlr"}, RUNS["adamlr: c and lr"][1], patience=None)
    whole = [tmp_path / "whole" / str(i) for i in range(3)]
    train(as_cells(specs, whole), CPU)
    for first, then in (("old", "new"), ("new", "old")):  # checkpointed by one path, resumed by the other
        cut = [tmp_path / first / str(i) for i in range(3)]
        with monkeypatch.context() as patch:
            if first == "old":
                _per_member_path(patch)
            with pytest.raises(Preempted):
                train(as_cells(specs, cut, [PreemptAt(30), None, None]), CPU)
        with monkeypatch.context() as patch:
            if then == "old":
                _per_member_path(patch)
            train(as_cells(specs[:2], cut[:2]), CPU)
        train(as_cells([specs[2]], [cut[2]]), CPU)  # a member of the stack on its own
        for i in range(3):
            assert metrics_text(cut[i]) == metrics_text(whole[i]), (first, then, i)


@pytest.mark.parametrize(
    "choices, settings, kind",
    [
        ({}, [{}, {}], StackedUpdate),  # the same settings: torch's own Adam over the stack
        ({"opt": "sgd"}, [{"lr": 0.1}, {"lr": 0.03}], MemberUpdates),  # not an Adam
        ({"opt": "adamlr_adaptive"}, [{"every": 5}, {"every": 7}], MemberUpdates),  # whole matrices
        ({"filter": "grokfast_ema"}, [{"lamb": 2.0}, {"lamb": 0.5}], MemberUpdates),  # the filters differ
        ({"filter": "grokfast_ema"}, [{"lr": 1e-2}, {"lr": 3e-3}], SettingsUpdate),  # one filter, Adams differ
    ],
)
def test_which_update_a_stack_takes(choices, settings, kind):
    assert type(stack_of(_run_specs(choices, settings)).update) is kind


# --- the ops of a step -------------------------------------------------------------------------------


def _ops_of_one_step(stack) -> Counter:
    """The aten ops that one update.step() of the stack issues, counted by torch.profiler."""
    loss = stack.model(stack.x_train[:, :16]).square().mean(1).sum()
    stack.update.zero_grad()
    loss.backward()
    stack.update.filter()
    stack.update.step()  # the first step makes the optimizer's state: count the second
    loss = stack.model(stack.x_train[:, :16]).square().mean(1).sum()
    stack.update.zero_grad()
    loss.backward()
    stack.update.filter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        stack.update.step()
    return Counter(e.name for e in profile.events() if e.name.startswith("aten::"))


def test_the_ops_of_a_step_do_not_grow_with_the_members_whose_settings_differ(monkeypatch):
    # On CPU a parameter goes in slices of CPU_SLICE_BYTES: this model's, 2 to 8 members of it, in one.
    def stack(k: int):
        return stack_of(_run_specs({"opt": "adamlr"}, [{"lr": 1e-2 * 0.8**i, "c": 1.0 + i} for i in range(k)]))

    two, eight = stack(2), stack(8)
    assert type(two.update) is type(eight.update) is SettingsUpdate
    ops = {k: _ops_of_one_step(s) for k, s in ((2, two), (8, eight))}
    assert ops[2] == ops[8] and sum(ops[2].values()) > 0
    _per_member_path(monkeypatch)  # the old path's grow with K
    old = {k: sum(_ops_of_one_step(stack(k)).values()) for k in (2, 8)}
    assert old[8] > 3 * old[2] and old[8] > sum(ops[8].values())
