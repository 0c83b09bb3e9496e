"""tuning.json, beside a tuned grid's final runs: the tuning's record (suite/launch/tuning.py has the
protocol), which `suite tune` writes and the leaderboard's tuning.md reads. Strict JSON: a time to
target never reached is null (older records hold Infinity, which is read too)."""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import sys
from pathlib import Path

from suite.results.rundir import UnreadableFile, read_json, write_json
from suite.specs.cell import GRID_NAME
from suite.specs.code import COMPUTATION


def write_record(path: Path, protocol: dict, chosen: list[dict], cells: dict[str, dict], adding: bool = False) -> None:
    """tuning.json beside the final runs: the protocol (suite.launch.spaces.Tuning.to_record: what the
    leaderboard shows of the tuning), the choices, and the base cells' specs by name (what a method added
    later runs on). The choices and cells of another experiment tuned into the same root are kept when
    the protocol is the same; `adding` (`tune --add`): also those of methods another add wrote
    meanwhile. Read, merged and written under a lock on the folder, so that two commands writing at
    once both stay in the record."""
    record = {"grid": protocol["grid"], "protocol": COMPUTATION} | protocol
    with _only_writer(path.parent):
        old = record_of(path.parent)
        new_keys = {(c["cell"], c["method"]) for c in chosen}
        if old is not None and (
            _same_protocol(old, record) if adding else all(old.get(k) == v for k, v in record.items())
        ):
            record["methods"] = old["methods"] | record["methods"]  # the same, unless another add wrote some
            chosen = [c for c in old["chosen"] if (c["cell"], c["method"]) not in new_keys] + chosen
            cells = old.get("cells", {}) | cells
        elif old is not None and (dropped := {(c["cell"], c["method"]) for c in old["chosen"]} - new_keys):
            print(
                f"note: {path} held choices under another protocol (the [tuning] table or a method changed): "
                f"{', '.join(f'{m} in {c}' for c, m in sorted(dropped))} dropped; tune them again to put them back",
                file=sys.stderr,
            )
        write_json(path, record | {"cells": cells, "chosen": [_strict(c) for c in chosen]})


def _same_protocol(old: dict, record: dict) -> bool:
    """Two records of one protocol, whose methods of one name are the same method."""
    shared = set(old["methods"]) & set(record["methods"])
    return all(old.get(k) == v for k, v in record.items() if k != "methods") and all(
        old["methods"][name] == record["methods"][name] for name in shared
    )


@contextlib.contextmanager
def _only_writer(folder: Path):
    """An exclusive lock on the folder itself (no file of its own in it), held while the record is
    read, merged and written."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _strict(choice: dict) -> dict:
    """A choice as strict JSON (jq and most readers refuse an Infinity literal): a time to target
    never reached is null, as a step never reached is in result.json; record_of reads it back as inf."""
    finite = lambda t: None if t is None or math.isinf(t) else t  # noqa: E731
    tried = [
        t | {"times": [finite(x) for x in t["times"]], "median_time": finite(t["median_time"])} for t in choice["tried"]
    ]
    return choice | {"tried": tried}


def record_of(root: Path) -> dict | None:
    """ROOT/tuning.json (None if there is none), its times to target as floats (inf: never reached;
    older records wrote it as Infinity). UnreadableFile (one line) if it is damaged or not a record."""
    path = Path(root) / "tuning.json"
    if not path.exists():
        return None
    record = read_json(path)
    if not _is_record(record):
        raise UnreadableFile(f"{path} is not a tuning record of this suite; delete it and run `suite tune` again")
    inf = lambda t: math.inf if t is None else float(t)  # noqa: E731
    for choice in record["chosen"]:
        for t in choice["tried"]:
            t["times"], t["median_time"] = [inf(x) for x in t["times"]], inf(t["median_time"])
    return record


def reached(choice: dict) -> bool:
    """Did a choice's chosen trial reach the target on any tuning seed? Where none did, the search failed
    and the tie-break picked its point by best val accuracy: its final runs could give no verdict, and
    are skipped (earlier versions of `suite tune` ran them, and the boards they wrote hold them: a board
    reads them, and gives no verdict either)."""
    chosen = next(t for t in choice["tried"] if t["point"] == choice["chosen"])
    return any(math.isfinite(time) for time in chosen["times"])


def _is_record(record) -> bool:
    """Does tuning.json hold what `write_record` writes, with every field its readers use?"""
    fields = dict(grid=str, trials=int, tuning_seeds=list, final_seeds=list, methods=dict, chosen=list)
    if not _fields(record, **fields) or not isinstance(record.get("rounds", []), list):
        return False
    if not GRID_NAME.fullmatch(record["grid"]):  # it names the folder of a submission's manifests and logs
        return False
    cells = record.get("cells", {})
    if not isinstance(cells, dict) or not all(map(_base_cell, cells.values())):
        return False
    for method in record["methods"].values():
        if not (
            _fields(method, fixed=dict, space=dict, recipes=(list, type(None)))
            and method.get("baseline") in (None, *record["methods"])
        ):
            return False
        if any(isinstance(v, dict) for v in method["fixed"].values()) or not all(
            map(_space_ok, method["space"].values())
        ):
            return False
    for choice in record["chosen"]:
        if not (
            _fields(choice, cell=str, method=str, chosen=int, settings=dict, tried=list, final_runs=(list, type(None)))
            and choice["method"] in record["methods"]
            and all(isinstance(r, str) for r in choice.get("final_runs") or [])
        ):
            return False
        tried = choice["tried"]
        if not all(_fields(t, point=int, settings=dict, times=list, median_best_val=(int, float)) for t in tried):
            return False
        if not all(_time(x) for t in tried for x in [*t["times"], t.get("median_time", "missing")]):
            return False
        if not any(t["point"] == choice["chosen"] for t in tried):
            return False
    return True


def _base_cell(spec) -> bool:
    """A base cell's spec, as far as a method added later reads it (spec_for)."""
    named = all(_fields(spec, **{kind: dict}) and isinstance(spec[kind].get("name"), str) for kind in ("task", "model"))
    return named and _fields(spec, train=dict)


def _time(value) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _fields(obj, **types) -> bool:
    return isinstance(obj, dict) and all(isinstance(obj.get(k), t) for k, t in types.items())


def _space_ok(value) -> bool:
    if isinstance(value, dict):
        bounds = next(iter(value.values()), None) if len(value) == 1 else None
        return isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds)
    return isinstance(value, list)
