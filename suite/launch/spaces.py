"""A grid's [tuning] table read and checked: its methods, their spaces, the points each method
tries (common points under shared spaces) and where a chosen point lies in its space. The protocol
that runs them is suite/launch/tuning.py's (its docstring describes the table)."""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from dataclasses import dataclass, field

import numpy as np

from suite.errors import SuiteError
from suite.launch.grid import KINDS
from suite.specs.registry import ALL
from suite.specs.spec import DEFAULTS, train_params

MIN_FINAL_SEEDS = 5  # the fewest seeds a verdict rests on (leaderboards/README.md, How verdicts are judged)
TUNING_KEYS = ("trials", "rounds", "tuning_seeds", "final_seeds", "methods", "shared", "race", "version")
ROUND_KEYS = ("search", "trials", "width")
SEARCHES = ("coarse", "refine", "own")
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # a method's name
EDGE = 0.10  # a chosen setting this close to a bound of its space (a fraction of its scale) is flagged


@dataclass(frozen=True)
class Round:
    """One round of a search. coarse: the method's recipes, then quasi-random points of its whole
    space; refine: points in a box around the best trial so far, `width` of each shared setting's
    scale on either side, the method's own settings at the best's; own: the method's own settings
    over their whole space at the best's shared settings (a method with none refines its shared
    settings within `width` instead, so that every method gets the same number of trials)."""

    search: str
    trials: int
    width: float | None = None


@dataclass
class Method:
    name: str
    fixed: dict  # component names and settings every point of the method has
    space: dict  # setting -> list, ("log", lo, hi), ("range", lo, hi) or ("per_step", lo, hi)
    baseline: str | None = None  # the method its verdict is against (leaderboard's tuning.md)
    recipes: list[dict] = field(default_factory=list)  # its published settings: the first trials it runs
    lacks: frozenset = frozenset()  # shared settings none of its components takes (SGD's decay coupling)

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
    rounds: list[Round]
    tuning_seeds: list[int]
    final_seeds: list[int]
    methods: list[Method] = field(default_factory=list)
    shared: dict = field(default_factory=dict)  # setting -> space, drawn as common points for every method
    grid: str = ""  # the grid's name: what the common points are seeded by
    race: bool = False  # stop a trial that can no longer win (suite/engine/race.py)
    version: int | None = None  # the grid's own protocol number, as its file declares it

    @property
    def trials(self) -> int:
        """Every method's trial budget per cell: the rounds' trials together."""
        return sum(r.trials for r in self.rounds)

    def first(self, r: int) -> int:
        """The index of round r's first trial (trials are numbered across the rounds)."""
        return sum(x.trials for x in self.rounds[:r])

    def points(self, method: Method, r: int = 0, best: dict | None = None) -> list[dict]:
        """Round r's points of the method; a round after the first needs `best`, the settings of the
        best trial of the rounds before it."""
        rnd = self.rounds[r]
        if rnd.search == "coarse":
            return self._coarse(method, rnd.trials)
        if best is None:
            raise ValueError(f"round {r} ({rnd.search}) is drawn around the best trial so far")
        if rnd.search == "own" and method.space:
            own = _sobol(method.space, rnd.trials, f"{self.grid}/{method.name}/round{r}")
            return [best | o for o in own]
        shared = {k: v for k, v in self.space_of(method).items() if k not in method.space}
        return [best | p for p in _around(shared, best, rnd.width, rnd.trials, f"{self.grid}/round{r}")]

    def _coarse(self, method: Method, n: int) -> list[dict]:
        """The method's recipes, then quasi-random points. Without shared spaces, the method's own
        draw; with them, the common points' shared values (but those the method fixes) and its own
        settings: its first recipe's, or a draw of their own where it declares no recipe."""
        recipes = method.recipes[:n]
        n -= len(recipes)
        if not self.shared:
            return recipes + method.points(n)
        common = _sobol(self.shared, n, self.grid)
        own = [{k: method.recipes[0][k] for k in method.space}] * n if method.recipes else None
        own = own or _sobol(method.space, n, f"{self.grid}/{method.name}")
        searched = self.space_of(method)
        return recipes + [{k: v for k, v in c.items() if k in searched} | o for c, o in zip(common, own)]

    def to_record(self) -> dict:
        """The protocol as tuning.json records it (suite/results/tuning_record.py)."""
        record = {
            "grid": self.grid,
            "trials": self.trials,
            "rounds": [{k: v for k, v in vars(r).items() if v is not None} for r in self.rounds],
            "tuning_seeds": self.tuning_seeds,
            "final_seeds": self.final_seeds,
            "methods": {
                m.name: {
                    "fixed": m.fixed,
                    "space": {k: _recorded(v) for k, v in m.space.items()},
                    "baseline": m.baseline,
                    **({"recipes": m.recipes} if m.recipes else {}),
                }
                for m in self.methods
            },
        }
        if self.version is not None:
            record["version"] = self.version
        if self.shared:  # the fair fight: the spaces every method shares
            record["shared"] = {k: _recorded(v) for k, v in self.shared.items()}
        if self.race:
            record["race"] = True
        return record

    def space_of(self, method: Method) -> dict:
        """Every setting the method searches, and its space."""
        return {k: v for k, v in self.shared.items() if k not in method.fixed and k not in method.lacks} | method.space

    def edges(self, method: Method, point: dict) -> list[str]:
        """The settings of a point within EDGE of a bound of their continuous space, on its scale."""
        out = []
        for key, space in self.space_of(method).items():
            if isinstance(space, list) or key not in point:
                continue
            where = _unit(space, point, key)
            if where < EDGE or where > 1 - EDGE:
                scale = {"log": "log range", "range": "range", "per_step": "log range of lr x " + key}[space[0]]
                out.append(f"{key} at {where:.2f} of its {scale}")
        return out


