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
`{ range = [lo, hi] }` (uniform). `python -m suite tune GRID --root ROOT` runs both phases, and
skips what is done: run it again after a Slurm submission of the tuning runs to submit the finals.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from suite.errors import SuiteError
from suite.grid import KINDS, Cell, Grid
from suite.milestones import Milestones
from suite.rundir import RunDir, write_json
from suite.spec import default_run_dir, resolve, spec_id

MIN_FINAL_SEEDS = 5  # the fewest seeds a verdict rests on (leaderboards/README.md, How verdicts are judged)
TUNING_KEYS = ("trials", "tuning_seeds", "final_seeds", "methods")


@dataclass
class Method:
    name: str
    fixed: dict  # component names and settings every point of the method has
    space: dict  # setting -> list, ("log", lo, hi) or ("range", lo, hi)
    baseline: str | None = None  # the method its verdict is against (leaderboard's tuning.md)

    def points(self, n: int) -> list[dict]:
        """n points of the space, the same on every machine and call (seeded by the method's name). A
        space of lists only is a grid: n of its points without repeats, in a shuffled order."""
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:8], "little"))
        if all(isinstance(values, list) for values in self.space.values()):
            grid = [dict(zip(self.space, combo)) for combo in itertools.product(*self.space.values())]
            if n > len(grid):
                raise SuiteError(f"method '{self.name}': its space holds {len(grid)} points, fewer than trials = {n}")
            return [grid[i] for i in rng.permutation(len(grid))[:n]]
        points = []
        for _ in range(n):
            point = {}
            for key, values in self.space.items():
                if isinstance(values, list):
                    point[key] = values[int(rng.integers(len(values)))]
                else:
                    kind, lo, hi = values
                    u = float(rng.random())
                    point[key] = float(lo * (hi / lo) ** u) if kind == "log" else float(lo + (hi - lo) * u)
            points.append(point)
        return points


@dataclass
class Tuning:
    trials: int
    tuning_seeds: list[int]
    final_seeds: list[int]
    methods: list[Method] = field(default_factory=list)


def parse(raw: dict, where: str) -> Tuning:
    """The [tuning] table, checked: one line on any bad input."""
    where = f"{where} [tuning]"
    for key in raw:
        if key not in TUNING_KEYS:
            raise SuiteError(f"{where}: unknown key '{key}'; known: {', '.join(TUNING_KEYS)}")
    trials = raw.get("trials")
    if not isinstance(trials, int) or isinstance(trials, bool) or not 1 <= trials <= 1000:
        raise SuiteError(f"{where}: trials must be an integer in [1, 1000], got {trials!r}")
    seeds = {key: raw.get(key) for key in ("tuning_seeds", "final_seeds")}
    for key, value in seeds.items():
        if not (isinstance(value, list) and value and all(isinstance(s, int) and s >= 0 for s in value)):
            raise SuiteError(f"{where}: {key} must be a list of non-negative integers, got {value!r}")
    if overlap := sorted(set(seeds["tuning_seeds"]) & set(seeds["final_seeds"])):
        raise SuiteError(f"{where}: seeds {overlap} are both tuning and final seeds; the final runs must be fresh")
    if len(set(seeds["final_seeds"])) < MIN_FINAL_SEEDS:
        raise SuiteError(f"{where}: final_seeds must hold {MIN_FINAL_SEEDS} seeds or more, got {seeds['final_seeds']}")
    methods = raw.get("methods")
    if not isinstance(methods, dict) or not methods:
        raise SuiteError(f"{where}: methods must be a table of methods, [tuning.methods.NAME]")
    out = Tuning(trials, seeds["tuning_seeds"], seeds["final_seeds"])
    for name, body in methods.items():
        if not isinstance(body, dict):
            raise SuiteError(f"{where}: method '{name}' must be a table")
        body = dict(body)
        space, baseline = body.pop("space", {}), body.pop("baseline", None)
        if not isinstance(space, dict):
            raise SuiteError(f"{where}: the space of method '{name}' must be a table")
        if baseline is not None and (baseline not in methods or baseline == name):
            raise SuiteError(f"{where}: method '{name}': baseline must name another method, got {baseline!r}")
        space = {key: _space(value, f"{where} {name}.space.{key}") for key, value in space.items()}
        out.methods.append(Method(name, body, space, baseline))
    return out


def _space(value, where: str):
    if isinstance(value, list) and value:
        return value
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("log", "range"):
        ((kind, bounds),) = value.items()
        if (
            isinstance(bounds, list)
            and len(bounds) == 2
            and all(isinstance(b, int | float) for b in bounds)
            and bounds[0] < bounds[1]
            and (kind == "range" or bounds[0] > 0)
        ):
            return (kind, float(bounds[0]), float(bounds[1]))
    raise SuiteError(
        f"{where}: a space is a non-empty list, {{ log = [lo, hi] }} (0 < lo < hi) or "
        f"{{ range = [lo, hi] }} (lo < hi), got {value!r}"
    )


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


