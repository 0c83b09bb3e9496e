"""Running many cells: the bookkeeping around train(), manifests and chunks (the local backend
that runs them on this machine: suite/launch/local.py).

Cells that differ only in their seed and their task's, optimizer's and filter's settings form a
group (at most `stack` cells, the grid command's --stack), which one call of the loop trains as one
stack (suite/engine/plan.py): the same computation as separate runs.
A grid submission writes a manifest into ROOT/grids/<grid>/<stamp>/: the cells still to run
(each with its spec and run folder) and the chunks, each a list of groups of about
cells_per_task cells (a group is never split). `python -m suite chunk MANIFEST I` runs chunk
I, group after group, skipping finished cells. The local backend starts one such process per
chunk, N at a time, each with one torch thread (suite/launch/local.py); a Slurm array task is one chunk
(suite/launch/slurm.py). Results never go through the manifest: each cell writes its own run folder.
A manifest written before a key was renamed ("ensemble", now "stack"; "n_tasks", now "n_chunks")
reads as one written now (read_manifest).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

from suite.errors import FAULTS, SuiteError, missing_extra
from suite.launch.grid import Grid
from suite.results.rundir import RunDir, RunLocked, cannot_write, read_json, writable_dir, write_json
from suite.specs.cell import Cell
from suite.specs.spec import default_run_dir, refuse_loaded_code, shared

FULL = 4  # a chunk's exit code when the machine failed it (a full disk): every cell after would meet it too
TO_RUN = ("failed", "interrupted", "missing")  # what a (re-)submitted grid runs; done and running are left alone
# The local backend's worker processes share the cores: one torch thread each, and OpenMP threads
# that sleep while they wait, so that no worker spins on a core another one needs.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


@dataclass(frozen=True)
class RunOptions:
    """How a launcher's cells run, whichever launcher: the device, W&B's mode, the most cells one
    stack trains, and whether the step's forward is compiled. A submission's manifest records them."""

    device: str = "auto"
    wandb: str = "off"
    stack: int = 8
    compile: bool = False

    @classmethod
    def of(cls, args) -> RunOptions:
        """The grid and tune commands' flags."""
        return cls(args.device, args.wandb, args.stack, args.compile)

    @classmethod
    def read(cls, manifest: dict) -> RunOptions:
        return cls(manifest["device"], manifest["wandb"], manifest["stack"], manifest.get("compile", False))


def execute(
    cells: list[Cell], device, *, compile: bool = False, wandb: str = "off", rerun_changed: bool = False
) -> list[dict]:
    """Train the cells whose run folders have not finished (those that have are said so on stderr)
    and return their results: the one entry point of every command that runs cells. A run folder
    made by other code of a component (suite/specs/code.py) is refused, or with rerun_changed
    emptied and run again. A crash leaves error.json (status 'failed') in each unfinished run
    folder, a finished run clears it, and the W&B runs are closed whatever happens. A task that
    trains nothing (the number probes) runs its registered runner, cell after cell, instead of the
    training loop."""
    from suite.engine.train import Preempted, train
    from suite.specs.spec import runner_of_task

    cells = _to_run(cells, wandb, rerun_changed)
    if not cells:
        return []
    dirs = [RunDir(c.run_dir) for c in cells]
    live = [c.tracker for c in cells if c.tracker is not None]  # train() starts them once the cells build
    runner = runner_of_task(cells[0].spec["task"]["name"])
    try:
        if runner:
            results = []
            for cell in cells:
                results.append(runner.build(cell.spec, cell.run_dir, device))
                if cell.tracker is not None:  # the runner's result, sent once it is written
                    cell.tracker.finish(results[-1])
        else:
            results = train(cells, device, compile)
    except Preempted:
        for tracker in live:
            tracker.close(3)
        raise
    except SuiteError:  # bad input or another process on it: nothing to record here
        for tracker in live:
            tracker.close(1)
        raise
    except Exception as err:
        missing = missing_extra(err) if isinstance(err, ModuleNotFoundError) else None
        for rd in dirs:
            if not rd.finished and missing is None:  # an extra not installed is bad input, not a failed run
                rd.record_failure(err)
        for tracker in live:
            tracker.close(1)
        if missing is not None:
            raise missing from None
        raise
    for rd in dirs:
        rd.clear_failure()
    for tracker in live:
        tracker.close(0)  # no-op unless train() found the cell finished by another process
    return results


