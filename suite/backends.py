"""Running many cells: the bookkeeping around train(), manifests, chunks and the local backend.

Cells that differ only in their seed form a seed group, trained as one ensemble (at most
`ensemble` members; suite/ensemble.py), which is the same computation as separate runs.
A grid submission writes a manifest into ROOT/grids/<grid>/<stamp>/: the cells still to run
(each with its spec and run dir) and the chunks, each a list of seed groups of about
cells_per_task cells (a group is never split). `python -m suite chunk MANIFEST I` runs chunk
I, group after group, skipping finished cells. The local backend starts one such process per
chunk, N at a time, each with one torch thread; a Slurm array task is one chunk
(suite/slurm.py). Results never go through the manifest: each cell writes its own run dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from suite.errors import SuiteError, missing_extra
from suite.grid import Cell, Grid
from suite.results import headline
from suite.rundir import RunDir, RunLocked, check_writable, read_json, writable_dir, write_json
from suite.spec import shared

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
    """Run chunk `index` of a manifest. Exit code: 0 all done, 1 a cell failed, 3 preempted."""
    catch_stop_signals()
    from suite.tracking import make_tracker
    from suite.train import Preempted, resolve_device

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
        names = "\n  ".join(f"{c['run_dir']} [{c['label']}]" for c in pending)
        if pending:
            print(
                f"running {names}"
                if len(pending) == 1
                else f"running {len(pending)} seeds as one ensemble:\n  {names}",
                file=sys.stderr,
                flush=True,
            )
        try:
            run_pending(
                [c["spec"] for c in cells],
                [Path(c["run_dir"]) for c in cells],
                [f"{c['run_dir']} [{c['label']}]" for c in cells],
                device,
                manifest.get("compile", False),
                lambda i, cells=cells: make_tracker(
                    manifest["wandb"], cells[i]["spec"], cells[i]["run_dir"], manifest["grid"], cells[i]["experiment"]
                ),
                [{"grid": manifest["grid"], "experiment": c["experiment"]} for c in cells],
            )
        except Preempted as stop:
            print(f"stopped: {stop}", file=sys.stderr)
            return 3  # the rest of the chunk runs when the task is requeued
        except RunLocked as err:
            print(f"skipped: {err}", file=sys.stderr)
        except SuiteError as err:  # bad input found only when building (e.g. a model that cannot read the task)
            for cell in pending:
                RunDir(cell["run_dir"]).record_failure(err)
            failed += len(pending)
            print(f"failed: {names}: {err}", file=sys.stderr)
        except Exception:
            failed += len(pending)
            print(f"failed: {names}:\n{traceback.format_exc()}", file=sys.stderr)
        else:
            if pending:
                print(f"finished {names}", file=sys.stderr, flush=True)
    return 1 if failed else 0


# --- local backend ----------------------------------------------------------------------------------


def check_local(root: str | Path, device: str, cells: list[Cell] = ()) -> None:
    """What would stop a local grid once it runs, checked before anything is printed or written:
    a root that cannot be written, a device this machine lacks or a precision it cannot run (else
    every worker fails on it)."""
    check_writable(root)
    if device not in ("auto", "cpu") or any(cell.spec.get("train", {}).get("precision") == "tf32" for cell in cells):
        from suite import precision
        from suite.train import resolve_device

        resolved = resolve_device(device)
        for cell in cells:
            if "train" in cell.spec:
                precision.check(cell.spec["train"]["precision"], resolved)


def run_local(
    grid: Grid,
    cells: list[Cell],
    root: str | Path,
    *,
    workers: int,
    device: str,
    wandb: str,
    ensemble: int,
    compile: bool,
) -> int:
    """Run the chunks (seed groups) in separate processes, `workers` at a time. SIGINT/SIGTERM:
    every running cell checkpoints and stops (a re-run resumes it). Exit code 0, 1 if a cell
    failed, 3 if stopped."""
    if workers < 1:
        raise SuiteError(f"--workers must be at least 1, got {workers}")
    check_local(root, device, cells)
    workdir = new_submission_dir(root, grid.name)
    manifest = write_manifest(
        workdir, grid, cells, root, device=device, wandb=wandb, cells_per_task=1, ensemble=ensemble, compile=compile
    )
    pool = _Workers(manifest, cells, root, workers)
    old = {sig: signal.signal(sig, pool.stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    print(
        f"{len(cells)} cells in {len(pool.chunks)} processes (cells differing only in seed train as one ensemble), "
        f"{workers} at a time; logs in {workdir / 'logs'}",
        file=sys.stderr,
    )
    try:
        shown, last = {}, time.monotonic()
        while (pool.pending or pool.running) and not (pool.stopped and not pool.running):
            pool.start()
            time.sleep(0.1)
            pool.reap()
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                logs = [Path(log.name) for _, log in pool.running.values()]
                for line in progress_lines(logs, shown):
                    print(line, file=sys.stderr, flush=True)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    left = sum(len(pool.chunks[k]) for k in pool.pending)
    counts = ", ".join(f"{v} {k}" for k, v in pool.counts.items() if v or k == "done")
    print(counts + (f", {left} not started" if left else ""), file=sys.stderr)
    return 3 if pool.stopped else (1 if pool.counts["failed"] else 0)


PROGRESS_EVERY_S = 30  # how often a local grid echoes its running processes' latest log lines


def progress_lines(logs: list[Path], shown: dict) -> list[str]:
    """The latest line of each running process's log (its stack's step, members live, milestones)
    that was not shown before; `shown` remembers, per log, the line last shown."""
    lines = []
    for log in logs:
        try:
            text = log.read_text(errors="replace").rstrip("\n")
        except OSError:
            continue
        latest = text.rsplit("\n", 1)[-1].strip()
        if latest and shown.get(log) != latest:
            shown[log] = latest
            lines.append(f"  {latest}")
    return lines


class _Workers:
    """The chunk processes of a local grid submission, at most `workers` at once, and what became of their cells."""

    def __init__(self, manifest: Path, cells: list[Cell], root, workers: int):
        self.manifest, self.cells, self.root, self.workers = manifest, cells, root, workers
        self.chunks = [[i for group in chunk for i in group] for chunk in read_json(manifest)["chunks"]]
        self.pending, self.running = list(range(len(self.chunks))), {}
        self.counts = {"done": 0, "failed": 0, "stopped": 0, "skipped": 0}
        self.stopped = []

    def stop(self, signum, frame) -> None:
        """SIGINT/SIGTERM: every running chunk checkpoints and stops; none starts."""
        self.stopped.append(signum)
        for proc in self.running:
            proc.send_signal(signal.SIGTERM)

    def start(self) -> None:
        while self.pending and len(self.running) < self.workers and not self.stopped:
            k = self.pending.pop(0)
            log = open(self.manifest.parent / "logs" / f"{k:04d}-{self.cells[self.chunks[k][0]].id}.log", "w")
            proc = subprocess.Popen(
                [sys.executable, "-m", "suite", "chunk", str(self.manifest), str(k)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=os.environ | WORKER_ENV,
                start_new_session=True,
            )
            self.running[proc] = (k, log)

    def reap(self) -> None:
        """The chunks that ended: one line per cell, with its outcome."""
        for proc in [p for p in self.running if p.poll() is not None]:
            k, log = self.running.pop(proc)
            log.close()
            for i in self.chunks[k]:
                cell = self.cells[i]
                outcome = _outcome(proc.returncode, RunDir(cell.run_dir(self.root)))
                self.counts[outcome] += 1
                line = _outcome_line(sum(self.counts.values()), len(self.cells), outcome, cell, self.root, log.name)
                print(line, file=sys.stderr, flush=True)


def _outcome(returncode: int, rd: RunDir) -> str:
    if rd.finished:  # an ensemble member may have finished before the rest of its process stopped
        return "done"
    if returncode == 3:
        return "stopped"
    return "skipped" if returncode == 0 else "failed"  # skipped: another process holds the cell


def _outcome_line(n: int, total: int, outcome: str, cell: Cell, root, log: str) -> str:
    rd = RunDir(cell.run_dir(root))
    line = f"[{n}/{total}] {outcome:<7} {rd.path} [{cell.label}]"
    if outcome == "done":
        result = read_json(rd / "result.json")
        line += "".join(f"  {part}" for part in (headline(result), f"{result['wall_s']:.1f} s") if part)
    elif outcome == "failed":
        line += f"  (see {log})"
    return line
