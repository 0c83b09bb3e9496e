"""`python -m suite run`: train one cell (or its seeds, as one stack) into its run folders."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from suite.commands import flags
from suite.errors import SuiteError


def add(sub) -> None:
    p = sub.add_parser(
        "run",
        help="train one cell and write DIR/spec.json, metrics.jsonl, result.json",
        description="Train one cell. The last stdout line is the path of result.json.",
    )
    p.add_argument("--task", help="task name (default modular)")
    p.add_argument("--model", help="model name (default mlp)")
    p.add_argument("--opt", help="optimizer name (default adam)")
    p.add_argument("--sampler", help="sampler name (default random)")
    p.add_argument("--filter", help="gradient filter name (default none)")
    p.add_argument("--preset", help="a named configuration (see `list preset`); flags and --set override it")
    p.add_argument(
        "--like",
        metavar="RUN_DIR",
        help="start from the spec an existing run ran (its spec.json, seed included); flags and --set change it",
    )
    seed = p.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=int, help="run seed: initialisation, split and batches (default 0)")
    seed.add_argument(
        "--seeds",
        metavar="LIST",
        help="several seeds, e.g. 0-31 or 0,1,2: trained as one stack (torch.func) when that is "
        "exact, each into its own run folder",
    )
    p.add_argument("--steps", type=int, help="update budget (train.steps)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any component parameter, e.g. --set op=mul --set opt.lr=1e-3 (repeatable); a KIND.KEY "
        "setting also as --KIND.KEY VALUE or --KIND.KEY=VALUE, e.g. --opt.lr 1e-3 (W&B sweeps)",
    )
    p.add_argument("--out", help="run folder (default: derived from the spec under --root)")
    flags.root(p)
    flags.device(p)
    flags.torch_compile(p)
    flags.wandb(p)
    flags.rerun_changed(p)


def run(args) -> int:
    from suite.engine.train import Preempted, resolve_device
    from suite.launch.manifest import execute
    from suite.results.result import summary
    from suite.results.rundir import RunDir, read_json
    from suite.specs.cell import Cell

    specs = resolve_specs(args)
    device = resolve_device(args.device)
    cells = [Cell(spec, run_dir_of(spec, args)) for spec in specs]
    for cell in cells:
        if (cell.run_dir / "spec.json").exists() and _id_of(read_json(cell.run_dir / "spec.json")) != cell.id:
            raise SuiteError(f"{cell.run_dir} holds a different spec; choose another --out")
    try:
        results = execute(cells, device, compile=args.compile, wandb=args.wandb, rerun_changed=args.rerun_changed)
    except Preempted as stop:
        if stop.signal == "SIGINT":
            if stop.checkpointed:
                said = f"interrupted at step {stop.step}, checkpointed; run the same command again to resume"
            else:
                said = "interrupted before the first training step; run the same command again to start"
            print(said, file=sys.stderr)
            return 130
        print(f"stopped: {stop}", file=sys.stderr)
        return 3  # not an error: the checkpoint is in place for the requeued job
    for result in results:
        line = summary(result, "" if len(specs) == 1 else f"seed {result['spec']['seed']}: ")
        if line:
            print(line, file=sys.stderr)
    for cell in cells:
        print(RunDir(cell.run_dir) / "result.json")
    return 0


def _id_of(spec) -> str | None:
    """The id of a spec.json found where a run goes; None where it holds no spec of this suite."""
    from suite.specs.spec import spec_id

    try:
        return spec_id(spec)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def run_dir_of(spec: dict, args) -> Path:
    """--out; else the --like run's own folder where the flags changed nothing (a finished run is
    said to be finished there, an interrupted one resumes there, wherever it was written); else
    the spec's folder under --root."""
    from suite.results.rundir import read_json
    from suite.specs.spec import default_run_dir, spec_id

    if args.out:
        return Path(args.out)
    if args.like and spec_id(read_json(Path(args.like) / "spec.json")) == spec_id(spec):
        return Path(args.like)
    return default_run_dir(spec, args.root)


def resolve_specs(args) -> list[dict]:
    """The specs the flags describe: one per seed."""
    from suite.specs.spec import resolve, runs_loaded_code

    settings = parse_sets(args.set)
    if args.steps is not None:
        settings["train.steps"] = args.steps
    choices = {"task": args.task, "model": args.model, "opt": args.opt, "sampler": args.sampler, "filter": args.filter}
    like_seed, typed = None, set(settings)  # what the flags set, not the file --like reads
    if args.like:
        if args.preset:
            raise SuiteError("--like and --preset both give a starting spec: use one")
        choices, settings, like_seed = like(args.like, choices, settings)
    if args.preset:
        from suite.specs.presets import apply

        choices, settings = apply(args.preset, choices, settings)
    default = [like_seed if like_seed is not None else 0]
    seeds = parse_seeds(args.seeds) if args.seeds is not None else [args.seed] if args.seed is not None else default
    if args.out and len(seeds) > 1:
        raise SuiteError("--out names one run folder; with several --seeds each seed gets its own under --root")
    specs = [resolve(choices, settings, seed) for seed in seeds]
    from_file = [key for key in runs_loaded_code(specs[0]) if not {key, key.partition(".")[2]} & typed]
    if args.like and from_file:
        raise SuiteError(
            f"--like {args.like}: its spec.json sets {from_file[0]} = true, which runs the code of the model's "
            f"folder; only you grant that, on this command: --set {from_file[0]}=true if you trust it"
        )
    return specs


