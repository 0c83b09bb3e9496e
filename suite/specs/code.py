"""The code a run was made by: for each component of its spec, the module that defines the
builder, a hash of the code that runs, and where it comes from (the suite's own, at its version,
or the installed package that holds it, at its version).

A run's id hashes its settings only, so a researcher who edits their optimizer would get the old
numbers back under the same id. Every run records this identity (code.json in its run folder,
`code` in result.json), and `execute` (suite/launch/manifest.py) never reuses a finished or
checkpointed run whose component code has changed since: it says which one, and what to do.

The identity follows the code, not its text: code_sha256 hashes the syntax trees (docstrings
dropped; comments and layout are not in them) of the component's module and of every module of its
own package it imports, directly or through one another (its package: the one that holds the
module; a package's __init__ holds itself), so a reworded docstring reuses a finished run and an
edit to a helper module the component calls refuses it. `imports` records the versions of the other
installed distributions those modules import (a plugin's dependency such as schedulefree), but
those the suite itself depends on (torch, numpy, ...: the suite's own version covers them), and a
change of version refuses a run too. Runs recorded before this rule hold source_sha256, a hash of
the module's text, and are compared by it; runs made before any record have none, and are reused.
The engine's code is not in the record; its computation number (COMPUTATION, below) is.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import importlib.metadata
import inspect
import re
import sys
import threading

KINDS = ("task", "model", "opt", "sampler", "filter")

# How the engine computes a run from its spec and seed, as a number: bumped when a change makes the same
# spec and seed train to other numbers (2: each stack member runs its own products on the CPU). The
# engine's code is not hashed (a refactor would refuse every run); tests/test_traces.py holds this number
# to the losses it computes. Runs record it, and one of another computation is not reused or resumed;
# a tuned board records it (tuning.json's "protocol"), and `tune --add` requires it.
COMPUTATION = 2


def code_of(spec: dict) -> dict:
    """Per component kind in the spec: {name, module, code_sha256, modules, imports, package, version};
    and "engine": {computation}."""
    return _components(spec) | {"engine": {"computation": COMPUTATION}}


def _components(spec: dict) -> dict:
    from suite.specs.registry import ALL

    with _computing:  # a stack's runs open in threads: one of them hashes the code, the others wait for it
        return {kind: _identity(ALL[kind].get(spec[kind]["name"]).build) for kind in KINDS if kind in spec}


_computing = threading.Lock()


def changed(recorded: dict | None, spec: dict) -> str | None:
    """Which component's code, or the engine's computation, differs from what made a run (one phrase),
    or None: the same, or a run made before they were recorded."""
    if not recorded:
        return None
    engine = recorded.get("engine")
    if isinstance(engine, dict) and engine.get("computation") != COMPUTATION:
        return f"the engine (computation {engine.get('computation')} -> {COMPUTATION})"
    for kind, now in _components(spec).items():
        then = recorded.get(kind)
        if not isinstance(then, dict):
            continue
        what = _difference(then, now)
        if what:
            where = now["module"] if then.get("module") == now["module"] else f"{then.get('module')} -> {now['module']}"
            return f"{kind} '{spec[kind]['name']}' ({where}: {what})"
    return None


def _difference(then: dict, now: dict) -> str | None:
    """How a recorded identity differs from today's, or None. An older record (source_sha256, the
    module's text) is compared by the rule it was made under."""
    if then.get("module") != now["module"] and (then.get("code_sha256") or then.get("source_sha256")):
        return "another module"
    if "code_sha256" in then:
        if then["code_sha256"] and now["code_sha256"] and then["code_sha256"] != now["code_sha256"]:
            return f"code {then['code_sha256'][:8]} -> {now['code_sha256'][:8]}"
        moved = {d: (v, now["imports"].get(d)) for d, v in (then.get("imports") or {}).items()}
        moved = {d: vs for d, vs in moved.items() if vs[0] != vs[1]}
        return ", ".join(f"{d} {a} -> {b}" for d, (a, b) in sorted(moved.items())) or None
    old = then.get("source_sha256")
    text = _source_sha256(now["module"])
    if old and text and old != text:
        return f"source {old[:8]} -> {text[:8]}"
    return None


