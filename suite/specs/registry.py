"""Name -> builder registries for tasks, models, optimizers, samplers, gradient filters and
runners.

A component is a plain function (or class) registered under a name. Its parameters with
defaults are the settings a user can change (`--set key=value`); the ones without defaults
are what the engine wires in (the task's data, the model's parameter groups, ...): each
kind's contract (suite/specs/contracts.py) is checked as the component registers. Types come
from the annotations (`Literal[...]` for a fixed set of choices), so the CLI can parse,
check and list every setting without any extra declaration. Each entry remembers where it
was defined; a name is registered once (override=True replaces on purpose).
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import inspect
import math
import pkgutil
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Literal

from suite.errors import SuiteError
from suite.specs.contracts import CONTRACTS, check, where


@dataclass(frozen=True)
class Param:
    name: str
    default: Any
    type: Any  # a Python type, a Literal[...] or an Optional of one

    def parse(self, text: str) -> Any:
        """Read a --set value given as text into this parameter's type."""
        return _coerce(self.type, text, self.name)

    def check(self, value: Any) -> Any:
        """Accept a value from a grid file or JSON (already typed) or text."""
        if isinstance(value, str) and _base_type(self.type) is not str:
            return self.parse(value)
        return _coerce(self.type, value, self.name)

    def describe(self) -> str:
        choices = typing.get_args(self.type) if typing.get_origin(self.type) is Literal else None
        return f"{self.name}={self.default!r}" + (f" {{{','.join(map(str, choices))}}}" if choices else "")


@dataclass
class Entry:
    kind: str
    name: str
    build: Callable
    params: dict[str, Param]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        """file:line of the builder; found when asked for (inspect reads the source file: ~3 ms an
        entry, ~0.1 s of every run's start-up when it was found at registration)."""
        return where(self.build)

    @property
    def summary(self) -> str:
        doc = inspect.getdoc(self.build) or ""
        return doc.splitlines()[0] if doc else ""


def _base_type(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _base_type(args[0])
    if typing.get_origin(tp) is Literal:
        return type(typing.get_args(tp)[0])
    return typing.get_origin(tp) or tp


def _coerce(tp, value, name):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() in ("none", "null"))):
            return None
        return _coerce(next(a for a in args if a is not type(None)), value, name)
    if origin is Literal:
        choices = typing.get_args(tp)
        value = _coerce(type(choices[0]), value, name)
        if value not in choices:
            known = ", ".join(map(str, choices))
            raise SuiteError(f"{name}={value!r} is not one of {known}{_closest(str(value), map(str, choices))}")
        return value
    if origin is tuple:
        if not isinstance(value, str | list | tuple):
            raise SuiteError(f"{name}={value!r}: {name} takes {len(typing.get_args(tp))} comma-separated values")
        parts = value.split(",") if isinstance(value, str) else list(value)
        inner = typing.get_args(tp)
        if len(parts) != len(inner):
            raise SuiteError(f"{name} takes {len(inner)} comma-separated values, got {value!r}")
        return tuple(_coerce(t, v, name) for t, v in zip(inner, parts))
    try:
        if tp is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if tp is int:
            if not isinstance(value, int | float | str) or isinstance(value, bool):
                raise ValueError
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            number = int(str(value).replace("_", "")) if isinstance(value, str) else int(value)
            if not -INT_LIMIT < number < INT_LIMIT:  # torch and numpy take 64-bit integers
                raise SuiteError(f"{name}={value!r}: {name} takes an integer below 2^63 in size")
            return number
        if tp is float:
            if not isinstance(value, int | float | str) or isinstance(value, bool):
                raise ValueError
            number = float(value)
            if not math.isfinite(number):  # no setting means anything at nan or inf
                raise SuiteError(f"{name}={value!r}: {name} takes a finite float")
            return number
        if tp is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except (ValueError, OverflowError):
        raise SuiteError(f"{name}={value!r}: {name} takes {tp.__name__}") from None
    return value


INT_LIMIT = 2**63


