"""`python -m suite tune FILE`: every method of a grid's [tuning] table tuned on the same budget,
then each one's best point rerun on fresh seeds (suite/launch/tuning.py has the protocol)."""

from __future__ import annotations

import sys
from pathlib import Path

from suite.commands import flags
from suite.errors import SuiteError


def add(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="tune every method of a grid's [tuning] table on the same trial budget, then rerun each one's "
        "best point on fresh seeds",
        description="Phase 1 runs every method's points on the tuning seeds under ROOT/tuning; phase 2 runs "
        "each method's best point on the final seeds under ROOT/final, with tuning.json beside them. Both "
        "skip what is done: run it again to resume, or after a Slurm submission of phase 1 to submit phase 2.",
    )
    p.add_argument("grid_file", help="a TOML grid file with a [tuning] table, e.g. suite/grids/tuned.toml")
    flags.experiment(p)
    flags.backend(p)


def run(args) -> int:
    from suite.launch import grid
    from suite.launch.spaces import parse
    from suite.launch.submit import check_flags, run_grid
    from suite.launch.tuning import cell_name, check_cells, choose, final_cells, tuning_cells
    from suite.results.tuning_record import record_of, write_record

    root = Path(args.root)
    whole = grid.load(args.grid_file, root)
    if whole.tuning is None:
        raise SuiteError(f"{whole.path} has no [tuning] table: run it with `python -m suite grid {args.grid_file}`")
    tuning = parse(whole.tuning, str(whole.path), whole.name)
    if len({c.spec["seed"] for c in whole.cells}) > 1:
        raise SuiteError(f"{whole.path}: a tuned grid takes its seeds from [tuning], not from a seed axis")
    check_cells(whole, tuning)  # every experiment: tuned together or one at a time, they share tuning.json
    g = whole.only(args.experiment)
    check_flags(args)
    record_of(root / "final")  # a damaged tuning.json stops the command here, before anything runs
    first = grid.Grid(f"{g.name}-tuning", g.path, tuning_cells(g, tuning, root / "tuning"), g.slurm)
    grid.check_builds(first.cells)
    code = run_grid(args, first, root / "tuning")
    if code:
        return code
    chosen = choose(g, tuning, root / "tuning")
    if chosen is None:
        print("the final runs are chosen once every tuning run is done: run this command again then", file=sys.stderr)
        return 0
    final = grid.Grid(f"{g.name}-final", g.path, final_cells(g, tuning, chosen, root / "final"), g.slurm)
    if not args.dry_run:
        (root / "final").mkdir(parents=True, exist_ok=True)
        write_record(root / "final" / "tuning.json", g, tuning, chosen, {cell_name(c): c.spec for c in g.cells})
    return run_grid(args, final, root / "final")
