"""Grid files: many cells from one TOML file, expanded in a fixed order, each a full run spec.

    name = "paper"                       # default: the file's stem
    [fixed]                              # every cell: component names and settings
    task = "modular"
    "train.steps" = 20000
    [axes]                               # the cartesian product of these lists, first key outermost
    seed = [0, 1, 2]
    opt = ["adam", "adamlr"]
    op = ["add", "mul"]                  # any --set key: bare, or kind.key ("opt.lr")
    [overrides."opt=adamlr"]             # only for the cells where opt is adamlr
    "opt.lr" = 1e-2                      #   a setting for those cells
    axes = { c = [4, 10] }               #   and an extra axis for them alone

    [[experiment]]                       # optional: several blocks, each with its own name,
    name = "sampling"                    # fixed, axes and overrides on top of the file's
    axes = { batch_size = [64, 512] }

    [slurm]                              # defaults for `grid --backend slurm` (flags win)
    partition = "gpu"
    sbatch = ["--constraint=a100"]

Keys of fixed / axes / overrides are the component kinds (task, model, opt, sampler,
filter), seed (or seeds) and any setting a chosen component takes. A fixed value is one value
(a list only for a tuple setting); an axis is always a list. Every cell is resolved by
suite.specs.spec.resolve, so an unknown name or value fails before anything runs, and its id is
suite.specs.spec.spec_id (a hash of the spec). Cells with the same spec appear once.
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.errors import SuiteError
from suite.specs.cell import GRID_NAME, Cell
from suite.specs.registry import _closest
from suite.specs.spec import DEFAULTS, default_run_dir, refuse_loaded_code, resolve

KINDS = tuple(DEFAULTS)  # task, model, opt, sampler, filter
MAX_CELLS = 100_000  # past this a grid file is a slip (an axis too many), and building its cells alone takes hours
TOP_KEYS = ("name", "description", "fixed", "axes", "overrides", "experiment", "slurm", "tuning")
BLOCK_KEYS = ("name", "description", "fixed", "axes", "overrides")
SLURM_KEYS = (
    "partition",
    "time",
    "gpus",
    "cpus",
    "mem",
    "account",
    "max_parallel",
    "cells_per_task",
    "signal_seconds",
    "max_requeues",
    "sbatch",
    "setup",
)


@dataclass
class Grid:
    name: str
    path: Path
    cells: list[Cell]  # each with its run folder under the root the grid was loaded for
    slurm: dict[str, Any] = field(default_factory=dict)
    tuning: dict | None = None  # a [tuning] table: its cells are tuned and rerun (suite/launch/tuning.py, `suite tune`)

    def only(self, experiments: list[str]) -> Grid:
        """The same grid with only the cells of these experiments (all of them when none are named)."""
        known = list(dict.fromkeys(c.experiment for c in self.cells))
        for name in experiments:
            if name not in known:
                raise SuiteError(
                    f"{self.path} has no experiment '{name}'{_closest(name, known)}; known: {', '.join(known)}"
                )
        if not experiments:
            return self
        cells = [c for c in self.cells if c.experiment in experiments]
        return Grid(self.name, self.path, cells, self.slurm, self.tuning)

    def under(self, root: str | Path) -> Grid:
        """The same grid with its cells' run folders under another root."""
        return Grid(self.name, self.path, [c.under(root) for c in self.cells], self.slurm, self.tuning)


SHIPPED = Path(__file__).resolve().parents[1] / "grids"  # suite/grids/*.toml, also inside an installed wheel