def like(run_dir: str, choices: dict, settings: dict, flag: str = "--like") -> tuple[dict, dict, int]:
    """The components, settings and seed of the spec a run ran, under the flags' own: a component the
    flags change takes its own defaults, not the run's settings of the one it replaces. flag: what
    the errors name as asking for it."""
    from suite.results.rundir import read_json
    from suite.specs.spec import resolve, with_later_defaults

    path = Path(run_dir) / "spec.json"
    if not path.is_file():
        raise SuiteError(f"{flag} {run_dir}: no spec.json there (a run folder holds one from its start)")
    spec = read_json(path)
    named = lambda part: isinstance(part, dict) and isinstance(part.get("name"), str)  # noqa: E731
    if not (isinstance(spec, dict) and named(spec.get("task")) and named(spec.get("model")) and "seed" in spec):
        raise SuiteError(f"{flag} {run_dir}: {path} is not a spec of this suite (a task, a model and a seed)")
    spec = with_later_defaults(spec)
    kinds = [k for k, part in spec.items() if isinstance(part, dict)]
    if unnamed := [k for k in kinds if k != "train" and not named(spec[k])]:
        raise SuiteError(f"{flag} {run_dir}: {path} is not a spec of this suite ({unnamed[0]} names no component)")
    try:  # the file's own spec, checked whole: its errors name the file, not a --set the user never typed
        resolve(
            {k: spec[k]["name"] for k in kinds if k != "train"},
            {f"{k}.{key}": v for k in kinds for key, v in spec[k].items() if key != "name"},
            spec["seed"],
        )
    except SuiteError as err:
        raise SuiteError(f"{flag} {run_dir}: {path} is not a spec this suite runs{_made_at(run_dir)}: {err}") from None
    kept = {k: spec[k]["name"] for k in kinds if k != "train" and choices.get(k) in (None, spec[k]["name"])}
    ran = {f"{k}.{key}": v for k in kinds if k in kept or k == "train" for key, v in spec[k].items() if key != "name"}
    return {**kept, **{k: v for k, v in choices.items() if v is not None}}, {**ran, **settings}, spec["seed"]


def _made_at(run_dir: str) -> str:
    """' (made at COMMIT: check it out to rerun it)' where the run's result.json names its commit."""
    from suite.results.rundir import RunDir

    commit = (RunDir(run_dir).read_result() or {}).get("git_commit")
    return f" (made at {commit[:8]}: check it out to rerun it)" if isinstance(commit, str) and commit else ""


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SuiteError(f"--set takes KEY=VALUE, got '{pair}'")
        out[key.strip()] = value.strip()
    return out


MAX_SEEDS = 10_000  # one stack of this many is already more than any machine here trains at once


def parse_seeds(text: str) -> list[int]:
    """'0-31', '0,1,2' or '0-3,8' -> the seeds, in order, each once."""
    spans = []
    try:
        for part in text.split(","):
            first, sep, last = part.strip().partition("-")
            span = range(int(first), int(last) + 1) if sep else range(int(first), int(first) + 1)
            if not span:
                raise ValueError
            spans.append(span)
    except ValueError:
        raise SuiteError(
            f"--seeds takes a list like 0-31 or 0,1,2 (non-negative, first <= last), got '{text}'"
        ) from None
    count = sum(span.stop - span.start for span in spans)  # len() of a range past 2^63 overflows
    if count > MAX_SEEDS:
        raise SuiteError(f"--seeds names {count} seeds; at most {MAX_SEEDS} run from one command")
    return list(dict.fromkeys(seed for span in spans for seed in span))


DOTTED = re.compile(r"--([A-Za-z_]\w*\.\w+)(?:=(.*))?", re.S)


def dotted_settings(extra: list[str]) -> list[str] | None:
    """What the run parser left over, `--kind.key VALUE` or `--kind.key=VALUE` (the form a W&B
    sweep's ${args} passes), as --set KEY=VALUE pairs; None if anything else is left over."""
    pairs, rest = [], iter(extra)
    for arg in rest:
        match = DOTTED.fullmatch(arg)
        value = None if match is None else match[2] if match[2] is not None else next(rest, None)
        if value is None or (match[2] is None and value.startswith("--")):
            return None
        pairs.append(f"{match[1]}={value}")
    return pairs
