"""The local backend: a grid submission's chunks (suite/launch/manifest.py) run on this machine, one
process each, N at a time, each with one torch thread (WORKER_ENV). Every cell's outcome is one
line as its process ends; a full disk, which would fail every cell after it, stops the submission
and is said once, last, naming the file."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from suite.launch.grid import Grid
from suite.launch.manifest import FULL, WORKER_ENV, RunOptions, new_submission_dir, read_manifest, write_manifest
from suite.results.result import headline
from suite.results.rundir import RunDir, check_writable, read_json
from suite.specs.cell import Cell


def check_local(root: str | Path, device: str, cells: list[Cell] = ()) -> None:
    """What would stop a local grid once it runs, checked before anything is printed or written:
    a root that cannot be written, a device this machine lacks or a precision it cannot run (else
    every worker fails on it)."""
    check_writable(root)
    if device not in ("auto", "cpu") or any(cell.spec.get("train", {}).get("precision") == "tf32" for cell in cells):
        from suite.engine import precision
        from suite.engine.train import resolve_device

        resolved = resolve_device(device)
        for cell in cells:
            if "train" in cell.spec:
                precision.check(cell.spec["train"]["precision"], resolved)


Drawer = Callable[[], list[Cell]]  # cells known since a submission started, to run in it


def run_local(
    grid: Grid, cells: list[Cell], root: str | Path, options: RunOptions, workers: int, more: Drawer | None = None
) -> int:
    """Run the chunks (whole groups of at most `options.stack` cells, and of an even share of them: every
    worker gets some) in separate processes, `workers` at a time. `more`, asked each time a process
    ends, gives cells that became known meanwhile (a tune's next round of a search whose runs have
    all finished): they join the queue at once rather than wait for every other process to end.
    SIGINT/SIGTERM: every running cell checkpoints and stops (a re-run resumes it). Exit code 0, 1
    if a cell failed, 3 if stopped."""
    check_local(root, options.device, cells)
    pool = _Workers(workers)
    for manifest, part in _submissions(grid, cells, options, workers):
        pool.add(manifest, part, "")
    old = {sig: signal.signal(sig, pool.stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    refused = None  # what `more` raised: nothing more is drawn; raised once the running processes end
    try:
        shown, last = {}, time.monotonic()
        while (pool.pending or pool.running) and not ((pool.stopped or pool.full) and not pool.running):
            pool.start()
            time.sleep(0.1)
            if pool.reap() and more is not None and refused is None and not (pool.stopped or pool.full):
                try:
                    drawn = more()
                except Exception as err:  # noqa: BLE001 - a bad draw or a damaged file: raised once the workers end
                    refused = err
                    continue
                for manifest, part in _submissions(grid, drawn, options, workers):
                    pool.add(manifest, part, "more: ")
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                logs = [Path(log.name) for _, log in pool.running.values()]
                for line in progress_lines(logs, shown):
                    print(line, file=sys.stderr, flush=True)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for folder in pool.held:
            folder.unlock()
    left = sum(len(pool.jobs[j][2]) for j in pool.pending)
    counts = ", ".join(f"{v} {k}" for k, v in pool.counts.items() if v or k == "done")
    print(counts + (f", {left} not started" if left else ""), file=sys.stderr)
    if pool.full:  # said once, last: the cells it stopped were not theirs to fail
        print(f"{pool.full}; run the same command again once there is room", file=sys.stderr)
    if refused is not None and not pool.stopped:
        raise refused
    return 3 if pool.stopped else (1 if pool.counts["failed"] or pool.full else 0)


def _submissions(grid: Grid, cells: list[Cell], options: RunOptions, workers: int) -> list[tuple[Path, list[Cell]]]:
    """A submission folder in each root the cells' run folders are in (a tune's draw can hold one
    search's next round, under ROOT/tuning, and another's final runs, under ROOT/final: a manifest
    names runs of its own root only), with the manifest of its cells, in groups no bigger than an
    even share of all of them: 5 final seeds of one cell made one group, one process, and the other
    workers sat idle through a tune's longest phase."""
    options = replace(options, stack=min(options.stack, math.ceil(len(cells) / workers)))
    by_root: dict[Path, list[Cell]] = {}
    for cell in cells:
        by_root.setdefault(Path(cell.run_dir).parent.parent, []).append(cell)
    return [
        (write_manifest(new_submission_dir(root, grid.name), grid, part, root, options, cells_per_task=1), part)
        for root, part in by_root.items()
    ]


