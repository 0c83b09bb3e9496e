"""The one training loop. Read it top to bottom: build, resume, step / evaluate / record, finish.

A run is a pure function of its spec: the seed fixes the model's initialisation, the task's
split (unless the task is given its own data_seed) and the generator that draws every batch.
A checkpoint holds everything that changes during training (model, optimizer, filter,
generator, step), so a run that is killed and resumed writes the same numbers as one that
never stopped.

Several specs that differ only in their seed and their task's settings (operation, split,
data seed, ...) train together as one stack (K members, parameters stacked, forward vmapped:
suite/ensemble.py) when that is exact and their tensors have the same shapes; in parts of
equal shapes, or one after the other, otherwise. Every member keeps its own data, batches,
run dir, milestones and early stop; a single run is the ensemble of one. What is done to the members besides this
loop (resume, evaluate, checkpoint, leave the stack, finish) is suite/stack.py's.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import torch

from suite.registry import SuiteError
from suite.rundir import read_json
from suite.spec import spec_id
from suite.stack import build, provenance


class Preempted(Exception):
    """Raised after a checkpoint when SIGUSR1/SIGTERM asked the run to stop (Slurm requeue)."""


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SuiteError(f"device '{name}' asked for, but CUDA is not available here")
    try:
        return torch.device(name)
    except RuntimeError:
        raise SuiteError(f"unknown device '{name}' (auto, cpu, cuda, cuda:N)") from None


def train(specs: list[dict], run_dirs: list[Path], device: torch.device, trackers: list | None = None,
          compile: bool = False) -> list[dict]:
    """Train specs into their run dirs and return their results (each also written to its
    run_dir/result.json). One spec is one run; specs that differ only in the seed and the task's
    settings are one stack, or train in parts (or one after the other) where that would not be
    exact. compile: the training step's forward through torch.compile (evaluation stays eager:
    its shapes vary)."""
    trackers = trackers or [None] * len(specs)
    # Weight decay drives unused weights into subnormal floats, which made CPU steps up to
    # 15x slower after grokking; flushing them to zero is deterministic (no result changed here).
    torch.set_flush_denormal(True)
    stack = build(specs, device)  # fails on bad input before anything is written
    if stack.sequential_reason:
        return in_parts(specs, run_dirs, device, trackers, compile, stack.sequential_reason, stack.parts)
    start = stack.claim(run_dirs, trackers)
    if start is None:  # finished by another process meanwhile, or the seeds were resumed apart
        if len(specs) == 1:
            return [read_json(Path(run_dirs[0]) / "result.json")]
        return in_parts(specs, run_dirs, device, trackers, compile,
                        "some finished meanwhile, or they stand at different steps")
    cfg, K, how = stack.cfg, len(specs), provenance(len(specs), device, compile)
    forward = torch.compile(stack.model) if compile else stack.model
    progress = Progress(cfg.steps, start, spec_id(specs[0])[:8] + (f" x{K}" if K > 1 else ""))
    clock, step = WallShare(K), start
    with _StopFlag() as stop:
        for step in range(start, cfg.steps + 1):
            if step > start and (step % cfg.checkpoint_every == 0 or stop.raised):
                stack.checkpoint(step, clock.now())
                if stop.raised:
                    progress.close()
                    stack.release()
                    raise Preempted(f"{stop.raised} at step {step}: checkpointed in "
                                    + ", ".join(str(m.run_dir.path) for m in stack.live))
            if step % cfg.eval_every == 0 or step == cfg.steps:
                stack.evaluate(step)
                for m in stack.live:
                    if reason := stack.stop_reason(m, step):
                        stack.finish(m, step, reason, m.wall_before + clock.now(), how)
                progress.update(step, _summary([m.record for m in stack.members if m.record]), _notes(stack.live, K))
                stack.leave()
                if not stack.live:
                    break
                clock.resize(len(stack.live))
            if step == cfg.steps:
                break
            stack.update(step, forward)
    progress.close()
    for m in stack.live:
        if m.result is None:
            stack.finish(m, step, "budget", m.wall_before + clock.now(), how)
    return [m.result for m in stack.members]


def in_parts(specs, run_dirs, device, trackers, compile, reason: str, parts: list[list[int]] | None = None) -> list[dict]:
    """The members trained in parts that can stack (None: one by one), one part after the other,
    with the reason said once."""
    parts = parts or [[i] for i in range(len(specs))]
    how = "one after the other" if all(len(part) == 1 for part in parts) else f"in {len(parts)} stacks of equal shapes"
    print(f"{len(specs)} runs train {how}: {reason}", file=sys.stderr)
    results = [None] * len(specs)
    for part in parts:
        done = train([specs[i] for i in part], [run_dirs[i] for i in part], device, [trackers[i] for i in part], compile)
        for i, result in zip(part, done):
            results[i] = result
    return results


class _StopFlag:
    """SIGUSR1 (Slurm's warning before the time limit) or SIGTERM: finish the step, checkpoint, exit."""

    def __init__(self):
        self.raised = None
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum, frame):
        self.raised = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


class Progress:
    """A tqdm bar on a terminal; on a pipe or a Slurm log, a plain line every `every_s` seconds."""

    def __init__(self, total: int, start: int, label: str, every_s: float = 10.0):
        self.tty = sys.stderr.isatty()
        self.label, self.every_s, self.last = label, every_s, 0.0
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, desc=label, unit="step", leave=False, file=sys.stderr)

    def update(self, step: int, record: dict | None, note: str = "") -> None:
        if self.tty:
            self.bar.n = step
            if record:
                self.bar.set_postfix(train=f"{record['train_acc']:.3f}", val=f"{record['val_acc']:.3f}", refresh=False)
            self.bar.refresh()
        elif record and (note or time.monotonic() - self.last >= self.every_s):
            self.last = time.monotonic()
            print(f"[{self.label}] step {step} train_acc {record['train_acc']:.4f} val_acc {record['val_acc']:.4f} "
                  f"val_loss {record['val_loss']:.4f}{' ' + note if note else ''}", file=sys.stderr, flush=True)

    def close(self):
        if self.tty:
            self.bar.close()


class WallShare:
    """A member's share of the wall time: the time elapsed divided by the members training in
    it. Members that stop leave the stack, and from then on the rest share the time."""

    def __init__(self, size: int):
        self.before, self.since, self.size = 0.0, time.monotonic(), size

    def now(self) -> float:
        return self.before + (time.monotonic() - self.since) / self.size

    def resize(self, size: int) -> None:
        self.before, self.since, self.size = self.now(), time.monotonic(), size


def _notes(live, K: int) -> str:
    """The milestones members just reached, for the progress line (then forgotten)."""
    notes = [(f"seed {m.spec['seed']} " if K > 1 else "") + note for m in live for note in m.notes]
    for m in live:
        m.notes.clear()
    return " ".join(notes)


def _summary(records: list[dict]) -> dict | None:
    """What the progress line shows: one member's record, or the members' means (None before any)."""
    if len(records) <= 1:
        return records[0] if records else None
    return {k: sum(r[k] for r in records) / len(records) for k in ("train_acc", "val_acc", "val_loss")}