def load(path: str | Path, root: str | Path = "runs") -> Grid:
    """Read, check and expand a grid file: a path, or the name of a shipped grid ('quick' or
    'quick.toml' for suite/grids/quick.toml, from any directory), its cells' run folders under
    root. Raises SuiteError (one line) on any bad input."""
    path = Path(path)
    shipped = SHIPPED / (path.name if path.suffix == ".toml" else f"{path.name}.toml")
    if not path.exists() and (len(path.parts) == 1 or path.parts[:-1] == ("suite", "grids")) and shipped.exists():
        path = shipped
    if path.is_dir():
        raise SuiteError(f"{path} is a folder, not a grid file")
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        names = ", ".join(sorted(p.stem for p in SHIPPED.glob("*.toml")))
        raise SuiteError(f"grid file {path} does not exist (shipped grids, by name: {names})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise SuiteError(f"{path}: not a valid TOML file: {err}") from None
    where = str(path)
    _check_keys(raw, TOP_KEYS, where)
    if not raw:
        raise SuiteError(f"{where}: the file is empty; a grid names its cells with [fixed] and [axes] tables")
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not GRID_NAME.fullmatch(name):
        raise SuiteError(
            f"{where}: name must be 1-100 letters, digits, '.', '_' or '-', starting with a letter or "
            f"digit (it names a folder under runs/grids/), got {name!r}"
        )
    slurm = _table(raw, "slurm", where)
    _check_keys(slurm, SLURM_KEYS, f"{where} [slurm]")

    cells = _cells(raw, name, where, root)
    tuning = raw.get("tuning")
    if tuning is not None and not isinstance(tuning, dict):
        raise SuiteError(f"{where}: 'tuning' must be a table")
    return Grid(name, path, cells, slurm, tuning)


def _cells(raw: dict, name: str, where: str, root: str | Path) -> list[Cell]:
    """Every cell of the file: each [[experiment]] block (or the file alone) expanded on top of the
    file's fixed, axes and overrides; a spec appears once."""
    experiments = raw.get("experiment", [{}])
    if not isinstance(experiments, list) or not all(isinstance(e, dict) for e in experiments):
        raise SuiteError(f"{where}: experiment must be an array of tables ([[experiment]])")
    top = {
        "fixed": _settings(_table(raw, "fixed", where), f"{where} [fixed]"),
        "axes": _axes(_table(raw, "axes", where), f"{where} [axes]"),
        "overrides": _overrides(_table(raw, "overrides", where), f"{where} [overrides]"),
    }
    _check_disjoint(top["fixed"], top["axes"], where)
    _check_size(raw, experiments, top, where)
    cells, seen, used = [], set(), set()
    for i, block in enumerate(experiments):
        block_where = f"{where} experiment {block.get('name', i)!r}" if "experiment" in raw else where
        if "name" in block and not (isinstance(block["name"], str) and block["name"].strip()):
            raise SuiteError(
                f"{block_where}: an experiment's name is text (--experiment NAME picks it), got {block['name']!r}"
            )
        _check_keys(block, BLOCK_KEYS, block_where)
        own_fixed = _settings(_table(block, "fixed", block_where), f"{block_where} fixed")
        own_axes = _axes(_table(block, "axes", block_where), f"{block_where} axes")
        _check_disjoint(own_fixed, own_axes, block_where)
        # the block's own keys win over the file's, whether they are fixed there or an axis
        fixed = {k: v for k, v in top["fixed"].items() if k not in own_axes} | own_fixed
        axes = {k: v for k, v in top["axes"].items() if k not in own_fixed} | own_axes
        own = _overrides(_table(block, "overrides", block_where), f"{block_where} overrides")
        origin = {"root": root, "grid": name, "experiment": block.get("name", name)}
        for cell in _expand(fixed, axes, top["overrides"] + own, used, origin, block_where):
            if cell.id not in seen:
                seen.add(cell.id)
                cells.append(cell)
        _check_used(own, used, fixed, axes, block_where)
    _check_used(top["overrides"], used, top["fixed"], top["axes"], where)
    if not cells:
        raise SuiteError(f"{where}: the grid has no cells (an axis with an empty list?)")
    return cells


def _check_size(raw: dict, experiments: list, top: dict, where: str) -> None:
    """Refuse a grid of more than MAX_CELLS cells, counted from its axes before one is built (an
    override's axes counted as if it matched every cell: a bound, not the count)."""
    total = 0
    for block in experiments:
        own_fixed = _settings(_table(block, "fixed", where), f"{where} fixed")
        own_axes = _axes(_table(block, "axes", where), f"{where} axes")
        axes = {k: v for k, v in top["axes"].items() if k not in own_fixed} | own_axes
        overrides = top["overrides"] + _overrides(_table(block, "overrides", where), f"{where} overrides")
        sizes = [len(v) for v in axes.values()] + [len(v) for o in overrides for v in o[3].values()]
        total += math.prod(sizes)
    if total > MAX_CELLS:
        raise SuiteError(
            f"{where}: its axes make up to {total:,} cells, more than the {MAX_CELLS:,} a grid file may name; "
            "split it into several grid files"
        )


def check_builds(cells: list[Cell]) -> None:
    """Build one cell of each group that differs only in its seed (data, model, batches,
    optimizer, filter, on the CPU), so that a grid whose cells cannot be built (a batch larger than
    a cell's training set) stops here with one line, before anything runs or is submitted."""
    import torch

    from suite.engine.build import build
    from suite.specs.spec import runner_of_task, task_data

    seen, datas = set(), {}
    for cell in cells:
        spec = cell.spec
        key = json.dumps({k: v for k, v in spec.items() if k != "seed"}, sort_keys=True)
        if key in seen or runner_of_task(spec["task"]["name"]) is not None:
            continue
        seen.add(key)
        data_key = json.dumps([spec["task"], spec["seed"]], sort_keys=True)  # cells that share data build it once
        try:
            if data_key not in datas:
                datas[data_key] = task_data(spec)[0]
            build(spec, torch.device("cpu"), datas[data_key])
        except SuiteError as err:
            raise SuiteError(f"cell [{cell.label or 'fixed'}] cannot be built: {err}") from None


def _check_disjoint(fixed: dict, axes: dict, where: str) -> None:
    both = [k for k in fixed if k in axes]
    if both:
        raise SuiteError(f"{where}: '{both[0]}' is both fixed and an axis")


def _expand(fixed: dict, axes: dict, overrides: list, used: set, origin: dict, where: str) -> list[Cell]:
    """The product of the axes (first key outermost), then each matching override's axes."""
    keys = list(axes)
    cells = []
    for values in itertools.product(*(axes[k] for k in keys)):
        assignment = fixed | dict(zip(keys, values))
        extra_fixed, extra_axes = {}, {}
        for override in overrides:
            key, value, o_fixed, o_axes = override
            if key in assignment and _same(assignment[key], value):
                used.add(id(override))
                extra_fixed |= o_fixed
                extra_axes |= o_axes
        for extra in itertools.product(*extra_axes.values()):
            cell_axes = dict(zip(keys, values)) | dict(zip(extra_axes, extra))
            cells.append(_cell(assignment | extra_fixed | cell_axes, cell_axes, origin, where))
    return cells


def _check_used(overrides: list, used: set, fixed: dict, axes: dict, where: str) -> None:
    """An override that applies to no cell is a typo (a wrong key or value): say which."""
    for override in overrides:
        key, value = override[:2]
        if id(override) in used:
            continue
        if key not in fixed and key not in axes:
            raise SuiteError(f"{where}: override '{key}={value}': '{key}' is neither fixed nor an axis")
        values = axes.get(key, [fixed.get(key)])
        raise SuiteError(
            f"{where}: override '{key}={value}' matches no cell ({key} takes {', '.join(map(str, values))})"
        )


def _cell(assignment: dict, cell_axes: dict, origin: dict, where: str) -> Cell:
    choices = {k: v for k, v in assignment.items() if k in KINDS}
    settings = {k: v for k, v in assignment.items() if k not in KINDS and k != "seed"}
    label = " ".join(f"{k}={v}" for k, v in cell_axes.items())
    for kind, value in choices.items():
        if not isinstance(value, str):
            raise SuiteError(f"{where}: {kind} takes a component name, got {value!r}")
    try:
        spec = resolve(choices, settings, assignment.get("seed", 0))
    except SuiteError as err:
        raise SuiteError(f"{where}: cell [{label or 'fixed'}]: {str(err).removeprefix('--set ')}") from None
    refuse_loaded_code(spec, f"{where}: cell [{label or 'fixed'}]")
    return Cell(spec, default_run_dir(spec, origin["root"]), label, origin["grid"], origin["experiment"])


# --- reading the tables --------------------------------------------------------------------------


def _check_keys(table: dict, known: tuple, where: str) -> None:
    for key in table:
        if key not in known:
            raise SuiteError(f"{where}: unknown key '{key}'{_closest(key, known)}; known: {', '.join(known)}")


def _table(raw: dict, key: str, where: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise SuiteError(f"{where}: '{key}' must be a table, got {type(value).__name__}")
    return value


def _key(key: str) -> str:
    return "seed" if key == "seeds" else key


def _settings(table: dict, where: str) -> dict:
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            raise SuiteError(f"{where}: '{key}' must be a value, got a table")
        out[_key(key)] = value
    return out


def _axes(table: dict, where: str) -> dict:
    out = {}
    for key, values in table.items():
        if not isinstance(values, list):
            raise SuiteError(f"{where}: axis '{key}' must be a list of values, got {values!r}")
        if not values:
            raise SuiteError(f"{where}: axis '{key}' is an empty list")
        out[_key(key)] = values
    return out


def _overrides(table: dict, where: str) -> list:
    """`"key=value" = {settings..., axes = {...}}` -> [(key, value, fixed, axes)] in file order."""
    out = []
    for selector, body in table.items():
        key, sep, value = selector.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SuiteError(f"{where}: '{selector}' must read KEY=VALUE, e.g. \"opt=adamlr\"")
        if not isinstance(body, dict):
            raise SuiteError(f'{where}."{selector}" must be a table')
        body = dict(body)
        axes = _axes(_table(body, "axes", where), f'{where}."{selector}".axes')
        body.pop("axes", None)
        out.append((_key(key.strip()), value.strip(), _settings(body, f'{where}."{selector}"'), axes))
    return out


def _same(value: Any, text: str) -> bool:
    """Does an axis value match the text of an override selector (e.g. 512 and "512", 1e-3 and "0.001")?"""
    if isinstance(value, bool):
        return str(value).lower() == text.lower()
    if isinstance(value, (int, float)):
        try:
            return float(value) == float(text)
        except ValueError:
            return False
    return str(value) == text