def queued(root: str | Path) -> set[Path]:
    """The run folders under root that a local grid or tune running now on this machine will start:
    those of its submissions (whose .lock it holds) not made yet."""
    found = set()
    for lock in Path(root).glob("grids/*/*/.lock"):
        if not RunDir(lock.parent).is_locked():  # its process has ended
            continue
        try:
            cells = read_manifest(lock.with_name("manifest.json"))["cells"]
        except (OSError, ValueError, LookupError):  # being written, or damaged: those cells say what they are
            continue
        found |= {Path(c["run_dir"]) for c in cells if not Path(c["run_dir"]).exists()}
    return found


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

    def __init__(self, workers: int):
        self.workers = workers
        self.jobs: list[tuple[Path, int, list[Cell]]] = []  # (manifest, chunk, its cells), in the order added
        self.pending, self.running = [], {}
        self.counts = {"done": 0, "failed": 0, "stopped": 0, "skipped": 0, "not run (disk full)": 0}
        self.total = 0  # cells added
        self.stopped = []
        self.full = None  # the line of the first chunk that met a full disk: no chunk starts after it
        self.held = []  # each submission's folder, locked while this process runs it (queued())

    def add(self, manifest: Path, cells: list[Cell], prefix: str) -> None:
        """Queue the chunks of a manifest (its cells in its order) behind those queued before."""
        self.held.append(RunDir(manifest.parent))
        self.held[-1].lock()
        chunks = read_manifest(manifest)["chunks"]
        for k, chunk in enumerate(chunks):
            self.pending.append(len(self.jobs))
            self.jobs.append((manifest, k, [cells[i] for group in chunk for i in group]))
        self.total += len(cells)
        print(
            f"{prefix}{len(cells)} cells in {len(chunks)} processes (a group of cells trains as one stack), "
            f"{self.workers} at a time; logs in {manifest.parent / 'logs'}",
            file=sys.stderr,
        )

    def stop(self, signum, frame) -> None:
        """SIGINT/SIGTERM: every running chunk checkpoints and stops; none starts."""
        self.stopped.append(signum)
        for proc in self.running:
            proc.send_signal(signal.SIGTERM)

    def start(self) -> None:
        while self.pending and len(self.running) < self.workers and not self.stopped and not self.full:
            j = self.pending.pop(0)
            manifest, k, cells = self.jobs[j]
            log = open(manifest.parent / "logs" / f"{k:04d}-{cells[0].id}.log", "w")
            proc = subprocess.Popen(
                [sys.executable, "-m", "suite", "chunk", str(manifest), str(k)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=os.environ | WORKER_ENV,
                start_new_session=True,
            )
            self.running[proc] = (j, log)

    def reap(self) -> int:
        """The chunks that ended: one line per cell, with its outcome. How many ended."""
        ended = [p for p in self.running if p.poll() is not None]
        for proc in ended:
            j, log = self.running.pop(proc)
            log.close()
            if proc.returncode == FULL:
                self.full = self.full or _last_error(Path(log.name))
            for cell in self.jobs[j][2]:
                outcome = _outcome(proc.returncode, RunDir(cell.run_dir))
                self.counts[outcome] += 1
                if outcome != "not run (disk full)":  # said once, at the end
                    n = sum(self.counts.values())
                    print(_outcome_line(n, self.total, outcome, cell, log.name), file=sys.stderr, flush=True)
        return len(ended)


def _outcome(returncode: int, rd: RunDir) -> str:
    if rd.finished:  # a stack member may have finished before the rest of its process stopped
        return "done"
    if returncode == 3:
        return "stopped"
    if returncode == FULL:
        return "not run (disk full)"
    return "skipped" if returncode == 0 else "failed"  # skipped: another process holds the cell


def _last_error(log: Path) -> str:
    """A chunk's last line: the error that stopped it, naming the file."""
    lines = log.read_text(errors="replace").strip().splitlines()
    return (
        lines[-1] if lines and lines[-1].startswith("error: ") else f"error: a full disk stopped a worker (see {log})"
    )


def _outcome_line(n: int, total: int, outcome: str, cell: Cell, log: str) -> str:
    rd = RunDir(cell.run_dir)
    line = f"[{n}/{total}] {outcome:<7} {rd.path} [{cell.label}]"
    if outcome == "done":
        result = read_json(rd / "result.json")
        line += "".join(f"  {part}" for part in (headline(result), f"{result['wall_s']:.1f} s") if part)
    elif outcome == "failed":
        line += f"  (see {log})"
    return line
