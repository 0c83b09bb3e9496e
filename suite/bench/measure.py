"""The bench's measurements, one function per section (suite/bench/__init__.py runs them in turn).

Figures carry their unit in their key: *_s seconds, *_flop FLOPs, *_flop_per_s FLOP/s,
*_runs_per_h runs per hour; ratios, fractions and speed-ups have none.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from suite.engine import precision
from suite.engine.measures import LOSSES
from suite.errors import SuiteError
from suite.specs.spec import resolve, runner_of_task, spec_id

SECTIONS = ("matmul", "plain", "steps", "profile", "stacks", "precision", "probe", "compile")
OLD_SECTIONS = {"ensembles": "stacks"}  # a section's name before it was renamed: --skip and old reports use it
MODELS = {"mlp": {"model": "mlp", "opt": "adam"}, "transformer": {"model": "transformer", "opt": "adamw"}}
SAMPLERS = {"batch512": {"sampler": "random"}, "full": {"sampler": "full"}}  # random's default batch is 512
NO_EARLY_STOP = {"train.patience": None}  # the loop runs its whole budget
EVAL_EVERY = 50  # the loop's default; fewer steps than this evaluate at the start and end only
RUN_STEPS = 2000  # runs per hour are for runs of this length (the default cell groks at ~1700, stops at ~2200)


class Options:
    """What to run and how long. --quick: the same code paths on a tiny task, in seconds."""

    def __init__(
        self,
        *,
        steps: int | None = None,
        stacks: str | None = None,
        skip: str = "",
        quick: bool = False,
        repeats: int | None = None,
    ):
        self.stacks = parse_stacks(stacks or ("1,2" if quick else "1,8,32"))
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


def parse_stacks(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SuiteError(f"--stacks takes sizes like 1,8,32, got '{text}'") from None
    if not sizes or min(sizes) < 1:
        raise SuiteError(f"--stacks takes positive sizes like 1,8,32, got '{text}'")
    return sorted(set(sizes) | {1})  # K = 1 is what the others are compared with


def parse_skip(text: str) -> set[str]:
    skip = {OLD_SECTIONS.get(part.strip(), part.strip()) for part in text.split(",") if part.strip()}
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
    """The limits a run with precision tf32 or bf16 is held to: on a GPU the best FLOP/s of fp32
    products computed in TF32 and of bf16 products; on a CPU of bf16 products (native on AVX-512
    BF16 or AMX, emulated elsewhere: suite.engine.precision.cpu_bf16_units says which)."""
    rates = {}
    if device.type == "cuda":
        with precision.matmul_mode("tf32", device):
            rates["tf32"] = matmul_rates(device, sizes, min_s)
    rates["bfloat16"] = matmul_rates(device, sizes, min_s, torch.bfloat16)
    return {name: max(r.values()) for name, r in rates.items()}


def matmul_limit(passes: list[dict[str, float]]) -> dict:
    """The limit over passes taken at the start and the end of the bench: on a shared machine
    a pass that ran beside someone else's job reads low, and the best is what the machine can do."""
    best = {n: max(p[n] for p in passes) for n in passes[0]}
    return {
        "dtype": "float32",
        "passes_flop_per_s": passes,
        "per_size_flop_per_s": best,
        "limit_flop_per_s": max(best.values()),
    }


# --- 2. the suite against a plain PyTorch loop -------------------------------------------------


