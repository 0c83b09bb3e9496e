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
        "skip what is done: run it again to resume, or on Slurm to submit what the runs before made drawable "
        "(--follow N queues those calls as jobs). "
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
    slurm = flags.backend(p)
    slurm.add_argument(
        "--follow",
        type=int,
        default=0,
        metavar="N",
        help="also queue a job that runs this command again once the array jobs it submitted have ended, "
        "and so on, at most N times in a row: a tune of R rounds needs R + 1 (the later rounds, the final runs, "
        "then the cost and the record); a larger N leaves room to resubmit what failed or was cut short",
    )


def run(args) -> int:
    from suite.launch.submit import check_flags

    root = Path(args.root)
    if (args.grid_file is None) == (args.add is None) or (args.add is None) != (args.against is None):
        raise SuiteError("tune takes a grid file, or --add FILE with --against BOARD")
    check_flags(args)
    if args.follow < 0:
        raise SuiteError(f"--follow must be at least 0, got {args.follow}")
    if args.follow and args.backend != "slurm":
        raise SuiteError("--follow is for --backend slurm: a local tune runs every round itself")
    code, finished, g = _add(args, root) if args.add else _tune(args, root)
    if not code and args.follow and not args.dry_run and not finished:
        _follow(args, root, g)
    return code


def _tune(args, root: Path) -> tuple[int, bool, object]:
    """Every method of the grid file's [tuning] table: the exit code, whether the tune is finished
    (every final run done, the cost measured), and the grid tuned."""
    from suite.launch import grid
    from suite.launch.spaces import parse
    from suite.launch.tuning import cell_name, check_cells
    from suite.results.tuning_record import record_of, write_record

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
        args,
        g,
        tuning,
        root,
        lambda chosen: write_record(root / "final" / "tuning.json", tuning.to_record(), chosen, cells),
    )
    finished = not code and _done(args, final)
    if finished:
        _cost(args, tuning, root / "final")
    if not code and args.dry_run and args.backend == "local":
        _estimate(args, g, tuning)
    return code, finished, g


def _follow(args, root: Path, g) -> None:
    """--follow N: a Slurm job that runs this tune again once its array jobs have ended, with
    --follow N - 1 (the last one given wins, so an abbreviated flag counts down too)."""
    from suite.launch.slurm import find_sbatch, follow
    from suite.launch.submit import slurm_options

    again = [a for a in args.argv if not a.startswith("--follow=")]
    while "--follow" in again:
        i = again.index("--follow")
        del again[i : i + 2]
    again += ["--follow", str(args.follow - 1)]
    line = follow(root, [root / "tuning", root / "final"], again, slurm_options(args, g), find_sbatch(), g.name)
    print(line, file=sys.stderr)


def _estimate(args, g, tuning) -> None:
    """A dry run's account of the tune: where each cell stands, then the cost of the whole tune (every
    trial on every tuning seed and the final seeds, per cell and method, each to its budget:
    suite/commands/grid.py's cost_line), and what the race does."""
    from suite.commands.grid import cost_line
    from suite.launch.tuning import progress, spec_for

    for line in progress(g, tuning, Path(args.root)):
        print(line, file=sys.stderr)
    runs_each = tuning.trials * len(tuning.tuning_seeds) + len(tuning.final_seeds)
    runs = [
        (spec_for(cell.spec, m, tuning.points(m)[0], tuning.tuning_seeds[0], str(g.path)), runs_each)
        for cell in g.cells
        for m in tuning.methods
    ]
    print(f"the whole tune, {len(tuning.methods)} method(s) x {len(g.cells)} cell(s):", file=sys.stderr)
    print(cost_line(runs, args.workers), file=sys.stderr)
    if not tuning.race:
        print("race = false: every tuning trial runs until it holds the target or its budget ends", file=sys.stderr)
    elif tuning.trials < 2:
        print("the race cannot help: a search of one trial has no rival to stop it against", file=sys.stderr)
    else:
        print("the race stops a trial once a rival's finished median beats what it can still reach", file=sys.stderr)


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


