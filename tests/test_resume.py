"""Never lose a result: SIGKILL and resume, corrupt checkpoints, concurrent writers."""

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import cli, metrics_text, wait_for_step

from suite.results.rundir import RunDir, RunLocked, write_json

# A run that takes a few seconds, checkpoints every 100 steps and never stops early.
LONG = [
    "--set",
    "p=23",
    "--set",
    "d=32",
    "--set",
    "hidden=64",
    "--set",
    "batch_size=64",
    "--set",
    "eval_every=50",
    "--set",
    "checkpoint_every=100",
    "--set",
    "patience=none",
    "--steps",
    "2500",
]
TIMING = {"wall_s", "steps_per_s", "git_commit", "created_utc"}  # git_commit: others may commit meanwhile


def start(out: Path) -> subprocess.Popen:
    """The run in a process of its own: the tests kill or signal it."""
    return subprocess.Popen(
        [sys.executable, "-m", "suite", "run", *LONG, "--out", str(out)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same run, never interrupted."""
    out = tmp_path_factory.mktemp("reference") / "run"
    proc = cli("run", *LONG, "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out


def assert_same_run(out: Path, reference: Path) -> None:
    assert metrics_text(out) == metrics_text(reference)
    ours, theirs = (json.loads((d / "result.json").read_text()) for d in (out, reference))
    assert {k: v for k, v in ours.items() if k not in TIMING} == {k: v for k, v in theirs.items() if k not in TIMING}
    assert not (out / "checkpoint.pt").exists() and not (out / "checkpoint.prev.pt").exists()


def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(tmp_path, reference):
    out = tmp_path / "run"
    proc = start(out)
    wait_for_step(proc, out, 1000)
    proc.kill()  # SIGKILL: no handler runs, no final checkpoint
    proc.wait()
    assert not (out / "result.json").exists() and (out / "checkpoint.pt").exists()
    assert RunDir(out).status() == "interrupted"  # the OS released the lock
    resumed = cli("run", *LONG, "--out", out)
    assert resumed.returncode == 0, resumed.stderr
    step = int(resumed.stderr.split("from step ")[1].split()[0])
    assert 1000 <= step < 2500
    assert_same_run(out, reference)


def preempted(tmp_path: Path) -> Path:
    """A run stopped by SIGUSR1 (Slurm's warning): exit 3 with checkpoint.pt and checkpoint.prev.pt."""
    out = tmp_path / "run"
    proc = start(out)
    wait_for_step(proc, out, 1000)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=120) == 3
    assert "checkpointed" in proc.stderr.read()
    assert (out / "checkpoint.pt").exists() and (out / "checkpoint.prev.pt").exists()
    return out


@pytest.mark.parametrize("damage", ["newest", "both"])
def test_corrupt_checkpoint_is_reported_and_the_run_restarts_from_the_last_good_state_or_is_refused(
    tmp_path, reference, damage
):
    out = preempted(tmp_path)
    good = torch.load(out / "checkpoint.prev.pt", weights_only=True)["step"]
    data = (out / "checkpoint.pt").read_bytes()
    (out / "checkpoint.pt").write_bytes(data[: len(data) // 2])  # truncated, as by a full disk
    if damage == "both":
        (out / "checkpoint.prev.pt").write_bytes(b"\x00garbage" * 100)
        before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".lock"}
        refused = cli("run", *LONG, "--out", out)  # starting again would overwrite its metrics: the user decides
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert (
            refused.stderr.startswith(f"error: no readable checkpoint in {out}")
            and "delete checkpoint.pt" in refused.stderr
        )
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".lock"} == before  # nothing written
        for name in ("checkpoint.pt", "checkpoint.prev.pt"):
            (out / name).unlink()
    resumed = cli("run", *LONG, "--out", out)
    assert resumed.returncode == 0, resumed.stderr
    if damage == "newest":
        assert f"checkpoint {out / 'checkpoint.pt'} is unreadable" in resumed.stderr
        assert "resuming from the last good checkpoint" in resumed.stderr and f"from step {good}" in resumed.stderr
    assert_same_run(out, reference)


class Trap:
    """Unpickling this object would create a file: a checkpoint must never run code."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_checkpoints_load_without_unpickling_arbitrary_objects(tmp_path, capsys):
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    rd.save_checkpoint({"step": 7, "w": torch.ones(2)})
    rd.save_checkpoint({"step": 9, "w": torch.zeros(2)})
    torch.save({"step": 11, "evil": Trap(tmp_path / "pwned")}, rd / "checkpoint.pt", pickle_module=pickle)
    state = rd.load_checkpoint("cpu")
    assert state["step"] == 7 and not (tmp_path / "pwned").exists()
    assert "unreadable" in capsys.readouterr().err


def test_a_torn_last_metrics_line_does_not_stop_a_resume(tmp_path):
    rd = RunDir(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "val_acc": 0.1}\n{"step": 50, "val_ac')
    assert rd.read_metrics() == [{"step": 0, "val_acc": 0.1}]


WRITER = """
import json, sys, time
from pathlib import Path
from suite.results.rundir import RunDir, RunLocked, write_json
from suite.specs.spec import default_run_dir
root, i = Path(sys.argv[1]), int(sys.argv[2])
while not (root / "go").exists():
    time.sleep(0.001)
opt = ["adam", "sgd", "adamw", "adamlr"][i % 4]
spec = {"task": {"name": "modular"}, "model": {"name": "mlp"}, "opt": {"name": opt},
        "sampler": {"name": "random"}, "filter": {"name": "none"}, "seed": i // 4}
rd = RunDir(default_run_dir(spec, root))
rd.lock()
write_json(rd / "spec.json", spec)
with rd.restart_metrics([]) as f:
    for step in range(50):
        f.write(json.dumps({"step": step, "writer": i}) + "\\n")
write_json(rd / "result.json", {"spec": spec, "writer": i, "payload": "x" * 100_000})
rd.unlock()
"""

READER = """
import json, sys, time
from pathlib import Path
root = Path(sys.argv[1])
while not (root / "go").exists():
    time.sleep(0.001)
reads, deadline = 0, time.monotonic() + 120
while len(list(root.rglob("result.json"))) < 64 and time.monotonic() < deadline:
    for path in root.rglob("result.json"):
        json.loads(path.read_text())  # never a half-written file
        reads += 1
print(reads)
"""


def test_64_concurrent_writers_into_one_results_folder_lose_nothing(tmp_path):
    """64 processes finish at the same instant into 4 shared cell folders (as array tasks do),
    while a reader keeps parsing every result it sees: every file lands whole, none is torn."""
    root = tmp_path / "runs"
    root.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(i)], env=env, stderr=subprocess.PIPE)
        for i in range(64)
    ]
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(root)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1.0)  # let them all start and wait at the line
    write_json(root / "go", {})
    for proc in writers:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0 and int(out) >= 64, err
    results = sorted(root.rglob("result.json"))
    assert len(results) == 64 and len({p.parent.parent for p in results}) == 4
    writers_seen = sorted(json.loads(p.read_text())["writer"] for p in results)
    assert writers_seen == list(range(64))
    for path in results:
        rd = RunDir(path.parent)
        assert rd.status() == "done"
        assert len(rd.read_metrics()) == 50
    assert not [p for p in root.rglob("*.tmp")]  # no temporary file left behind


def test_a_resume_that_diverges_at_its_first_evaluation_keeps_the_last_one_before(tmp_path, monkeypatch):
    # a run never stopped reports its last finite evaluation; resumed, it knew none until it evaluated again
    from suite.cli import main
    from suite.engine.stack import Stack

    out = preempted(tmp_path)
    last = json.loads(metrics_text(out).splitlines()[-1])
    monkeypatch.setattr(Stack, "evaluate", lambda self, step: [None] * len(self.live))  # diverged at once
    assert main(["run", *LONG, "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "diverged"
    assert (result["final_val_acc"], result["final_train_loss"]) == (last["val_acc"], last["train_loss"])


def test_a_folder_another_process_runs_in_is_never_discarded(tmp_path):
    # --rerun-changed empties a run made by other code: never one whose owner still trains in it
    owner = RunDir(tmp_path / "run")
    owner.lock()  # flock is per open file: a second open in this process is another process to it
    (tmp_path / "run" / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(RunLocked):
        RunDir(tmp_path / "run").discard()
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    owner.unlock()
    RunDir(tmp_path / "run").discard()
    assert not (tmp_path / "run").exists()


def test_a_lock_given_up_while_another_waits_on_it_is_held_by_one_process_at_a_time(tmp_path):
    # abandon() removes the folder its lock() made: a process that was waiting on the old lock file
    # must not hold a lock on a file no longer there while a third locks the new one
    import threading

    first, waiter = RunDir(tmp_path / "a" / "run"), RunDir(tmp_path / "a" / "run")
    first.lock()
    got = threading.Thread(target=waiter.lock, kwargs={"tries": 200})  # up to 10 s
    got.start()
    time.sleep(0.3)  # the waiter is retrying on the lock file first holds
    first.abandon()
    got.join()
    assert waiter._lock is not None and (tmp_path / "a" / "run" / ".lock").exists()
    with pytest.raises(RunLocked):
        RunDir(tmp_path / "a" / "run").lock(tries=2)
