"""Command line: `python -m suite list | run ...`."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from suite.registry import ALL, SuiteError, _closest


def runtime_defaults() -> None:
    """Environment defaults torch reads when it is imported: main() sets them first, so
    `python -m suite` and the grok-suite console script (which calls main() directly) run alike."""
    # No OMP_WAIT_POLICY here: passive waiting cost a run alone ~25% (18.3 vs 14.6 s); the places
    # where runs share cores (local workers, the sbatch script, the tests) ask for it themselves.
    # Ensembles allocate activations and gradients of tens of MB every step; glibc hands blocks
    # that large straight back to the kernel, so each step page-faults them in again. Huge pages
    # (torch's allocator madvises blocks >= 2 MB) made a K = 32 step 1.4x faster here; results
    # are unchanged (it is where memory lives, not what is computed).
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def _parse_sets(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SuiteError(f"--set takes KEY=VALUE, got '{pair}'")
        out[key.strip()] = value.strip()
    return out


DOTTED = re.compile(r"--([A-Za-z_]\w*\.\w+)(?:=(.*))?", re.S)


def _dotted_settings(extra: list[str]) -> list[str] | None:
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


def _print_presets() -> int:
    from suite.presets import PRESETS

    print("presets (run --preset NAME; explicit flags and --set override them):")
    for preset in PRESETS.values():
        print(f"  {preset.name:<18} {preset.summary}")
        for line in preset.describe():
            print(f"  {'':<18}   {line}")
    return 0


def cmd_list(args) -> int:
    from suite.registry import RUNNERS
    from suite.spec import train_params

    registries = {**ALL, "runner": RUNNERS}
    kind, pattern = args.kind, args.pattern
    if kind is not None and kind not in registries and kind != "preset":
        if pattern is not None or not any(ch in kind for ch in "*?[") and not _matches_any(registries, kind):
            raise SuiteError(f"unknown kind '{kind}'{_closest(kind, [*registries, 'preset'])}; known: "
                             f"{', '.join(registries)}, preset (or give a name pattern such as 'adam*')")
        kind, pattern = None, kind  # `list 'adam*'`: a pattern across every kind
    if kind == "preset":
        return _print_presets()
    shown = 0
    for name_of_kind in [kind] if kind else list(registries):
        names = registries[name_of_kind].names(pattern or "*")
        if not names:
            continue
        print(f"{name_of_kind}s:" if name_of_kind != "opt" else "optimizers:")
        for name in names:
            entry = registries[name_of_kind].get(name)
            extra = f"  [inputs: {', '.join(entry.info['inputs'])}]" if "inputs" in entry.info else ""
            print(f"  {name:<18} {entry.summary}{extra}")
            if entry.params:
                print(f"  {'':<18}   " + "  ".join(p.describe() for p in entry.params.values()))
            if args.origin:
                print(f"  {'':<18}   from {entry.origin}")
            shown += 1
        print()
    if pattern and not shown:
        raise SuiteError(f"no component matches '{pattern}'")
    if not kind and not pattern:
        print("train (every run):")
        print("  " + "  ".join(p.describe() for p in train_params().values()))
        print()
        _print_presets()
    return 0


def _matches_any(registries, name: str) -> bool:
    return any(name in registry.names() for registry in registries.values())


def parse_seeds(text: str) -> list[int]:
    """'0-31', '0,1,2' or '0-3,8' -> the seeds, in order, each once."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            first, sep, last = part.strip().partition("-")
            span = range(int(first), int(last) + 1) if sep else [int(first)]
            if not span:
                raise ValueError
            seeds += [s for s in span if s not in seeds]
    except ValueError:
        raise SuiteError(f"--seeds takes a list like 0-31 or 0,1,2 (non-negative, first <= last), got '{text}'") from None
    return seeds


