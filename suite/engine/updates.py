"""The optimizer and gradient filter of a stack, in three kinds with one interface.

`StackedUpdate`: one optimizer and one filter over the stacked parameters. Exact when every
member has the same settings and both treat each element on its own (registered
elementwise=True): each member's slice then gets the update its separate run would get.

`SettingsUpdate`: one Adam over the stacked parameters with each member's own settings (learning
rate, weight decay, betas, eps, Adam-LR's c; suite/engine/stacked_adam.py), and one filter over the
stack. For members whose optimizers are torch's Adam or AdamW (adam, adamw, adamlr, adamwlr) and
differ in their settings but not in their filter's (an elementwise one): each member's update is
its separate run's, bit for bit on CPU, and a step's launches on a GPU are the same at any K (on
CPU it goes in slices of members that fit the cache).

`MemberUpdates`: one optimizer and one filter per member, each built from that member's own spec
over its slice of the stacked parameters (a view: the update writes into the stack). Members may
then differ in any optimizer or filter setting (learning rate, weight decay, Adam-LR's c, a
filter's strength), and an optimizer or filter that reads whole tensors (Muon, the adaptive c,
orthograd) sees only its member's: each member is its separate run, step for step. It costs a
few small kernels per member and tensor (on an H200, +272 us and +8 launches a member-step), so a
stack uses it only when neither of the others is exact.

All give each member's state in a separate run's format, so a checkpoint resumes in any of them.

An optimizer with modes (the optimizer contract, suite/specs/contracts.py: `train()` and `eval()`,
as Schedule-Free's) holds its training iterate in the parameters in train mode and the weights it
means to be evaluated in eval mode: `training` puts every member's in train mode before the first
step, `evaluated` swaps in the weights to evaluate for as long as the loop evaluates and keeps them.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch

from suite.engine import stacked_adam
from suite.engine.build import build_filter, build_optimizer
from suite.engine.stacked import Alone, Stacked
from suite.specs.registry import ALL
from suite.specs.spec import Spec


def elementwise(spec: Spec) -> bool:
    """Do the spec's optimizer and filter treat every element on its own (registered so)?"""
    return all(ALL[kind].get(getattr(spec, kind).name).info.get("elementwise", False) for kind in ("opt", "filter"))


def for_stack(specs: list[Spec], model: Stacked | Alone, elementwise: bool):
    """The update a stack of these members needs (see the module)."""
    same_filter = all(s.filter == specs[0].filter for s in specs)
    same = same_filter and all(s.opt == specs[0].opt for s in specs)
    if isinstance(model, Alone) or (same and elementwise):
        return StackedUpdate(specs[0], model)
    if elementwise and same_filter and (update := SettingsUpdate.build(specs, model)) is not None:
        return update
    return MemberUpdates(specs, model)


def training(update: StackedUpdate | SettingsUpdate | MemberUpdates) -> None:
    """Every optimizer with modes in train mode: its training iterate in the parameters."""
    for optimizer in update.optimizers:
        if callable(getattr(optimizer, "train", None)):
            optimizer.train()


@contextlib.contextmanager
def evaluated(update: StackedUpdate | SettingsUpdate | MemberUpdates):
    """Inside, the parameters hold the weights each member's method means to be evaluated (an
    optimizer with modes in eval mode, Schedule-Free's averaged x); after, its training iterate again."""
    modal = [o for o in update.optimizers if callable(getattr(o, "eval", None))]
    for optimizer in modal:
        optimizer.eval()
    try:
        yield
    finally:
        for optimizer in modal:
            optimizer.train()


class StackedUpdate:
    def __init__(self, spec: Spec, model: Stacked | Alone):
        self.spec, self.model = spec, model
        self.optimizer, self.grad_filter = build_optimizer(spec, model), build_filter(spec, model)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def filter(self) -> None:
        self.grad_filter.apply()

    def step(self) -> None:
        self.optimizer.step()

    def states(self) -> list[dict]:
        """Per member: {"optimizer": ..., "filter": ...} in a separate run's format."""
        optimizers = self.model.split(self.optimizer.state_dict())
        filters = self.model.split(self.grad_filter.state_dict())
        return [{"optimizer": o, "filter": f} for o, f in zip(optimizers, filters)]

    def load(self, states: list[dict]) -> None:
        self.optimizer.load_state_dict(self.model.join([s["optimizer"] for s in states]))
        self.grad_filter.load_state_dict(self.model.join([s["filter"] for s in states]))

    def keep(self, specs: list[Spec], states: list[dict]) -> StackedUpdate:
        """The update of the smaller stack (after model.keep), from the kept members' states."""
        update = StackedUpdate(specs[0], self.model)
        update.load(states)
        return update


