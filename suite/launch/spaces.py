"""A grid's [tuning] table read and checked: its methods, their spaces, the points each method
tries (common points under shared spaces) and where a chosen point lies in its space. The protocol
that runs them is suite/launch/tuning.py's (its docstring describes the table)."""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from suite.errors import SuiteError
from suite.launch.grid import KINDS

MIN_FINAL_SEEDS = 5  # the fewest seeds a verdict rests on (leaderboards/README.md, How verdicts are judged)
TUNING_KEYS = ("trials", "tuning_seeds", "final_seeds", "methods", "shared", "race")
EDGE = 0.10  # a chosen setting this close to a bound of its space (a fraction of its scale) is flagged


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
    shared: dict = field(default_factory=dict)  # setting -> space, drawn as common points for every method
    grid: str = ""  # the grid's name: what the common points are seeded by
    race: bool = False  # stop a trial that can no longer win (suite/engine/race.py)

    def points(self, method: Method) -> list[dict]:
        """The method's `trials` points. Without shared spaces, the method's own draw; with them,
        the common points' shared values (but those the method fixes) and its own settings."""
        if not self.shared:
            return method.points(self.trials)
        common = _sobol(self.shared, self.trials, self.grid)
        own = _sobol(method.space, self.trials, f"{self.grid}/{method.name}")
        return [{k: v for k, v in c.items() if k not in method.fixed} | o for c, o in zip(common, own)]

    def space_of(self, method: Method) -> dict:
        """Every setting the method searches, and its space."""
        return {k: v for k, v in self.shared.items() if k not in method.fixed} | method.space

    def edges(self, method: Method, point: dict) -> list[str]:
        """The settings of a point within EDGE of a bound of their continuous space, on its scale."""
        out = []
        for key, space in self.space_of(method).items():
            if isinstance(space, list) or key not in point:
                continue
            kind, lo, hi = space
            scale = math.log if kind == "log" else float
            where = (scale(point[key]) - scale(lo)) / (scale(hi) - scale(lo))
            if where < EDGE or where > 1 - EDGE:
                out.append(f"{key} at {where:.2f} of its {'log ' if kind == 'log' else ''}range")
        return out


def parse(raw: dict, where: str, grid: str = "") -> Tuning:
    """The [tuning] table of the grid named `grid`, checked: one line on any bad input."""
    where = f"{where} [tuning]"
    for key in raw:
        if key not in TUNING_KEYS:
            raise SuiteError(f"{where}: unknown key '{key}'; known: {', '.join(TUNING_KEYS)}")
    trials = raw.get("trials")
    if not isinstance(trials, int) or isinstance(trials, bool) or not 1 <= trials <= 1000:
        raise SuiteError(f"{where}: trials must be an integer in [1, 1000], got {trials!r}")
    seeds = {key: raw.get(key) for key in ("tuning_seeds", "final_seeds")}
    for key, value in seeds.items():
        if not (isinstance(value, list) and value and all(natural(s) for s in value)):
            raise SuiteError(f"{where}: {key} must be a list of non-negative integers, got {value!r}")
        if twice := sorted({s for s in value if value.count(s) > 1}):
            raise SuiteError(f"{where}: {key} lists seeds {twice} more than once; a seed is one run")
    if overlap := sorted(set(seeds["tuning_seeds"]) & set(seeds["final_seeds"])):
        raise SuiteError(f"{where}: seeds {overlap} are both tuning and final seeds; the final runs must be fresh")
    if len(seeds["final_seeds"]) < MIN_FINAL_SEEDS:
        raise SuiteError(f"{where}: final_seeds must hold {MIN_FINAL_SEEDS} seeds or more, got {seeds['final_seeds']}")
    methods = raw.get("methods")
    if not isinstance(methods, dict) or not methods:
        raise SuiteError(f"{where}: methods must be a table of methods, [tuning.methods.NAME]")
    shared = raw.get("shared", {})
    if not isinstance(shared, dict):
        raise SuiteError(f"{where}: shared must be a table of spaces, [tuning.shared]")
    shared = {key: _space(value, f"{where} shared.{key}") for key, value in shared.items()}
    race = raw.get("race", False)
    if not isinstance(race, bool):
        raise SuiteError(f"{where}: race must be true or false, got {race!r}")
    out = Tuning(trials, seeds["tuning_seeds"], seeds["final_seeds"], shared=shared, grid=grid, race=race)
    for name, body in methods.items():
        if not isinstance(body, dict):
            raise SuiteError(f"{where}: method '{name}' must be a table")
        body = dict(body)
        space, baseline = body.pop("space", {}), body.pop("baseline", None)
        for key, value in body.items():  # what grid files refuse in [fixed], refused here too
            if key in KINDS and not isinstance(value, str):
                raise SuiteError(f"{where}: method '{name}': {key} takes a component name, got {value!r}")
            if isinstance(value, dict):
                raise SuiteError(f"{where}: method '{name}': '{key}' must be a value, got a table")
        if not isinstance(space, dict):
            raise SuiteError(f"{where}: the space of method '{name}' must be a table")
        if baseline is not None and (not isinstance(baseline, str) or baseline not in methods or baseline == name):
            raise SuiteError(f"{where}: method '{name}': baseline must name another method, got {baseline!r}")
        space = {key: _space(value, f"{where} {name}.space.{key}") for key, value in space.items()}
        if both := sorted(set(space) & set(shared)):
            raise SuiteError(
                f"{where}: method '{name}' searches '{both[0]}' in a space of its own, but it is shared: "
                "a method shares the baseline's range of a shared setting (or fixes it, if its definition does)"
            )
        out.methods.append(Method(name, body, space, baseline))
    return out


def _sobol(space: dict, n: int, name: str) -> list[dict]:
    """n points of a space from a scrambled Sobol sequence seeded by name: the same on every machine.
    Continuous values keep 4 significant digits (readable in tuning.md and spec.json)."""
    if not space:
        return [{} for _ in range(n)]
    import torch

    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    draws = torch.quasirandom.SobolEngine(len(space), scramble=True, seed=seed).draw(n, dtype=torch.float64)
    points = []
    for row in draws.tolist():
        point = {}
        for (key, values), u in zip(space.items(), row):
            if isinstance(values, list):
                point[key] = values[min(int(u * len(values)), len(values) - 1)]
            else:
                kind, lo, hi = values
                point[key] = float(f"{(lo * (hi / lo) ** u if kind == 'log' else lo + (hi - lo) * u):.4g}")
        points.append(point)
    return points


def natural(value) -> bool:
    """A whole number >= 0 (a seed, a step), and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