def tuning_cells(grid: Grid, tuning: Tuning) -> list[Cell]:
    """Every cell x method x point x tuning seed."""
    where, cells = str(grid.path), {}
    for cell in grid.cells:
        for method in tuning.methods:
            for k, point in enumerate(method.points(tuning.trials)):
                for seed in tuning.tuning_seeds:
                    spec = spec_for(cell.spec, method, point, seed, where)
                    cells.setdefault(spec_id(spec), Cell(spec, _label(cell, method, k, seed), f"tuning/{method.name}"))
    return list(cells.values())


def choose(grid: Grid, tuning: Tuning, root: Path) -> list[dict] | None:
    """Per cell and method, every point's scores and the point chosen; None while a tuning run is missing."""
    chosen = []
    for cell in grid.cells:
        for method in tuning.methods:
            tried = []
            for k, point in enumerate(method.points(tuning.trials)):
                specs = [spec_for(cell.spec, method, point, seed, str(grid.path)) for seed in tuning.tuning_seeds]
                dirs = [RunDir(default_run_dir(spec, root)) for spec in specs]
                if not all(d.finished for d in dirs):
                    return None
                # judged from the evaluations by the one success rule (suite.milestones), as the board does
                reached = [Milestones.of(d.read_metrics(), *_targets(spec)) for d, spec in zip(dirs, specs)]
                times = [math.inf if m.grok_step is None else float(m.grok_step) for m in reached]
                best_val = [m.best_val_acc or 0.0 for m in reached]
                tried.append(
                    {
                        "point": k,
                        "settings": point,
                        "times": times,
                        "median_time": float(np.median(times)),
                        "median_best_val": float(np.median(best_val)),
                    }
                )
            winner = min(tried, key=lambda t: (t["median_time"], -t["median_best_val"], t["point"]))
            chosen.append(
                {
                    "cell": _name(cell),
                    "method": method.name,
                    "chosen": winner["point"],
                    "settings": winner["settings"],
                    "tried": tried,
                }
            )
    return chosen


def _targets(spec: dict) -> tuple[float, float, int]:
    train = spec["train"]
    return train["memorization"], train["target"], train["hold"]


def final_cells(grid: Grid, tuning: Tuning, chosen: list[dict]) -> list[Cell]:
    """Each chosen point on the final seeds; records the run ids in its entry ("final_runs"), by
    which the leaderboard finds a method's final runs."""
    by = {(c["cell"], c["method"]): c for c in chosen}
    cells = []
    for cell in grid.cells:
        for method in tuning.methods:
            entry = by[_name(cell), method.name]
            where = str(grid.path)
            specs = [spec_for(cell.spec, method, entry["settings"], seed, where) for seed in tuning.final_seeds]
            entry["final_runs"] = [spec_id(spec) for spec in specs]
            cells += [Cell(spec, _label(cell, method, entry["chosen"], spec["seed"]), method.name) for spec in specs]
    return cells


def write_record(path: Path, grid: Grid, tuning: Tuning, chosen: list[dict]) -> None:
    """tuning.json beside the final runs: what the leaderboard shows of the tuning. The choices of
    cells not in `grid` (another experiment tuned into the same root) are kept when the budget,
    seeds and methods are the same."""
    record = {
        "grid": grid.name,
        "trials": tuning.trials,
        "tuning_seeds": tuning.tuning_seeds,
        "final_seeds": tuning.final_seeds,
        "methods": {
            m.name: {
                "fixed": m.fixed,
                "space": {k: v if isinstance(v, list) else {v[0]: [v[1], v[2]]} for k, v in m.space.items()},
                "baseline": m.baseline,
            }
            for m in tuning.methods
        },
    }
    old = record_of(path.parent)
    new_keys = {(c["cell"], c["method"]) for c in chosen}
    if old is not None and all(old.get(k) == v for k, v in record.items()):
        chosen = [c for c in old["chosen"] if (c["cell"], c["method"]) not in new_keys] + chosen
    write_json(path, record | {"chosen": chosen})


def _name(cell: Cell) -> str:
    """A base cell's name in tuning.json: its experiment and axis values (e.g. "mlp task=modular op=add")."""
    return " ".join(part for part in (cell.experiment, cell.label) if part)


def _label(cell: Cell, method: Method, point: int, seed: int) -> str:
    return f"{_name(cell)} method={method.name} point={point} seed={seed}"


def record_of(root: Path) -> dict | None:
    path = Path(root) / "tuning.json"
    return json.loads(path.read_text()) if path.exists() else None
