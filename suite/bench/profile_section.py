"""The bench's profile section: where a stack's training step spends its time.

A stack of the default cell, of the bench's largest stack size up to 256 (the GPU target's
stack), runs `train_step` (suite/engine/train.py: batch, forward, loss, backward, update; no
evaluation): warm-up steps, 30 steps timed without the profiler (`step_s`), then 30 more under
torch.profiler. Per step, from the profile: the host's ops by self CPU time (the profiler's own cost
inflates it), the aten ops issued, the members' batch draws (`aten::randperm`, one per member, on
the CPU); on a GPU also its kernels and copies by device time, the launches that issued them, and
`device_busy_fraction`, their time over the unprofiled step: well under 1, the step waits on the
host (launches, drawing), not on the GPU.

Then the same stack's whole `train()` (build, set-up, steps, evaluations, the writes that record
and finish them, checkpoints; the loop labels each part a `phase`) under the profiler, into a
scratch folder: each part's seconds and share of the run, and the host's waits on the GPU (SYNCS)
and kernel launches in each, per step and per evaluation.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from suite.bench.measure import Options, cell_spec, sync
from suite.engine import precision

LARGEST_K = 256
TOP = 12


def profile_section(device: torch.device, options: Options) -> dict:
    from suite.engine.build import build
    from suite.engine.member import Member
    from suite.engine.plan import stacks
    from suite.engine.train import train_step

    k = max([size for size in options.stacks if size <= LARGEST_K] or [1])
    torch.set_flush_denormal(True)  # as the loop does
    members = [Member.of(build(cell_spec({}, options, seed), device, updates=False)) for seed in range(k)]
    (stack,) = stacks(members, device)  # the default cell's seeds make one stack
    warmup, steps = options.warmup_steps, 3 if options.quick else 30

    def train(first: int, n: int) -> None:
        for step in range(first, first + n):
            train_step(stack, step, stack.model)
        sync(device)

    cuda = device.type == "cuda"
    with precision.matmul_mode(stack.cfg.precision, device):
        train(0, warmup)
        t0 = time.perf_counter()
        train(warmup, steps)
        step_s = (time.perf_counter() - t0) / steps
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            train(warmup + steps, steps)
    head = {"k": k, "cell": "modular mlp adam random(batch 512)", "steps": steps, "step_s": step_s}
    return head | op_figures(prof, steps, step_s, cuda) | {"train": whole_train(k, device, options)}


PHASES = ("build", "set-up", "step", "evaluate", "write", "checkpoint")  # the loop's (suite/engine/train.py)
# On a GPU, the runtime's waits; on a CPU, the ops that would wait on a GPU were their tensors there
# (an upper bound: a CPU tensor's .item(), as an optimizer's step count, never waits)
SYNCS = {
    "cuda": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy"),
    "cpu": ("aten::_local_scalar_dense", "aten::nonzero"),
}


def whole_train(k: int, device: torch.device, options: Options) -> dict:
    """A stack of k default cells trained by `train()` under the profiler: each phase's seconds,
    share, calls, syncs and launches, and the syncs per step and per evaluation."""
    from suite.engine.train import train
    from suite.specs.cell import Cell

    steps, eval_every = (20, 10) if options.quick else (200, 50)
    settings = {"train.steps": steps, "train.eval_every": eval_every, "train.checkpoint_every": steps // 2}
    cuda = device.type == "cuda"
    with tempfile.TemporaryDirectory() as scratch:
        cells = [Cell(cell_spec({}, options, seed, settings), Path(scratch) / str(seed)) for seed in range(k)]
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            t0 = time.perf_counter()
            with contextlib.redirect_stderr(io.StringIO()):  # its progress lines: the bench says what it measures
                train(cells, device)
            sync(device)
            total_s = time.perf_counter() - t0
    parts = {name: {"s": 0.0, "calls": 0, "syncs": 0, "launches": 0} for name in PHASES}
    syncs = SYNCS[device.type]
    for event in prof.events():
        if event.name in parts:
            parts[event.name]["s"] += event.cpu_time_total / 1e6
            parts[event.name]["calls"] += 1
        elif event.name in syncs or event.name.startswith(("cudaLaunch", "cuLaunch")):
            part = _phase_of(event)
            if part is not None:
                parts[part]["syncs" if event.name in syncs else "launches"] += 1
    for figures in parts.values():
        figures["share"] = figures["s"] / total_s
    evaluations = parts["evaluate"]["calls"]
    return {
        "steps": steps,
        "evaluations": evaluations,
        "total_s": total_s,
        "other_s": total_s - sum(f["s"] for f in parts.values()),
        "parts": parts,
        "syncs_per_step": parts["step"]["syncs"] / max(parts["step"]["calls"], 1),
        "syncs_per_evaluation": parts["evaluate"]["syncs"] / max(evaluations, 1),
    }


def _phase_of(event) -> str | None:
    """The loop's phase an op ran in: its nearest enclosing label."""
    parent = event.cpu_parent
    while parent is not None and parent.name not in PHASES:
        parent = parent.cpu_parent
    return None if parent is None else parent.name


def op_figures(prof: profile, steps: int, step_s: float, cuda: bool) -> dict:
    """Per step, from the profile: the host's ops (self CPU time, inflated by the profiler's own
    cost), the batches' drawing among them, and on a GPU its kernels and copies (device time) and
    the launches that issued them."""
    averages = prof.key_averages()  # by name: an op called inside one of its own name counts twice
    host = [a for a in averages if a.device_type == DeviceType.CPU]
    out = {
        "randperm_per_step": draws(prof.events()) / steps,
        "host_self_per_step_s": sum(a.self_cpu_time_total for a in host) / 1e6 / steps,
        "aten_ops_per_step": sum(a.count for a in host if a.key.startswith("aten::")) / steps,
        "randperm_per_step_s": sum(a.self_cpu_time_total for a in host if a.key == "aten::randperm") / 1e6 / steps,
        "top_host": _busiest(host, lambda a: a.self_cpu_time_total / 1e6, steps),
    }
    if cuda:
        on_device = [a for a in averages if a.device_type == DeviceType.CUDA]  # kernels, copies, memsets
        busy = sum(_device_s(a) for a in on_device) / steps
        out |= {
            "device_busy_per_step_s": busy,
            "device_busy_fraction": busy / step_s,
            "kernel_launches_per_step": sum(a.count for a in host if a.key.startswith(("cudaLaunch", "cuLaunch")))
            / steps,
            "top_device": _busiest(on_device, _device_s, steps),
        }
    return out


def draws(events) -> int:
    """The randperm calls made (one aten::randperm calls another inside it: the outer ones)."""
    return sum(
        e.name == "aten::randperm" and (e.cpu_parent is None or e.cpu_parent.name != "aten::randperm") for e in events
    )


def _device_s(avg) -> float:
    return avg.self_device_time_total / 1e6


def _busiest(averages, seconds, steps: int) -> list[dict]:
    total = sum(seconds(a) for a in averages)
    return [
        {
            "op": a.key,
            "calls_per_step": a.count / steps,
            "self_per_step_s": seconds(a) / steps,
            "share": seconds(a) / total if total else None,
        }
        for a in sorted(averages, key=seconds, reverse=True)[:TOP]
    ]
