import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from suite.cli import cpu_flags, kernel_defaults  # imports no torch

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # tests share 2 cores with each other
# The command line's CPU kernels, set before torch is imported: what trains in this process runs the
# code a user's `python -m suite` runs (on an AVX-512 machine, too).
os.environ.update(kernel_defaults(os.environ, cpu_flags()))
REPO = Path(__file__).resolve().parents[1]


def cli(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """`python -m suite ...` in this process: suite.cli.main, as run_cli runs it (the environment
    with OMP_NUM_THREADS=1 and env added, torch on one thread, cwd), stdout and stderr captured,
    the exit code argparse's own exits too; the environment, torch's threads and the working folder
    are restored after. A fresh interpreter costs seconds of torch's import for milliseconds of
    work: run_cli is for tests whose point is the process (signals, a fresh import, concurrency)."""
    import torch

    from suite.cli import main

    out, err, saved, threads = io.StringIO(), io.StringIO(), dict(os.environ), torch.get_num_threads()
    os.environ.update({"OMP_NUM_THREADS": "1", **(env or {})})
    torch.set_num_threads(1)
    try:
        with contextlib.chdir(cwd or "."), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            end_wandb_session()
            try:
                code = main([str(a) for a in args])
            except SystemExit as exit:  # argparse: --version, --help, a bad flag
                code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
            finally:
                end_wandb_session()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def end_wandb_session() -> None:
    """W&B reads its environment (WANDB_MODE, WANDB_DIR, a sweep's) once a session, at its first run in
    a process: cli ends the session before and after each command, as the command's own process would."""
    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()


class ChunkHere:
    """What the local backend's Popen of a worker (`python -m suite chunk MANIFEST K`) gives, with the
    chunk run to its end at once in this process: the worker's environment (one thread), its output in
    the worker's log, its exit code; the environment, torch's threads and the stop signals' handlers
    (the chunk takes them over) restored after."""

    def __init__(self, argv, *, stdout, env, **_):
        import torch

        from suite.cli import main

        *_, command, manifest, index = map(str, argv)
        assert command == "chunk", argv
        saved, threads = dict(os.environ), torch.get_num_threads()
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
        os.environ.clear()
        os.environ.update(env)
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stdout):
                try:
                    self.returncode = main([command, manifest, index])
                except Exception:  # what the worker's Python would print, and its exit code
                    traceback.print_exc()
                    self.returncode = 1
        finally:
            stdout.flush()
            os.environ.clear()
            os.environ.update(saved)
            torch.set_num_threads(threads)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def poll(self) -> int:
        return self.returncode

    def send_signal(self, sig) -> None:
        pass  # it has ended


@contextlib.contextmanager
def chunks_here():
    """A local grid's (or tune's) workers run in this process, one after the other: for tests of what a
    grid or a tune computes, not of its processes (tests/test_grid.py, test_faults.py and test_code_identity.py
    run real workers). A worker is a fresh interpreter: seconds of torch's import for a tiny cell."""
    from types import SimpleNamespace

    from suite.launch import local

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(local, "subprocess", SimpleNamespace(Popen=ChunkHere, STDOUT=subprocess.STDOUT))
        yield


@pytest.fixture
def chunks_in_process():
    """chunks_here() for a test: a module asks for it with pytest.mark.usefixtures("chunks_in_process")."""
    with chunks_here():
        yield


def run_cli(*args, cwd=None, env=None, timeout=600):
    """`python -m suite ...` in a subprocess: the same path a user takes, for a test whose point is
    the process (cli runs the same command in this one)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "suite", *map(str, args)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# The tiny cell: a+b mod 11 (60 training pairs) on a small MLP, a second or two a run. The one
# definition for the tests that need a run, not particular numbers; a test changes or adds keys with
# {**TINY, ...}, and passes it to the command line with as_args or to a grid file with as_fixed.
TINY = {
    "p": 11,
    "train_frac": 0.5,
    "test_frac": 0.3,
    "batch_size": 32,
    "d": 16,
    "hidden": 32,
    "train.steps": 40,
    "eval_every": 10,
}


def as_args(settings: dict) -> list[str]:
    """Settings as the command line's flags: --set KEY=VALUE each."""
    return [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]


