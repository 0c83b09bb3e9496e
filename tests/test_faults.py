"""Faults never give a wrong result (issue 28, part 3): a foreign checkpoint, a history lost before
its checkpoint, a leaderboard stopped mid-write, stale temporaries, a full disk, W&B without a
network, Ctrl-C, and Slurm limits that would requeue forever."""

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest
import torch
from conftest import TINY_FIXED, PreemptAt, QuietTracker, as_cells, cli, metrics_text, wait_for_step

from suite.cli import main
from suite.engine.train import Preempted, train
from suite.leaderboard import generate
from suite.results import rundir
from suite.results.rundir import RunDir
from suite.specs.spec import resolve

CPU = torch.device("cpu")
CELL = {"p": 11, "train_frac": 0.5, "test_frac": 0.3, "batch_size": 16, "d": 8, "hidden": 16, "eval_every": 10,
        "checkpoint_every": 20, "patience": None, "train.steps": 60}  # fmt: skip
ARGS = [arg for key, value in CELL.items() for arg in ("--set", f"{key}={value}")]


def stopped(tmp_path, seed):
    """A run of CELL with `seed` asked to stop at its evaluation of step 30: it checkpoints at the
    next step, 31, in tmp_path/seed<seed>."""
    out = tmp_path / f"seed{seed}"
    with pytest.raises(Preempted):
        train(as_cells([resolve({}, CELL, seed)], [out], [PreemptAt(30)]), CPU)
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == 31
    return out


def test_a_stack_stopped_says_where_it_checkpointed_in_one_short_line(tmp_path):
    # a stack of 1,024 members printed 1,024 paths in its one line
    dirs = [tmp_path / "grid" / f"seed{i}" for i in range(1024)]
    where = f"1024 run folders under {tmp_path / 'grid'}"
    assert str(Preempted("SIGTERM", 5, dirs)) == f"SIGTERM at step 5: checkpointed in {where}"
    assert str(Preempted("SIGINT", 5, dirs[:2])) == f"SIGINT at step 5: checkpointed in {dirs[0]}, {dirs[1]}"