def _to_run(cells: list[Cell], wandb: str, rerun_changed: bool) -> list[Cell]:
    """The cells still to run, each with its tracker: those made by other code refused (or emptied
    with rerun_changed), the finished ones said so, one another process runs refused."""
    from suite.launch.tracking import make_tracker

    for cell, why in changed_code(cells):
        if not rerun_changed:
            raise SuiteError(f"{cell.run_dir} {made_by_other_code(why)}")
        RunDir(cell.run_dir).discard()
    for cell in cells:
        if RunDir(cell.run_dir).finished:
            print(f"already finished: {cell.name}", file=sys.stderr)
    cells = [c for c in cells if not RunDir(c.run_dir).finished]
    for cell in cells:  # before W&B starts: a second process must not write into the owner's W&B run
        if RunDir(cell.run_dir).is_locked():
            raise RunLocked(f"another process is running this spec in {cell.run_dir}")
    return [c if c.tracker is not None else replace(c, tracker=make_tracker(wandb, c)) for c in cells]


def statuses(cells: list[Cell], held: set[Path] = frozenset()) -> list[str]:
    """Each cell's run folder status; "queued" where the folder is in `held` (an array task Slurm
    still holds will run it, suite.launch.slurm.queued) and is neither done nor running."""
    found = [RunDir(cell.run_dir).status() for cell in cells]
    return [
        s if s in ("done", "running") or Path(c.run_dir).resolve() not in held else "queued"
        for c, s in zip(cells, found)
    ]


def changed_code(cells: list[Cell]) -> list[tuple[Cell, str]]:
    """The cells whose run folders (finished or checkpointed) were made by other code of a component,
    each with the component that changed (suite.specs.code.changed)."""
    from suite.specs.code import changed

    found = [(c, changed(RunDir(c.run_dir).read_code(), c.spec)) for c in cells]
    return [(c, why) for c, why in found if why]


def made_by_other_code(why: str) -> str:
    """What to say of a run folder made by other code: which component changed, and what to do."""
    return f"was made by other code of {why}: rerun it with --rerun-changed, or choose another --root (or --out)"


# --- manifests and chunks -------------------------------------------------------------------------


def new_submission_dir(root: str | Path, grid_name: str) -> Path:
    """A folder of its own for a submission (a local tune adds a submission each time a round is drawn)."""
    return stamped_dir(Path(root) / "grids" / grid_name)


def stamped_dir(parent: Path) -> Path:
    """A new folder under parent named by the time and this process, and a number where this process
    made one in the same second; with its logs folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    path = first = writable_dir(parent.resolve()) / stamp
    n = 1
    while True:  # made here, not found free: two nodes' processes of one pid in one second get a folder each
        try:
            path.mkdir()
            break
        except FileExistsError:
            n += 1
            path = first.with_name(f"{stamp}-{n}")
        except OSError as err:
            raise cannot_write(path, err) from None
    writable_dir(path / "logs")
    return path


def groups(cells: list[Cell], stack: int) -> list[list[int]]:
    """Indices of the cells that differ only in their seed and their task's, optimizer's and
    filter's settings (suite.specs.spec.shared), in grid order, at most `stack` per group: each group
    trains as one stack (or as several, when the settings change a tensor's size)."""
    by_rest: dict[str, list[int]] = {}
    for i, cell in enumerate(cells):
        rest = json.dumps(shared(cell.spec), sort_keys=True)
        by_rest.setdefault(rest, []).append(i)
    return [group[j : j + stack] for group in by_rest.values() for j in range(0, len(group), stack)]


def plan_chunks(cells: list[Cell], cells_per_task: int, stack: int) -> list[list[list[int]]]:
    """Chunks (one per process or array task) of whole groups, each of at least
    cells_per_task cells where the groups allow it."""
    chunks: list[list[list[int]]] = []
    for group in groups(cells, stack):
        if not chunks or sum(map(len, chunks[-1])) >= cells_per_task:
            chunks.append([])
        chunks[-1].append(group)
    return chunks


def write_manifest(
    workdir: Path, grid: Grid, cells: list[Cell], root: str | Path, options: RunOptions, cells_per_task: int
) -> Path:
    root = Path(root).resolve()
    chunks = plan_chunks(cells, cells_per_task, options.stack)
    manifest = {
        "grid": grid.name,
        "source": str(grid.path.resolve()),
        "root": str(root),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": options.device,
        "wandb": options.wandb,
        "compile": options.compile,
        "cells_per_task": cells_per_task,
        "stack": options.stack,
        "n_chunks": len(chunks),
        "chunks": chunks,
        "cells": [c.to_json() | {"run_dir": str(c.run_dir.resolve())} for c in cells],  # read from any folder
    }
    write_json(workdir / "manifest.json", manifest)
    return workdir / "manifest.json"


OLD_KEYS = {"ensemble": "stack", "n_tasks": "n_chunks"}  # a manifest's keys before they were renamed


def read_manifest(path: str | Path) -> dict:
    """A manifest, its keys under their names now: one written before a rename reads as one
    written now (a key under its new name wins over its old one)."""
    manifest = read_json(path)
    if not isinstance(manifest, dict):
        raise ValueError("not a JSON object")
    return {OLD_KEYS.get(k, k): v for k, v in manifest.items() if OLD_KEYS.get(k) not in manifest}


_stop_requested: list[str] = []


def catch_stop_signals() -> None:
    """Remember a USR1/TERM that arrives before the training loop takes over the signals (torch
    is still importing, or between cells) instead of dying of it: the chunk then stops, exit 3."""

    def remember(signum, frame):
        _stop_requested.append(signal.Signals(signum).name)

    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, remember)


