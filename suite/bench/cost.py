"""What a step of a spec costs: milliseconds per training step, measured alike for every spec, and
each parameter group's weight decay per step.

A board compares methods in steps; a method that needs fewer steps may pay more for each (Muon's
Newton-Schulz iterations, a gradient filter's extra pass over the gradients), so each row needs its
step's time taken the same way: the run built as the loop builds it (suite.build,
suite.engine.plan.stacks), then the loop's own step (suite.engine.train.train_step: the batch,
forward, loss, backward, filter, clip, optimizer; no evaluation) on one torch thread, `warmup`
steps, then REPEATS stretches of `steps` steps, the median stretch's ms per step. On a CPU the
clock is that thread's CPU time (the whole step runs on it, backward included), so a row costs
what its step computes, not how long it waited for a core: on 2 cores shared with two other
processes, a step's wall time doubled while its thread time grew ~10-15% (cache, memory). On a
GPU it is wall time, the device synchronised around each stretch.

    from suite.bench.cost import measure, measure_all
    measure(resolve({"opt": "muon"}))["ms_per_step"]
    measure_all({"adam": spec_a, "muon": spec_m}, Path("cost.json"))   # resumes where it stopped

The groups are the optimizer's parameter groups as built (before any warmup scales their rate),
named by the model's roles (suite.specs.contracts.ParamGroups): "all", "embedding", "hidden"
(Muon's matrices), "rest" (what the optimizer's other groups leave), else "group N". Decoupled
decay shrinks a parameter by lr x weight_decay each step (AdamW; Muon's matrices at muon_lr;
Adam-LR's embedding at c x lr): its decay_per_step. Coupled L2 adds weight_decay x p to the
gradient and shrinks nothing by a fixed rate: coupled is true, decay_per_step None.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import platform
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch

from suite.bench.measure import sync
from suite.components.optimizers import MuonAdamW
from suite.engine import precision
from suite.engine.build import build
from suite.engine.member import Member
from suite.engine.plan import stacks
from suite.engine.train import resolve_device, train_step
from suite.errors import SuiteError
from suite.results.rundir import cannot_write, read_json, rng_states, set_rng_states, writable_dir, write_json
from suite.specs.contracts import ParamGroups
from suite.specs.spec import spec_id

REPEATS = 3  # stretches of `steps` steps; the median is the figure
TIMERS = {"wall": time.perf_counter, "thread CPU time": time.thread_time}  # a clock's name, and how it is read


def measure(spec: dict, steps: int = 200, warmup: int = 20, device: str = "cpu") -> dict:
    """The spec's ms per training step on one thread of `device`, and its optimizer's parameter groups."""
    _check(spec, steps, warmup)
    where = resolve_device(device)
    precision.check(spec["train"]["precision"], where)
    with _as_the_loop_steps(where):
        member = Member.of(build(spec, where))  # its optimizer as a separate run builds it: its groups
        groups = parameter_groups(member.optimizer, ParamGroups.of(member.model))
        (stack,) = stacks([member], where)
        ms = _ms_per_step(stack, steps, warmup, where)
    return {
        "ms_per_step": ms,
        "steps": steps,
        "threads": 1,
        "clock": clock_of(where),
        "device": str(where),
        "groups": groups,
    }


def measure_all(
    specs: dict[str, dict],
    path: Path,
    steps: int = 200,
    warmup: int = 20,
    device: str = "cpu",
    progress: Callable[[str], object] | None = None,
    replace_other: bool = False,
) -> dict:
    """measure() each spec into the JSON file at path, written (atomically) after each, beside the
    machine they were measured on. A name the file already holds for the same spec is not measured
    again, so an interrupted call resumes; a file measured on another machine or with other steps
    is refused rather than mixed with (replace_other: measured again, every row, here). Returns what
    the file holds."""
    for spec in specs.values():  # before the file is written
        _check(spec, steps, warmup)
    where = resolve_device(device)
    how = {"machine": machine(where), "clock": clock_of(where), "steps": steps, "warmup": warmup, "repeats": REPEATS}
    path = Path(path)
    report = _resumed(path, how, replace_other)
    ids = {name: spec_id(spec) for name, spec in specs.items()}
    todo = [name for name in specs if report["specs"].get(name, {}).get("spec_id") != ids[name]]
    for i, name in enumerate(todo, 1):
        if progress is not None:
            progress(f"cost {i} of {len(todo)}: {name}")
        report["specs"][name] = {"spec_id": ids[name]} | measure(specs[name], steps, warmup, device)
        _write(path, report)
    return report


def estimate(runs: list[tuple[dict, int]], device: str = "cpu", steps: int = 3, warmup: int = 1) -> tuple[float, int]:
    """Seconds of process time (one thread) that `count` runs of each spec take at most: each run to
    its budget at the ms per step measured here, a few steps once per distinct shape (the task by
    name, the model and sampler with their settings, the optimizer and filter by name, the precision:
    what a step's cost mostly depends on). Returns the seconds and the number of shapes measured."""
    per_step: dict[str, float] = {}
    total = 0.0
    for spec, count in runs:
        shape = json.dumps(
            [spec["task"]["name"], spec["model"], spec["sampler"], spec["opt"]["name"], spec["filter"]["name"],
             spec["train"]["precision"]], sort_keys=True, default=str
        )  # fmt: skip
        if shape not in per_step:
            per_step[shape] = measure(spec, steps, warmup, device)["ms_per_step"]
        total += count * spec["train"]["steps"] * per_step[shape] / 1000
    return total, len(per_step)


def hours(seconds: float) -> str:
    """A duration as people say it: hours, minutes or seconds."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def parameter_groups(optimizer: torch.optim.Optimizer, roles: ParamGroups) -> list[dict]:
    """Each parameter group of the optimizer: its role's name, size, nominal lr, weight decay, and
    whether that decay is coupled (L2 in the gradient) or decoupled (a shrink of lr x weight_decay)."""
    parts = optimizer.parts if isinstance(optimizer, MuonAdamW) else (optimizer,)  # Muon's and AdamW's groups
    found = [(part, group) for part in parts for group in part.param_groups]
    everything = {id(p) for p in roles.all}
    named = {"all": roles.all, "embedding": roles.embedding, "hidden": roles.hidden or []}
    out = []
    for i, (part, group) in enumerate(found):
        ids = {id(p) for p in group["params"]}
        others = {id(p) for _, other in found if other is not group for p in other["params"]}
        name = next((n for n, params in named.items() if params and ids == {id(p) for p in params}), None)
        if name is None:
            name = "rest" if others and ids == everything - others else f"group {i}"
        lr, decay = float(group["lr"]), float(group.get("weight_decay", 0.0))
        # torch's AdamW groups say so only from torch 2.6 on; an optimizer that does not say is coupled (L2)
        coupled = not group.get("decoupled_weight_decay", isinstance(part, torch.optim.AdamW))
        out.append(
            {
                "name": name,
                "params": sum(p.numel() for p in group["params"]),
                "lr": lr,
                "weight_decay": decay,
                "coupled": coupled,
                "decay_per_step": None if coupled else lr * decay,
            }
        )
    return out


def clock_of(device: torch.device) -> str:
    """What a step is timed by on the device (see the module): a name of TIMERS."""
    return "wall" if device.type == "cuda" else "thread CPU time"


def machine(device: torch.device) -> dict:
    """What the figures were measured on: the CPU's model (and the GPU's), torch, the threads."""
    out = {"cpu": cpu_model(), "device": str(device), "torch_version": torch.__version__, "threads": 1}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _check(spec, steps: int, warmup: int) -> None:
    if not isinstance(spec, dict) or not all(isinstance(spec.get(k), dict) for k in ("opt", "train")):
        raise SuiteError(
            "cost measures a resolved spec of a task that trains (suite.specs.spec.resolve): "
            "one with opt and train settings"
        )
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SuiteError(f"steps must be a positive integer, got {steps!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise SuiteError(f"warmup must be a non-negative integer, got {warmup!r}")


def _ms_per_step(stack, steps: int, warmup: int, device: torch.device) -> float:
    """The loop's step (as suite.engine.train.train_stack runs it), warmed up, then the median of
    REPEATS stretches."""
    numbers = itertools.count()  # the step numbers the loop passes on (its learning-rate warmup reads them)

    def take(n: int) -> None:
        for _ in range(n):
            train_step(stack, next(numbers), stack.model)

    now = TIMERS[clock_of(device)]
    stretches = []
    with precision.matmul_mode(stack.cfg.precision, device), contextlib.closing(stack.draws):
        stack.start()
        take(warmup)
        for _ in range(REPEATS):
            sync(device)
            t0 = now()
            take(steps)
            sync(device)
            stretches.append((now() - t0) * 1000 / steps)
    return statistics.median(stretches)


@contextmanager
def _as_the_loop_steps(device: torch.device):
    """One torch thread and denormals flushed (as train() flushes them) while measuring; torch's
    threads, flushing and global RNG (the build seeds it) as they were afterwards, whatever happens."""
    threads, rng = torch.get_num_threads(), rng_states(device)
    torch.set_num_threads(1)
    try:
        with precision.denormals_flushed():
            yield
    finally:
        torch.set_num_threads(threads)
        set_rng_states(rng, device)


def _resumed(path: Path, how: dict, replace_other: bool) -> dict:
    """The file's measurements, if it holds some taken as these would be; a fresh report otherwise."""
    if not path.exists() or (replace_other and _measured_otherwise(path, how)):
        report = {**how, "specs": {}}
        _write(path, report)  # an unwritable path fails here, before anything is measured
        return report
    report = read_json(path)
    if not isinstance(report, dict) or not isinstance(report.get("specs"), dict):
        raise SuiteError(f"{path} is not a file of step costs (no 'specs'); measure into another file")
    differ = [key for key in how if report.get(key) != how[key]]
    if differ:
        raise SuiteError(
            f"{path} holds step costs measured otherwise ({', '.join(differ)} differ): rows measured "
            "apart would not compare; measure into another file or delete it"
        )
    return report


def _measured_otherwise(path: Path, how: dict) -> bool:
    report = read_json(path)
    return isinstance(report, dict) and any(report.get(key) != value for key, value in how.items())


def _write(path: Path, report: dict) -> None:
    writable_dir(path.parent)
    try:
        write_json(path, report)
    except OSError as err:
        raise cannot_write(path, err) from None