def timed_process(args: list[str]) -> tuple[float, str]:
    """Wall seconds of a fresh interpreter running args (start-up included: what a user waits for), and its stdout."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(
            f"{' '.join(args[:3])} exited with {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}"
        )
    return time.monotonic() - t0, proc.stdout


def plain_section(options: Options, root: Path) -> dict:
    """A single run of the default cell, `python -m suite run`, against the same steps and
    evaluations as a plain PyTorch script (`python -m suite.bench.plain`, suite/bench/plain.py), each a fresh
    process, `repeats` times, interleaved so that both see the same machine. Ratios of the best of
    each: on a shared machine the fastest repeat is the least disturbed one."""
    spec = cell_spec({}, options)
    flags = [
        f"--set={k}={v}"
        for k, v in {**options.settings, "train.eval_every": spec["train"]["eval_every"], **NO_EARLY_STOP}.items()
    ]
    walls, inner, last = {"suite": [], "plain": []}, {"suite": [], "plain": []}, {}
    for r in range(options.repeats):
        log(
            f"plain: a suite run and a plain PyTorch loop, {options.steps} steps each, "
            f"repeat {r + 1} of {options.repeats}"
        )
        run = ["-m", "suite", "run", "--steps", str(options.steps), *flags, "--device=cpu", f"--out={root / str(r)}"]
        wall, out = timed_process(run)
        result = json.loads(Path(out.strip().splitlines()[-1]).read_text())
        walls["suite"].append(wall)
        inner["suite"].append(result["wall_s"])
        wall, out = timed_process(["-m", "suite.bench.plain", json.dumps(spec)])
        plain = json.loads(out)
        walls["plain"].append(wall)
        inner["plain"].append(plain["loop_s"])
        last = {"suite": result, "plain": plain}
    best = {name: min(w) for name, w in walls.items()}
    loop = {name: min(t) for name, t in inner.items()}
    return {
        "cell": "modular mlp adam random(batch 512)",
        "p": spec["task"]["p"],
        "steps": options.steps,
        "eval_every": spec["train"]["eval_every"],
        "repeats": options.repeats,
        "suite_wall_s": walls["suite"],
        "plain_wall_s": walls["plain"],
        "suite_best_s": best["suite"],
        "plain_best_s": best["plain"],
        "ratio": best["suite"] / best["plain"],
        "suite_loop_s": inner["suite"],
        "plain_loop_s": inner["plain"],
        "loop_ratio": loop["suite"] / loop["plain"],
        "final_val_acc": {"suite": last["suite"]["final_val_acc"], "plain": last["plain"]["val_acc"]},
    }


# --- 3. pure and whole steps -------------------------------------------------------------------


def cell_spec(cell: dict, options: Options, seed: int = 0, settings: dict | None = None) -> dict:
    steps = {"train.steps": options.steps, "train.eval_every": min(EVAL_EVERY, options.steps)}
    return resolve(cell, {**options.settings, **steps, **NO_EARLY_STOP, **(settings or {})}, seed)


def pure_step(spec: dict, device: torch.device, options: Options, compile_model: bool = False) -> dict:
    """Median time of forward + backward + optimizer.step on one fixed batch (no sampling, no evaluation).

    Built through the registry as the loop builds it. With compile_model, the first step's time
    (compiling forward and backward) is reported as compile_s and left out of the median.
    """
    from suite.engine.build import build

    torch.set_flush_denormal(True)  # as the loop does
    run = build(spec, device)
    model, optimizer = run.model, run.optimizer
    batch = run.sampler.next().to(device)
    x, y = run.data.x_train[batch], run.data.y_train[batch]
    loss_fn = LOSSES[spec["train"]["loss"]]
    forward = torch.compile(model) if compile_model else model

    def step():
        with precision.autocast(spec["train"]["precision"], device):
            logits = forward(x).float()
        loss = loss_fn(logits, y)
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
    times = []
    with precision.matmul_mode(spec["train"]["precision"], device):
        for _ in range(options.warmup_steps + options.timed_steps):
            sync(device)
            t0 = time.perf_counter()
            step()
            sync(device)
            times.append(time.perf_counter() - t0)
    out["step_s"] = statistics.median(times[options.warmup_steps :])
    if not compile_model:
        with FlopCounterMode(display=False) as counter, precision.autocast(spec["train"]["precision"], device):
            loss_fn(model(x).float(), y).backward()
        out["flop"] = counter.get_total_flops()
        out["flop_per_s"] = out["flop"] / out["step_s"]
    return out


def train_runs(specs: list[dict], device: torch.device, root: Path) -> tuple[float, list[dict]]:
    """The bench's one call of the training loop: the specs (seeds of one cell: one stack
    where that is exact) into fresh run folders under root. Returns the wall seconds of the call
    (build, loop, writes: what a user waits for) and the results."""
    from suite.engine.train import train
    from suite.specs.cell import Cell

    cells = [Cell(spec, root / f"{spec_id(spec)}-seed{spec['seed']}") for spec in specs]
    t0 = time.monotonic()
    results = train(cells, device)
    return time.monotonic() - t0, results


def whole_step(spec: dict, device: torch.device, root: Path) -> dict:
    """The loop's real step: wall_s / steps from its result (evaluation and progress measures included)."""
    _, (result,) = train_runs([spec], device, root)
    return {
        "steps": result["steps"],
        "wall_s": result["wall_s"],
        "step_s": result["wall_s"] / result["steps"],
        "eval_every": spec["train"]["eval_every"],
    }


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
                "model": model_cell["model"],
                "opt": model_cell["opt"],
                "sampler": sampler_cell["sampler"],
                "batch": pure["batch"],
                "pure_step_s": pure["step_s"],
                "flop": pure["flop"],
                "achieved_flop_per_s": pure["flop_per_s"],
                "fraction_of_limit": None,  # set once the limit is known (measured at both ends of the bench)
                "whole_step_s": whole["step_s"],
                "whole_steps": whole["steps"],
                "whole_wall_s": whole["wall_s"],
                "eval_every": whole["eval_every"],
                "overhead_ratio": whole["step_s"] / pure["step_s"],
            }
    return {"task": "modular", "p": spec["task"]["p"], "optimizer_flops_counted": False, "cells": cells}


