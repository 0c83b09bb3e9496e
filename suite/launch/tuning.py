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
   seed; not where the chosen point reached the target on no tuning seed (the search failed, and a
   verdict could not be given: the choice says so, and the method gets no row in that cell). Only
   these runs count in the leaderboard of ROOT/final, beside tuning.json: the space, N, the seeds,
   and per cell and method every point tried with its scores and the one chosen.

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
from dataclasses import dataclass
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


@dataclass
class Trial:
    """One point of a method's search in one cell, run on every tuning seed."""

    round: int
    point: int  # its number among the method's trials in the cell, across the rounds
    settings: dict
    specs: list[dict]  # one per tuning seed
    dirs: list[Path]


def search(grid: Grid, tuning: Tuning, root: Path, cell: Cell, method: Method) -> tuple[list[Trial], list[dict]]:
    """The method's trials in the cell as far as they are known, and the scores of those finished
    (trial() of each, in order). A round after the first is drawn around the best trial of the rounds
    before it, so its points are known once those have all finished: a pure function of their runs."""
    where, trials, scores = str(grid.path), [], []
    for r in range(len(tuning.rounds)):
        best = None
        if r:
            scores = [score(t, tuning.race) for t in trials]
            if any(s is None for s in scores):
                return trials, [s for s in scores if s is not None]
            best = best_of(scores)["settings"]
        for k, point in enumerate(tuning.points(method, r, best), tuning.first(r)):
            specs = [spec_for(cell.spec, method, point, seed, where) for seed in tuning.tuning_seeds]
            trials.append(Trial(r, k, point, specs, [default_run_dir(spec, root) for spec in specs]))
    scores = [score(t, tuning.race) for t in trials]
    return trials, [s for s in scores if s is not None]


def best_of(scores: list[dict]) -> dict:
    """The winning trial: the smallest median held time on the tuning seeds, ties to the higher median
    best val accuracy, then the earlier trial."""
    return min(scores, key=lambda t: (t["median_time"], -t["median_best_val"], t["point"]))


def tuning_cells(grid: Grid, tuning: Tuning, root: Path) -> list[Cell]:
    """Every cell x method x known trial x tuning seed, its run folder under root; with `race`, each
    knows its trial's run folders and its rivals' (every other known trial of its search, earlier
    rounds' included: suite/engine/race.py)."""
    cells = {}
    for cell in grid.cells:
        for method in tuning.methods:
            trials, _ = search(grid, tuning, root, cell, method)
            dirs = [[str(d.resolve()) for d in t.dirs] for t in trials]
            for i, t in enumerate(trials):
                race = {"trial": dirs[i], "rivals": dirs[:i] + dirs[i + 1 :]} if tuning.race else None
                for spec, run_dir in zip(t.specs, t.dirs):
                    label, experiment = _label(cell, method, t.point, spec["seed"]), f"tuning/{method.name}"
                    cells.setdefault(spec_id(spec), Cell(spec, run_dir, label, f"{grid.name}-tuning", experiment, race))
    return list(cells.values())


def choose(grid: Grid, tuning: Tuning, root: Path) -> list[dict] | None:
    """Per cell and method, every trial's scores and the one chosen; None while a search is unfinished."""
    chosen = []
    for cell in grid.cells:
        for method in tuning.methods:
            trials, tried = search(grid, tuning, root, cell, method)
            if len(tried) < tuning.trials:
                return None
            winner = best_of(tried)
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


def score(trial: Trial, race: bool) -> dict | None:
    """A finished trial's scores over its tuning seeds (None while a run is unfinished): each seed's
    held time to target, their median, the median best val; where it was raced, how far each run got
    (its last step and val accuracy) of its budget."""
    dirs = [RunDir(d) for d in trial.dirs]
    if not all(d.finished for d in dirs):
        return None
    reached = [_reached(d, spec) for d, spec in zip(dirs, trial.specs)]
    times = [math.inf if m.grok_step is None else float(m.grok_step) for m in reached]
    out = {
        "round": trial.round,
        "point": trial.point,
        "settings": trial.settings,
        "times": times,
        "median_time": float(np.median(times)),
        "median_best_val": float(np.median([m.best_val_acc or 0.0 for m in reached])),
    }
    if race:  # what the race stopped, and the steps each run took
        results = [read_json(d / "result.json") for d in dirs]
        out["raced"] = [r.get("stop_reason") == "raced" for r in results]
        out["steps"] = [r["steps"] for r in results]
        out["budget"] = [spec["train"]["steps"] for spec in trial.specs]
        out["last_val"] = [d.read_metrics()[-1]["val_acc"] for d in dirs]
    return out


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
            if not reached(entry):  # by the board's rule its final runs could give no verdict
                entry["final_runs"] = []
                continue
            where = str(grid.path)
            specs = [spec_for(cell.spec, method, entry["settings"], seed, where) for seed in tuning.final_seeds]
            entry["final_runs"] = [spec_id(spec) for spec in specs]
            for spec in specs:
                label = _label(cell, method, entry["chosen"], spec["seed"])
                run_dir = default_run_dir(spec, root)
                cells.setdefault(spec_id(spec), Cell(spec, run_dir, label, f"{grid.name}-final", method.name))
    return list(cells.values())


def reached(choice: dict) -> bool:
    """Did the chosen trial reach the target on any tuning seed? Where none did, the search failed and
    the tie-break picked its point by best val accuracy (then by index): its final runs are skipped."""
    chosen = next(t for t in choice["tried"] if t["point"] == choice["chosen"])
    return any(math.isfinite(time) for time in chosen["times"])


def cost_specs(tuning: Tuning, record: dict, where: str) -> dict[str, dict]:
    """Each chosen setting of the record ("cell/method") as the spec its first final run trains: what
    the cost phase measures (suite/bench/cost.py)."""
    methods = {m.name: m for m in tuning.methods}
    return {
        f"{c['cell']}/{c['method']}": spec_for(
            record["cells"][c["cell"]], methods[c["method"]], c["settings"], tuning.final_seeds[0], where
        )
        for c in record["chosen"]
        if c["method"] in methods and c["cell"] in record.get("cells", {}) and reached(c)
    }


def cell_name(cell: Cell) -> str:
    """A base cell's name in tuning.json: its experiment and axis values (e.g. "mlp task=modular op=add")."""
    return " ".join(part for part in (cell.experiment, cell.label) if part)


def _label(cell: Cell, method: Method, point: int, seed: int) -> str:
    return f"{cell_name(cell)} method={method.name} point={point} seed={seed}"
