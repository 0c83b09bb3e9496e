"""`python -m suite tune FILE`: every method of a grid's [tuning] table tuned on the same budget,
then each one's best point rerun on fresh seeds (suite/launch/tuning.py has the protocol).
`python -m suite tune --add FILE --against BOARD`: one more method on a committed tuned board, under
its protocol, beside its runs (suite/launch/adding.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from suite.commands import flags
from suite.errors import SuiteError


def add(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="tune every method of a grid's [tuning] table on the same trial budget, then rerun each one's "
        "best point on fresh seeds; or add a method to a committed tuned board (--add)",
        description="Phase 1 runs every method's points on the tuning seeds under ROOT/tuning; phase 2 runs "
        "each method's best point on the final seeds under ROOT/final, with tuning.json beside them. Both "
        "skip what is done: run it again to resume, or after a Slurm submission of phase 1 to submit phase 2. "
        "With --add, the methods of FILE are tuned under the protocol of the board --against names (its "
        "cells, N, seeds, common points, race), its final runs are linked into ROOT/final, and ROOT/board "
        "gets the new rows beside the board's, with their verdicts; the board's files are never written.",
    )
    p.add_argument("grid_file", nargs="?", help="a TOML grid file with a [tuning] table, e.g. suite/grids/tuned.toml")
    p.add_argument(
        "--add", metavar="FILE", help="a TOML file of [tuning.methods.NAME] tables to add to the board of --against"
    )
    p.add_argument("--against", metavar="BOARD", help="a tuned board (e.g. leaderboards/tuned) the methods join")
    flags.experiment(p)
    flags.backend(p)


def run(args) -> int:
    from suite.launch import grid
    from suite.launch.spaces import parse
    from suite.launch.submit import check_flags
    from suite.launch.tuning import cell_name, check_cells
    from suite.results.tuning_record import record_of, write_record

    root = Path(args.root)
    if (args.grid_file is None) == (args.add is None) or (args.add is None) != (args.against is None):
        raise SuiteError("tune takes a grid file, or --add FILE with --against BOARD")
    check_flags(args)
    if args.add:
        return _add(args, root)
    whole = grid.load(args.grid_file, root)
    if whole.tuning is None:
        raise SuiteError(f"{whole.path} has no [tuning] table: run it with `python -m suite grid {args.grid_file}`")
    tuning = parse(whole.tuning, str(whole.path), whole.name)
    if len({c.spec["seed"] for c in whole.cells}) > 1:
        raise SuiteError(f"{whole.path}: a tuned grid takes its seeds from [tuning], not from a seed axis")
    check_cells(whole, tuning)  # every experiment: tuned together or one at a time, they share tuning.json
    g = whole.only(args.experiment)
    record_of(root / "final")  # a damaged tuning.json stops the command here, before anything runs
    cells = {cell_name(c): c.spec for c in g.cells}
    code, final = _phases(
        args, g, tuning, root, lambda chosen: write_record(root / "final" / "tuning.json", g, tuning, chosen, cells)
    )
    if not code and _done(args, final):
        _cost(args, tuning, root / "final")
    return code


def _done(args, final) -> bool:
    from suite.results.rundir import RunDir

    return not args.dry_run and final is not None and all(RunDir(c.run_dir).finished for c in final.cells)


def _cost(args, tuning, final: Path) -> None:
    """The last phase: each chosen setting's ms per step and decay per step, measured alike on this
    machine into final/cost.json (suite/bench/cost.py; resumes where it stopped)."""
    from suite.bench.cost import measure_all
    from suite.launch.tuning import cost_specs
    from suite.results.tuning_record import record_of

    specs = cost_specs(tuning, record_of(final), str(final / "tuning.json"))
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    device = getattr(args, "device", None) or "cpu"
    measure_all(specs, final / "cost.json", device=device, progress=progress, replace_other=True)


def _add(args, root: Path) -> int:
    """--add: the new methods under the board's protocol, its final runs linked beside theirs, and
    the board with both written once every final run is done."""
    from suite.launch import adding
    from suite.launch.tuning import check_cells
    from suite.results.tuning_record import write_record

    adding.check_root(root, args.against)
    record, board_runs = adding.board_record(args.against)
    # the board's methods, those added into this root before and the new ones: tuning.json's
    board = adding.protocol(record, args.add, adding.earlier_methods(record, root / "final"))
    tuning = adding.only_new(board, record)
    g = adding.base_grid(record, args.experiment, args.add)
    check_cells(g, tuning)

    def write(chosen):
        adding.link_board_runs(board_runs, root / "final")
        write_record(root / "final" / "tuning.json", g, board, record["chosen"] + chosen, record["cells"])

    code, final = _phases(args, g, tuning, root, write)
    if code or args.dry_run or final is None:
        return code
    if not _done(args, final):
        print("the board is written once every final run is done: run this command again then", file=sys.stderr)
        return 0
    _cost(args, board, root / "final")  # the board's rows and yours, measured alike on this machine
    from suite.leaderboard import generate

    written = generate(root / "final", root / "board")
    print(f"the board with your method: {root / 'board'} ({len(written)} files)", file=sys.stderr)
    return 0


def _phases(args, g, tuning, root: Path, write) -> tuple[int, object]:
    """Phase 1 (the tuning runs), the choice, and phase 2 (the chosen points on the final seeds);
    `write(chosen)` records the choice before the final runs start. The exit code, and the grid of
    final runs once they are chosen."""
    from suite.launch import grid
    from suite.launch.submit import run_grid
    from suite.launch.tuning import choose, final_cells, reached, tuning_cells

    known = None
    while True:  # a round's points are known once the rounds before it are done: run until none is new
        cells = tuning_cells(g, tuning, root / "tuning")
        if {c.id for c in cells} == known:
            break
        first = grid.Grid(f"{g.name}-tuning", g.path, cells, g.slurm)
        grid.check_builds(first.cells)
        code = run_grid(args, first, root / "tuning")
        if code:
            return code, None
        if args.dry_run:  # later rounds are drawn from runs a dry run does not make
            break
        known = {c.id for c in cells}
    chosen = choose(g, tuning, root / "tuning")
    if chosen is None:
        print(
            "the next round and the final runs are drawn once every tuning run before them is done: "
            "run this command again then",
            file=sys.stderr,
        )
        return 0, None
    for c in chosen:
        if not reached(c):
            print(
                f"cell [{c['cell']}], method '{c['method']}': no trial reached the target on any tuning seed; "
                f"the tie-break chose point {c['chosen']} by its best val accuracy, and its final runs are skipped "
                "(they could give no verdict): no row for it in that cell",
                file=sys.stderr,
            )
    final = grid.Grid(f"{g.name}-final", g.path, final_cells(g, tuning, chosen, root / "final"), g.slurm)
    if not args.dry_run:
        (root / "final").mkdir(parents=True, exist_ok=True)
        write(chosen)
    return run_grid(args, final, root / "final"), final
