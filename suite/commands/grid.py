"""`python -m suite grid FILE`: the missing or failed cells of a grid file, locally or as a Slurm array job."""

from __future__ import annotations

import sys

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
    flags.backend(p)


def run(args) -> int:
    from suite.launch import grid
    from suite.launch.submit import check_flags, run_grid

    g = grid.load(args.grid_file, args.root).only(args.experiment)
    if g.tuning is not None:
        raise SuiteError(f"{g.path} has a [tuning] table: run it with `python -m suite tune {args.grid_file}`")
    check_flags(args)
    if not args.dry_run:  # a dry run counts the cells: building them (paper.toml's 91 groups) took minutes
        grid.check_builds(g.cells)
    code = run_grid(args, g, args.root)
    if args.dry_run and args.backend == "local" and not code:
        from suite.launch.manifest import TO_RUN, statuses

        todo = [c for c, s in zip(g.cells, statuses(g.cells)) if s in TO_RUN and "train" in c.spec]
        print(cost_line([(c.spec, 1) for c in todo], args.workers), file=sys.stderr)
    return code


def cost_line(runs: list[tuple[dict, int]], workers: int) -> str:
    """What the runs cost at most, from ms per step measured here (suite/bench/cost.py)."""
    from suite.bench.cost import estimate, hours

    if not runs:
        return "estimate: nothing to run"
    seconds, shapes = estimate(runs)
    count = sum(n for _, n in runs)
    return (
        f"estimate: up to {hours(seconds)} of process time for {count} runs, each to its budget (an early stop "
        f"only shortens it), ~{hours(seconds / workers)} on --workers {workers}; from the ms per step measured "
        f"here on one thread, {shapes} model/optimizer shape{'s' if shapes > 1 else ''}"
    )
