"""Running many cells: the bookkeeping around train(), manifests and chunks (the local backend
that runs them on this machine: suite/local.py).

Cells that differ only in their seed form a seed group, trained as one ensemble (at most
`ensemble` members; suite/ensemble.py), which is the same computation as separate runs.
A grid submission writes a manifest into ROOT/grids/<grid>/<stamp>/: the cells still to run
(each with its spec and run dir) and the chunks, each a list of seed groups of about
cells_per_task cells (a group is never split). `python -m suite chunk MANIFEST I` runs chunk
I, group after group, skipping finished cells. The local backend starts one such process per
chunk, N at a time, each with one torch thread (suite/local.py); a Slurm array task is one chunk
(suite/slurm.py). Results never go through the manifest: each cell writes its own run dir.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from suite.errors import FAULTS, SuiteError, missing_extra
from suite.grid import Cell, Grid
from suite.rundir import RunDir, RunLocked, read_json, writable_dir, write_json
from suite.spec import shared

FULL = 4  # a chunk's exit code when the machine failed it (a full disk): every cell after would meet it too
TO_RUN = ("failed", "interrupted", "missing")  # what a (re-)submitted grid runs; done and running are left alone
# The local backend's worker processes share the cores: one torch thread each, and OpenMP threads
# that sleep while they wait (busy-waiting beside other runs made small steps 7-14x slower).
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def run_cells(
    specs: list[dict], run_dirs: list[Path], device, trackers=None, compile=False, origins=None
) -> list[dict]:
    """train() plus what every entry point needs: a crash leaves error.json (status 'failed')
    in each unfinished run dir, a finished run clears it, and the W&B runs are closed whatever
    happens. A task that trains nothing (the number probes) runs its registered runner,
    spec after spec, instead of the training loop. trackers, origins: per spec, or None."""
    from suite.spec import runner_of_task
    from suite.train import Preempted, train

    trackers = trackers or [None] * len(specs)
    runner = runner_of_task(specs[0]["task"]["name"])
    dirs = [RunDir(d) for d in run_dirs]
    for rd in dirs:  # before W&B starts: a second process must not write into the owner's W&B run
        if rd.is_locked():
            raise RunLocked(f"another process is running this spec in {rd.path}")
    live = [t for t in trackers if t is not None]  # train() starts them once the specs are known to build
    try:
        if runner:
            results = []
            for spec, rd, tracker in zip(specs, dirs, trackers):
                results.append(runner.build(spec, rd.path, device))
                if tracker is not None:  # the runner's result, sent once it is written
                    tracker.finish(results[-1])
        else:
            results = train(specs, [rd.path for rd in dirs], device, trackers, compile, origins)
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


def run_pending(
    specs: list[dict],
    run_dirs: list[Path],
    names: list[str],
    device,
    compile: bool,
    tracker_of=lambda i: None,
    origins: list[dict] | None = None,
) -> list[dict]:
    """run_cells over the specs whose run dirs have not finished (those that have are said so, by
    name, on stderr); tracker_of(i) makes spec i's tracker; origins[i] is the grid and experiment
    spec i's result records. Returns the new results."""
    todo = [i for i, run_dir in enumerate(run_dirs) if not RunDir(run_dir).finished]
    for i in sorted(set(range(len(specs))) - set(todo)):
        print(f"already finished: {names[i]}", file=sys.stderr)
    if not todo:
        return []
    pick = lambda items: [items[i] for i in todo]  # noqa: E731
    trackers = [tracker_of(i) for i in todo]
    return run_cells(pick(specs), pick(run_dirs), device, trackers, compile, pick(origins or [{}] * len(specs)))


def statuses(cells: list[Cell], root: str | Path) -> list[str]:
    return [RunDir(cell.run_dir(root)).status() for cell in cells]


# --- manifests and chunks -------------------------------------------------------------------------


