"""Run specs: which components, every setting resolved, and a stable id.

A spec is stored as plain JSON (spec.json, result.json's "spec", a cell in a manifest):

    {"task": {"name": "modular", "p": 97, ...}, "model": {...}, "opt": {...},
     "sampler": {...}, "filter": {...}, "train": {...}, "seed": 0}

and read typed as a `Spec` (`Spec.of(json)`: its parts, its train settings as a TrainConfig, its id).
Every default is filled in, so the spec alone says what ran. A run is a pure function of its spec;
the id is a hash of it, so the same spec always lands in the same place.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.errors import SuiteError
from suite.specs.config import TrainConfig
from suite.specs.registry import ALL, INT_LIMIT, RUNNERS, _closest, params_of

DEFAULTS = {"task": "modular", "model": "mlp", "opt": "adam", "sampler": "random", "filter": "none"}


@dataclass(frozen=True)
class Part:
    """One component of a spec: its registry name and its settings, every default filled in."""

    name: str
    settings: dict[str, Any]

    def to_json(self) -> dict:
        return {"name": self.name, **self.settings}


@dataclass(frozen=True)
class Spec:
    """A resolved spec, typed. opt, sampler, filter and train are None for a task that brings its
    own runner (it trains nothing: suite.specs.registry.register_runner)."""

    task: Part
    model: Part
    seed: int
    opt: Part | None = None
    sampler: Part | None = None
    filter: Part | None = None
    train: TrainConfig | None = None

    @classmethod
    def of(cls, spec: Spec | dict) -> Spec:
        """The typed spec of its JSON form (a Spec is returned as it is). TrainConfig checks the
        train settings; those an older spec lacks read as LATER_DEFAULTS says its runs trained."""
        if isinstance(spec, Spec):
            return spec
        parts = {kind: Part(spec[kind]["name"], component_settings(spec, kind)) for kind in DEFAULTS if kind in spec}
        later = {key: value for (kind, key), value in later_defaults(spec).items() if kind == "train"}
        train = TrainConfig(**(later | spec["train"])) if "train" in spec else None
        return cls(seed=spec["seed"], train=train, **parts)

    def to_json(self) -> dict:
        """Its JSON form, key for key in resolve()'s order."""
        parts = {kind: getattr(self, kind) for kind in DEFAULTS}
        out: dict[str, Any] = {kind: part.to_json() for kind, part in parts.items() if part is not None}
        if self.train is not None:
            out["train"] = dataclasses.asdict(self.train)
        return out | {"seed": self.seed}

    @functools.cached_property
    def id(self) -> str:
        """spec_id of its JSON form."""
        return spec_id(self.to_json())


@functools.cache  # a spec resolves them, and a tune resolves hundreds of specs at every draw
def train_params():
    return params_of(TrainConfig)


def runner_of_task(task_name: str):
    """The registry entry of the runner a task that trains nothing names, or None for the
    training loop."""
    runner = ALL["task"].get(task_name).info.get("runner")
    return RUNNERS.get(runner) if runner else None


