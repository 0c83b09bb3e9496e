'''What each kind of component promises the engine: one small contract per kind.

A component is a builder (a function or a class) registered under a name with one decorator.
Its first parameters are fixed: the engine passes them, positionally, in this order. Every
parameter after them has a default and is a *setting*: `--set key=value`, a grid axis, a
field of the spec, typed by its annotation (int, float, bool, str, Literal[...], Optional[...],
tuple[...]). Extra facts about a component go in the decorator's keywords (`info`).

    kind       builder(fixed..., *, settings)     builds                   info
    task       (seed)                             suite.TaskData           default_model, runner, gives
    model      (data: TaskData)                   torch.nn.Module          inputs (required), stackable, opt_defaults
    opt        (groups: ParamGroups)              torch.optim.Optimizer    elementwise
    sampler    (data: TaskData, generator)        suite.Sampler            -
    filter     (params: list of parameters)       suite.GradFilter         elementwise
    runner     (spec, run_dir, device)            the result (a dict)      -

- task: `seed` is the run's seed (it fixes the split unless the task takes its own
  data_seed). A task that trains nothing names its runner (`runner="probe"`) and the
  model it reads by default (`default_model=...`); its spec then holds only task and model.
  `gives="tokens"` (or "image", "text") declares the kind of data it builds, so that a model
  that cannot read it is refused before the data is built (optional; the built data says it too).
- model: maps inputs [batch, ...] to logits [batch, classes]. `inputs` lists the TaskData
  kinds it reads ("tokens", "image", "text"). Optional attributes: `embedding_weight` (the
  token embedding E: Adam-LR's embedding group and the progress measures) and
  `coupled_weight` (the first weight W that reads E). Seeds of one cell train as one
  stack with the forward vmapped over the member axis (suite/engine/stacked.py); a model whose
  forward cannot be vmapped, or that says `stackable=False`, runs its seeds one after the
  other instead, and a single run never needs vmap. A model may write that stacked forward
  itself, `forward_stacked(params, x)` (stacked parameters by name, x [K, batch, ...]), to
  skip vmap's overhead; each member must compute what the model alone computes (models/mlp.py,
  tests/test_stack.py). `opt_defaults={"adamlr": {"opt.lr": 1e-3, "train.warmup_steps": 10}}`
  declares the settings the model's own recipe trains it with, per optimizer (opt.* and train.*
  keys): they replace that optimizer's and the loop's defaults when both are chosen, and --set
  still wins (the transformer runs adam and Adam-LR at Nanda et al.'s AdamW recipe).
- opt: built from the model's parameter groups (groups.embedding, groups.coupled,
  groups.rest, groups.all). `elementwise=True` promises that each element's update depends
  on that element alone (Adam, SGD): the optimizer then trains a stack's members exactly.
  How a method is evaluated: an optimizer whose weights to evaluate are not its training iterate
  (Schedule-Free's averaged x, an EMA, Lookahead's slow weights) has modes, `train()` and `eval()`
  (torch's optimizers have neither): eval() puts the weights it means to be evaluated into the
  parameters, train() its training iterate back. The loop calls train() before the first step,
  eval() before every evaluation and train() after it, so the records, the milestones and the
  weights a run keeps are the evaluated ones; its state_dict() carries the mode (the loop
  checkpoints in train mode). suite/components/schedulefree.py is one.
- sampler: `next()` returns the indices of the next batch, drawn with `generator` only, so
  that a resumed run draws the same batches; `state_dict()`/`load_state_dict()` carry any
  position it keeps (the base class keeps none). A sampler that adapts to training sets
  `reads_embedding_grad = True`: after every backward, `observe(grad)` hands it its run's
  token-embedding gradient (vocab x d, before any filter); the model must then have one.
- filter: rewrites the gradients in place between backward and the optimizer step
  (`apply()`), with `state_dict()`/`load_state_dict()` for checkpoints (tensors and numbers
  only). `elementwise=True` as for optimizers.
- runner: runs one spec of a task that trains nothing into run_dir and returns its result
  (also written to run_dir/result.json); `summary(result)`, if the runner defines it, is the
  one line the CLI prints for it.

`check()` holds a builder to its kind's contract when it registers: a wrong fixed argument,
a setting without a usable type, or an unknown info key is one error line naming the file.

One component of each kind, all in one module: the example tests/test_contracts.py runs (it reads
the python block after the marker below). README.md, "Extend the suite", says how to run it and how
to register such a module from a package of your own.

<!-- example components -->
```python
from pathlib import Path

import torch
from suite import GradFilter, Sampler, TaskData, register_filter, register_model, register_optimizer
from suite import register_runner, register_sampler, register_task


@register_task("parity")
def parity(seed: int, *, n_bits: int = 8, train_frac: float = 0.5) -> TaskData:
    """Parity of n_bits bits, tokens 0/1."""
    g = torch.Generator().manual_seed(seed)
    x = torch.cartesian_prod(*[torch.arange(2)] * n_bits)
    y = x.sum(1) % 2
    perm = torch.randperm(len(x), generator=g)
    cut = int(train_frac * len(x))
    tr, va = perm[:cut], perm[cut:]
    return TaskData(
        x[tr],
        y[tr],
        x[va],
        y[va],
        kind="tokens",
        n_classes=2,
        vocab_size=2,
        token_freq=torch.bincount(x[tr].flatten(), minlength=2),
    )


@register_model("bag", inputs=("tokens",))
class Bag(torch.nn.Module):
    """Mean of the token embeddings, then a linear readout."""

    def __init__(self, data: TaskData, *, d: int = 16):
        super().__init__()
        self.embed = torch.nn.Embedding(data.vocab_size, d)
        self.out = torch.nn.Linear(d, data.n_classes)

    @property
    def embedding_weight(self):  # Adam-LR's embedding group, the progress measures
        return self.embed.weight

    def forward(self, x):
        return self.out(self.embed(x).mean(1))


@register_optimizer("adagrad", elementwise=True)
def adagrad(groups, *, lr: float = 1e-2):
    """Adagrad."""
    return torch.optim.Adagrad(groups.all, lr=lr)


@register_sampler("cyclic")
class Cyclic(Sampler):
    """The training set in order, batch_size examples at a time."""

    def __init__(self, data, generator, *, batch_size: int = 32):
        self.n, self.batch_size, self.device, self.pos = len(data.y_train), batch_size, generator.device, 0

    def next(self):
        batch = (torch.arange(self.batch_size, device=self.device) + self.pos) % self.n
        self.pos = (self.pos + self.batch_size) % self.n
        return batch

    def state_dict(self):  # where it stands, for checkpoints
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = int(state["pos"])


@register_filter("clip", elementwise=True)
class Clip(GradFilter):
    """Clamp every gradient element to [-limit, limit]."""

    def __init__(self, params, *, limit: float = 1.0):
        self.params, self.limit = list(params), limit

    def apply(self):
        for p in self.params:
            if p.grad is not None:
                p.grad.clamp_(-self.limit, self.limit)


@register_runner("majority")
def majority(spec, run_dir, device) -> dict:
    """Val accuracy of always answering the commonest training label: the floor to beat."""
    from suite.results.rundir import write_json
    from suite.specs.spec import task_data

    data, _ = task_data(spec)
    guess = torch.bincount(data.y_train).argmax()
    result = {"spec": spec, "runner": "majority", "wall_s": 0.0, "val_acc": (data.y_val == guess).float().mean().item()}
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_json(Path(run_dir) / "result.json", result)
    return result


@register_task("parity_floor", runner="majority", default_model="bag")
def parity_floor(seed: int, *, n_bits: int = 8, train_frac: float = 0.5) -> TaskData:
    """Parity, measured by the majority runner instead of trained."""
    return parity(seed, n_bits=n_bits, train_frac=train_frac)
```
'''

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from suite.errors import SuiteError

