"""`python -m suite grid FILE`: the missing or failed cells of a grid file, locally or as a Slurm array job."""

from __future__ import annotations

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
    return run_grid(args, g, args.root)
