"""Which members train together: the one place that decides whether runs can stack, and the
stacks they train in.

Members stack (suite/engine/stacked.py's Stacked) when that is exact and their tensors line up:
their specs differ only in the seed and the settings of their task, optimizer and filter
(suite.specs.spec.shared), the model may be stacked and vmapped, and the members' data and parameters
have the same shapes and start at the same step. How each member is updated exactly (one
optimizer over the stack, or one per member over its slice) is suite/engine/updates.py's. A model that
keeps per-model state the stack cannot hold (BatchNorm statistics, dropout's random draws) would
not be exact: such members run one after the other, each its model alone (Alone), with the
reason said once. Members whose shapes or starting steps differ stack in parts of equal shapes
and steps.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from suite.engine.member import Member
from suite.engine.stack import Stack
from suite.engine.stacked import Alone, Stacked, shapes
from suite.specs.registry import ALL
from suite.specs.spec import Spec, shared

SHAPES_DIFFER = "the members' data or models differ in shape"
STEPS_DIFFER = "they were resumed from different steps"


def blocker(specs: list[Spec | dict], models: list[nn.Module]) -> str | None:
    """Why these members cannot train as one exact stack whatever their shapes, or None."""
    specs = [Spec.of(s) for s in specs]
    first = specs[0]
    if any(shared(s.to_json()) != shared(first.to_json()) for s in specs[1:]):
        return "the specs differ in more than the seed and the task's, optimizer's and filter's settings"
    if not ALL["model"].get(first.model.name).info.get("stackable", True):
        return f"model '{first.model.name}' is registered with stackable=False"
    if len(specs) > 1 and first.train.hessian_every:
        return "Hessian measures are per model"  # one run measures its stack of one (Stacked.alone)
    for module in models[0].modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return f"the model has BatchNorm ({type(module).__name__}), whose statistics are per model"
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            return "the model has dropout, whose random draws differ from separate runs"
    return None


def stacks(members: list[Member], device: torch.device) -> list[Stack]:
    """The members still to train, in stacks that each train as one model, in order; says once,
    on stderr, why they do not all train as one stack. Building a stack builds its optimizers and
    filters: one that does not fit the model raises here."""
    live = [m for m in members if m.result is None]
    if not live:
        return []
    reasons, out = [], []
    if blocked := blocker([m.spec for m in live], [m.model for m in live]):
        reasons.append(blocked)
        out = [([m], Alone(m.model)) for m in live]
    else:
        by_key: dict = {}
        for m in live:
            by_key.setdefault((shapes(m.model, m.data), m.start), []).append(m)
        if len(by_key) > 1:
            reasons.append(SHAPES_DIFFER if len({shape for shape, _ in by_key}) > 1 else STEPS_DIFFER)
        for group in by_key.values():
            stacked, failure = _stacked(group)
            if stacked is not None:
                out.append((group, stacked))
            else:
                reasons.append(failure)
                out += [([m], Alone(m.model)) for m in group]
    if len(out) > 1:
        how = "one after the other" if all(len(ms) == 1 for ms, _ in out) else f"in {len(out)} stacks"
        print(f"{len(live)} runs train {how}: {'; '.join(dict.fromkeys(reasons))}", file=sys.stderr)
    return [Stack(ms, model, device) for ms, model in out]


def _stacked(group: list[Member]) -> tuple[Stacked | None, str | None]:
    """The group's members as one Stacked model, or None and why not: the first stacked forward
    and backward runs here, and the batched forward a GPU takes, where a model whose ops have no
    vmap batching rule fails: such a model runs its seeds one after the other on every device
    (on CPU a stack would run each member's own forward anyway), so a cell's plan is the same
    wherever it runs."""
    name = group[0].spec.model.name
    try:  # a builder that defines its class anew at each call makes models torch cannot stack
        model = Stacked([m.model for m in group])
    except Exception as err:  # noqa: BLE001 (each model then runs alone)
        return None, f"model '{name}' cannot be stacked ({_first_line(err)})"
    try:
        sample = torch.stack([m.data.x_train[:8] for m in group])
        model.check_batched(sample)
        model.lay_out_like_gradients(sample)
    except Exception as err:  # noqa: BLE001 (the plain model then runs, and raises its own errors)
        return None, f"model '{name}' cannot be vmapped ({_first_line(err)})"
    return model, None


def _first_line(err: Exception) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"
