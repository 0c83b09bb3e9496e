"""Which runner wrote a result.json: the training loop, or a task's own runner (a probe).

Every result.json records its runner under "runner": "train" for the training loop, the
runner's registered name otherwise (the number probes' is "probe"). Files written before the
field existed are told apart by their spec, since only a trained run's spec has a "train"
block. Readers of results (the CLI's summaries, the backends, the leaderboards) dispatch on
this one function instead of probing for fields.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import subprocess
from pathlib import Path

TRAIN = "train"
SCHEMA_VERSION = 2  # of result.json; 1 (no field): files written before created_utc, hostname and device_name


def runner_of(result: dict) -> str:
    if "runner" in result:
        return result["runner"]
    spec = result.get("spec")
    return TRAIN if isinstance(spec, dict) and "train" in spec else "probe"


def has_full_spec(result) -> bool:
    """Is result a result of this suite: a JSON object whose spec holds every block its readers use
    (task and model; for a trained run also its optimizer, filter, sampler and train settings)?"""
    spec = result.get("spec") if isinstance(result, dict) else None
    if not isinstance(spec, dict):
        return False
    needed = ("task", "model", "opt", "filter", "sampler", "train") if runner_of(result) == TRAIN else ("task", "model")
    return all(isinstance(spec.get(kind), dict) for kind in needed)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def damage_of(result: dict) -> str | None:
    """What in a training run's result.json is not what the suite writes (a hand edit, another
    program), or None."""
    spec, train = result["spec"], result["spec"].get("train")
    if not isinstance(train, dict) or not is_int(spec.get("seed")):
        return "its spec has no train settings or no integer seed"
    for key in ("steps", "eval_every"):
        if not (is_int(train.get(key)) and train[key] > 0):
            return f"train.{key} is {train.get(key)!r}, not a positive integer"
    if "grok_step" not in result:  # a run that never grokked has null: one without is no run's result
        return "it has no grok_step, which every result the suite writes has"
    for key in ("memorization_step", "grok_step", "first_touch_step"):
        if result.get(key) is not None and not is_int(result[key]):
            return f"{key} is {result[key]!r}, not an integer or null"
    wall = result.get("wall_s")
    if wall is not None and not (isinstance(wall, int | float) and not isinstance(wall, bool)):
        return f"wall_s is {wall!r}, not a number"
    if result.get("git_commit") is not None and not isinstance(result["git_commit"], str):
        return f"git_commit is {result['git_commit']!r}, not a string"
    return None


CHECKOUT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> subprocess.CompletedProcess | None:
    """git in the suite's own checkout; None when the suite is installed (a venv inside some other
    repository must not lend it that repository's commit)."""
    if not (CHECKOUT / ".git").exists():
        return None
    try:
        return subprocess.run(["git", *args], cwd=CHECKOUT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> str | None:
    """The suite's commit, recorded in every result: the checkout's HEAD, or for an installed wheel
    the commit it was built from (suite/COMMIT, written by suite/_build/commit_stamp.py); None when
    neither is known."""
    out = _git("rev-parse", "HEAD")
    if out is not None:
        return out.stdout.strip() or None
    stamp = Path(__file__).resolve().parents[1] / "COMMIT"
    return (stamp.read_text().strip() or None) if stamp.is_file() else None


def git_dirty() -> bool | None:
    """Whether the checkout has uncommitted changes to tracked files (then a result describes more
    than its commit); None outside a git checkout."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return bool(out.stdout.strip()) if out and out.returncode == 0 else None


def machine(device) -> dict:
    """Where and when a result was made: the schema of the file, the UTC time, the host, and the
    device's model (the GPU's name, or the CPU's, since rounding and speed depend on it)."""
    import torch

    if torch.device(device).type == "cuda":
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        name = _cpu_model()
    return {
        "schema_version": SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "device_name": name,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(size: int, device, compile: bool) -> dict:
    """How a result was made, recorded in it. Threads and the CPU's kernels (ATen's vector width, MKL's
    code path: suite/cli.py pins both) change the rounding on CPU (README, "Many seeds at once") and the
    wait policy the speed, so all are recorded beside the commit."""
    import torch

    return {
        "stack_size": size,
        "device": str(device),
        "compiled": compile,
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        **machine(device),
    }


# result.json's fields as written before they were renamed, and their names now: "ensemble_size" (the
# members of the stack that trained the run) is "stack_size". The committed runs under leaderboards/
# keep the old name; every reader takes either.
OLD_FIELDS = {"ensemble_size": "stack_size"}


def current_fields(result: dict) -> dict:
    """result with its fields under their names now (a field under its new name wins over its old one):
    a result.json written before a rename reads as one written now."""
    return {OLD_FIELDS.get(k, k): v for k, v in result.items() if OLD_FIELDS.get(k) not in result}


def stack_size(result: dict) -> int:
    """How many members the stack that trained the run had (1: alone), under either name."""
    return result.get("stack_size", result.get("ensemble_size", 1))


def headline(result: dict) -> str:
    """What a one-line report of a finished run shows: a trained run's grok step, a probe's
    best ordered layers."""
    if runner_of(result) == TRAIN:
        return f"grok_step {result['grok_step']}"
    best = {
        name: (result[name].get("best") or {}).get("by_ev_ordered")
        for name in ("numbers", "letters")
        if isinstance(result.get(name), dict)
    }
    return "  ".join(f"{name}: ordered layer {row['layer'] if row else 'none'}" for name, row in best.items())


def summary(result: dict, who: str = "") -> str | None:
    """The line `suite run` prints for a trained run (a probe prints its own as it goes: None)."""
    if runner_of(result) != TRAIN:
        return None
    shared = stack_size(result)
    val = result["final_val_acc"]
    touch = (
        f"  (first touch {result['first_touch_step']})" if result.get("first_touch_step") != result["grok_step"] else ""
    )
    return (
        who + f"memorization_step {result['memorization_step']}  grok_step {result['grok_step']}{touch}  "
        f"delay {result['delay']}  final val_acc {'-' if val is None else f'{val:.4f}'}  "
        f"{result['steps']} steps in {result['wall_s']:.1f} s on {result['device']}"
        + (f" (its share of a stack of {shared})" if shared > 1 else "")
        + ("  COLLAPSED: val acc fell below half the target after touching it" if result.get("collapsed") else "")
        + (
            f"  AT CHANCE: train and val acc fell to chance at step {result['chance_step']:,}"
            + (", and stayed there: stopped" if result["stop_reason"] == "at chance" else "")
            if result.get("chance_step") is not None
            else ""
        )
        + (
            "  NEVER LEARNED: train and val acc never left chance: stopped"
            if result.get("stop_reason") == "never learned"
            else ""
        )
        + (
            "  DIVERGED: loss or parameters not finite; final values are the last finite evaluation's"
            if result.get("stop_reason") == "diverged"
            else ""
        )
    )