def cmd_run(args) -> int:
    from suite.results import summary
    from suite.rundir import RunDir, read_json
    from suite.spec import canonical, default_run_dir, resolve
    from suite.backends import run_cells
    from suite.tracking import make_tracker
    from suite.train import Preempted, resolve_device

    settings = _parse_sets(args.set)
    if args.steps is not None:
        settings["train.steps"] = args.steps
    choices = {"task": args.task, "model": args.model, "opt": args.opt, "sampler": args.sampler, "filter": args.filter}
    if args.preset:
        from suite.presets import apply

        choices, settings = apply(args.preset, choices, settings)
    seeds = parse_seeds(args.seeds) if args.seeds is not None else [args.seed]
    if args.out and len(seeds) > 1:
        raise SuiteError("--out names one run dir; with several --seeds each seed gets its own under --root")
    specs = [resolve(choices, settings, seed) for seed in seeds]
    device = resolve_device(args.device)
    run_dirs = [Path(args.out)] if args.out else [default_run_dir(spec, args.root) for spec in specs]
    for spec, run_dir in zip(specs, run_dirs):
        if (run_dir / "spec.json").exists() and read_json(run_dir / "spec.json") != canonical(spec):
            raise SuiteError(f"{run_dir} holds a different spec; choose another --out")
    todo = [i for i, run_dir in enumerate(run_dirs) if not RunDir(run_dir).finished]
    for i in sorted(set(range(len(specs))) - set(todo)):
        print(f"already finished: {run_dirs[i]}", file=sys.stderr)
    if todo:
        try:
            results = run_cells([specs[i] for i in todo], [run_dirs[i] for i in todo], device,
                                [make_tracker(args.wandb, specs[i], run_dirs[i]) for i in todo], args.compile)
        except Preempted as stop:
            print(f"stopped: {stop}", file=sys.stderr)
            return 3  # not an error: the checkpoint is in place for the requeued job
        for result in results:
            line = summary(result, "" if len(seeds) == 1 else f"seed {result['spec']['seed']}: ")
            if line:
                print(line, file=sys.stderr)
    for run_dir in run_dirs:
        print(RunDir(run_dir) / "result.json")
    return 0


def cmd_grid(args) -> int:
    from suite import backends, grid
    from suite.slurm import TEMPLATE, SlurmOptions, find_sbatch, submit

    g = grid.load(args.grid_file).only(args.experiment)
    if args.backend == "slurm":  # check the options (and that sbatch exists) before anything else happens
        options = SlurmOptions.merge(g.slurm, partition=args.partition, time=args.time, gpus=args.gpus,
                                     cpus=args.cpus, mem=args.mem, account=args.account,
                                     max_parallel=args.max_parallel, cells_per_task=args.cells_per_task,
                                     sbatch=args.sbatch)
        sbatch = None if args.dry_run else find_sbatch()
    if args.backend == "local" and not args.dry_run:
        backends.check_local(args.root, args.device)  # before the summary line: an error is the only line
    status = backends.statuses(g.cells, args.root)
    todo = [c for c, s in zip(g.cells, status) if s in backends.TO_RUN]
    summary = (f"{g.name}: {len(g.cells)} cells, {status.count('done')} done, {status.count('running')} running, "
               f"{len(todo)} to run")
    if args.backend == "local" or args.dry_run or not todo:
        print(summary, file=sys.stderr)
    if not todo:
        return 0
    if args.backend == "local":
        if args.dry_run:
            for cell in todo:
                print(f"{cell.run_dir(args.root)}  [{cell.label}]")
            return 0
        return backends.run_local(g, todo, args.root, workers=args.workers, device=args.device, wandb=args.wandb,
                                  ensemble=args.ensemble, compile=args.compile)
    out = submit(g, todo, args.root, options, sbatch=sbatch, device=args.device, wandb=args.wandb,
                 ensemble=args.ensemble, compile=args.compile, template=Path(args.template) if args.template else TEMPLATE)
    if args.dry_run:
        print(out, end="")
    else:
        n_tasks = len(backends.plan_chunks(todo, options.cells_per_task, args.ensemble))
        print(f"{summary}; submitted array job {out} ({n_tasks} tasks); "
              f"follow with: python -m suite status {args.grid_file}", file=sys.stderr)
        print(out)
    return 0


def cmd_status(args) -> int:
    from suite import backends, grid

    g = grid.load(args.grid_file).only(args.experiment)
    for line in backends.status_lines(g.cells, args.root, show_done=args.all):
        print(line)
    return 0


def cmd_chunk(args) -> int:
    from suite.backends import run_chunk

    return run_chunk(args.manifest, args.index)


def cmd_leaderboard(args) -> int:
    from suite.leaderboard import default_out, generate, terminal_summary

    out = default_out(args.root) if args.out is None else Path(args.out)
    written = generate(args.root, out, tau_max=args.tau_max)
    print(f"{len(written)} files written to {out}", file=sys.stderr)
    print("\n".join(terminal_summary(out, written)))
    print(out / "index.md")
    return 0