def parse(raw: dict, where: str, grid: str = "") -> Tuning:
    """The [tuning] table of the grid named `grid`, checked: one line on any bad input."""
    where = f"{where} [tuning]"
    for key in raw:
        if key not in TUNING_KEYS:
            raise SuiteError(f"{where}: unknown key '{key}'; known: {', '.join(TUNING_KEYS)}")
    rounds = _rounds(raw, where)
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
    _check_per_step(shared, f"{where} shared")
    race = raw.get("race", False)
    if not isinstance(race, bool):
        raise SuiteError(f"{where}: race must be true or false, got {race!r}")
    version = raw.get("version")
    if version is not None and not (natural(version) and version > 0):
        raise SuiteError(f"{where}: version must be a positive integer, got {version!r}")
    out = Tuning(
        rounds, seeds["tuning_seeds"], seeds["final_seeds"], shared=shared, grid=grid, race=race, version=version
    )
    for name, body in methods.items():
        if not NAME.fullmatch(name):  # it heads tables, labels plots and names a board's rows
            raise SuiteError(f"{where}: method name {name!r}: letters, digits, '_', '-' and '.' only")
        if not isinstance(body, dict):
            raise SuiteError(f"{where}: method '{name}' must be a table")
        body = dict(body)
        space, baseline, recipes = body.pop("space", {}), body.pop("baseline", None), body.pop("recipes", [])
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
        _check_per_step(space, f"{where} {name}.space")
        method = Method(name, body, space, baseline, lacks=_lacks(body, shared, f"{where}: method '{name}'"))
        method.recipes = _recipes(recipes, out.space_of(method), f"{where} method '{name}'")
        if len(method.recipes) > rounds[0].trials:
            raise SuiteError(
                f"{where}: method '{name}' has {len(method.recipes)} recipes, more than the first round's "
                f"{rounds[0].trials} trials: every recipe is one of its trials"
            )
        out.methods.append(method)
    return out


def _lacks(fixed: dict, shared: dict, where: str) -> frozenset:
    """The shared settings that no component of a method with these fixed components and settings
    takes: it searches them no more than its runs could use them. The task, model and sampler a
    method leaves to the cell could be any: a setting one of their kind takes is kept."""
    takes = set(train_params())
    for kind, registry in ALL.items():
        named = fixed.get(kind, DEFAULTS[kind] if kind in ("opt", "filter") else None)
        try:
            entries = [registry.get(named)] if named is not None else [registry.get(n) for n in registry.names()]
        except SuiteError as err:
            raise SuiteError(f"{where}: {err}") from None
        takes.update(k for entry in entries for k in entry.params)
    return frozenset(k for k in shared if k not in fixed and k not in takes)


def _rounds(raw: dict, where: str) -> list[Round]:
    """`rounds = [{ search = ..., trials = N, width = w }, ...]`, or `trials = N`: one coarse round."""
    if ("trials" in raw) == ("rounds" in raw):
        raise SuiteError(f"{where}: give trials = N (one round) or rounds = [...], one of the two")
    if "trials" in raw:
        return [Round("coarse", _trials(raw["trials"], where))]
    rounds = raw["rounds"]
    if not isinstance(rounds, list) or not rounds or not all(isinstance(r, dict) for r in rounds):
        raise SuiteError(f"{where}: rounds must be a list of tables {{ search, trials, width }}, got {rounds!r}")
    out = []
    for i, r in enumerate(rounds):
        at = f"{where} round {i + 1}"
        if unknown := sorted(set(r) - set(ROUND_KEYS)):
            raise SuiteError(f"{at}: unknown key '{unknown[0]}'; known: {', '.join(ROUND_KEYS)}")
        search, width = r.get("search"), r.get("width")
        if search not in SEARCHES:
            raise SuiteError(f"{at}: search must be one of {', '.join(SEARCHES)}, got {search!r}")
        if (search == "coarse") != (i == 0):
            raise SuiteError(f"{at}: the first round, and only the first, is coarse (later ones search around it)")
        if search == "coarse" and width is not None:
            raise SuiteError(f"{at}: a coarse round covers the whole space and takes no width")
        if search != "coarse" and not (
            isinstance(width, int | float) and not isinstance(width, bool) and 0 < width <= 1
        ):
            raise SuiteError(f"{at}: width (of each setting's scale, either side of the best) must lie in (0, 1]")
        out.append(Round(search, _trials(r.get("trials"), at), None if width is None else float(width)))
    return out