def refused(capsys, *args):
    capsys.readouterr()  # what the runs before said
    code = main([str(a) for a in args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_a_checkpoint_of_another_seed_is_refused_not_resumed(tmp_path, capsys):
    a, b = stopped(tmp_path, 0), stopped(tmp_path, 1)
    (a / "checkpoint.pt").write_bytes((b / "checkpoint.pt").read_bytes())  # two seeds' files swapped
    before = (a / "metrics.jsonl").read_bytes()
    line = refused(capsys, "run", *ARGS, "--seed", 0, "--out", a)
    assert "is run " in line and "(seed 1), not this run's" in line
    assert (a / "metrics.jsonl").read_bytes() == before and not (a / "result.json").exists()


def test_a_history_lost_before_its_checkpoint_is_refused(tmp_path, capsys):
    out = stopped(tmp_path, 0)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join(lines[:1] + lines[2:]) + "\n")  # what a power loss can do
    line = refused(capsys, "run", *ARGS, "--out", out)
    assert "does not hold the evaluations its checkpoint (step 31) continues: 1 missing, the first at step 10" in line
    assert not (out / "result.json").exists()


def test_evaluations_reach_the_disk_before_the_checkpoint_that_continues_them(tmp_path, monkeypatch):
    order = []
    real_fsync, real_save = os.fsync, RunDir.save_checkpoint
    monkeypatch.setattr(os, "fsync", lambda fd: order.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    monkeypatch.setattr(
        RunDir, "save_checkpoint", lambda self, state: order.append("checkpoint") or real_save(self, state)
    )
    train(as_cells([resolve({}, CELL, 0)], [tmp_path / "run"]), CPU)
    first = order.index("checkpoint")
    assert order[first - 1].endswith("metrics.jsonl")  # fsynced just before the first checkpoint was written


def test_a_stacks_files_are_written_side_by_side_each_run_in_its_order(tmp_path, monkeypatch):
    # A stack's K runs open, checkpoint and finish in threads (fsyncs that arrive together commit at
    # once); each run's own files still reach the disk in the order that keeps it resumable.
    synced, real_fsync = [], os.fsync  # (run folder, file, thread)
    monkeypatch.setattr(
        os,
        "fsync",
        lambda fd: (
            synced.append((*os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1), threading.current_thread().name))
            or real_fsync(fd)
        ),
    )
    runs = [tmp_path / str(seed) for seed in range(3)]
    train(as_cells([resolve({}, CELL | {"checkpoint_every": 20}, seed) for seed in range(3)], runs), CPU)
    for run in runs:
        files = [name.lstrip(".").split(".")[0] for d, name, _ in synced if d == str(run)]  # .result.json.x1.tmp
        assert files[:3] == ["spec", "code", "metrics"]  # as it opens
        assert files[-2:] == ["metrics", "result"]  # the evaluations, then result.json that says they are all in
        checkpoints = [i for i, name in enumerate(files) if name == "checkpoint"]  # steps 20, 40 and 60
        assert len(checkpoints) == 3 and all(files[i - 1] == "metrics" for i in checkpoints)
    assert all(thread.startswith("writes") for *_, thread in synced)


def test_write_all_runs_every_write_together_and_raises_the_first_failure():
    from suite.engine.member import write_all

    together, done = threading.Barrier(3, timeout=10), []

    def write(i):
        together.wait()  # breaks unless all three run at once
        if i == 1:
            raise OSError(errno.ENOSPC, "No space left on device", f"run{i}")
        done.append(i)

    with pytest.raises(OSError, match="run1"):
        write_all([lambda i=i: write(i) for i in range(3)])
    assert sorted(done) == [0, 2]  # the others finished their writes


def test_stale_temporaries_of_a_killed_writer_are_cleaned_on_resume(tmp_path):
    out = stopped(tmp_path, 0)
    for name in (".checkpoint.pt.k1ll3d.tmp", ".metrics.jsonl.abc123.tmp"):
        (out / name).write_bytes(b"half")
    (result,) = train(as_cells([resolve({}, CELL, 0)], [out]), CPU)
    assert result["steps"] == 60 and not list(out.glob(".*.tmp"))


def test_a_leaderboard_stopped_mid_write_runs_again_and_cleans_up(tmp_path, monkeypatch):
    runs, out = tmp_path / "runs", tmp_path / "board"
    train(as_cells([resolve({}, CELL, seed) for seed in (0, 1)], [runs / "a", runs / "b"]), CPU)
    real, written = rundir.write_atomic, []

    def dies_on_the_fourth(path, data):
        if len(written) == 3:
            (path.parent / f".{path.name}.half.tmp").write_bytes(b"half")  # what a SIGKILL leaves
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(path)
        real(path, data)

    monkeypatch.setattr("suite.leaderboard.write_atomic", dies_on_the_fourth)
    with pytest.raises(OSError):
        generate(runs, out)
    monkeypatch.setattr("suite.leaderboard.write_atomic", real)
    files = generate(runs, out)  # its own half-written board is its own: no refusal
    assert "index.md" in files and not list(out.rglob(".*.tmp"))
    assert sorted((out / "generated.txt").read_text().split()) == sorted(files)


@pytest.mark.parametrize("command", ["run", "export", "grid", "bench"])
def test_a_full_disk_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    if command == "export":
        train(as_cells([resolve({}, CELL, 0)], [tmp_path / "runs" / "a"]), CPU)
    (tmp_path / "g.toml").write_text(TINY_FIXED)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir.os, "fsync", full)
    args = {"run": ["run", *ARGS, "--out", "full"], "export": ["export", "runs", "--out", "table"],
            "grid": ["grid", "g.toml", "--root", "runs2"],
            "bench": ["bench", "--quick", "--out", "b.json"]}[command]  # fmt: skip
    code = main(args)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and lines[-1].startswith("error: ") and "No space left on device" in lines[-1]
    assert lines[-1].split(": ")[1].endswith((".json", ".jsonl", ".csv", ".parquet", ".pt", ".txt"))  # the file named
    assert not list(tmp_path.rglob(".*.tmp"))  # no torn or temporary file left


