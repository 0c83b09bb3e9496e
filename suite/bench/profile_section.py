"""The bench's profile section: where a stack's training step spends its time.

A stack of the default cell, of the bench's largest stack size up to 256 (the GPU target's
stack), runs `train_step` (suite/engine/train.py: batch, forward, loss, backward, update; no
evaluation): warm-up steps, 30 steps timed without the profiler (`step_s`), then 30 more under
torch.profiler. Per step, from the profile: the host's ops by self CPU time (the profiler's own cost
inflates it), the aten ops issued, the members' batch draws (`aten::randperm`, one per member, on
the CPU); on a GPU also its kernels and copies by device time, the launches that issued them, and
`device_busy_fraction`, their time over the unprofiled step: well under 1, the step waits on the
host (launches, drawing), not on the GPU.
"""

from __future__ import annotations

import time

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
    return head | op_figures(prof, steps, step_s, cuda)


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
