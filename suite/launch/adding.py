"""A method added to a committed tuned board (`suite tune --add FILE --against BOARD --root ROOT`),
under the board's own protocol, without rerunning its baselines or touching its files.

The board's tuning.json holds the protocol: N, the seeds, the shared spaces (so the new method gets
the same common points), the race, the base cells' specs (budgets included) and the methods already
on it. The new method is tuned and rerun on those cells under ROOT/tuning and ROOT/final like any
tuned method; ROOT/final also links the board's final runs (read through the links, never copied)
and holds a tuning.json of the board's choices and the new one, so ROOT/board has the new rows
beside the committed ones, with verdicts against their baselines.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

from suite.errors import SuiteError
from suite.launch.grid import Grid
from suite.launch.spaces import Tuning, parse
from suite.results.rundir import result_files
from suite.results.tuning_record import PROTOCOL, record_of
from suite.specs.cell import Cell

RECORD_PLACES = (".", "runs", "final")  # where a board keeps tuning.json: committed boards in runs/


def board_record(board: str | Path) -> tuple[dict, Path]:
    """The board's tuning record and the folder of final runs it sits in; one line if it has none,
    was made at another protocol, or predates recorded base cells."""
    for place in RECORD_PLACES:
        folder = Path(board) / place
        record = record_of(folder)
        if record is not None:
            break
    else:
        raise SuiteError(f"{board} holds no tuning.json (in it, runs/ or final/): --against takes a tuned board")
    made_at = record.get("protocol", 1)
    if made_at != PROTOCOL:
        raise SuiteError(
            f"{board} was run at protocol {made_at} and this suite computes runs as protocol {PROTOCOL}: its "
            "baselines and your method would not be measured alike; add it at the commit its runs name "
            "(git_commit in their result.json), or rerun the board"
        )
    if not isinstance(record.get("cells"), dict) or not record["cells"]:
        raise SuiteError(
            f"{folder / 'tuning.json'} records no base cells (written before `tune --add`): rerun the board"
        )
    return record, folder


def protocol(record: dict, method_file: str | Path, earlier: dict) -> Tuning:
    """The board's protocol, its methods, those added `earlier` into the same root (as tuning.json
    records them) and those of method_file: a TOML file of [tuning.methods.NAME] tables (as in a grid
    file), whose baselines may be the board's methods. A name in the file replaces an earlier one."""
    path = Path(method_file)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise SuiteError(f"cannot read {path}: {err}") from None
    methods = raw.get("tuning", {}).get("methods") if isinstance(raw.get("tuning"), dict) else None
    if set(raw) != {"tuning"} or set(raw["tuning"]) != {"methods"} or not isinstance(methods, dict) or not methods:
        raise SuiteError(f"{path}: a method file holds [tuning.methods.NAME] tables and nothing else")
    if taken := sorted(set(methods) & set(record["methods"])):
        raise SuiteError(f"{path}: '{taken[0]}' is already a method of the board: give yours another name")
    recorded = record["methods"] | earlier
    board = {
        name: {
            **m["fixed"],
            "space": m["space"],
            **_baseline(m),
            **({"recipes": m["recipes"]} if "recipes" in m else {}),
        }
        for name, m in recorded.items()
    }
    raw = {
        **({"rounds": record["rounds"]} if "rounds" in record else {"trials": record["trials"]}),
        **({"version": record["version"]} if "version" in record else {}),
        "tuning_seeds": record["tuning_seeds"],
        "final_seeds": record["final_seeds"],
        "race": record.get("race", False),
        "methods": board | methods,
        **({"shared": record["shared"]} if "shared" in record else {}),
    }
    return parse(raw, str(path), record["grid"])


def earlier_methods(record: dict, final: Path) -> dict:
    """The methods an earlier --add tuned into this root against the same board, as its tuning.json
    records them: they stay on the root's board beside the ones added now (and run on the cells named
    now where they have not run yet)."""
    mine = record_of(final)
    if mine is None or mine.get("grid") != record["grid"]:
        return {}
    return {name: m for name, m in mine["methods"].items() if name not in record["methods"]}


def only_new(whole: Tuning, record: dict) -> Tuning:
    """The protocol with only the methods the board does not have: the ones to run."""
    return dataclasses.replace(whole, methods=[m for m in whole.methods if m.name not in record["methods"]])


def _baseline(method: dict) -> dict:
    return {"baseline": method["baseline"]} if method.get("baseline") else {}


def base_grid(record: dict, cells: list[str], where: str | Path) -> Grid:
    """The board's base cells (those named in `cells`, or all) as a grid of the board's name: each
    cell's name in tuning.json is its experiment, so its runs take the board's labels."""
    known = list(record["cells"])
    if unknown := [name for name in cells if name not in known]:
        raise SuiteError(f"the board has no cell '{unknown[0]}'; its cells: {', '.join(known)}")
    chosen = [name for name in known if not cells or name in cells]
    return Grid(record["grid"], Path(where), [Cell(record["cells"][name], Path(), "", None, name) for name in chosen])


def link_board_runs(board_runs: Path, final: Path) -> None:
    """Each final run of the board, linked into `final` at the same relative place (a run folder already
    there, made by this command or linked before, is left as it is)."""
    for result in result_files(board_runs):
        source = result.parent.resolve()
        link = final / result.parent.relative_to(board_runs)
        if not link.exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(source, link, target_is_directory=True)


def check_root(root: Path, board: Path) -> None:
    root, board = root.resolve(), Path(board).resolve()
    if root == board or board in root.parents or root in board.parents:
        raise SuiteError(f"--root {root} overlaps the board {board}: give a folder of your own, outside it")