@pytest.mark.skipif(shutil.which("getent") is not None and subprocess.run(["getent", "hosts", "api.wandb.ai"],
                    capture_output=True).returncode == 0, reason="needs a machine without a route to W&B")  # fmt: skip
def test_wandb_online_without_a_network_falls_back_to_offline_with_one_line(tmp_path, monkeypatch):
    from suite.launch import tracking

    env = {"WANDB_MODE": "online", "WANDB_API_KEY": "a" * 40, "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    env["SUITE_WANDB_INIT_TIMEOUT"] = "3"  # read as the run starts, not when the suite is imported
    monkeypatch.setattr(tracking, "_online_failed", False)  # this process's first online attempt
    proc = cli("run", *ARGS, "--out", tmp_path / "run", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: W&B online failed")]
    assert len(warnings) == 1 and "logging offline instead" in warnings[0]
    assert list((tmp_path / "wandb").glob("offline-run-*")) and (tmp_path / "run" / "result.json").exists()


def test_ctrl_c_on_run_checkpoints_with_one_line_and_resumes_to_the_same_numbers(tmp_path):
    long = [*ARGS, "--set", "train.steps=3000", "--set", "checkpoint_every=100"]  # Ctrl-C comes at step ~500
    reference = cli("run", *long, "--out", tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr
    out = tmp_path / "run"
    # a process of its own: the point is its Ctrl-C (SIGINT) and exit code
    proc = subprocess.Popen([sys.executable, "-m", "suite", "run", *long, "--out", str(out)],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for_step(proc, out, 500)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    err = proc.stderr.read()
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted at step ") and last.endswith(
        "checkpointed; run the same command again to resume"
    )
    resumed = cli("run", *long, "--out", out)
    assert resumed.returncode == 0, resumed.stderr
    assert metrics_text(out) == metrics_text(tmp_path / "reference")


def test_slurm_caps_its_requeues_and_says_so_and_warns_without_a_time_limit(tmp_path, capsys):
    (tmp_path / "g.toml").write_text(TINY_FIXED)
    assert main(["grid", str(tmp_path / "g.toml"), "--backend", "slurm", "--dry-run", "--max-requeues", "2",
                 "--root", str(tmp_path / "runs")]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    assert 'if [ "${SLURM_RESTART_COUNT:-0}" -ge 2 ]' in out and "not requeueing $task" in out
    assert "the most max_requeues (2) allows" in out
    assert "warning: no --time" in err
    assert main(["grid", str(tmp_path / "g.toml"), "--backend", "slurm", "--dry-run", "--time", "1:00:00",
                 "--root", str(tmp_path / "runs")]) == 0  # fmt: skip
    assert "warning: no --time" not in capsys.readouterr().err


def test_the_requeue_cap_stops_a_task_that_keeps_being_signalled(tmp_path):
    """The rendered script's own logic, run by bash with a fake Slurm: restart 3 of at most 3 exits
    with 3 and a line, instead of requeueing again."""
    from suite.launch.grid import load
    from suite.launch.slurm import SlurmOptions, render

    (tmp_path / "g.toml").write_text(TINY_FIXED)
    grid = load(tmp_path / "g.toml")
    script = render(grid, SlurmOptions(max_requeues=3), grid.cells, tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/sh\necho requeued >> "$LOG"\n')
    (bin_dir / "scontrol").chmod(0o755)
    script = script.replace(sys.executable, "sh -c 'exit 3'")  # the run stops with 3 (checkpointed on request)
    (tmp_path / "job.sh").write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"),
           "SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "0"}  # fmt: skip
    again = subprocess.run(["bash", str(tmp_path / "job.sh")], env={**env, "SLURM_RESTART_COUNT": "1"},
                           capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 0 and "requeue 2 of at most 3" in again.stdout
    assert (tmp_path / "log").read_text() == "requeued\n"
    last = subprocess.run(["bash", str(tmp_path / "job.sh")], env={**env, "SLURM_RESTART_COUNT": "3"},
                          capture_output=True, text=True)  # fmt: skip
    assert last.returncode == 3 and "not requeueing 7_0: it was requeued 3 times" in last.stdout
    assert (tmp_path / "log").read_text() == "requeued\n"  # not requeued again


class Said(io.StringIO):
    """stderr that sets an event once a phrase is written (capsys, read from another thread while
    this one writes, can lose the write: a test that waited on it hung)."""

    def __init__(self, phrase: str):
        super().__init__()
        self.phrase, self.event = phrase, threading.Event()

    def write(self, text: str) -> int:
        if self.phrase in text:
            self.event.set()
        return super().write(text)


def test_a_leaderboard_waits_for_another_writing_into_the_same_folder_and_leaves_its_files_alone(tmp_path, monkeypatch):
    # two leaderboards into one --out deleted each other's temporaries, and the loser failed on them
    import fcntl

    runs, out = tmp_path / "runs", tmp_path / "board"
    train(as_cells([resolve({}, CELL, seed) for seed in (0, 1)], [runs / "a", runs / "b"]), CPU)
    out.mkdir()
    theirs = out / ".index.md.other.tmp"  # the other writer's file, half written
    theirs.write_bytes(b"half")
    other = os.open(out, os.O_RDONLY)
    fcntl.flock(other, fcntl.LOCK_EX)
    said = Said("waiting for the leaderboard being written into")
    monkeypatch.setattr(sys, "stderr", said)
    written = []
    second = threading.Thread(target=lambda: written.extend(generate(runs, out)))
    second.start()
    while not said.event.wait(0.05):
        assert second.is_alive(), "it wrote without waiting"
    assert theirs.read_bytes() == b"half" and not (out / "index.md").exists()
    os.close(other)  # the other writer is done
    second.join()
    assert "index.md" in written and (out / "index.md").exists()


TUNING = """[tuning]
trials = 2
tuning_seeds = [100]
final_seeds = [0, 1, 2, 3, 4]
[tuning.methods.adam]
opt = "adam"
space = { lr = [0.01, 0.001] }
[tuning.methods.sgd]
opt = "sgd"
space = { lr = [0.1, 0.01] }
"""
FULL_DISK_IN_WORKERS = """import errno, os, sys
if "chunk" in sys.argv:  # a grid's worker process, on a disk that is full
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    os.fsync = full
"""


@pytest.mark.parametrize("command", ["grid", "tune"])
def test_a_full_disk_in_a_grids_workers_is_one_line_naming_the_file_not_a_line_per_cell(
    tmp_path, capsys, monkeypatch, command
):
    # the workers are processes of their own: the fault is injected into them by a sitecustomize module
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(FULL_DISK_IN_WORKERS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "inject"), os.getenv("PYTHONPATH")])))
    grid = TINY_FIXED + ('[axes]\nop = ["add", "mul"]\nopt = ["adam", "sgd"]\n' if command == "grid" else TUNING)
    (tmp_path / "g.toml").write_text(grid)
    code = main([command, str(tmp_path / "g.toml"), "--root", str(tmp_path / "runs"), "--workers", "2"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert code == 1 and len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    assert "No space left on device" in errors[0] and str(tmp_path / "runs") in errors[0]
    assert errors[0].split(": ")[1].endswith(".json")  # the file it could not write
    assert " failed " not in err and "Traceback" not in err


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 3), (signal.SIGINT, 130)])
def test_a_signal_while_the_data_is_built_stops_the_run_at_once_as_a_preemption(tmp_path, sig, code):
    # the polygons' render takes a minute or more on a busy CPU: it says how far it got, and a
    # signal ends it there (exit code 3 as a preempted run's, 130 for Ctrl-C), with nothing written
    out = tmp_path / "run"
    args = ["--task", "polygons", "--model", "mlp", "--set", "resolution=8", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SUITE_CACHE": str(tmp_path / "cache")}
    # a process of its own: the point is the signal and the exit code
    proc = subprocess.Popen([sys.executable, "-m", "suite", "run", *args], env=env, stderr=subprocess.PIPE, text=True)
    said = []
    while not (said and said[-1].startswith("polygons: rendering")):
        said.append(proc.stderr.readline())
        assert said[-1], f"the run ended before rendering: {''.join(said)}"
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == code
    last = proc.stderr.read().strip().splitlines()[-1]
    assert last in (
        "stopped: SIGTERM before the first training step: nothing to resume",
        "interrupted before the first training step; run the same command again to start",
    )
    assert not out.exists() and not list((tmp_path / "cache").glob("*.pt"))


@pytest.mark.parametrize("step", [0, 30])
def test_a_signal_during_an_evaluation_ends_it_there_and_the_run_resumes_to_the_same_numbers(
    tmp_path, monkeypatch, capsys, step
):
    # a big model's evaluation takes minutes on a CPU: a signal then must not wait for it to end
    from suite.engine.stack import Stack

    assert main(["run", *ARGS, "--out", str(tmp_path / "reference")]) == 0
    evaluate = Stack.evaluate

    def signalled_at(stack, at):
        if at == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(stack, at)

    monkeypatch.setattr(Stack, "evaluate", signalled_at)
    out = tmp_path / "run"
    assert main(["run", *ARGS, "--out", str(out)]) == 3
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(0, step, 10))  # the evaluation it stopped wrote nothing
    if step:  # checkpointed where it stopped (CELL checkpoints every 20 steps, so only the stop writes 30)
        assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == step
        assert capsys.readouterr().err.strip().endswith(f"SIGTERM at step {step}: checkpointed in {out}")
    else:
        assert not (out / "checkpoint.pt").exists()
        assert capsys.readouterr().err.strip().endswith("SIGTERM before the first training step: nothing to resume")
    monkeypatch.setattr(Stack, "evaluate", evaluate)
    assert main(["run", *ARGS, "--out", str(out)]) == 0
    assert metrics_text(out) == metrics_text(tmp_path / "reference")


class Told(QuietTracker):
    """A tracker that records the results it is told."""

    def __init__(self, told):
        self.told = told

    def finish(self, result):
        self.told.append(result["spec"]["seed"])


def test_a_result_that_cannot_be_written_leaves_the_others_finished_and_told_and_its_own_run_resumable(
    tmp_path, monkeypatch
):
    from suite.engine import member

    real, told = member.write_json, []

    def full_for_seed_1(path, obj):
        if path.name == "result.json" and path.parent.name == "1":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, obj)

    monkeypatch.setattr(member, "write_json", full_for_seed_1)
    runs = [tmp_path / str(seed) for seed in range(2)]
    cells = as_cells([resolve({}, CELL, seed) for seed in range(2)], runs, [Told(told), Told(told)])
    with pytest.raises(OSError, match="No space left") as caught:  # its traceback keeps any lock left
        train(cells, CPU)
    assert told == [0] and (runs[0] / "result.json").exists()  # seed 0 finished beside it, and is told
    assert not (runs[1] / "result.json").exists() and not RunDir(runs[1]).is_locked(), caught  # let go
    monkeypatch.undo()
    (again,) = train(as_cells([resolve({}, CELL, 1)], runs[1:]), CPU)
    assert again["steps"] == 60


def test_a_fault_while_deciding_stops_leaves_no_member_counted_finished(tmp_path, monkeypatch):
    # a member concluded at an evaluation whose deciding then fails (a rival's damaged result.json) wrote nothing
    from suite.engine import train as loop

    real = loop.stop_reason

    def fails_on_the_second(m, cfg, step):
        if step == 30 and m.spec.seed == 1:
            raise rundir.UnreadableFile("a rival's result.json is damaged")
        return "target held" if step == 30 else real(m, cfg, step)

    monkeypatch.setattr(loop, "stop_reason", fails_on_the_second)
    runs = [tmp_path / str(seed) for seed in range(2)]
    with pytest.raises(rundir.UnreadableFile) as caught:  # its traceback keeps the members, and any lock left
        train(as_cells([resolve({}, CELL, seed) for seed in range(2)], runs), CPU)
    assert not any((run / "result.json").exists() or RunDir(run).is_locked() for run in runs), caught
