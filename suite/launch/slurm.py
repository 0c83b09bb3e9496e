"""The Slurm backend: one array job per grid submission, rendered from slurm/array.sbatch.

Settings come from the grid file's [slurm] table, then the command line. Everything is checked
and rendered before anything is written; the manifest and script are written, then sbatch
submits the whole array at once (or refuses it: then the files are removed again), so a
submission never happens half-way. squeue says which submitted array tasks Slurm still holds, so
that a submission again leaves their cells to them; `tune --follow` queues a small job behind the
array jobs that runs the tune again once they have ended.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

from suite.errors import SuiteError
from suite.launch.grid import Cell, Grid
from suite.launch.manifest import (
    RunOptions,
    new_submission_dir,
    plan_chunks,
    read_manifest,
    stamped_dir,
    write_manifest,
)
from suite.results.rundir import write_atomic

_INSTALLED = Path(__file__).resolve().parents[1] / "slurm_template" / "array.sbatch"  # from a wheel
TEMPLATE = _INSTALLED if _INSTALLED.exists() else Path(__file__).resolve().parents[2] / "slurm" / "array.sbatch"
MAX_ARRAY_TASKS = 1000  # Slurm's default MaxArraySize is 1001 (indices 0..1000)
PROGRESS_MARGIN_S = 240  # the least an array task should train between its start and its USR1 (start-up is ~10-60 s)


def time_seconds(text: str) -> int | None:
    """Slurm's --time in seconds ("minutes", "m:s", "h:m:s", "d-h", "d-h:m", "d-h:m:s"); None for
    UNLIMITED / INFINITE; SuiteError for anything else."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = rest.split(":")
    try:
        numbers = [int(days)] + [int(p) for p in parts]
    except ValueError:
        numbers = None
    if numbers is None or len(parts) > 3 or min(numbers) < 0:
        raise SuiteError(f"slurm time must read minutes, m:s, h:m:s or d-h[:m[:s]], got {text!r}")
    d, *clock = numbers
    if "-" in text:  # d-h, d-h:m, d-h:m:s
        h, m, s = (clock + [0, 0])[:3]
    else:  # m, m:s, h:m:s
        h, m, s = (0, clock[0], 0) if len(clock) == 1 else (0, *clock) if len(clock) == 2 else tuple(clock)
    return ((d * 24 + h) * 60 + m) * 60 + s


