"""The one training loop. Read it top to bottom: build, claim, plan the stacks, open, then per
stack: step / evaluate / record / checkpoint, and finish. Each part is a `phase` (a profiler label,
free when nothing profiles) that the bench's profile section times.

A run is a pure function of its spec: the seed fixes the model's initialisation, the task's
split (unless the task is given its own data_seed) and the generator that draws every batch.
A checkpoint holds everything that changes during training (model, optimizer, filter,
generator, step), so a run that is killed and resumed writes the same numbers as one that
never stopped.

The loop takes cells (suite/specs/cell.py: a spec with its seed, and its run folder). A group of cells
that differ only in their seed and their task's, optimizer's and filter's settings trains as one
stack (K members, parameters stacked, forward vmapped: suite/engine/stacked.py) when that is exact and
their tensors have the same shapes; as several stacks, or one member after the other, otherwise
(suite/engine/plan.py decides, once, up front). Every member keeps its own data, batches, run folder,
milestones and early stop; a single run is the stack of one. The members own their run folders
(suite/engine/member.py); the stack computes (suite/engine/stack.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from functools import partial

import torch
from torch.profiler import record_function as phase

from suite.engine import precision
from suite.engine.build import build
from suite.engine.member import Member, claim, write_all
from suite.engine.plan import stacks
from suite.engine.race import Race
from suite.engine.stack import Stack
from suite.engine.stacked import clip_grad_norms
from suite.engine.updates import evaluated
from suite.errors import SuiteError
from suite.results.result import provenance
from suite.results.rundir import rng_states
from suite.specs.cell import Cell
from suite.specs.registry import ALL
from suite.specs.spec import Part, Spec


class Preempted(Exception):
    """Raised after a checkpoint when SIGUSR1/SIGTERM (Slurm's requeue) or SIGINT (Ctrl-C) asked
    the run to stop: `signal` names which, `step` is where the checkpoint stands. Asked before the
    first training step (while the data is built, or at the first evaluation), there is nothing to
    checkpoint: run_dirs is empty, and the same command starts the run again."""

    def __init__(self, signal_name: str, step: int, run_dirs: list):
        where = [str(d) for d in run_dirs]
        if len(where) > 3:  # a stack of 1,024 members: one line, not a thousand paths
            where = [f"{len(where)} run folders under {os.path.commonpath(where)}"]
        if where:
            super().__init__(f"{signal_name} at step {step}: checkpointed in {', '.join(where)}")
        else:
            super().__init__(f"{signal_name} before the first training step: nothing to resume")
        self.signal, self.step, self.checkpointed = signal_name, step, bool(where)


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
    """Train the cells into their run folders and return their results (each also written to its
    run_dir/result.json). compile: the training step's forward through torch.compile (evaluation
    stays eager: its shapes vary)."""
    with precision.denormals_flushed():
        return _train(cells, device, compile)


def _train(cells: list[Cell], device: torch.device, compile: bool) -> list[dict]:
    for cell in cells:  # a grid's check builds its cells on the CPU, so the device's own checks are here
        precision.check(cell.spec["train"]["precision"], device)
    with _StopFlag() as stop:
        try:
            with stop.at_once(), phase("build"):  # building the data can take minutes (polygons renders 14,641 images)
                members = [Member.of(build(cell.spec, device, updates=False)) for cell in cells]  # bad input raises...
        except _StopNow:
            raise Preempted(stop.raised, 0, []) from None  # nothing written yet
        with phase("set-up"):
            claim(members, cells)  # finished meanwhile: its result is read
        try:
            with phase("set-up"):
                planned = stacks(members, device)  # ...to here (their optimizers and filters)
                opening = [m for m in members if m.result is None]
                for m in opening:
                    if m.start:
                        print(f"resuming {m.run_dir.path} from step {m.start}", file=sys.stderr)
                write_all([m.open for m in opening])  # the first writes
                for m in opening:
                    if m.tracker is not None:
                        m.tracker.start()  # before any clock: W&B's start-up is not training time
            race = Race(members)
            for stack in planned:
                train_stack(stack, device, compile, stop, race)
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


def train_stack(stack: Stack, device: torch.device, compile: bool, stop: _StopFlag, race: Race | None = None) -> None:
    """The loop over steps for one stack, from where its members' checkpoints stand to their stops."""
    cfg, start, members, K = stack.cfg, stack.live[0].start, list(stack.live), len(stack.live)
    how = provenance(K, device, compile)
    forward = torch.compile(stack.model) if compile else stack.model
    progress = Progress(cfg.steps, start, stack_label(stack.spec, K))
    progress.begin(stack.cfg.eval_every, stack.x_train.shape[1], stack.x_val.shape[1])
    stack.start()
    clock = WallShare(K)
    with precision.matmul_mode(cfg.precision, device), contextlib.closing(stack.draws):
        for step in range(start, cfg.steps + 1):
            if step > start and (step % cfg.checkpoint_every == 0 or stop.raised):
                with phase("checkpoint"):
                    checkpoint(stack, step, clock.now())
                if stop.raised:
                    _preempted(stack, step, stop.raised, progress)
            if step % cfg.eval_every == 0 or step == cfg.steps:
                try:
                    record(stack, step, how, clock, stop, race)
                except _StopNow:  # in the evaluation, before anything was written
                    if step > start:
                        checkpoint(stack, step, clock.now())
                    _preempted(stack, step, stop.raised, progress)
                progress.update(step, _summary([m.record for m in members if m.record]), _notes(stack.live, K))
                stack.leave()
                if not stack.live:
                    break
                clock.resize(len(stack.live))
            with phase("step"):
                train_step(stack, step, forward)  # never after the budget's step: every member stopped there
    progress.close()


