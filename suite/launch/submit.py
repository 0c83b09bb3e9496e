"""A grid's cells run by the grid command's flags (shared with `tune`): listed (--dry-run), run on
this machine (launch/local.py) or submitted as a Slurm array job (launch/slurm.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from suite.errors import SuiteError
from suite.launch.manifest import RunOptions
from suite.results.rundir import RunDir


def check_flags(args) -> None:
    """The flags grid and tune share, checked once, before anything is planned or written."""
    from suite.launch.tracking import check_mode

    for flag, value in (("--stack", args.stack), ("--workers", args.workers)):  # Slurm's: SlurmOptions
        if value < 1:
            raise SuiteError(f"{flag} must be at least 1, got {value}")
    check_mode(args.wandb)  # here, not in every cell's process (an error.json each)


def run_grid(args, g, root, more=None) -> int:
    """The cells of g that are not done or running, under root: listed (--dry-run), run here, or
    submitted. `more` (run here): cells known since, to run in the same submission (launch/local.py)."""
    from suite.launch import local

    if args.backend == "slurm":
        return _slurm(args, g, root)
    if not args.dry_run:
        local.check_local(root, args.device, g.cells)  # before the summary line: an error is the only line
    summary, todo = _plan(g, args)
    print(summary, file=sys.stderr)
    if not todo:
        return 0
    if args.dry_run:
        for cell in todo:
            print(f"{cell.run_dir}  [{cell.label}]")
        return 0
    return local.run_local(g, todo, root, RunOptions.of(args), args.workers, more)


def _plan(g, args, held: set[Path] = frozenset()) -> tuple[str, list]:
    """How many cells are done, running, queued (their run folders in `held`: an array task Slurm
    still holds will run them) and to run (a line), and the cells to run. A run folder made by other
    code of a component stops the grid here, or with --rerun-changed is emptied to run again (a dry
    run only counts it)."""
    from suite.launch import manifest

    status = manifest.statuses(g.cells, held)
    changed = manifest.changed_code([c for c, s in zip(g.cells, status) if s not in ("running", "queued")])
    if changed and not args.rerun_changed:
        first, why = changed[0]
        raise SuiteError(
            f"{len(changed)} of {g.name}'s run folders were made by other code; the first, {first.run_dir}, "
            + manifest.made_by_other_code(why)
        )
    for cell, _ in changed if not args.dry_run else ():
        RunDir(cell.run_dir).discard()
    stale = {c.run_dir for c, _ in changed}  # emptied, or (a dry run) counted as if
    status = ["missing" if c.run_dir in stale else s for c, s in zip(g.cells, status)]
    todo = [c for c, s in zip(g.cells, status) if s in manifest.TO_RUN]
    queued = f"{status.count('queued')} queued, " if "queued" in status else ""
    return (
        f"{g.name}: {len(g.cells)} cells, {status.count('done')} done, {status.count('running')} running, "
        f"{queued}{len(todo)} to run"
    ), todo


def slurm_options(args, g):
    """The grid file's [slurm] table with the command line's flags over it, checked."""
    from suite.launch.slurm import SlurmOptions

    return SlurmOptions.merge(
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


def _slurm(args, g, root) -> int:
    from suite.launch import manifest
    from suite.launch.slurm import TEMPLATE, find_sbatch, queued, submit

    options = slurm_options(args, g)  # checked, and sbatch found, before anything else happens
    sbatch = None if args.dry_run else find_sbatch()
    summary, todo = _plan(g, args, queued(root))
    if args.dry_run or not todo:
        print(summary, file=sys.stderr)
    if not todo:
        return 0
    template = Path(args.template) if args.template else TEMPLATE
    out = submit(g, todo, root, options, RunOptions.of(args), sbatch, template)
    if options.time is None:
        print(
            "warning: no --time (or [slurm] time): the partition's default limit applies, and each array task "
            f"checkpoints only when Slurm's USR1 comes, {options.signal_seconds} s before it",
            file=sys.stderr,
        )
    if args.dry_run:
        print(out, end="")
        return 0
    n_chunks = len(manifest.plan_chunks(todo, options.cells_per_task, args.stack))
    print(
        f"{summary}; submitted array job {out} ({n_chunks} array tasks); follow with: "
        f"python -m suite status {args.grid_file}",
        file=sys.stderr,
    )
    print(out)
    return 0