@dataclass
class SlurmOptions:
    partition: str | None = None
    time: str | None = None  # e.g. 2:00:00; Slurm checks the format
    gpus: str | None = None  # a count, or type:count
    cpus: int | None = None  # --cpus-per-task; also the run's torch threads
    mem: str | None = None  # e.g. 8G
    account: str | None = None
    max_parallel: int | None = None  # array tasks running at once (%N)
    cells_per_task: int = 1
    signal_seconds: int = 120  # USR1 this long before the time limit (it may come up to 60 s early)
    max_requeues: int = 3  # an array task requeued this often stops requeueing itself (submitit's default)
    sbatch: list[str] = field(default_factory=list)  # extra #SBATCH lines, e.g. "--constraint=a100"
    setup: list[str] = field(default_factory=list)  # shell lines before Python starts, e.g. "module load cuda"

    @classmethod
    def merge(cls, from_grid: dict, **flags) -> SlurmOptions:
        """The grid file's [slurm] table, overridden by the flags given (None = not given)."""
        values = {}
        for f in fields(cls):
            if flags.get(f.name) not in (None, []):
                values[f.name] = flags[f.name]
            elif f.name in from_grid:
                values[f.name] = from_grid[f.name]
        options = cls(**values)
        options.check()
        return options

    def check(self) -> None:
        for name in ("partition", "time", "gpus", "mem", "account"):
            value = getattr(self, name)
            if value is not None:
                value = str(value)
                if not value.strip() or any(c.isspace() for c in value):
                    raise SuiteError(f"slurm {name} must be one word, got {value!r}")
                setattr(self, name, value)
        if self.gpus is not None and not re.fullmatch(r"([A-Za-z0-9_.-]+:)?[1-9][0-9]*", self.gpus):
            raise SuiteError(f"slurm gpus must be a count >= 1 or type:count (a100:1), got {self.gpus!r}")
        for name, least in (
            ("cpus", 1),
            ("max_parallel", 1),
            ("cells_per_task", 1),
            ("signal_seconds", 0),
            ("max_requeues", 0),
        ):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise SuiteError(f"slurm {name} must be an integer >= {least}, got {value!r}")
        for name in ("sbatch", "setup"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) and "\n" not in v for v in value):
                raise SuiteError(f"slurm {name} must be a list of one-line strings")
        self.sbatch = [_sbatch_option(line) for line in self.sbatch]
        limit = time_seconds(self.time) if self.time is not None else None
        if limit is not None and limit <= self.signal_seconds + PROGRESS_MARGIN_S:
            raise SuiteError(
                f"slurm time {self.time} is not longer than the USR1 warning ({self.signal_seconds} s before "
                f"the limit) plus {PROGRESS_MARGIN_S} s: each array task would be signalled before it made "
                "progress, and requeue forever"
            )

    def sbatch_lines(self, n_array: int, log_dir: Path, job_name: str) -> list[str]:
        array = f"0-{n_array - 1}" + (f"%{self.max_parallel}" if self.max_parallel else "")
        options = [
            f"--job-name={job_name}",
            f"--array={array}",
            f"--output={log_dir}/%A_%a.out",
            "--open-mode=append",
            "--requeue",
            f"--signal=B:USR1@{self.signal_seconds}",
        ]
        return [f"#SBATCH {option}" for option in options + self.resources()]

    def resources(self) -> list[str]:
        """What each job asks of the cluster: partition, time, GPUs, CPUs, memory, account, extra lines."""
        options = []
        for flag, value in (
            ("--partition", self.partition),
            ("--time", self.time),
            ("--gpus", self.gpus),
            ("--cpus-per-task", self.cpus),
            ("--mem", self.mem),
            ("--account", self.account),
        ):
            if value is not None:
                options.append(f"{flag}={value}")
        return options + self.sbatch


def _sbatch_option(line: str) -> str:
    """Accept "--constraint=a100" or "#SBATCH --constraint=a100"; keep the option."""
    option = line.strip().removeprefix("#SBATCH").strip()
    if not option.startswith("-"):
        raise SuiteError(f"extra sbatch line {line!r} must be an option such as --constraint=a100")
    return option


def _one_line(*paths) -> None:
    """A path that goes into a job script must not break its line: after a line break, the rest is a
    line of shell (or an #SBATCH option) that nobody asked to run."""
    for path in paths:
        if any(c in str(path) for c in "\n\r"):
            raise SuiteError(f"{str(path)!r}: a path with a line break cannot go into a Slurm job script")


def render(
    grid: Grid, options: SlurmOptions, cells: list[Cell], workdir: Path, template: Path = TEMPLATE, stack: int = 1
) -> str:
    _one_line(grid.path, workdir, Path.cwd(), sys.executable)
    try:
        text = Path(template).read_text()
    except FileNotFoundError:
        raise SuiteError(
            f"sbatch template {template} not found (install the suite from its source tree: "
            "pip install -e ., or pass --template)"
        ) from None
    values = {
        "grid_file": str(grid.path),
        "cells_per_task": str(options.cells_per_task),
        "sbatch_lines": "\n".join(
            options.sbatch_lines(
                len(plan_chunks(cells, options.cells_per_task, stack)), workdir / "logs", f"suite-{grid.name}"
            )
        ),
        "signal_seconds": str(options.signal_seconds),
        "max_requeues": str(options.max_requeues),
        "setup": "\n".join(options.setup),
        "workdir": shlex.quote(str(Path.cwd())),
        "python": shlex.quote(sys.executable),
        "manifest": shlex.quote(str(workdir / "manifest.json")),
    }

    def fill(match):
        if match.group(1) not in values:
            raise SuiteError(f"{template}: unknown placeholder {{{{ {match.group(1)} }}}}")
        return values[match.group(1)]

    return re.sub(r"\{\{\s*(\w+)\s*\}\}", fill, text)


