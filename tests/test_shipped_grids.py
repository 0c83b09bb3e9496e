"""The grid files shipped in suite/grids/ load, the ones that restate a preset match it, and the grid
of each committed board still names the specs of the runs it holds."""

import json
from dataclasses import replace

import pytest
from conftest import REPO

from suite.launch.grid import load
from suite.launch.spaces import parse
from suite.launch.tuning import cell_name, final_cells, tuning_cells
from suite.results.tuning_record import reached, record_of
from suite.specs.presets import apply
from suite.specs.spec import resolve, spec_id

GRIDS = sorted((REPO / "suite/grids").glob("*.toml"))


@pytest.mark.parametrize("path", GRIDS, ids=lambda p: p.stem)
def test_shipped_grid_loads(path):
    grid = load(path)
    assert grid.cells and grid.name == path.stem


def test_grokfast_grid_is_the_preset():
    # The grid spells out `--preset grokfast` (grids cannot name presets): the same specs, so its
    # cells and `suite run --preset grokfast` share run folders.
    grid = load(REPO / "suite/grids/grokfast.toml")
    ids = sorted(cell.id for cell in grid.cells)
    expected = []
    for choices, extra in (
        ({"filter": "grokfast_ema"}, {}),
        ({"filter": "grokfast_ma"}, {}),
        ({}, {"train.eval_every": 100}),
    ):  # the 40k-step baseline evaluates every 10 epochs
        choices, settings = apply("grokfast", choices, extra)
        expected.append(spec_id(resolve(choices, settings, 0)))
    assert ids == sorted(expected)


# Boards whose runs an older version of the code wrote, with settings since renamed or added without
# a LATER_DEFAULTS entry (train.hold, the MLP's `embed` now `inputs`, task.skew, ...): no grid of today
# names their specs; each with how many of its runs are such (all, or hessian's seeds 0-2 from bf7b056,
# whose seeds 3 and 4 today's grid does name). Every other run must be a cell of its board's grid.
OLDER = {
    "cross_arch": "all",
    "cross_arch_polygons_zipf": "all",
    "grokfast": "all",
    "hessian": 6,
    "inputs": "all",
    "natural_text": "all",
    "paper_mlp": "all",
    "probes": "all",
}
BOARDS = sorted({p.parent.name for part in ("runs", "tuning") for p in (REPO / "leaderboards").glob(f"*/{part}")})
GRID_OF = {"adamlr_transformer_adamw": "adamlr_transformer"}  # a board of one experiment of a grid


def grid_ids(board: str) -> set[str]:
    """The spec ids the board's grid names today: its cells; for a tuned grid, its tuning runs and the
    final runs of the points its tuning.json chose."""
    grid = load(REPO / "suite/grids" / f"{GRID_OF.get(board, board)}.toml")
    ids = {cell.id for cell in grid.cells}
    if grid.tuning:
        tuning = parse(grid.tuning, str(grid.path), grid.name)
        root = REPO / "leaderboards" / board
        # a round after the first is drawn around the runs of those before: read where they are committed
        found = tuning_cells(grid, tuning, root / "tuning")
        # final runs: the board's runs/, or final/ while a campaign's later experiments still tune
        for finals in ("runs", "final"):
            record = record_of(root / finals)  # none while the first tuning runs; never-reached times as inf
            chosen = record["chosen"] if record else []
            # a failed search's final runs, which earlier versions of `suite tune` ran (reached's docstring)
            ids |= {run for c in chosen if not reached(c) for run in c.get("final_runs") or []}
            names = {c["cell"] for c in chosen}  # a board tuned one experiment at a time has chosen for those only
            tuned = replace(grid, cells=[cell for cell in grid.cells if cell_name(cell) in names])
            found += final_cells(tuned, tuning, chosen, root / finals)
        ids |= {cell.id for cell in found}
    return ids


@pytest.mark.parametrize("board", BOARDS)
def test_each_committed_board_s_grid_still_names_the_spec_of_every_run_it_holds(board):
    results = [json.loads(p.read_text()) for p in (REPO / "leaderboards" / board).rglob("result.json")]
    assert results and all(r["run_id"] == spec_id(r["spec"]) for r in results)
    named = grid_ids(board)
    unnamed = [r["run_id"] for r in results if r["run_id"] not in named]
    older = OLDER.get(board, 0)  # the list holds only the boards that need it, with their exact count
    assert len(unnamed) == (len(results) if older == "all" else older), (
        f"{len(unnamed)} of {board}'s runs are no cell of its grid now"
    )


def test_the_headline_board_s_runs_were_made_by_today_s_code():
    # `suite tune --add` benchmarks a method against these runs and refuses runs whose component code
    # changed since (suite.specs.code): a change to a task, model, optimizer, sampler or filter module
    # shuts every user out of the headline board until it is rerun
    from suite.specs.code import changed

    results = [json.loads(p.read_text()) for p in (REPO / "leaderboards" / "tuned").rglob("result.json")]
    stale = [(r["run_id"], why) for r in results if (why := changed(r["code"], r["spec"]))]
    assert results and not stale, f"{len(stale)} of {len(results)} runs, the first {stale[:1]}"


def test_the_headline_board_checks_its_rows_against_every_committed_recipe_of_their_families():
    # a tuned row is at least as good as every recipe in the repository: a committed board holding an
    # untuned run of a tuned row's family in its cell must be among the board command's --untuned roots
    import re

    from suite.leaderboard.collect import collect
    from suite.leaderboard.tuned import judge

    text = (REPO / "suite/grids/tuned.toml").read_text()
    declared = {(REPO / root).as_posix() for root in re.findall(r"--untuned (\S+)", text)}
    tuned = next(p for p in (REPO / "leaderboards/tuned/runs", REPO / "leaderboards/tuned/final") if p.is_dir())
    others = tuple(p for p in sorted((REPO / "leaderboards").glob("*/runs")) if p.parent.name != "tuned")
    assert declared and declared <= {p.as_posix() for p in others}
    checks = judge(collect(tuned), record_of(tuned), others).checks
    used = {r.root for found in checks.values() for r in found}
    assert used and used <= declared, f"recipes under {sorted(used - declared)} are not checked on the board"
