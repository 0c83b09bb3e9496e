"""Every method tuned on the same budget, then judged on seeds tuning never saw.

The protocol follows AlgoPerf's external tuning ruleset (Dahl et al., arXiv 2306.07179, and the
AlgoPerf rules): a submission declares a search space, every submission gets the same number of
trials, and the score comes from runs separate from the tuning. Here, for each cell of the grid
(its [fixed] and [axes]) and each method of its [tuning] table:

1. tuning: `trials` points drawn from the method's space (the same N for every method; a
   deterministic draw, seeded by the method's name), each run on every tuning seed;
2. choice: the point with the smallest held time to target, median over the tuning seeds (a
   failed seed counting as infinity), ties to the higher median best val accuracy, then the
   earlier point;
3. final: that point run on the final seeds, which must be 5 or more and none of them a tuning
   seed. Only these runs count in the leaderboard of ROOT/final, beside tuning.json: the space,
   N, the seeds, and per cell and method every point tried with its scores and the one chosen.

    [tuning]
    trials = 8                        # N: points per method per cell
    tuning_seeds = [100, 101]
    final_seeds = [0, 1, 2, 3, 4]
    [tuning.methods.adamw]            # a method: its components and settings, and its space
    opt = "adamw"
    space = { lr = { log = [1e-4, 1e-2] }, weight_decay = [0.1, 1.0] }

A space maps a setting to a list (drawn uniformly), `{ log = [lo, hi] }` (log-uniform) or
`{ range = [lo, hi] }` (uniform).

A fair fight shares its spaces: `[tuning.shared]` holds the settings every method shares with the
baseline (lr, weight decay, ...), searched over the same ranges by all. Its points are common:
point k of every method takes the same shared values, the k-th of a scrambled Sobol sequence
seeded by the grid's name (not the method's), so methods are paired in hyperparameter space too;
a method's own settings (its `space`) come from a sequence seeded by the grid and method. A
method that fixes a shared setting (orthograd's AdamW at weight_decay = 0) keeps it fixed, and
tuning.md says so. Under shared spaces the final runs must be watched past their grok step:
`train.patience` >= 2 x `train.hold` (or none), so that a collapse after the hold is seen.
Each chosen point is flagged where it lies at an edge of its space (within 10% of a bound, on
the space's own scale). `python -m suite tune GRID --root ROOT` runs both phases, and
skips what is done: run it again after a Slurm submission of the tuning runs to submit the finals.
A grid whose cells tuning.json could not tell apart (two of one name, or two that a method makes
one spec) is refused before anything runs (check_cells); suite/launch/spaces.py reads the [tuning]
table and draws its points; suite/results/tuning_record.py reads and writes tuning.json.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from suite.engine.milestones import Milestones
from suite.errors import SuiteError
from suite.launch.grid import KINDS, Grid
from suite.launch.spaces import Method, Tuning, natural
from suite.results.rundir import RunDir, UnreadableFile, read_json
from suite.specs.cell import Cell
from suite.specs.spec import default_run_dir, resolve, spec_id

WATCH = 2  # under shared spaces, final runs are watched at least WATCH x hold past their grok step


def spec_for(base: dict, method: Method, point: dict, seed: int, where: str) -> dict:
    """A base cell's spec with the method's components and settings and one point of its space."""
    choices = {k: v for k, v in method.fixed.items() if k in KINDS}
    settings = {k: v for k, v in method.fixed.items() if k not in KINDS}
    keep = ["task", "model", "train"] + (["sampler"] if "sampler" not in choices else [])
    base_settings = {f"{kind}.{k}": v for kind in keep for k, v in base[kind].items() if k != "name"}
    try:
        return resolve(
            {
                "task": base["task"]["name"],
                "model": base["model"]["name"],
                **({"sampler": base["sampler"]["name"]} if "sampler" not in choices else {}),
                **choices,
            },
            {**base_settings, **settings, **point},
            seed,
        )
    except SuiteError as err:
        raise SuiteError(f"{where}: method '{method.name}': {err}") from None


def check_cells(grid: Grid, tuning: Tuning) -> None:
    """tuning.json (and the board's tuning.md) know a cell by its name, and a cell's runs by the
    specs a method makes of it: two cells of one name would take each other's choices, and two
    that a method makes the same spec would share one set of runs under two names. Refused in
    one line, before anything runs. Checked over every experiment: they share tuning.json. Under
    shared spaces, a cell whose runs stop before WATCH x hold past their grok step is refused too."""
    where, named = str(grid.path), {}
    for cell in grid.cells:
        train = cell.spec["train"]
        if tuning.shared and train["patience"] is not None and train["patience"] < WATCH * train["hold"]:
            raise SuiteError(
                f"{where}: cell [{cell_name(cell)}] stops its runs {train['patience']} steps after their grok step "
                f"(train.patience), under {WATCH} x train.hold = {WATCH * train['hold']}: a collapse after the hold "
                "would go unseen; set train.patience to at least that (or none: to the budget)"
            )
        if named.setdefault(cell_name(cell), cell) is not cell:
            raise SuiteError(
                f"{where}: two cells are both '{cell_name(cell)}' (experiment and axis values), the name "
                "tuning.json knows a cell by: give each [[experiment]] a name of its own"
            )
    for method in tuning.methods:
        # every point sets the same keys, so cells one point makes the same spec, every point does
        point, seed, made = tuning.points(method)[0], tuning.tuning_seeds[0], {}
        for cell in grid.cells:
            other = made.setdefault(spec_id(spec_for(cell.spec, method, point, seed, where)), cell)
            if other is not cell:
                raise SuiteError(
                    f"{where}: method '{method.name}' replaces what cells [{cell_name(other)}] and [{cell_name(cell)}] "
                    f"differ in ({', '.join(_differences(other.spec, cell.spec))}), so it would run them as one "
                    "cell: take that axis out of the grid, or the setting out of the method"
                )


def _differences(a: dict, b: dict) -> list[str]:
    """The settings (kind.key) in which two specs differ."""
    flat_a, flat_b = (_flat(spec) for spec in (a, b))
    return sorted(k for k in flat_a.keys() | flat_b.keys() if flat_a.get(k) != flat_b.get(k))


def _flat(spec: dict) -> dict:
    return {f"{kind}.{k}": v for kind, part in spec.items() if isinstance(part, dict) for k, v in part.items()}


def tuning_cells(grid: Grid, tuning: Tuning, root: Path) -> list[Cell]:
    """Every cell x method x point x tuning seed, its run folder under root; with `race`, each knows
    its trial's run folders and its rivals' (suite/engine/race.py)."""
    where, cells = str(grid.path), {}
    for cell in grid.cells:
        for method in tuning.methods:
            trials = [
                [spec_for(cell.spec, method, point, seed, where) for seed in tuning.tuning_seeds]
                for point in tuning.points(method)
            ]
            dirs = [[str(default_run_dir(spec, root).resolve()) for spec in specs] for specs in trials]
            for k, specs in enumerate(trials):
                race = {"trial": dirs[k], "rivals": dirs[:k] + dirs[k + 1 :]} if tuning.race else None
                for spec in specs:
                    label, experiment = _label(cell, method, k, spec["seed"]), f"tuning/{method.name}"
                    run_dir = default_run_dir(spec, root)
                    cells.setdefault(spec_id(spec), Cell(spec, run_dir, label, f"{grid.name}-tuning", experiment, race))
    return list(cells.values())


def choose(grid: Grid, tuning: Tuning, root: Path) -> list[dict] | None:
    """Per cell and method, every point's scores and the point chosen; None while a tuning run is missing."""
    chosen = []
    for cell in grid.cells:
        for method in tuning.methods:
            tried = []
            for k, point in enumerate(tuning.points(method)):
                specs = [spec_for(cell.spec, method, point, seed, str(grid.path)) for seed in tuning.tuning_seeds]
                dirs = [RunDir(default_run_dir(spec, root)) for spec in specs]
                if not all(d.finished for d in dirs):
                    return None
                reached = [_reached(d, spec) for d, spec in zip(dirs, specs)]
                times = [math.inf if m.grok_step is None else float(m.grok_step) for m in reached]
                best_val = [m.best_val_acc or 0.0 for m in reached]
                trial = {
                    "point": k,
                    "settings": point,
                    "times": times,
                    "median_time": float(np.median(times)),
                    "median_best_val": float(np.median(best_val)),
                }
                if tuning.race:  # what the race stopped, and the steps each run took of its budget
                    results = [read_json(d / "result.json") for d in dirs]
                    trial["raced"] = [r.get("stop_reason") == "raced" for r in results]
                    trial["steps"] = [r["steps"] for r in results]
                    trial["budget"] = [spec["train"]["steps"] for spec in specs]
                tried.append(trial)
            winner = min(tried, key=lambda t: (t["median_time"], -t["median_best_val"], t["point"]))
            entry = {
                "cell": cell_name(cell),
                "method": method.name,
                "chosen": winner["point"],
                "settings": winner["settings"],
                "tried": tried,
            }
            if tuning.shared:  # the fair fight's record: where the winner sits in its space
                entry["edges"] = tuning.edges(method, winner["settings"])
            chosen.append(entry)
    return chosen


def _reached(run_dir: RunDir, spec: dict) -> Milestones:
    """What a finished tuning run reached, judged from its evaluations by the one success rule
    (suite.engine.milestones), as the board does. A history that is gone or not evaluations would judge
    the run a failure: one line naming the file instead."""
    records, path = run_dir.read_metrics(), run_dir / "metrics.jsonl"
    if not records or not all(_evaluation(r) for r in records):
        raise UnreadableFile(
            f"{path} {'holds no evaluations' if not records else 'holds a line that is not an evaluation'}, "
            "though the run finished: delete its run dir to run it again"
        )
    return Milestones.of(records, *_targets(spec))


def _evaluation(record) -> bool:
    number = lambda v: isinstance(v, int | float) and not isinstance(v, bool)  # noqa: E731
    return (
        isinstance(record, dict)
        and natural(record.get("step"))
        and number(record.get("val_acc"))
        and number(record.get("train_acc"))
    )


def _targets(spec: dict) -> tuple[float, float, int]:
    train = spec["train"]
    return train["memorization"], train["target"], train["hold"]


def final_cells(grid: Grid, tuning: Tuning, chosen: list[dict], root: Path) -> list[Cell]:
    """Each chosen point on the final seeds, its run folder under root; records the run ids in its
    entry ("final_runs"), by which the leaderboard finds a method's final runs."""
    by = {(c["cell"], c["method"]): c for c in chosen}
    cells = {}  # two methods that chose the same settings share their final runs
    for cell in grid.cells:
        for method in tuning.methods:
            entry = by[cell_name(cell), method.name]
            where = str(grid.path)
            specs = [spec_for(cell.spec, method, entry["settings"], seed, where) for seed in tuning.final_seeds]
            entry["final_runs"] = [spec_id(spec) for spec in specs]
            for spec in specs:
                label = _label(cell, method, entry["chosen"], spec["seed"])
                run_dir = default_run_dir(spec, root)
                cells.setdefault(spec_id(spec), Cell(spec, run_dir, label, f"{grid.name}-final", method.name))
    return list(cells.values())


def cell_name(cell: Cell) -> str:
    """A base cell's name in tuning.json: its experiment and axis values (e.g. "mlp task=modular op=add")."""
    return " ".join(part for part in (cell.experiment, cell.label) if part)


def _label(cell: Cell, method: Method, point: int, seed: int) -> str:
    return f"{cell_name(cell)} method={method.name} point={point} seed={seed}"