class SettingsUpdate:
    """One Adam over the stack, each member with its own settings (StackedAdam), one filter over the
    stack (the members' filters are the same and elementwise): see the module."""

    def __init__(self, specs: list[Spec], model: Stacked, optimizer: stacked_adam.StackedAdam):
        self.specs, self.model, self.optimizer = specs, model, optimizer
        self.grad_filter = build_filter(specs[0], model)

    @classmethod
    def build(cls, specs: list[Spec], model: Stacked) -> SettingsUpdate | None:
        """The update, or None where StackedAdam does not take these members' optimizers: each
        member's built by its builder over its slice (as MemberUpdates builds it) says."""
        views = [_member_view(model, i) for i in range(model.size)]
        shells = [build_optimizer(spec, view) for spec, view in zip(specs, views)]
        if stacked_adam.fits(shells, views, model) is not None:
            return None
        return cls(specs, model, stacked_adam.StackedAdam(shells, views, model))

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return self.optimizer.shells  # each member's settings; none has modes (train/eval)

    @property
    def param_groups(self) -> list[dict]:
        return [group for shell in self.optimizer.shells for group in shell.param_groups]

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)

    def filter(self) -> None:
        self.grad_filter.apply()

    def step(self) -> None:
        self.optimizer.step()

    def states(self) -> list[dict]:
        filters = self.model.split(self.grad_filter.state_dict())
        return [{"optimizer": o, "filter": f} for o, f in zip(self.optimizer.states(), filters)]

    def load(self, states: list[dict]) -> None:
        self.optimizer.load([s["optimizer"] for s in states])
        self.grad_filter.load_state_dict(self.model.join([s["filter"] for s in states]))

    def keep(self, specs: list[Spec], states: list[dict]) -> SettingsUpdate:
        update = SettingsUpdate.build(specs, self.model)  # fewer members of the same optimizer: it fits
        update.load(states)
        return update


class MemberUpdates:
    def __init__(self, specs: list[Spec], model: Stacked):
        self.specs, self.model = specs, model
        self.views = [_member_view(model, i) for i in range(model.size)]
        self.members = [
            (build_optimizer(spec, view), build_filter(spec, view)) for spec, view in zip(specs, self.views)
        ]

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [optimizer for optimizer, _ in self.members]

    @property
    def param_groups(self) -> list[dict]:
        return [group for optimizer, _ in self.members for group in optimizer.param_groups]

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)

    def filter(self) -> None:
        self._link_grads()
        for _, grad_filter in self.members:
            grad_filter.apply()

    def step(self) -> None:  # after filter(), which linked the gradients (a clip scales them in place)
        for optimizer, _ in self.members:
            optimizer.step()

    def _link_grads(self) -> None:
        """Each member's parameters see their slice of the stacked gradients."""
        for i, view in enumerate(self.views):
            for name, p in view.named.items():
                grad = self.model.stacked(name).grad
                p.grad = None if grad is None else grad[i]

    def states(self) -> list[dict]:
        return [{"optimizer": o.state_dict(), "filter": f.state_dict()} for o, f in self.members]

    def load(self, states: list[dict]) -> None:
        for (optimizer, grad_filter), state in zip(self.members, states):
            optimizer.load_state_dict(state["optimizer"])
            grad_filter.load_state_dict(state["filter"])

    def keep(self, specs: list[Spec], states: list[dict]) -> MemberUpdates:
        update = MemberUpdates(specs, self.model)
        update.load(states)
        return update


def _member_view(model: Stacked, i: int) -> SimpleNamespace:
    """Member i's parameters as leaf tensors sharing the stack's storage, with the roles a
    builder reads (embedding_weight, coupled_weight, hidden_weights), in the model's own order."""
    named = {name: model.stacked(name).data[i] for name in model._names}
    role = {name: named[name] for name in (model._embedding, model._coupled) if name}
    return SimpleNamespace(
        named=named,
        parameters=lambda: iter(named.values()),
        embedding_weight=role.get(model._embedding),
        coupled_weight=role.get(model._coupled),
        hidden_weights=[named[name] for name in model._hidden] if model._hidden is not None else None,
    )