def _trials(value, where: str) -> int:
    if not natural(value) or not 1 <= value <= 1000:
        raise SuiteError(f"{where}: trials must be an integer in [1, 1000], got {value!r}")
    return value


def _recipes(recipes, space: dict, where: str) -> list[dict]:
    """A method's published settings: each gives every setting it searches, a value inside its space."""
    if not isinstance(recipes, list) or not all(isinstance(r, dict) for r in recipes):
        raise SuiteError(f"{where}: recipes must be a list of tables of settings, got {recipes!r}")
    for recipe in recipes:
        if set(recipe) != set(space):
            missing, extra = sorted(set(space) - set(recipe)), sorted(set(recipe) - set(space))
            raise SuiteError(
                f"{where}: a recipe gives every setting the method searches and nothing else"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; not searched: {', '.join(extra)}" if extra else "")
            )
        for key, value in recipe.items():
            inside = (
                value in space[key]
                if isinstance(space[key], list)
                else isinstance(value, int | float)
                and not isinstance(value, bool)
                and 0 <= _unit(space[key], recipe, key) <= 1
            )
            if not inside:
                raise SuiteError(f"{where}: its recipe's {key} = {value!r} lies outside its space")
    return [dict(r) for r in recipes]


def _check_per_step(space: dict, where: str) -> None:
    for key, value in space.items():
        if isinstance(value, tuple) and value[0] == "per_step" and (key == "lr" or "lr" not in space):
            raise SuiteError(
                f"{where}.{key}: a per_step space is drawn as lr x {key}, so lr must be searched beside it"
            )


def _unit(space: tuple, point: dict, key: str) -> float:
    """Where a point's value of key lies in its continuous space, on the space's scale: 0 at lo, 1 at hi.
    A per_step setting lies where lr x its value does."""
    kind, lo, hi = space
    value = point[key] * point["lr"] if kind == "per_step" else point[key]
    if kind == "range":
        return (value - lo) / (hi - lo)
    return (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo)) if value > 0 else -math.inf


def _from_unit(space: dict, units: dict) -> dict:
    """Settings from unit coordinates (lr before the settings drawn per step of it), 4 significant
    digits kept (readable in tuning.md and spec.json)."""
    point = {}
    for key in sorted(units, key=lambda k: space[k][0] == "per_step"):
        kind, lo, hi = space[key]
        value = lo + (hi - lo) * units[key] if kind == "range" else lo * (hi / lo) ** units[key]
        point[key] = float(f"{value / point['lr'] if kind == 'per_step' else value:.4g}")
    return {key: point[key] for key in units}


def _sobol(space: dict, n: int, name: str) -> list[dict]:
    """n points of a space from a scrambled Sobol sequence seeded by name: the same on every machine."""
    if not space or n == 0:
        return [{} for _ in range(n)]
    points = []
    for row in _draw(len(space), n, name):
        point = {
            key: values[min(int(u * len(values)), len(values) - 1)]
            for (key, values), u in zip(space.items(), row)
            if isinstance(values, list)
        }
        units = {key: u for (key, values), u in zip(space.items(), row) if not isinstance(values, list)}
        points.append({key: (point | _from_unit(space, units))[key] for key in space})
    return points


def _around(space: dict, best: dict, width: float, n: int, name: str) -> list[dict]:
    """n points of the continuous settings of space, each within width of best's on its scale (clipped
    to the space), at the same quasi-random offsets for every method (seeded by name)."""
    keys = [k for k, v in space.items() if not isinstance(v, list) and k in best]
    if not keys:
        return [{} for _ in range(n)]
    centre = {k: _unit(space[k], best, k) for k in keys}
    return [
        _from_unit(space, {k: min(max(centre[k] + (2 * u - 1) * width, 0.0), 1.0) for k, u in zip(keys, row)})
        for row in _draw(len(keys), n, name)
    ]


def _draw(dims: int, n: int, name: str) -> list[list[float]]:
    import torch

    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    return torch.quasirandom.SobolEngine(dims, scramble=True, seed=seed).draw(n, dtype=torch.float64).tolist()


def _recorded(space):
    """A space as a grid file writes it: a list, or { kind = [lo, hi] }."""
    return space if isinstance(space, list) else {space[0]: [space[1], space[2]]}


def natural(value) -> bool:
    """A whole number >= 0 (a seed, a step), and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _space(value, where: str):
    if isinstance(value, list) and value:
        return value
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("log", "range", "per_step"):
        ((kind, bounds),) = value.items()
        if (
            isinstance(bounds, list)
            and len(bounds) == 2
            and all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
            and bounds[0] < bounds[1]
            and (kind == "range" or bounds[0] > 0)
        ):
            return (kind, float(bounds[0]), float(bounds[1]))
    raise SuiteError(
        f"{where}: a space is a non-empty list, {{ log = [lo, hi] }} (0 < lo < hi), {{ range = [lo, hi] }} "
        f"(lo < hi) or {{ per_step = [lo, hi] }} (lr x the setting, log-uniform), got {value!r}"
    )