def _closest(name: str, known) -> str:
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def params_of(fn: Callable) -> dict[str, Param]:
    """Settable parameters of a builder: those that have a default."""
    hints = typing.get_type_hints(fn.__init__ if inspect.isclass(fn) else fn)
    out = {}
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out[p.name] = Param(p.name, p.default, hints.get(p.name, type(p.default)))
    return out


class Registry:
    """Name -> Entry for one kind. Registering a taken name is an error unless the decorator
    says override=True (the same builder registered again, as a reloaded module does, is not
    a clash)."""

    def __init__(self, kind: str, word: str | None = None):
        self.kind, self.word = kind, word or kind  # the spec's key ("opt") and the word for messages ("optimizer")
        self.contract = CONTRACTS.get(kind)
        self._entries: dict[str, Entry] = {}

    def register(self, name: str | None = None, *, override: bool = False, **info):
        """Decorator: `@register_model("mlp", inputs=("tokens", "image"))`."""

        def deco(fn):
            key = name or fn.__name__
            if self.contract is not None:
                check(self.contract, key, fn, info)
            old = self._entries.get(key)
            if old is not None and not override and _qualname(old.build) != _qualname(fn):
                raise SuiteError(
                    f"{where(fn)}: {self.word} '{key}' is already registered by {old.origin}; "
                    f"pick another name, or register with override=True to replace it"
                )
            self._entries[key] = Entry(self.kind, key, fn, params_of(fn), info)
            return fn

        return deco

    def get(self, name: str) -> Entry:
        discover()
        if name not in self._entries:
            known = sorted(self._entries)
            raise SuiteError(f"unknown {self.word} '{name}'{_closest(name, known)}; known: {', '.join(known)}")
        return self._entries[name]

    def names(self, pattern: str = "*") -> list[str]:
        """Registered names, sorted; those matching a shell-style pattern ('adam*') if given."""
        discover()
        return sorted(n for n in self._entries if fnmatch.fnmatchcase(n, pattern))


def _qualname(fn) -> str:
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"


TASKS = Registry("task")
MODELS = Registry("model")
OPTIMIZERS = Registry("opt", "optimizer")
SAMPLERS = Registry("sampler")
FILTERS = Registry("filter")
RUNNERS = Registry("runner")  # for tasks that train nothing; not a part of specs
ALL = {"task": TASKS, "model": MODELS, "opt": OPTIMIZERS, "sampler": SAMPLERS, "filter": FILTERS}

register_task = TASKS.register
register_model = MODELS.register
register_optimizer = OPTIMIZERS.register
register_sampler = SAMPLERS.register
register_filter = FILTERS.register
register_runner = RUNNERS.register

# Built-in components: every module of these packages registers itself on import.
_BUILTIN_PACKAGES = ("suite.tasks", "suite.models", "suite.components")
ENTRY_POINT_GROUPS = (
    "suite.tasks",
    "suite.models",
    "suite.optimizers",
    "suite.samplers",
    "suite.filters",
    "suite.runners",
)
_discovered = False
# the distribution (name, version) of each top-level module an entry point loaded: who provides a component
PROVIDERS: dict[str, tuple[str, str | None]] = {}


def discover() -> None:
    """Import the built-in component modules and every installed entry point, once. A module
    that fails to import costs one warning line; the rest stay usable."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for pkg_name in _BUILTIN_PACKAGES:
        pkg = importlib.import_module(pkg_name)
        for mod in pkgutil.iter_modules(pkg.__path__):
            _load(f"{pkg_name}.{mod.name}", lambda name=f"{pkg_name}.{mod.name}": importlib.import_module(name))
    installed = entry_points()  # one scan of the installed packages (a scan per group took ~0.1 s more)
    for group in ENTRY_POINT_GROUPS:
        for ep in installed.select(group=group):
            if ep.dist is not None:
                PROVIDERS[ep.module.split(".")[0]] = (ep.dist.name, ep.dist.version)
            _load(f"entry point {ep.name} ({ep.value})", ep.load)


def _load(what: str, load: Callable) -> None:
    try:
        load()
    except Exception as err:  # a user's broken module must not take `list` and every run down with it
        message = str(err).splitlines()[0] if str(err) else ""
        print(f"warning: skipped {what}: {type(err).__name__}: {message}", file=sys.stderr)