def as_fixed(settings: dict) -> str:
    """Settings as a grid file's [fixed] table."""
    lines = [f"{json.dumps(key) if '.' in key else key} = {json.dumps(value)}\n" for key, value in settings.items()]
    return "\n[fixed]\n" + "".join(lines)


# A grid's [fixed] table for modular cells that train in a second or two.
TINY_FIXED = as_fixed(TINY)

# A grid's [fixed] table of sparse parity, which a good point learns for good within tens of steps
# and a poor one not at all in 100 (each test adds its own train.patience)
PARITY_FIXED = """
[fixed]
task = "sparse_parity"
n_bits = 8
k = 2
n_examples = 256
batch_size = 32
d = 16
hidden = 32
"train.steps" = 100
eval_every = 10
hold = 20
"""

# a [tuning] table of one method and one point: the tune command's paths in a few runs
ONE_POINT = """
[tuning]
trials = 1
tuning_seeds = [100]
final_seeds = [0, 1, 2, 3, 4]
[tuning.methods.adam]
opt = "adam"
space = { lr = [0.01] }
"""


class QuietTracker:
    """A tracker (suite.specs.contracts.Tracker) that does nothing: tests' trackers override what they watch."""

    def start(self):
        pass

    def log(self, record, step):
        pass

    def finish(self, result):
        pass

    def close(self, exit_code):
        pass


class PreemptAt(QuietTracker):
    """A tracker that sends this process SIGUSR1 at one evaluation, as Slurm does before a time limit."""

    def __init__(self, step):
        self.step = step

    def log(self, record, step):
        if step == self.step:
            os.kill(os.getpid(), signal.SIGUSR1)


def stack_of(specs):
    """The specs' members as the loop stacks them (one part), without run folders: a Stack at step 0."""
    import torch

    from suite import build
    from suite.engine.member import Member
    from suite.engine.plan import stacks

    (stack,) = stacks([Member.of(build(spec, updates=False)) for spec in specs], torch.device("cpu"))
    stack.start()
    return stack


def wait_for_step(proc: subprocess.Popen, out: Path, step: int) -> None:
    """Poll metrics.jsonl until the run has evaluated `step` (and so checkpointed before it)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended before step {step}: {proc.communicate()[1]}"
        lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
        if any(json.loads(line)["step"] >= step for line in lines[:-1]):
            return
        time.sleep(0.02)
    raise AssertionError(f"step {step} not reached")


def metrics_text(run_dir) -> str:
    """A run's metrics.jsonl without its clock (elapsed_s is a time, not a result): what two runs of
    one spec agree on byte for byte."""
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return "".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "elapsed_s"}) + "\n" for line in lines)


@pytest.fixture
def one_thread():
    """torch on one thread for the test: where a stack's members equal their separate runs bit for
    bit (README, "Exactness"); a module asks for it with pytest.mark.usefixtures("one_thread")."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def as_cells(specs, run_dirs, trackers=()):
    """The cells the loop takes: each spec with its run folder (and its tracker, where given)."""
    from suite.specs.cell import Cell

    trackers = list(trackers) or [None] * len(specs)
    return [Cell(spec, Path(d), tracker=t) for spec, d, t in zip(specs, run_dirs, trackers, strict=True)]


def plugin_package(root: Path, module_code: str, ep_name: str = "parity", group: str = "suite.tasks") -> dict:
    """A throwaway installed distribution (module + dist-info with an entry point) on PYTHONPATH."""
    (root / "outside_pkg").mkdir()
    (root / "outside_pkg/__init__.py").write_text(module_code)
    info = root / "outside_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{ep_name} = outside_pkg\n")
    return {"PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