def _preempted(stack: Stack, step: int, signal_name: str, progress: Progress) -> None:
    """Stop the stack where its checkpoint stands (at step 0 there is none: nothing to resume)."""
    progress.close()
    checkpointed = [m.run_dir.path for m in stack.live if step > 0]
    for m in stack.live:
        m.release()
    raise Preempted(signal_name, step, checkpointed)


def stack_label(spec: Spec, K: int) -> str:
    """How progress lines name a stack: its method (optimizer, and filter and sampler where not the
    plain ones) on its task and model, and how many members; a grid's log names its cells besides.
    An optimizer whose decay is not the kind its name says (the transformer's recipe runs `adam`
    with AdamW's decoupled decay) is named with the kind it runs."""
    method = [spec.opt.name + _decay_kind(spec.opt)]
    method += [spec.filter.name] if spec.filter.name != "none" else []
    method += [spec.sampler.name] if spec.sampler.name != "random" else []
    return f"{'+'.join(method)} {spec.task.name}/{spec.model.name}" + (f" x{K}" if K > 1 else "")


def _decay_kind(opt: Part) -> str:
    param = ALL["opt"].get(opt.name).params.get("decoupled_weight_decay")
    decoupled = opt.settings.get("decoupled_weight_decay")
    if param is None or decoupled is None or decoupled == param.default:
        return ""
    return " (decoupled decay)" if decoupled else " (coupled decay)"


def record(stack: Stack, step: int, how: dict, clock: WallShare, stop: _StopFlag, race: Race | None = None) -> None:
    """Evaluate the stack, write each member's record (or mark it diverged), and finish the
    members that stop here: all of it on the weights each method means to be evaluated (the
    optimizer contract's eval mode, where an optimizer has one)."""
    with evaluated(stack.update):
        with stop.at_once(), phase("evaluate"):  # a big model's evaluation takes minutes: a signal ends it there
            evaluations = stack.evaluate(step)
        with phase("write"):
            for i, (m, evaluation) in enumerate(zip(stack.live, evaluations)):
                if evaluation is None:
                    m.diverged = True
                    m.notes.append("diverged")
                    continue
                m.write(evaluation | {"elapsed_s": round(m.wall_before + clock.now(), 3)})
                if stack.cfg.keep_weights:
                    m.keep_weights(step, lambda i=i: stack.model.member_state_dicts()[i])
            stack.restart_running()  # not in evaluate(): a signal may end that, and the counts are checkpointed
            stops = []  # the index in the stack of each member that stops here
            try:
                for i, m in enumerate(stack.live):
                    raced = "raced" if race and race.lost(m) else None  # against those concluded before it
                    # at the budget's end too, here: the final weights kept are the ones just evaluated
                    budget = "budget" if step >= stack.cfg.steps else None
                    if reason := stop_reason(m, stack.cfg, step) or raced or budget:
                        m.conclude(step, reason, m.wall_before + clock.now(), how)
                        stops.append(i)
            except BaseException:  # (a rival's damaged result.json) nothing written: let them go unfinished
                for i in stops:
                    stack.live[i].result = None
                raise
            if stops:
                finish(stack, stops)


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