if TYPE_CHECKING:
    import torch


class Sampler:
    """Base of every sampler: `next()` -> the next batch's indices into the training set."""

    reads_embedding_grad = False  # True: observe() gets the token-embedding gradient after each backward

    def next(self):  # -> torch.Tensor of indices into the training set
        raise NotImplementedError

    def observe(self, embedding_grad) -> None:
        """The run's token-embedding gradient of the batch just drawn (vocab x d)."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class GradFilter:
    """Base of every gradient filter: `apply()` rewrites the parameters' .grad in place."""

    def apply(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class Tracker(Protocol):
    """What the loop reports to (suite/launch/tracking.py's W&B tracker; tests' own): started once the run
    is known to build (before its clock), every evaluation's record, then the result; closed with an
    exit code if the run stops otherwise (3 preempted, 1 failed)."""

    def start(self) -> None: ...

    def log(self, record: dict, step: int) -> None: ...

    def finish(self, result: dict) -> None: ...

    def close(self, exit_code: int) -> None: ...


@dataclass(frozen=True)
class Contract:
    kind: str
    fixed: tuple[str, ...]  # the arguments the engine passes, in order
    info: frozenset  # the decorator keywords this kind knows
    required_info: tuple[str, ...] = ()


CONTRACTS = {
    "task": Contract("task", ("seed",), frozenset({"default_model", "runner", "gives"})),
    "model": Contract("model", ("data",), frozenset({"inputs", "stackable", "opt_defaults"}), ("inputs",)),
    "opt": Contract("optimizer", ("groups",), frozenset({"elementwise"})),
    "sampler": Contract("sampler", ("data", "generator"), frozenset()),
    "filter": Contract("filter", ("params",), frozenset({"elementwise"})),
    "runner": Contract("runner", ("spec", "run_dir", "device"), frozenset()),
}
RESERVED = {"name"}  # a spec's component entry holds its name beside the settings
_SIMPLE = (int, float, bool, str)


def where(fn: Callable) -> str:
    """file:line of a builder, for error messages and `suite list --origin`."""
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return getattr(fn, "__module__", "?")


def check(contract: Contract, name: str, fn: Callable, info: dict[str, Any]) -> None:
    """Raise ContractError (one line, naming the file) if fn does not fit its kind's contract."""

    def fail(what: str):
        raise ContractError(f"{where(fn)}: {contract.kind} '{name}' {what}")

    if not callable(fn):
        fail("is not callable")
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn.__init__ if inspect.isclass(fn) else fn)
    except (TypeError, ValueError, NameError) as err:
        fail(f"has a signature the suite cannot read ({err})")
    params = list(signature.parameters.values())
    required = [
        p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) != len(contract.fixed):
        fail(
            f"must take ({', '.join(contract.fixed)}) first, then settings with defaults; "
            f"it takes ({', '.join(required)})"
        )
    for p in params:
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            fail(f"setting '{p.name}' needs a default")
        if p.default is p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in contract.fixed or p.name in RESERVED:
            fail(
                f"cannot have a setting called '{p.name}': the engine passes it"
                if p.name in contract.fixed
                else f"cannot have a setting called '{p.name}': specs use it for the component's name"
            )
        tp = hints.get(p.name, type(p.default))
        if not _usable(tp):
            fail(
                f"setting '{p.name}' needs a type annotation the CLI can parse (int, float, bool, str, "
                f"Literal, Optional, tuple); got {tp!r}"
            )
    unknown = set(info) - contract.info
    if unknown:
        fail(
            f"got unknown keyword(s) {', '.join(sorted(unknown))}; {contract.kind} knows "
            f"{', '.join(sorted(contract.info)) or 'none'}"
        )
    missing = [k for k in contract.required_info if k not in info]
    if missing:
        fail(f"must say {', '.join(missing)}= when it registers")
    if not _is_opt_defaults(info.get("opt_defaults", {})):
        fail('opt_defaults must map optimizer names to {"opt.KEY" or "train.KEY": value}')