def resolve(
    choices: dict[str, str | None] | None = None, settings: dict[str, Any] | None = None, seed: int = 0
) -> dict:
    """Build a full spec from component names and `key=value` settings.

    Defaults come from each component, then from the model's own recipe for the chosen optimizer
    (register_model's opt_defaults), then the settings win. A setting `key` goes to every chosen
    component that takes `key`; `kind.key` (e.g. `opt.lr`, `train.steps`) to that component alone.
    A key nobody takes is an error.
    """
    chosen = {k: v for k, v in (choices or {}).items() if v is not None}
    unknown = set(chosen) - set(DEFAULTS)
    if unknown:
        raise SuiteError(f"unknown component kind(s): {', '.join(sorted(unknown))}")
    # A task may name its default model (register_task(..., default_model="smollm2")), and may
    # bring its own runner instead of the training loop: its spec then holds only task and model.
    task = ALL["task"].get(chosen.get("task", DEFAULTS["task"]))
    names = {**DEFAULTS, **({"model": task.info["default_model"]} if "default_model" in task.info else {}), **chosen}
    trains = runner_of_task(task.name) is None
    if not trains:
        unused = sorted(set(chosen) - {"task", "model"})
        if unused:
            raise SuiteError(f"task '{task.name}' trains nothing: --{unused[0]} does not apply")
        names = {"task": names["task"], "model": names["model"]}
    gives, takes = task.info.get("gives"), ALL["model"].get(names["model"]).info.get("inputs", ())
    if trains and gives and gives not in takes:  # said before the task builds anything (images render once)
        raise SuiteError(
            f"model '{names['model']}' takes {' or '.join(takes)} inputs, but task '{task.name}' gives {gives}"
        )
    params = {kind: ALL[kind].get(name).params for kind, name in names.items()}
    spec: dict[str, Any] = {
        kind: {"name": names[kind]} | {k: p.default for k, p in params[kind].items()} for kind in names
    }
    if trains:
        params["train"] = train_params()
        spec["train"] = {k: p.default for k, p in params["train"].items()}
        _apply_model_opt_defaults(spec, params)

    for key, value in (settings or {}).items():
        kind, _, bare = key.rpartition(".")
        if kind and kind not in params:
            raise SuiteError(f"--set {key}: '{kind}' is not one of {', '.join(params)}")
        targets = [kind] if kind else [k for k in params if bare in params[k]]
        if not targets or bare not in params[targets[0]]:
            known = sorted({k for kind_params in ([params[kind]] if kind else params.values()) for k in kind_params})
            if not kind:
                raise SuiteError(f"--set {key}: no chosen component takes '{bare}'{_closest(bare, known)}")
            takes = f"it takes {', '.join(known)}" if known else "it takes no settings"
            raise SuiteError(
                f"--set {key}: the {kind} '{spec[kind].get('name', kind)}' does not take '{bare}'"
                f"{_closest(bare, known)}; {takes}"
            )
        for kind_ in targets:
            spec[kind_][bare] = params[kind_][bare].check(value)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < INT_LIMIT:
        raise SuiteError(f"seed must be a non-negative integer below 2^63, got {seed!r}")
    spec["seed"] = seed
    if trains:
        TrainConfig(**spec["train"])  # its checks, before anything runs
    return spec


# Settings that, on, let a component run code it loads (a transformers model folder's own Python).
# Only the person at the keyboard turns one on, with a flag of the command they type (`run --set
# trust_remote_code=true`); a file never does: a spec.json under `run --like`, a grid file, a method
# file or a board's tuning.json, a manifest.
CODE_SETTINGS = ("trust_remote_code",)


def runs_loaded_code(spec: dict) -> list[str]:
    """The spec's CODE_SETTINGS that are on, as kind.key."""
    return [
        f"{kind}.{key}"
        for kind, part in spec.items()
        if isinstance(part, dict)
        for key in CODE_SETTINGS
        if part.get(key) is True
    ]


def refuse_loaded_code(spec: dict, where: str) -> None:
    """One line if a spec read from a file would let a component run code it loads (CODE_SETTINGS)."""
    if on := runs_loaded_code(spec):
        raise SuiteError(
            f"{where}: {on[0]} = true would run the code of the model's folder, and only a flag you type "
            f"grants that, never a file: run the cell with `python -m suite run ... --set {on[0]}=true` if you trust it"
        )


def model_opt_defaults(model: str, opt: str) -> dict[str, Any]:
    """The settings `model`'s own recipe trains it with under optimizer `opt` ("opt.lr": ..., "train.*": ...)."""
    return ALL["model"].get(model).info.get("opt_defaults", {}).get(opt, {})


def _apply_model_opt_defaults(spec: dict, params: dict) -> None:
    model, opt = spec["model"]["name"], spec["opt"]["name"]
    for key, value in model_opt_defaults(model, opt).items():
        kind, _, bare = key.partition(".")
        if bare not in params[kind]:
            raise SuiteError(f"model '{model}' declares {key} for optimizer '{opt}', which takes no '{bare}'")
        spec[kind][bare] = params[kind][bare].check(value)


def component_settings(spec: dict, kind: str) -> dict:
    return {k: v for k, v in spec[kind].items() if k != "name"}


# Settings added after runs were stored: at these values a setting is left out of the id, so the ids
# of the runs from before it (whose specs lack it) do not change, and an old spec reads as this one.
LATER_DEFAULTS = {
    ("train", "precision"): "fp32",
    ("train", "chance_patience"): None,  # runs before it went on at chance to their budget
    ("train", "learn_patience"): None,  # the default: a run that never leaves chance goes on to its budget
}