def finish(stack: Stack, stops: list[int]) -> None:
    """The members at these indices, concluded, write their results (side by side), then tell their trackers."""
    weights = stack.model.member_state_dicts() if stack.cfg.keep_weights else None
    members = [stack.live[i] for i in stops]
    try:
        kept = [weights[i] if weights and not m.diverged else None for i, m in zip(stops, members)]
        write_all([partial(m.finish, final) for m, final in zip(members, kept)])
    finally:  # where another member's write failed too: a result on the disk is told
        for m in members:
            if m.result is not None:
                m.tell_tracker()


def checkpoint(stack: Stack, step: int, wall_share: float) -> None:
    """One checkpoint per live member, each in the format of a separate run (its sampler as its
    last batch left it: a batch drawn ahead is drawn again), written side by side."""
    stack.draws.rewind()
    rng = rng_states(stack.device)
    write_all(
        [
            partial(m.save_checkpoint, state | rng | {"step": step, "wall_s": m.wall_before + wall_share})
            for m, state in zip(stack.live, stack.states())
        ]
    )


class _StopNow(Exception):
    """A stop signal that came inside _StopFlag.at_once."""


class _StopFlag:
    """SIGUSR1 (Slurm's warning before the time limit), SIGTERM or SIGINT (Ctrl-C): finish the step,
    checkpoint, exit. Inside at_once (what can take minutes without a step: building the data, an
    evaluation) the signal stops that work where it is, raising _StopNow."""

    def __init__(self):
        self.raised = None
        self.stop_at_once = False
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
        if self.stop_at_once:
            self.stop_at_once = False
            raise _StopNow(self.raised)

    @contextlib.contextmanager
    def at_once(self):
        """Work that a stop signal may end where it is: it changes no state the checkpoint keeps."""
        if self.raised:
            raise _StopNow(self.raised)
        self.stop_at_once = True
        try:
            yield
        finally:
            self.stop_at_once = False

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


class Progress:
    """A tqdm bar on a terminal; on a pipe or a Slurm log, a plain line every `every_s` seconds."""

    def __init__(self, total: int, start: int, label: str, every_s: float = 10.0):
        self.tty = sys.stderr.isatty()
        self.label, self.every_s, self.last, self.start, self.total = label, every_s, 0.0, start, total
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, desc=label, unit="step", leave=False, file=sys.stderr)

    def begin(self, eval_every: int, n_train: int, n_val: int) -> None:
        """One line before the first evaluation, which for a big model takes minutes on a CPU: that it runs."""
        line = (
            f"[{self.label}] steps {self.start:,} to {self.total:,}, evaluating every {eval_every:,} on "
            f"{n_train:,} train and {n_val:,} val examples"
        )
        if self.tty:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

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
    notes = [(f"seed {m.spec.seed} " if K > 1 else "") + note for m in live for note in m.notes]
    for m in live:
        m.notes.clear()
    return " ".join(notes)


def _summary(records: list[dict]) -> dict | None:
    """What the progress line shows: one member's record, or the members' means (None before any)."""
    if len(records) <= 1:
        return records[0] if records else None
    return {k: sum(r[k] for r in records) / len(records) for k in ("train_acc", "val_acc", "val_loss")}