def fit_array(options: SlurmOptions, cells: list[Cell], stack: int) -> None:
    """More cells per array task when the array would pass Slurm's default MaxArraySize."""
    n = len(plan_chunks(cells, options.cells_per_task, stack))
    if n > MAX_ARRAY_TASKS:
        options.cells_per_task = -(-len(cells) // MAX_ARRAY_TASKS)
        print(
            f"note: {len(cells)} cells: {options.cells_per_task} cells per array task to stay within "
            f"{MAX_ARRAY_TASKS} array tasks",
            file=sys.stderr,
        )


def find_sbatch() -> str:
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SuiteError(
            "sbatch not found: Slurm is not installed here (try --dry-run to see the script, or --backend local)"
        )
    return sbatch


def submit(
    grid: Grid,
    cells: list[Cell],
    root: str | Path,
    options: SlurmOptions,
    run: RunOptions,
    sbatch: str | None,
    template: Path = TEMPLATE,
) -> str:
    """Write the manifest and script and submit them with `sbatch`; returns the job id.
    sbatch None (a dry run): return the script, write nothing."""
    fit_array(options, cells, run.stack)
    if sbatch is None:
        placeholder = Path(root).resolve() / "grids" / grid.name / "<submission>"
        return render(grid, options, cells, placeholder, template, run.stack)
    workdir = new_submission_dir(root, grid.name)
    try:
        script = render(grid, options, cells, workdir, template, run.stack)
        write_manifest(workdir, grid, cells, root, run, options.cells_per_task)
        (workdir / "job.sbatch").write_text(script)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return _sbatch(sbatch, workdir / "job.sbatch", "the job")


def _sbatch(sbatch: str, script: Path, what: str, after_refusal: str = "") -> str:
    """Submit script; its job id, written beside it (job_id: what status and a later submission ask
    squeue about). Where sbatch refuses, the script's folder goes; where it cannot be told whether the
    job was queued (no answer in time, an interrupt), the folder stays for the job that may be."""
    folder = script.parent
    try:
        proc = subprocess.run([sbatch, "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise SuiteError(
            f"sbatch did not answer in 120 s: {what} may be queued (ask squeue); {folder} is kept for it"
        ) from None
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if proc.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        reason = [line for line in proc.stderr.splitlines() if line.strip()] or [f"exit code {proc.returncode}"]
        raise SuiteError(f"sbatch refused {what}: {reason[-1].removeprefix('sbatch: error: ')}{after_refusal}")
    job_id = proc.stdout.strip().split(";")[0]
    write_atomic(folder / "job_id", job_id + "\n")
    return job_id


def queued(root: str | Path) -> set[Path]:
    """The run folders under root that an array task Slurm still holds will run (pending, running,
    or pending again after a requeue): a grid or tune submitted again leaves them to it rather than
    submitting them twice. Empty where no submission under root has a job id, or no squeue is here
    to ask (results copied off the cluster); a SuiteError where squeue cannot answer."""
    jobs = _job_ids(Path(root).glob("grids/*/*/job_id"))
    tasks = held(jobs)
    return {run_dir for job, its in tasks.items() for run_dir in _run_dirs(jobs[job], its)}


def _job_ids(files) -> dict[str, Path]:
    """Job id -> the folder of its job_id file, for each file that holds one."""
    jobs = {}
    for job_file in files:
        job = job_file.read_text().strip()
        if job.isdigit():
            jobs[job] = job_file.parent
    return jobs


def held(jobs) -> dict[str, list[str]]:
    """Of the job ids given, those Slurm still holds, each with its array task ids as squeue shows
    them ("3", or a range "[4-7%2]" for pending ones); empty where none is given or no squeue is here."""
    squeue = shutil.which("squeue")
    if not jobs or squeue is None:
        return {}
    try:  # --array: one line per array task, "JOB_TASK", pending ones included
        proc = subprocess.run(
            [squeue, "--noheader", "--array", "--format=%i", f"--jobs={','.join(jobs)}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        raise SuiteError(
            "cannot tell which submitted cells Slurm still holds: squeue did not answer in 120 s"
        ) from None
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:  # squeue's answer when the only job asked about has left the queue
            return {}
        reason = [line for line in proc.stderr.splitlines() if line.strip()] or [f"exit code {proc.returncode}"]
        raise SuiteError(f"cannot tell which submitted cells Slurm still holds: squeue: {reason[-1]}")
    tasks: dict[str, list[str]] = {}
    for line in proc.stdout.split():
        job, _, task = line.partition("_")
        if job in jobs:
            tasks.setdefault(job, []).append(task)
    return tasks


def _run_dirs(workdir: Path, tasks: list[str]) -> set[Path]:
    """The run folders of a submission's array tasks: its chunks of those numbers (every chunk
    where squeue shows a task as a range)."""
    path = workdir / "manifest.json"
    try:
        manifest = read_manifest(path)
        chunks = manifest["chunks"]
        theirs = [chunks[int(t)] for t in tasks] if all(t.isdigit() for t in tasks) else chunks
        return {Path(manifest["cells"][i]["run_dir"]) for chunk in theirs for group in chunk for i in group}
    except (OSError, ValueError, LookupError, TypeError) as err:
        raise SuiteError(f"cannot read {path}, whose array job Slurm still holds: {err!r}") from None


def follow_ups(root: str | Path, but: str | None = None) -> list[str]:
    """The follow-up jobs of root (tune --follow) that Slurm still holds, but the one given."""
    jobs = {j: d for j, d in _job_ids((Path(root) / "follow").glob("*/job_id")).items() if j != but}
    return sorted(held(jobs), key=int)


def last_follow_up(root: str | Path) -> tuple[str, Path] | None:
    """The last follow-up job queued for root, and its log; None where none was."""
    jobs = _job_ids((Path(root) / "follow").glob("*/job_id"))
    if not jobs:
        return None
    job = max(jobs, key=int)
    return job, jobs[job] / "logs" / f"{job}.out"


FOLLOW = """#!/bin/bash
# Written by `python -m suite {command}`: the same command again, once the array jobs it waits
# for have ended, however they ended (it submits again what a failed or cancelled task left).
{sbatch_lines}
set -u
{setup}
export OMP_NUM_THREADS="${{SLURM_CPUS_PER_TASK:-1}}"
export OMP_WAIT_POLICY=PASSIVE
cd {workdir}
exec {python} -m suite {command}
"""


def follow(root: Path, waits_on: list[Path], command: list[str], options: SlurmOptions, sbatch: str, name: str) -> str:
    """Queue a job that runs `python -m suite COMMAND` from here once every array job Slurm still
    holds under the roots in waits_on has ended (afterany; at once where none is: they ended before
    it looked); its script, job id and log go to ROOT/follow/<stamp>/. Returns the line to tell: the
    job queued, or that none was since a follow-up job of root is queued already (one is enough)."""
    jobs = _job_ids(f for r in waits_on for f in Path(r).glob("grids/*/*/job_id"))
    waiting = sorted(held(jobs), key=int)
    others = follow_ups(root, but=os.environ.get("SLURM_JOB_ID"))  # a follow-up queues the next one while it runs
    if others:
        return f"no follow-up job: follow-up job {others[0]} is queued already"
    _one_line(Path(root).resolve(), Path.cwd(), sys.executable)
    workdir = stamped_dir(Path(root) / "follow")
    line = shlex.join(command)
    lines = [
        f"--job-name=suite-{name}-follow",
        f"--output={workdir}/logs/%j.out",
    ] + ([f"--dependency=afterany:{':'.join(waiting)}"] if waiting else [])  # none left: at once
    lines += options.resources()
    script = FOLLOW.format(
        command=line,
        sbatch_lines="\n".join(f"#SBATCH {option}" for option in lines),
        setup="\n".join(options.setup),
        workdir=shlex.quote(str(Path.cwd())),
        python=shlex.quote(sys.executable),
    )
    (workdir / "follow.sbatch").write_text(script)
    job_id = _sbatch(
        sbatch,
        workdir / "follow.sbatch",
        "the follow-up job",
        " (what was submitted stands: run this command again once it has ended)",
    )
    after = f"once job(s) {', '.join(waiting)} have ended" if waiting else "now: no array job of its is held"
    return f"queued follow-up job {job_id}: python -m suite {line}, {after}"