def _add(args, root: Path) -> tuple[int, bool, object]:
    """--add: the new methods under the board's protocol, its final runs linked beside theirs, and
    the board with both written once every final run is done."""
    from suite.launch import adding
    from suite.launch.tuning import check_cells
    from suite.results.tuning_record import write_record

    adding.check_root(root, args.against)
    record, board_runs = adding.board_record(args.against)
    adding.check_board(record, board_runs, args.experiment)
    adding.board_links(board_runs, root / "final")  # a run in the place of one of the board's: refused now
    # the board's methods, those added into this root before and the new ones: tuning.json's
    board = adding.protocol(record, args.add, adding.earlier_methods(record, root / "final"))
    tuning = adding.only_new(board, record)
    g = adding.base_grid(record, args.experiment, args.add)
    check_cells(g, tuning)

    def write(chosen):
        adding.link_board_runs(board_runs, root / "final")
        protocol = board.to_record()
        write_record(root / "final" / "tuning.json", protocol, record["chosen"] + chosen, record["cells"], adding=True)

    code, final = _phases(args, g, tuning, root, write)
    if not code and args.dry_run and args.backend == "local":
        _estimate(args, g, tuning)
    if code or args.dry_run or final is None:
        return code, False, g
    if not _done(args, final):
        again = "the follow-up job runs" if args.follow and not args.dry_run else "run"
        print(f"the board is written once every final run is done: {again} this command again then", file=sys.stderr)
        return 0, False, g
    _cost(args, board, root / "final")  # the board's rows and yours, measured alike on this machine
    from suite.leaderboard import generate

    written = generate(root / "final", root / "board")
    print(f"the board with your method: {root / 'board'} ({len(written)} files)", file=sys.stderr)
    return 0, True, g


def _phases(args, g, tuning, root: Path, write) -> tuple[int, object]:
    """Phase 1 (the tuning runs), the choices, and phase 2 (each chosen point on the final seeds);
    `write(chosen)` records choices before their final runs start. A search's next round, and its
    final runs once it has chosen, need only its own runs: run here, they join the running submission
    as soon as those have finished, and no worker waits for the other searches' slowest trial; on
    Slurm, the next call submits them. The exit code, and the grid of final runs once every search
    has chosen."""
    from suite.launch import grid
    from suite.launch.manifest import TO_RUN, changed_code, statuses
    from suite.launch.submit import run_grid
    from suite.launch.tuning import choices, choose, final_cells, tuning_cells
    from suite.results.tuning_record import reached

    known: set = set()  # the ids of the cells submitted (or found done or running) by this call
    declared: set = set()  # (cell, method) whose choice this call recorded

    def finals_of_finished() -> list:
        """The final runs of the searches that finished since, their choices recorded first."""
        new = [c for c in choices(g, tuning, root / "tuning") if (c["cell"], c["method"]) not in declared]
        if not new or args.dry_run:
            return []
        cells = final_cells(g, tuning, new, root / "final")  # before write: it names their runs in the record
        (root / "final").mkdir(parents=True, exist_ok=True)
        write(new)
        declared.update((c["cell"], c["method"]) for c in new)
        return cells

    def more() -> list:
        cells = [c for c in tuning_cells(g, tuning, root / "tuning") + finals_of_finished() if c.id not in known]
        grid.check_builds(cells)
        stale = {c.id for c, _ in changed_code(cells)}  # left to the next submission, which says why
        known.update(c.id for c in cells if c.id not in stale)
        return [c for c, s in zip(cells, statuses(cells)) if s in TO_RUN and c.id not in stale]

    while True:  # a round's points are known once the rounds before it are done: run until none is new
        cells = tuning_cells(g, tuning, root / "tuning")
        if {c.id for c in cells} <= known:
            break
        first = grid.Grid(f"{g.name}-tuning", g.path, cells, g.slurm)
        grid.check_builds(first.cells)
        known.update(c.id for c in cells)
        code = run_grid(args, first, root / "tuning", more)
        if code:
            return code, None
        if args.dry_run:  # later rounds are drawn from runs a dry run does not make
            break
    chosen = choose(g, tuning, root / "tuning")
    if chosen is None:
        code, early = 0, [c for c in finals_of_finished() if c.id not in known]
        if early:  # on Slurm, or where another process holds a tuning run
            code = run_grid(args, grid.Grid(f"{g.name}-final", g.path, early, g.slurm), root / "final")
        again = "the follow-up job runs" if args.follow and not args.dry_run else "run"
        print(
            "a search's next round, and its final runs, are drawn once every run of its rounds before is done: "
            f"{again} this command again then",
            file=sys.stderr,
        )
        return code, None
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
