"""The one training loop. Read it top to bottom: build, claim, plan the stacks, open, then per
stack: step / evaluate / record / checkpoint, and finish.

A run is a pure function of its spec: the seed fixes the model's initialisation, the task's
split (unless the task is given its own data_seed) and the generator that draws every batch.
A checkpoint holds everything that changes during training (model, optimizer, filter,
generator, step), so a run that is killed and resumed writes the same numbers as one that
never stopped.

The loop takes cells (suite/specs/cell.py: a spec with its seed, and its run folder). A group of cells
that differ only in their seed and their task's, optimizer's and filter's settings trains as one
stack (K members, parameters stacked, forward vmapped: suite/engine/stacked.py) when that is exact and
their tensors have the same shapes; as several stacks, or one member after the other, otherwise
(suite/engine/plan.py decides, once, up front). Every member keeps its own data, batches, run dir,
milestones and early stop; a single run is the stack of one. The members own their run folders
(suite/engine/member.py); the stack computes (suite/engine/stack.py).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch

from suite.engine import precision
from suite.engine.member import Member, claim
from suite.engine.plan import stacks
from suite.engine.race import Race
from suite.engine.stack import Stack
from suite.engine.stacked import clip_grad_norms
from suite.errors import SuiteError
from suite.results.result import provenance
from suite.results.rundir import rng_states
from suite.specs.cell import Cell
from suite.specs.spec import spec_id


class Preempted(Exception):
    """Raised after a checkpoint when SIGUSR1/SIGTERM (Slurm's requeue) or SIGINT (Ctrl-C) asked
    the run to stop: `signal` names which, `step` is where the checkpoint stands."""

    def __init__(self, signal_name: str, step: int, run_dirs: list):
        where = [str(d) for d in run_dirs]
        if len(where) > 3:  # a stack of 1,024 members: one line, not a thousand paths
            where = [f"{len(where)} run folders under {os.path.commonpath(where)}"]
        super().__init__(f"{signal_name} at step {step}: checkpointed in {', '.join(where)}")
        self.signal, self.step = signal_name, step


def resolve_device(name: str = "auto") -> torch.device:
    """auto (CUDA when present), cpu, cuda or cuda:N: the devices the suite trains on."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise SuiteError(f"device '{name}' is not one the suite runs on (auto, cpu, cuda, cuda:N)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SuiteError(f"device '{name}' asked for, but CUDA is not available here")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise SuiteError(f"device '{name}' asked for, but this machine has {torch.cuda.device_count()} GPU(s)")
    return device


def train(cells: list[Cell], device: torch.device, compile: bool = False) -> list[dict]:
    """Train the cells into their run dirs and return their results (each also written to its
    run_dir/result.json). compile: the training step's forward through torch.compile (evaluation
    stays eager: its shapes vary)."""
    # Weight decay drives unused weights into subnormal floats, which made CPU steps up to
    # 15x slower after grokking; flushing them to zero is deterministic (no result changed here).
    torch.set_flush_denormal(True)
    for cell in cells:  # a grid's check builds its cells on the CPU, so the device's own checks are here
        precision.check(cell.spec["train"]["precision"], device)
    members = [Member.build(cell.spec, device) for cell in cells]  # bad input raises from here on...
    claim(members, cells)  # finished meanwhile: its result is read
    try:
        planned = stacks(members, device)  # ...to here (their optimizers and filters)
        for m in members:
            if m.result is None:
                m.open()  # the first write
                if m.tracker is not None:
                    m.tracker.start()  # before any clock: W&B's start-up is not training time
        race = Race(members)
        for stack in planned:
            train_stack(stack, device, compile, race)
    except BaseException:
        for m in members:
            if m.result is None:
                m.release()
        raise
    return [m.result for m in members]


def train_step(stack: Stack, step: int, forward) -> None:
    """One update of every live member of the stack: its own batch, the sum of their mean losses
    (so each member's slice of every gradient is its own run's), filter, clip, optimizer."""
    stack.warm_up(step)
    x, y = stack.next_batch()  # [K, batch, ...], [K, batch]
    with precision.autocast(stack.cfg.precision, stack.device):  # bf16: the forward and its backward
        logits = forward(x).float()  # [K, batch, classes]; the loss in float32 whatever the precision
    stack.count_running(logits, y)
    loss = stack.loss_fn(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1).sum()
    stack.update.zero_grad()
    loss.backward()
    stack.observe_embedding_grad()  # samplers that adapt to training
    stack.update.filter()
    if stack.cfg.grad_clip is not None:
        clip_grad_norms(stack.model, stack.cfg.grad_clip)
    stack.update.step()


def train_stack(stack: Stack, device: torch.device, compile: bool, race: Race | None = None) -> None:
    """The loop over steps for one stack, from where its members' checkpoints stand to their stops."""
    cfg, start, members, K = stack.cfg, stack.live[0].start, list(stack.live), len(stack.live)
    how = provenance(K, device, compile)
    forward = torch.compile(stack.model) if compile else stack.model
    progress = Progress(cfg.steps, start, spec_id(stack.spec)[:8] + (f" x{K}" if K > 1 else ""))
    stack.start()
    clock, step = WallShare(K), start
    with _StopFlag() as stop, precision.matmul_mode(cfg.precision, device):
        for step in range(start, cfg.steps + 1):
            if step > start and (step % cfg.checkpoint_every == 0 or stop.raised):
                checkpoint(stack, step, clock.now())
                if stop.raised:
                    progress.close()
                    for m in stack.live:
                        m.release()
                    raise Preempted(stop.raised, step, [m.run_dir.path for m in stack.live])
            if step % cfg.eval_every == 0 or step == cfg.steps:
                record(stack, step, how, clock, race)
                progress.update(step, _summary([m.record for m in members if m.record]), _notes(stack.live, K))
                stack.leave()
                if not stack.live:
                    break
                clock.resize(len(stack.live))
            if step == cfg.steps:
                break
            train_step(stack, step, forward)
    progress.close()
    for m in list(stack.live):
        finish(stack, m, step, "budget", m.wall_before + clock.now(), how)


def record(stack: Stack, step: int, how: dict, clock: WallShare, race: Race | None = None) -> None:
    """Evaluate the stack, write each member's record (or mark it diverged), and finish the
    members that stop here."""
    for i, (m, evaluation) in enumerate(zip(stack.live, stack.evaluate(step))):
        if evaluation is None:
            m.diverged = True
            m.notes.append("diverged")
            continue
        m.write(evaluation | {"elapsed_s": round(m.wall_before + clock.now(), 3)})
        if stack.cfg.keep_weights:
            m.keep_weights(step, lambda i=i: stack.model.member_state_dicts()[i])
    for m in stack.live:
        if reason := stop_reason(m, stack.cfg, step) or ("raced" if race and race.lost(m) else None):
            finish(stack, m, step, reason, m.wall_before + clock.now(), how)


def stop_reason(m: Member, cfg, step: int) -> str | None:
    """Why m stops at this evaluation ("diverged", "target held", "at chance", "never learned"), or None."""
    if m.diverged:
        return "diverged"
    if (
        cfg.patience is not None
        and m.milestones.held_since is not None
        and step - m.milestones.held_since >= cfg.patience
    ):
        return "target held"
    if cfg.chance_patience is not None and m.chance.since is not None and step - m.chance.since >= cfg.chance_patience:
        return "at chance"
    if cfg.learn_patience is not None and not m.chance.left and step >= cfg.learn_patience:
        return "never learned"
    return None


def finish(stack: Stack, m: Member, step: int, reason: str, wall: float, how: dict) -> None:
    keep = stack.cfg.keep_weights and not m.diverged
    m.finish(step, reason, wall, how, stack.model.member_state_dicts()[stack.live.index(m)] if keep else None)


def checkpoint(stack: Stack, step: int, wall_share: float) -> None:
    """One checkpoint per live member, each in the format of a separate run."""
    for m, state in zip(stack.live, stack.states()):
        m.save_checkpoint(state | rng_states(stack.device) | {"step": step, "wall_s": m.wall_before + wall_share})


class _StopFlag:
    """SIGUSR1 (Slurm's warning before the time limit), SIGTERM or SIGINT (Ctrl-C): finish the step,
    checkpoint, exit."""

    def __init__(self):
        self.raised = None
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
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
            if note:  # a line above the bar, so that it stays
                self.bar.write(f"[{self.label}] step {step} {note}", file=sys.stderr)
            self.bar.refresh()
        elif record and (note or time.monotonic() - self.last >= self.every_s):
            self.last = time.monotonic()
            print(
                f"[{self.label}] step {step} train_acc {record['train_acc']:.4f} val_acc {record['val_acc']:.4f} "
                f"val_loss {record['val_loss']:.4f}{' ' + note if note else ''}",
                file=sys.stderr,
                flush=True,
            )

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
