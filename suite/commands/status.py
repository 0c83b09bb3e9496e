"""`python -m suite status FILE`: done / running / failed / interrupted / missing, per cell of a grid file."""

from __future__ import annotations

from pathlib import Path

from suite.commands import flags
from suite.errors import SuiteError


def add(sub) -> None:
    p = sub.add_parser("status", help="done / running / failed / interrupted / missing, per cell of a grid file")
    p.add_argument("grid_file")
    flags.root(p)
    p.add_argument("--all", action="store_true", help="also list the cells that are done")
    flags.experiment(p)


def run(args) -> int:
    from suite import backends, grid

    g = grid.load(args.grid_file).only(args.experiment)
    if Path(args.root).exists() and not Path(args.root).is_dir():
        raise SuiteError(f"{args.root} is not a folder of runs")
    for line in backends.status_lines(g.cells, args.root, show_done=args.all):
        print(line)
    return 0