def new_submission_dir(root: str | Path, grid_name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    path = Path(root).resolve() / "grids" / grid_name / stamp
    writable_dir(path / "logs")
    return path


def seed_groups(cells: list[Cell], ensemble: int) -> list[list[int]]:
    """Indices of the cells that differ only in their seed and their task's, optimizer's and
    filter's settings (suite.spec.shared), in grid order, at most `ensemble` per group: each group
    trains as one stack (or in parts of equal shapes, when the settings change a tensor's size)."""
    by_rest: dict[str, list[int]] = {}
    for i, cell in enumerate(cells):
        rest = json.dumps(shared(cell.spec), sort_keys=True)
        by_rest.setdefault(rest, []).append(i)
    return [group[j : j + ensemble] for group in by_rest.values() for j in range(0, len(group), ensemble)]


def plan_chunks(cells: list[Cell], cells_per_task: int, ensemble: int) -> list[list[list[int]]]:
    """Chunks (one per process or array task) of whole seed groups, each of at least
    cells_per_task cells where the groups allow it."""
    if ensemble < 1:
        raise SuiteError(f"--ensemble must be at least 1, got {ensemble}")
    chunks: list[list[list[int]]] = []
    for group in seed_groups(cells, ensemble):
        if not chunks or sum(map(len, chunks[-1])) >= cells_per_task:
            chunks.append([])
        chunks[-1].append(group)
    return chunks


def write_manifest(
    workdir: Path,
    grid: Grid,
    cells: list[Cell],
    root: str | Path,
    *,
    device: str,
    wandb: str,
    cells_per_task: int,
    ensemble: int,
    compile: bool,
) -> Path:
    root = Path(root).resolve()
    chunks = plan_chunks(cells, cells_per_task, ensemble)
    manifest = {
        "grid": grid.name,
        "source": str(grid.path.resolve()),
        "root": str(root),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": device,
        "wandb": wandb,
        "compile": compile,
        "cells_per_task": cells_per_task,
        "ensemble": ensemble,
        "n_tasks": len(chunks),
        "chunks": chunks,
        "cells": [
            {"id": c.id, "experiment": c.experiment, "label": c.label, "run_dir": str(c.run_dir(root)), "spec": c.spec}
            for c in cells
        ],
    }
    write_json(workdir / "manifest.json", manifest)
    return workdir / "manifest.json"


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
    from suite.train import resolve_device

    try:
        manifest = read_json(manifest_path)
    except (FileNotFoundError, ValueError) as err:
        raise SuiteError(f"cannot read manifest {manifest_path}: {err}") from None
    if not 0 <= index < manifest["n_tasks"]:
        raise SuiteError(f"{manifest_path} has chunks 0..{manifest['n_tasks'] - 1}, not {index}")
    device = resolve_device(manifest["device"])
    failed = 0
    for group in manifest["chunks"][index]:
        cells = [manifest["cells"][i] for i in group]
        pending = [c for c in cells if not RunDir(c["run_dir"]).finished]
        if pending and _stop_requested:
            print(f"stopped by {_stop_requested[0]} before {pending[0]['run_dir']}", file=sys.stderr)
            return 3
        code = _run_group(manifest, cells, pending, device)
        if code in (3, FULL):  # preempted: the rest runs when the task is requeued; a full disk: nothing would
            return code
        failed += code
    return 1 if failed else 0


def _run_group(manifest: dict, cells: list[dict], pending: list[dict], device) -> int:
    """One seed group of a chunk, its progress said on stderr: 3 preempted, FULL the disk is full,
    else 1 if its cells failed, 0 if not."""
    from suite.tracking import make_tracker
    from suite.train import Preempted

    names = "\n  ".join(f"{c['run_dir']} [{c['label']}]" for c in pending)
    if pending:
        many = f"running {len(pending)} seeds as one ensemble:\n  {names}"
        print(f"running {names}" if len(pending) == 1 else many, file=sys.stderr, flush=True)
    try:
        run_pending(
            [c["spec"] for c in cells],
            [Path(c["run_dir"]) for c in cells],
            [f"{c['run_dir']} [{c['label']}]" for c in cells],
            device,
            manifest.get("compile", False),
            lambda i: make_tracker(
                manifest["wandb"], cells[i]["spec"], cells[i]["run_dir"], manifest["grid"], cells[i]["experiment"]
            ),
            [{"grid": manifest["grid"], "experiment": c["experiment"]} for c in cells],
        )
    except Preempted as stop:
        print(f"stopped: {stop}", file=sys.stderr)
        return 3
    except RunLocked as err:
        print(f"skipped: {err}", file=sys.stderr)
    except SuiteError as err:  # bad input found only when building (e.g. a model that cannot read the task)
        for cell in pending:
            RunDir(cell["run_dir"]).record_failure(err)
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