def spec_id(spec: dict) -> str:
    """Stable across processes and machines (never Python's salted hash())."""
    canonical = json.dumps(without_later_defaults(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# Such settings of the components that gained them, by name: Adam and Adam-LR decayed coupled before
# decoupled_weight_decay, Muon always decoupled (so a muon spec at true keeps its id, a coupled one gets
# its own). AdamW is decoupled by its definition and never takes the setting, so it gets none.
LATER_DEFAULTS_BY_NAME = {
    ("opt", "adam", "decoupled_weight_decay"): False,
    ("opt", "adamlr", "decoupled_weight_decay"): False,
    ("opt", "adamlr_adaptive", "decoupled_weight_decay"): False,
    ("opt", "muon", "decoupled_weight_decay"): True,
}


def later_defaults(spec: dict) -> dict:
    """LATER_DEFAULTS as they hold for this spec's components."""
    out = dict(LATER_DEFAULTS)
    for (kind, name, key), value in LATER_DEFAULTS_BY_NAME.items():
        if spec.get(kind, {}).get("name") == name:
            out[(kind, key)] = value
    return out


def without_later_defaults(spec: dict) -> dict:
    """The spec as it was written before LATER_DEFAULTS's settings existed (where they hold those values)."""
    out = dict(spec)
    for (kind, key), value in later_defaults(spec).items():
        if kind in out and out[kind].get(key, value) == value:
            out[kind] = {k: v for k, v in out[kind].items() if k != key}
    return out


def with_later_defaults(spec: dict) -> dict:
    """An older spec with LATER_DEFAULTS's settings filled in, so it reads as a spec of today."""
    out = dict(spec)
    for (kind, key), value in later_defaults(spec).items():
        if kind in out and key not in out[kind]:
            out[kind] = {**out[kind], key: value}
    return out


def cell_id(spec: dict) -> str:
    """spec_id of the spec without its seed: the same for every seed of a cell (W&B's group, export's
    cell_id column)."""
    return spec_id({k: v for k, v in spec.items() if k != "seed"})


def default_run_dir(spec: dict, root: str | Path = "runs") -> Path:
    if "opt" not in spec:  # a task with its own runner: no optimizer, sampler or filter
        return Path(root) / f"{spec['task']['name']}-{spec['model']['name']}" / f"seed{spec['seed']}-{spec_id(spec)}"
    method = spec["opt"]["name"] + ("" if spec["filter"]["name"] == "none" else "+" + spec["filter"]["name"])
    precision = spec.get("train", {}).get("precision", "fp32")
    cell = f"{spec['task']['name']}-{spec['model']['name']}-{method}-{spec['sampler']['name']}"
    cell += "" if precision == "fp32" else f"-{precision}"
    return Path(root) / cell / f"seed{spec['seed']}-{spec_id(spec)}"


def canonical(spec: dict) -> dict:
    """The spec as it reads back from JSON (tuples become lists), for comparisons."""
    return json.loads(json.dumps(spec))


def task_data(spec: dict, data=None):
    """The task's data (built, unless given) and the model's registry entry, once the model is
    known to take that data."""
    task, model_entry = ALL["task"].get(spec["task"]["name"]), ALL["model"].get(spec["model"]["name"])
    if data is None:
        data = task.build(spec["seed"], **component_settings(spec, "task"))
    accepted = model_entry.info.get("inputs", ())
    if data.kind not in accepted:
        raise SuiteError(
            f"model '{model_entry.name}' takes {' or '.join(accepted)} inputs, but task '{task.name}' gives {data.kind}"
        )
    return data, model_entry


def shared(spec: dict) -> dict:
    """What the members of one stack have in common: the spec but its seed and the settings of its
    task, optimizer and filter. Each member brings its own data (operation, split, data seed, ...),
    so cells that differ there stack as seeds do, as long as the tensors come out the same shapes
    (suite.engine.stacked.shapes); each member may have its own optimizer and filter settings (its own
    learning rate, weight decay, c, filter strength: suite/engine/updates.py)."""
    own = ("task", "opt", "filter")
    return {k: ({"name": v["name"]} if k in own else v) for k, v in spec.items() if k != "seed"}
