"""`python -m suite grid FILE`: the missing or failed cells of a grid file, locally or as a Slurm array job."""

from __future__ import annotations

import sys
from pathlib import Path

from suite.commands import flags
from suite.errors import SuiteError


def add(sub) -> None:
    p = sub.add_parser(
        "grid",
        help="run the missing or failed cells of a grid file, locally or as a Slurm array job",
        description="Run every cell of a grid file that is not done or running.",
    )
    p.add_argument("grid_file", help="a TOML grid file, e.g. suite/grids/paper.toml")
    flags.experiment(p)
    add_backend_flags(p)


def add_backend_flags(p) -> None:
    """How cells run: grid's flags, which `tune` shares."""
    p.add_argument("--backend", choices=("local", "slurm"), default="local")
    p.add_argument("--workers", type=int, default=1, help="local: processes at once, one group each (default 1)")
    p.add_argument(
        "--ensemble",
        type=int,
        default=8,
        metavar="K",
        help="at most K cells in a group, trained as one stack (cells that differ only in their seed and "
        "their task's, optimizer's and filter's settings; default 8: on 2 CPU "
        "cores K = 8 gave the most runs per hour, see `suite bench`; on a GPU try 32; "
        "1: every cell on its own)",
    )
    flags.root(p)
    flags.device(p)
    p.add_argument(
        "--dry-run", action="store_true", help="local: list the cells to run; slurm: print the sbatch script"
    )
    flags.torch_compile(p)
    flags.wandb(p)
    sl = p.add_argument_group("slurm (defaults from the grid file's [slurm] table)")
    sl.add_argument("--partition")
    sl.add_argument("--time", help="time limit per array task, e.g. 4:00:00")
    sl.add_argument("--gpus", help="GPUs per array task, e.g. 1 or a100:1")
    sl.add_argument("--cpus", type=int, help="CPUs per array task (also torch threads)")
    sl.add_argument("--mem", help="memory per array task, e.g. 8G")
    sl.add_argument("--account")
    sl.add_argument("--max-parallel", type=int, help="array tasks running at once")
    sl.add_argument("--cells-per-task", type=int, help="cells each array task runs in turn (default 1)")
    sl.add_argument(
        "--max-requeues", type=int, help="times an array task requeues itself after a checkpointed stop (default 3)"
    )
    sl.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="an extra #SBATCH line, e.g. --sbatch=--constraint=a100 (repeatable)",
    )
    sl.add_argument("--template", help="sbatch template (default slurm/array.sbatch)")


def run(args) -> int:
    from suite import grid

    g = grid.load(args.grid_file, args.root).only(args.experiment)
    if g.tuning is not None:
        raise SuiteError(f"{g.path} has a [tuning] table: run it with `python -m suite tune {args.grid_file}`")
    check_flags(args)
    grid.check_builds(g.cells)
    return run_grid(args, g, args.root)


def check_flags(args) -> None:
    """The flags grid and tune share, checked once, before anything is planned or written."""
    from suite.tracking import check_mode

    for flag, value in (("--ensemble", args.ensemble), ("--workers", args.workers)):  # Slurm's: SlurmOptions
        if value < 1:
            raise SuiteError(f"{flag} must be at least 1, got {value}")
    check_mode(args.wandb)  # here, not in every cell's process (an error.json each)


def run_grid(args, g, root) -> int:
    """The cells of g that are not done or running, under root: listed (--dry-run), run here, or submitted."""
    from suite import local

    if args.backend == "slurm":
        return _slurm(args, g, root)
    if not args.dry_run:
        local.check_local(root, args.device, g.cells)  # before the summary line: an error is the only line
    summary, todo = _plan(g)
    print(summary, file=sys.stderr)
    if not todo:
        return 0
    if args.dry_run:
        for cell in todo:
            print(f"{cell.run_dir}  [{cell.label}]")
        return 0
    return local.run_local(
        g,
        todo,
        root,
        workers=args.workers,
        device=args.device,
        wandb=args.wandb,
        ensemble=args.ensemble,
        compile=args.compile,
    )


def _plan(g) -> tuple[str, list]:
    """How many cells are done, running and to run (a line), and the cells to run."""
    from suite import backends

    status = backends.statuses(g.cells)
    todo = [c for c, s in zip(g.cells, status) if s in backends.TO_RUN]
    return (
        f"{g.name}: {len(g.cells)} cells, {status.count('done')} done, {status.count('running')} running, "
        f"{len(todo)} to run"
    ), todo


def _slurm(args, g, root) -> int:
    from suite import backends
    from suite.slurm import TEMPLATE, SlurmOptions, find_sbatch, submit

    # the options (and that sbatch exists) are checked before anything else happens
    options = SlurmOptions.merge(
        g.slurm,
        partition=args.partition,
        time=args.time,
        gpus=args.gpus,
        cpus=args.cpus,
        mem=args.mem,
        account=args.account,
        max_parallel=args.max_parallel,
        cells_per_task=args.cells_per_task,
        max_requeues=args.max_requeues,
        sbatch=args.sbatch,
    )
    sbatch = None if args.dry_run else find_sbatch()
    summary, todo = _plan(g)
    if args.dry_run or not todo:
        print(summary, file=sys.stderr)
    if not todo:
        return 0
    out = submit(
        g,
        todo,
        root,
        options,
        sbatch=sbatch,
        device=args.device,
        wandb=args.wandb,
        ensemble=args.ensemble,
        compile=args.compile,
        template=Path(args.template) if args.template else TEMPLATE,
    )
    if options.time is None:
        print(
            "warning: no --time (or [slurm] time): the partition's default limit applies, and each task "
            f"checkpoints only when Slurm's USR1 comes, {options.signal_seconds} s before it",
            file=sys.stderr,
        )
    if args.dry_run:
        print(out, end="")
        return 0
    n_tasks = len(backends.plan_chunks(todo, options.cells_per_task, args.ensemble))
    print(
        f"{summary}; submitted array job {out} ({n_tasks} tasks); follow with: python -m suite status {args.grid_file}",
        file=sys.stderr,
    )
    print(out)
    return 0