# --- 4. stacks -----------------------------------------------------------------------------------


def stack_section(device: torch.device, options: Options, root: Path, report: dict) -> dict:
    """K seeds of the default cell (MLP, adam, batch 512) as one stack vs K sequential runs; and K
    members that differ in their learning rate too (log-spaced 1e-2 down to 1e-3), as a tuning grid's
    stack trains them: one Adam over the stack with a learning rate per member (suite/engine/updates.py's
    SettingsUpdate; `python -m suite.bench.member_settings` times it against one optimizer per member).
    Each size goes into report["stacks"] as it is measured, so a bench stopped midway keeps the
    sizes it took."""
    section = report["stacks"] = {
        "cell": "modular mlp adam random(batch 512)",
        "steps": options.steps,
        "normalised_to_steps": RUN_STEPS,
        "wall": "seconds of the whole train() call (build, loop, writes)",
        "sizes": {},
    }
    rows = section["sizes"]
    for k in options.stacks:
        specs = [cell_spec({}, options, seed) for seed in range(k)]
        log(f"stack K = {k}: {options.steps} steps")
        wall, results = train_runs(specs, device, root / f"stack{k}")
        row = rows[str(k)] = {
            "k": k,
            "wall_s": wall,
            "trained_as_stack_of": results[0]["stack_size"],
            "runs_per_h": k * 3600 / wall * (options.steps / RUN_STEPS),
        }
        if "1" in rows:  # K sequential runs of one
            row["sequential_wall_s"] = k * rows["1"]["wall_s"]
            row["sequential_runs_per_h"] = k * 3600 / row["sequential_wall_s"] * (options.steps / RUN_STEPS)
            row["speedup"] = row["runs_per_h"] / row["sequential_runs_per_h"]
        if k > 1:
            log(f"stack K = {k}, a learning rate per member: {options.steps} steps")
            mixed = [cell_spec({}, options, i, {"opt.lr": 1e-2 * 10 ** (-i / (k - 1))}) for i in range(k)]
            wall, mixed_results = train_runs(mixed, device, root / f"mixed{k}")
            row |= {
                "lr_per_member_wall_s": wall,
                "lr_per_member_trained_as_stack_of": mixed_results[0]["stack_size"],
                "lr_per_member_runs_per_h": k * 3600 / wall * (options.steps / RUN_STEPS),
            }
    return section


# --- 5. the number probe ---------------------------------------------------------------------------


def probe_section(device: torch.device, root: Path) -> dict:
    spec = resolve({"task": "number_probe"}, {}, 0)
    runner = runner_of_task("number_probe")
    log(f"number probe on {spec['model']['name']}")
    t0 = time.monotonic()
    result = runner.build(spec, root / "probe", device)
    return {
        "model": spec["model"]["name"],
        "wall_s": time.monotonic() - t0,
        "timings_s": result.get("timings", {}),
        "threads": result.get("threads"),
    }


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
            row |= {
                "compiled_step_s": compiled["step_s"],
                "compile_s": compiled["compile_s"],
                "speedup": eager["step_s"] / compiled["step_s"],
            }
        cells[model_name] = row
    return {
        "what": "pure step at batch 512, torch.compile(model); optimizer not compiled",
        "compile_s": "the first compiled step; inductor caches its code on disk, so a repeat on this machine "
        "compiles faster",
        "cells": cells,
    }