def _is_opt_defaults(opt_defaults) -> bool:
    """Is it {optimizer name: {"opt.KEY" or "train.KEY": value}}? (Whether the optimizer takes each key
    is known once it is chosen: suite.specs.spec.resolve says.)"""
    return isinstance(opt_defaults, dict) and all(
        isinstance(settings, dict)
        and all(str(key).partition(".")[0] in ("opt", "train") and str(key).partition(".")[2] for key in settings)
        for settings in opt_defaults.values()
    )


def _usable(tp) -> bool:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return len(rest) == 1 and _usable(rest[0])
    if origin is Literal:
        return all(isinstance(a, _SIMPLE) for a in args)
    if origin is tuple:
        return all(_usable(a) for a in args) and Ellipsis not in args
    return tp in _SIMPLE


@dataclass
class ParamGroups:
    """What an optimizer builder is given: the model's parameters by the role the paper's methods
    treat differently (the token embedding E, the first weight W that reads it, the rest)."""

    embedding: list[torch.nn.Parameter]
    coupled: torch.nn.Parameter | None
    rest: list[torch.nn.Parameter]
    hidden: list[torch.nn.Parameter] | None = None  # the model's hidden_weights (Muon's matrices), if it names them

    @classmethod
    def of(cls, model) -> ParamGroups:
        E = getattr(model, "embedding_weight", None)
        rest = [p for p in model.parameters() if p is not E]
        hidden = getattr(model, "hidden_weights", None)
        return cls([E] if E is not None else [], getattr(model, "coupled_weight", None), rest, hidden)

    @property
    def all(self) -> list[torch.nn.Parameter]:
        return self.embedding + self.rest


class ContractError(SuiteError):
    """A component that does not fit its kind's contract (raised when it registers)."""


def check_built(kind: str, name: str, obj, base: type) -> None:
    """A builder gave what its contract promises, or one line that says what it gave instead."""
    if not isinstance(obj, base):
        raise SuiteError(
            f"{kind} '{name}' built a {type(obj).__name__}, not a {base.__module__}.{base.__qualname__} "
            "(see suite/specs/contracts.py)"
        )
