"""`python -m suite list [KIND] [PATTERN]`: every registered component with its settings."""

from __future__ import annotations

from suite.errors import SuiteError
from suite.specs.registry import ALL, RUNNERS, _closest


def add(sub) -> None:
    p = sub.add_parser(
        "list",
        help="show every registered task, model, optimizer, sampler, filter and runner",
        description="List registered components with their settings. `list opt`, `list 'adam*'`, "
        "`list model '*former*'`.",
    )
    p.add_argument(
        "kind", nargs="?", help="only this kind: task, model, opt, sampler, filter, runner or preset; or a name pattern"
    )
    p.add_argument("pattern", nargs="?", help="only names matching this shell-style pattern, e.g. 'adam*'")
    p.add_argument("--origin", action="store_true", help="also say where each component is defined (file:line)")


def run(args) -> int:
    from suite.specs.spec import train_params

    registries = {**ALL, "runner": RUNNERS}
    kind, pattern = args.kind, args.pattern
    if kind is not None and kind not in registries and kind != "preset":
        if pattern is not None or not any(ch in kind for ch in "*?[") and not _matches_any(registries, kind):
            raise SuiteError(
                f"unknown kind '{kind}'{_closest(kind, [*registries, 'preset'])}; known: "
                f"{', '.join(registries)}, preset (or give a name pattern such as 'adam*')"
            )
        kind, pattern = None, kind  # `list 'adam*'`: a pattern across every kind
    if kind == "preset":
        return _print_presets()
    shown = sum(_print_kind(registries[k], k, pattern, args.origin) for k in ([kind] if kind else list(registries)))
    if pattern and not shown:
        raise SuiteError(f"no component matches '{pattern}'")
    if not kind and not pattern:
        print("train (every run):")
        print("  " + "  ".join(p.describe() for p in train_params().values()))
        print()
        _print_presets()
    return 0


def _print_kind(registry, kind: str, pattern: str | None, origin: bool) -> int:
    """The components of one kind whose names match; how many were shown."""
    names = registry.names(pattern or "*")
    if not names:
        return 0
    print(f"{kind}s:" if kind != "opt" else "optimizers:")
    for name in names:
        entry = registry.get(name)
        extra = f"  [inputs: {', '.join(entry.info['inputs'])}]" if "inputs" in entry.info else ""
        print(f"  {name:<18} {entry.summary}{extra}")
        if entry.params:
            print(f"  {'':<18}   " + "  ".join(p.describe() for p in entry.params.values()))
        for opt, settings in entry.info.get("opt_defaults", {}).items():  # a model's own recipe
            print(f"  {'':<18}   with --opt {opt}: " + "  ".join(f"{k}={v!r}" for k, v in settings.items()))
        if origin:
            print(f"  {'':<18}   from {entry.origin}")
    print()
    return len(names)


def _print_presets() -> int:
    from suite.specs.presets import PRESETS

    print("presets (run --preset NAME; explicit flags and --set override them):")
    for preset in PRESETS.values():
        print(f"  {preset.name:<18} {preset.summary}")
        for line in preset.describe():
            print(f"  {'':<18}   {line}")
    return 0


def _matches_any(registries, name: str) -> bool:
    return any(name in registry.names() for registry in registries.values())
