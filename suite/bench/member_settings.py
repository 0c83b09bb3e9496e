"""A stack whose members differ in their optimizer's settings, trained by each update path.

    python -m suite.bench.member_settings [--sizes 2,8,32] [--steps 30] [--device cpu]

For each K: the default cell's seeds 0..K-1 (MLP, adam, batch 512), each member with its own
learning rate (log-spaced 1e-2 down to 1e-3) and weight decay (1e-3 and 1e-2 in turn), as a tuning
grid's stack holds them, trained by
- `members`: one torch optimizer per member over its slice (updates.py's MemberUpdates, the path
  such a stack took before stacked_adam.py);
- `stacked`: one Adam over the stack, the settings per member as [K] tensors (SettingsUpdate);
- `stacked_whole` (on CPU): the same, each parameter stepped whole instead of in slices of members
  that fit the cache (stacked_adam.CPU_SLICE_BYTES), as on a GPU;
- `same`: beside them, torch's Adam over the stack with member 0's settings for all (StackedUpdate):
  what a stack of equal settings costs.
All update the one stack, their steps interleaved, so that a busy machine slows them alike.
Per path: the whole training step (`train_step`: batch, forward, backward, update; median of
`--steps` after 3 warm-up steps), the optimizer's step alone (`update.step()`, median of `--steps`,
on the last step's gradients) and the aten ops of one update step, counted by torch.profiler.
Prints one JSON line per K and path; the figures so far are in leaderboards/bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from suite.bench.measure import sync
from suite.engine.build import build
from suite.engine.member import Member
from suite.engine.plan import stacks
from suite.engine.train import train_step
from suite.engine.updates import MemberUpdates, SettingsUpdate, StackedUpdate
from suite.specs.spec import resolve


def specs(k: int) -> list[dict]:
    own = [{"opt.lr": 1e-2 * 10 ** (-i / max(k - 1, 1)), "opt.weight_decay": (1e-3, 1e-2)[i % 2]} for i in range(k)]
    return [resolve({}, {"train.steps": 10**6, **o}, seed) for seed, o in enumerate(own)]


def measure(k: int, steps: int, device: torch.device) -> list[dict]:
    """The three paths over one stack, their steps interleaved (a busy machine slows them alike)."""
    torch.set_flush_denormal(True)  # as the loop does
    members = [Member.of(build(spec, device, updates=False)) for spec in specs(k)]
    (stack,) = stacks(members, device)
    own = [m.spec for m in members]
    paths = {
        "members": MemberUpdates(own, stack.model),
        "stacked": SettingsUpdate.build(own, stack.model),
        "same": StackedUpdate(own[0], stack.model),  # every member at member 0's settings
    }
    if device.type == "cpu":  # the stacked Adam with every parameter whole, as on a GPU
        paths["stacked_whole"] = SettingsUpdate.build(own, stack.model)
        paths["stacked_whole"].optimizer.slice_bytes = 2**62
    stack.start()
    whole: dict = {path: [] for path in paths}
    alone: dict = {path: [] for path in paths}
    for step in range(3 + steps):
        for path, update in paths.items():
            stack.update = update
            t0 = time.perf_counter()
            train_step(stack, step, stack.model)
            sync(device)
            if step >= 3:
                whole[path].append(time.perf_counter() - t0)
    stack.draws.close()  # the batches are all drawn (on a GPU, one was drawn ahead)
    paths["members"].filter()  # its members' views see the last step's gradients
    for _ in range(steps):
        for path, update in paths.items():
            t0 = time.perf_counter()
            update.step()
            sync(device)
            alone[path].append(time.perf_counter() - t0)
    rows = []
    for path, update in paths.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            update.step()
        rows.append(
            {
                "k": k,
                "path": path,
                "update": type(update).__name__,
                "optimizer_step_ms": 1e3 * statistics.median(alone[path]),
                "train_step_ms": 1e3 * statistics.median(whole[path]),
                "aten_ops_per_update_step": sum(1 for e in prof.events() if e.name.startswith("aten::")),
                "threads": torch.get_num_threads(),
                "device": str(device),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m suite.bench.member_settings", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="2,8,32", help="stack sizes K, comma-separated")
    parser.add_argument("--steps", type=int, default=30, help="steps timed per K and path")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    for k in (int(s) for s in args.sizes.split(",")):
        for row in measure(k, args.steps, device):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