def run_chunk(manifest_path: str | Path, index: int) -> int:
    """Run chunk `index` of a manifest. Exit code: 0 all done, 1 a cell failed, 3 preempted, FULL
    the disk is full (said in one last line naming the file)."""
    catch_stop_signals()
    from suite.engine.train import resolve_device

    try:
        manifest = read_manifest(manifest_path)
    except (FileNotFoundError, ValueError) as err:
        raise SuiteError(f"cannot read manifest {manifest_path}: {err}") from None
    if not 0 <= index < manifest["n_chunks"]:
        raise SuiteError(f"{manifest_path} has chunks 0..{manifest['n_chunks'] - 1}, not {index}")
    options = RunOptions.read(manifest)
    device = resolve_device(options.device)
    chunk = [
        [Cell.from_json({"grid": manifest["grid"]} | manifest["cells"][i]) for i in g]
        for g in manifest["chunks"][index]
    ]
    _refuse_stray([c for cells in chunk for c in cells], Path(manifest["root"]), Path(manifest_path))
    failed = 0
    for cells in chunk:
        pending = [c for c in cells if not RunDir(c.run_dir).finished]
        if pending and _stop_requested:
            print(f"stopped by {_stop_requested[0]} before {pending[0].run_dir}", file=sys.stderr)
            return 3
        code = _run_group(options, cells, pending, device)
        if code in (3, FULL):  # preempted: the rest runs when the array task is requeued; a full disk: nothing would
            return code
        failed += code
    return 1 if failed else 0


def _refuse_stray(cells: list[Cell], root: Path, path: Path) -> None:
    """What a grid never writes but a manifest made by hand (or moved) might, refused in one line: a
    manifest outside its root's grids/<grid>/<stamp>/, a cell whose run folder is not the one its spec
    has under that root (a chunk writes nowhere else), a spec that would run a model folder's code."""
    if path.resolve().parent.parent.parent != (root / "grids").resolve():
        raise SuiteError(f"{path} is not in {root / 'grids'}/<grid>/<stamp>/, where its root's manifests are")
    for cell in cells:
        if cell.run_dir != default_run_dir(cell.spec, root):
            raise SuiteError(f"{path}: {cell.run_dir} is not the run folder of its spec under {root}")
        refuse_loaded_code(cell.spec, f"{path}: {cell.run_dir}")


def _run_group(options: RunOptions, cells: list[Cell], pending: list[Cell], device) -> int:
    """One group of a chunk, its progress said on stderr: 3 preempted, FULL the disk is full,
    else 1 if its cells failed, 0 if not."""
    from suite.engine.train import Preempted

    names = "\n  ".join(c.name for c in pending)
    if pending:
        many = f"running {len(pending)} cells as one group:\n  {names}"
        print(f"running {names}" if len(pending) == 1 else many, file=sys.stderr, flush=True)
    try:
        execute(cells, device, compile=options.compile, wandb=options.wandb)
    except Preempted as stop:
        print(f"stopped: {stop}", file=sys.stderr)
        return 3
    except RunLocked as err:
        print(f"skipped: {err}", file=sys.stderr)
    except SuiteError as err:  # bad input found only when building (e.g. a model that cannot read the task)
        for cell in pending:
            RunDir(cell.run_dir).record_failure(err)
        print(f"failed: {names}: {err}", file=sys.stderr)
        return 1
    except Exception as err:
        if isinstance(err, OSError) and err.errno in FAULTS:  # not the cells' failure: every cell after would meet it
            print(f"error: {err.filename}: {err.strerror}", file=sys.stderr)
            return FULL
        print(f"failed: {names}:\n{traceback.format_exc()}", file=sys.stderr)
        return 1
    if pending:
        print(f"finished {names}", file=sys.stderr, flush=True)
    return 0