def cmd_export(args) -> int:
    from suite.export import export

    out = Path(args.out) if args.out else Path(args.root) / "export"
    written, runs, curves = export(args.root, out)
    print(f"{len(runs)} runs and {len(curves)} curve points written to {out}", file=sys.stderr)
    print("\n".join(map(str, written)))
    return 0


def cmd_bench(args) -> int:
    from suite.bench import Options, format_report, run_bench
    from suite.train import resolve_device

    options = Options(steps=args.steps, ensembles=args.ensembles, skip=args.skip, quick=args.quick,
                      repeats=args.repeats)
    device = resolve_device(args.device)  # every flag is checked before anything runs
    report, path = run_bench(device, options, args.out)  # written as it goes: an interruption keeps what was measured
    print(format_report(report))
    print(path)
    return 0


def make_parser() -> argparse.ArgumentParser:
    from suite import __version__

    parser = argparse.ArgumentParser(prog="python -m suite", description=__doc__.splitlines()[0].split(":")[0]
                                     + ": a grokking benchmark suite.")
    parser.add_argument("--version", action="version", version=f"grokking-suite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="show every registered task, model, optimizer, sampler, filter and runner",
                       description="List registered components with their settings. `list opt`, `list 'adam*'`, "
                                   "`list model '*former*'`.")
    p.add_argument("kind", nargs="?", help="only this kind: task, model, opt, sampler, filter, runner or preset; "
                                           "or a name pattern")
    p.add_argument("pattern", nargs="?", help="only names matching this shell-style pattern, e.g. 'adam*'")
    p.add_argument("--origin", action="store_true", help="also say where each component is defined (file:line)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="train one cell and write DIR/spec.json, metrics.jsonl, result.json",
                       description="Train one cell. The last stdout line is the path of result.json.")
    p.add_argument("--task", help="task name (default modular)")
    p.add_argument("--model", help="model name (default mlp)")
    p.add_argument("--opt", help="optimizer name (default adam)")
    p.add_argument("--sampler", help="sampler name (default random)")
    p.add_argument("--filter", help="gradient filter name (default none)")
    p.add_argument("--preset", help="a named configuration (see `list preset`); flags and --set override it")
    seed = p.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=int, default=0, help="run seed: initialisation, split and batches (default 0)")
    seed.add_argument("--seeds", metavar="LIST",
                      help="several seeds, e.g. 0-31 or 0,1,2: trained as one ensemble (torch.func) when that is "
                           "exact, each into its own run dir")
    p.add_argument("--steps", type=int, help="update budget (train.steps)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any component parameter, e.g. --set op=mul --set opt.lr=1e-3 (repeatable); a KIND.KEY "
                        "setting also as --KIND.KEY VALUE or --KIND.KEY=VALUE, e.g. --opt.lr 1e-3 (W&B sweeps)")
    p.add_argument("--out", help="run directory (default: derived from the spec under --root)")
    p.add_argument("--root", default="runs", help="where default run directories go (default runs/)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    _compile_flag(p)
    _wandb_flag(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("grid", help="run the missing or failed cells of a grid file, locally or as a Slurm array job",
                       description="Run every cell of a grid file that is not done or running.")
    p.add_argument("grid_file", help="a TOML grid file, e.g. suite/grids/paper.toml")
    p.add_argument("--backend", choices=("local", "slurm"), default="local")
    p.add_argument("--workers", type=int, default=1, help="local: processes at once, one seed group each (default 1)")
    p.add_argument("--ensemble", type=int, default=8, metavar="K",
                   help="at most K cells that differ only in their seed train as one ensemble (default 8: on 2 CPU "
                        "cores K = 8 gave the most runs per hour, see `suite bench`; on a GPU try 32; "
                        "1: every cell on its own)")
    p.add_argument("--root", default="runs", help="where run directories go (default runs/)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    p.add_argument("--dry-run", action="store_true", help="local: list the cells to run; slurm: print the sbatch script")
    _experiment_flag(p)
    _compile_flag(p)
    _wandb_flag(p)
    sl = p.add_argument_group("slurm (defaults from the grid file's [slurm] table)")
    sl.add_argument("--partition")
    sl.add_argument("--time", help="time limit per array task, e.g. 4:00:00")
    sl.add_argument("--gpus", help="GPUs per array task, e.g. 1 or a100:1")
    sl.add_argument("--cpus", type=int, help="CPUs per array task (also torch threads)")
    sl.add_argument("--mem", help="memory per array task, e.g. 8G")
    sl.add_argument("--account")
    sl.add_argument("--max-parallel", type=int, help="array tasks running at once")
    sl.add_argument("--cells-per-task", type=int, help="cells each array task runs in turn (default 1)")
    sl.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                    help="an extra #SBATCH line, e.g. --sbatch=--constraint=a100 (repeatable)")
    sl.add_argument("--template", help="sbatch template (default slurm/array.sbatch)")
    p.set_defaults(func=cmd_grid)

    p = sub.add_parser("status", help="done / running / failed / interrupted / missing, per cell of a grid file")
    p.add_argument("grid_file")
    p.add_argument("--root", default="runs", help="where run directories go (default runs/)")
    p.add_argument("--all", action="store_true", help="also list the cells that are done")
    _experiment_flag(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("leaderboard", help="tables (Markdown, CSV), performance profile and plots from result files",
                       description="Read every result.json under ROOT and write leaderboards to --out; print "
                                   "their tables and the paths of their accuracy plots. The last stdout line "
                                   "is the path of the index.")
    p.add_argument("root", nargs="?", default="runs", help="directory searched recursively for result.json (default runs/)")
    p.add_argument("--out", help="where tables and plots go (default ROOT/leaderboard); a file there that "
                                 "an earlier leaderboard did not write is never overwritten")
    p.add_argument("--tau-max", type=float, help="performance profile over tau in [1, TAU_MAX] (default 4, AlgoPerf's)")
    p.set_defaults(func=cmd_leaderboard)

    p = sub.add_parser("export", help="every run under ROOT as one table (CSV, parquet), its curves in long format",
                       description="Read every result.json under ROOT and write runs.csv / runs.parquet (one row per "
                                   "run: the spec flattened into columns, the result's scalar fields beside them) and "
                                   "curves.csv / curves.parquet (run, step, metric, value). Prints the files written.")
    p.add_argument("root", help="directory searched recursively for result.json")
    p.add_argument("--out", help="where the tables go (default ROOT/export)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("bench", help="measure step times, FLOP/s against the matmul limit, ensemble runs/hour, probe and compile",
                       description="Measure the suite on this machine: a table on stdout, progress on stderr. The last "
                                   "stdout line is the path of the JSON report.")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    p.add_argument("--out", help="JSON report (default runs/bench/bench-<commit>-<UTC stamp>.json)")
    p.add_argument("--steps", type=int, help="loop length of the whole-step and ensemble runs (default 600; quick 20)")
    p.add_argument("--ensembles", help="ensemble sizes K, comma-separated (default 1,8,32; quick 1,2)")
    p.add_argument("--skip", default="", help="sections to skip, comma-separated: matmul,plain,steps,ensembles,probe,compile")
    p.add_argument("--quick", action="store_true", help="the same code paths on a tiny task in seconds (skips probe and compile)")
    p.add_argument("--repeats", type=int, help="suite runs and plain loops in the plain section, interleaved; the ratio is "
                                               "of the fastest of each (default 3; quick 1)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("chunk", help="(used by the backends) run chunk I of a grid manifest")
    p.add_argument("manifest")
    p.add_argument("index", type=int)
    p.set_defaults(func=cmd_chunk)
    return parser


def _compile_flag(p) -> None:
    p.add_argument("--compile", action="store_true",
                   help="the training step's forward through torch.compile (default off: on this suite's small "
                        "models it did not pay for its compile time on CPU; see `suite bench`)")


def _experiment_flag(p) -> None:
    p.add_argument("--experiment", action="append", default=[], metavar="NAME",
                   help="only the cells of this [[experiment]] block of the grid file (repeatable; default all)")


def _wandb_flag(p) -> None:
    from suite.tracking import MODES, default_mode

    p.add_argument("--wandb", choices=MODES, default=default_mode(),
                   help="Weights & Biases tracking (default from WANDB_MODE, else online under a sweep agent, else off)")


def main(argv: list[str] | None = None) -> int:
    runtime_defaults()  # before any command imports torch
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        pairs = _dotted_settings(extra) if args.command == "run" else None
        if pairs is None:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")  # what parse_args says
        args.set += pairs
    try:
        return args.func(args)
    except SuiteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `suite list | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
