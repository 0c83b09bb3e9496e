"""The code a run was made by: for each component of its spec, the module that defines the
builder, a hash of that module's source, and where it comes from (the suite's own, at its
version, or the installed package that holds it, at its version).

A run's id hashes its settings only, so a researcher who edits their optimizer would get the old
numbers back under the same id. Every run records this identity (code.json in its run folder,
`code` in result.json), and `execute` (suite/launch/manifest.py) never reuses a finished or
checkpointed run whose component code has changed since: it says which one, and what to do.
Runs made before the record existed have none, and are reused as before.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect

KINDS = ("task", "model", "opt", "sampler", "filter")


def code_of(spec: dict) -> dict:
    """Per component kind in the spec: {name, module, source_sha256, package, version}."""
    from suite.specs.registry import ALL

    return {kind: _identity(ALL[kind].get(spec[kind]["name"]).build) for kind in KINDS if kind in spec}


def changed(recorded: dict | None, spec: dict) -> str | None:
    """Which component's code differs from what made a run (one phrase), or None: the same code,
    or a run made before code identities were recorded."""
    if not recorded:
        return None
    for kind, now in code_of(spec).items():
        then = recorded.get(kind)
        if then is None or then.get("source_sha256") is None or now["source_sha256"] is None:
            continue
        if (then["module"], then["source_sha256"]) != (now["module"], now["source_sha256"]):
            where = now["module"] if then["module"] == now["module"] else f"{then['module']} -> {now['module']}"
            return (
                f"{kind} '{spec[kind]['name']}' ({where}: source {then['source_sha256'][:8]} -> "
                f"{now['source_sha256'][:8]})"
            )
    return None


@functools.cache
def _identity(build) -> dict:
    module = getattr(build, "__module__", None) or "?"
    try:
        source = inspect.getsourcefile(build)
        digest = hashlib.sha256(open(source, "rb").read()).hexdigest() if source else None
    except (OSError, TypeError):  # a builder with no source file (defined in a REPL, or compiled)
        digest = None
    package, version = _package(module)
    return {"module": module, "source_sha256": digest, "package": package, "version": version}


def _package(module: str) -> tuple[str | None, str | None]:
    """The installed distribution that holds a module, and its version (None for a loose module)."""
    import suite
    from suite.specs.registry import PROVIDERS

    top = module.split(".")[0]
    if top == "suite":
        return "grokking-suite", suite.__version__
    if top in PROVIDERS:  # loaded through its entry point
        return PROVIDERS[top]
    names = _distributions().get(top)
    if not names:
        return None, None
    try:
        return names[0], importlib.metadata.version(names[0])
    except importlib.metadata.PackageNotFoundError:
        return names[0], None


@functools.cache
def _distributions() -> dict:
    return importlib.metadata.packages_distributions()