@functools.cache
def _identity(build) -> dict:
    module = getattr(build, "__module__", None) or "?"
    modules = _own_modules(module)
    trees = [_tree(name) for name in modules]
    digest = None if None in trees else hashlib.sha256("\n".join(trees).encode()).hexdigest()
    package, version = _package(module)
    return {
        "module": module,
        "code_sha256": digest,
        "modules": modules,
        "imports": _third_party(modules),
        "package": package,
        "version": version,
    }


def _own_modules(module: str) -> list[str]:
    """The module and the modules of its own package it imports, directly or through one another."""
    mod = sys.modules.get(module)
    package = module if hasattr(mod, "__path__") else module.rpartition(".")[0] or module
    found, todo = [], [module]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.append(name)
        inside = (n for n in _imports(name) if n == package or n.startswith(package + "."))
        todo.extend(n for n in inside if n not in found)
    return sorted(found)


def _imports(name: str) -> list[str]:
    """The loaded modules a module's import statements name (those it imports, and modules imported
    from a package by `from package import module`)."""
    tree = _parsed(name)
    if tree is None:
        return []
    here = name if hasattr(sys.modules[name], "__path__") else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package `level - 1` above the module's own
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            out += [source] + [f"{source}.{alias.name}" for alias in node.names]
    return [n for n in out if n in sys.modules]


@functools.cache
def _parsed(name: str) -> ast.Module | None:
    try:
        source = inspect.getsource(sys.modules[name])
    except (OSError, TypeError, KeyError):  # no source: defined in a REPL, or compiled
        return None
    return ast.parse(source)


def _tree(name: str) -> str | None:
    """The module's syntax tree without docstrings, as text (no line numbers: layout does not count)."""
    if _parsed(name) is None:
        return None
    tree = copy.deepcopy(_parsed(name))  # stripped below; the cached one stays whole
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return f"{name}\n{ast.dump(tree)}"


def _third_party(modules: list[str]) -> dict:
    """{distribution: version} of what the modules import from outside their own top-level package,
    the standard library and the suite's own dependencies."""
    own = {m.split(".")[0] for m in modules}
    tops = {n.split(".")[0] for m in modules for n in _imports(m)} - own - set(sys.stdlib_module_names)
    out = {}
    for top in sorted(tops - {"suite"}):
        for dist in _distributions().get(top, []):
            if _normal(dist) not in _suite_requirements():
                try:
                    out[dist] = importlib.metadata.version(dist)
                except importlib.metadata.PackageNotFoundError:
                    continue
    return out


@functools.cache
def _suite_requirements() -> frozenset:
    """The distributions the suite itself requires (not its extras): their versions are the suite's."""
    try:
        requires = importlib.metadata.requires("grokking-suite") or []
    except importlib.metadata.PackageNotFoundError:
        return frozenset()
    return frozenset(_normal(re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0]) for r in requires if "extra ==" not in r)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _source_sha256(module: str) -> str | None:
    """The hash of the module's text: how identities were recorded before code_sha256."""
    try:
        path = inspect.getsourcefile(sys.modules[module])
        return hashlib.sha256(open(path, "rb").read()).hexdigest() if path else None
    except (OSError, TypeError, KeyError):
        return None


def _package(module: str) -> tuple[str | None, str | None]:
    """The installed distribution that holds a module, and its version (None for a loose module)."""
    from suite.specs.registry import PROVIDERS

    top = module.split(".")[0]
    if top == "suite":
        return "grokking-suite", _suite_version()
    if top in PROVIDERS:  # loaded through its entry point
        return PROVIDERS[top]
    names = _distributions().get(top)
    if not names:
        return None, None
    try:
        return names[0], importlib.metadata.version(names[0])
    except importlib.metadata.PackageNotFoundError:
        return names[0], None


def _suite_version() -> str:
    try:
        return importlib.metadata.version("grokking-suite")
    except importlib.metadata.PackageNotFoundError:  # a checkout that was never installed
        return "0+unknown"


@functools.cache
def _distributions() -> dict:
    return importlib.metadata.packages_distributions()
