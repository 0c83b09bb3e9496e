"""The one training loop. Read it top to bottom: build, (resume), train and evaluate, record.

A run is a pure function of its spec: the seed fixes the model's initialisation, the task's
split (unless the task is given its own data_seed) and the generator that draws every batch.
A checkpoint holds everything that changes during training (model, optimizer, filter,
generator, step), so a run that is killed and resumed writes the same numbers as one that
never stopped.

Several specs that differ only in their seed train together as one ensemble (K members,
parameters stacked, forward vmapped: suite/ensemble.py) when that is exact, and one after
the other otherwise. Every member keeps its own data, batches, run dir, milestones and
early stop; a single run is the ensemble of one. Tensors in the loop carry the member axis
first: x_train is [K, n, ...], logits [K, batch, classes].
"""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

import suite
from suite import ensemble
from suite.components.optimizers import ParamGroups
from suite.ensemble import Ensemble
from suite.hessian import hessian_measures
from suite.measures import LOSSES, LossName, Milestones, evaluate, progress_measures
from suite.registry import ALL, SuiteError
from suite.rundir import RunDir, read_json, rng_states, set_rng_states, write_json
from suite.spec import component_settings, spec_id


@dataclass
class TrainConfig:
    steps: int = 20_000  # update budget
    eval_every: int = 50  # evaluate on the whole train and val sets every this many steps
    memorization: float = 0.99  # train accuracy that counts as memorized
    target: float = 0.99  # val accuracy that counts as grokked
    patience: Optional[int] = 500  # stop once val acc has held the target this many steps; None = never
    warmup_steps: int = 0  # linear warmup from lr 0 (Nanda et al. use 10)
    loss: LossName = "ce"  # ce (softmax cross-entropy) or stablemax
    eval_batch: int = 8192  # examples per evaluation chunk (per member of an ensemble)
    checkpoint_every: int = 2_000
    hessian_every: Optional[int] = None  # every k evaluations, top Hessian eigenvalue of the E and W blocks


class Preempted(Exception):
    """Raised after a checkpoint when SIGUSR1/SIGTERM asked the run to stop (Slurm requeue)."""


@dataclass
class Member:
    """One seed of a cell: its own data, batches, run dir and record. The model, optimizer and
    filter are shared by all members (stacked, see suite/ensemble.py)."""
    spec: dict
    data: object
    sampler: object
    generator: torch.Generator
    tracker: object = None
    run_dir: RunDir | None = None
    milestones: Milestones | None = None
    metrics_file: object = None
    record: dict | None = None  # the last evaluation
    wall_before: float = 0.0  # this member's share of the wall time before a resume
    result: dict | None = None  # set once it stops (target held, or the budget)


@dataclass
class Built:
    members: list[Member]
    model: Ensemble | None  # None when the members cannot train as one: sequential_reason says why
    optimizer: torch.optim.Optimizer | None
    grad_filter: object
    sequential_reason: str | None = None


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SuiteError(f"device '{name}' asked for, but CUDA is not available here")
    try:
        return torch.device(name)
    except RuntimeError:
        raise SuiteError(f"unknown device '{name}' (auto, cpu, cuda, cuda:N)") from None


def check_train_config(cfg: TrainConfig) -> None:
    if cfg.steps <= 0:
        raise SuiteError(f"steps must be positive, got {cfg.steps}")
    if cfg.eval_every <= 0 or cfg.checkpoint_every <= 0 or cfg.eval_batch <= 0:
        raise SuiteError("eval_every, checkpoint_every and eval_batch must be positive")
    if cfg.loss not in LOSSES:
        raise SuiteError(f"unknown loss '{cfg.loss}'; known: {', '.join(LOSSES)}")
    if cfg.hessian_every is not None and cfg.hessian_every <= 0:
        raise SuiteError(f"hessian_every must be positive (or None), got {cfg.hessian_every}")
    if cfg.warmup_steps < 0 or (cfg.patience is not None and cfg.patience < 0):
        raise SuiteError("warmup_steps and patience must be >= 0")


def task_data(spec: dict):
    """The task's data and the model's registry entry, once the model is known to take that data."""
    task, model_entry = ALL["task"].get(spec["task"]["name"]), ALL["model"].get(spec["model"]["name"])
    data = task.build(spec["seed"], **component_settings(spec, "task"))
    accepted = model_entry.info.get("inputs", ())
    if data.kind not in accepted:
        raise SuiteError(f"model '{model_entry.name}' takes {' or '.join(accepted)} inputs, "
                         f"but task '{task.name}' gives {data.kind}")
    return data, model_entry


def build(specs: list[dict], device: torch.device) -> Built:
    """Everything a run needs, from its specs (one per seed). Raises SuiteError on bad input,
    before any file is written."""
    members, models = zip(*(build_member(spec, device) for spec in specs))
    members, models = list(members), list(models)
    reason = ensemble.blocker(specs, models, [m.data for m in members])
    if reason and len(specs) > 1:
        return Built(members, None, None, None, reason)
    model = Ensemble(models, stacked=reason is None)
    model.lay_out_like_gradients(torch.stack([m.data.x_train[:8] for m in members]))
    return Built(members, model, *optimizer_and_filter(specs[0], model))


def build_member(spec: dict, device: torch.device) -> tuple[Member, torch.nn.Module]:
    """One seed's data, batches and (plain, unstacked) model."""
    check_train_config(TrainConfig(**spec["train"]))
    data, model_entry = task_data(spec)
    data = data.to(device)
    torch.manual_seed(spec["seed"])  # the model's initialisation
    model = model_entry.build(data, **component_settings(spec, "model")).to(device)
    generator = torch.Generator(device=device).manual_seed(spec["seed"])
    sampler = ALL["sampler"].get(spec["sampler"]["name"]).build(data, generator, **component_settings(spec, "sampler"))
    return Member(spec, data, sampler, generator), model


def optimizer_and_filter(spec: dict, model: torch.nn.Module):
    groups = ParamGroups.of(model)
    optimizer = ALL["opt"].get(spec["opt"]["name"]).build(groups, **component_settings(spec, "opt"))
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]  # warmup scales from here
    grad_filter = ALL["filter"].get(spec["filter"]["name"]).build(groups.all, **component_settings(spec, "filter"))
    return optimizer, grad_filter


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


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


def train(specs: list[dict], run_dirs: list[Path], device: torch.device, trackers: list | None = None,
          compile: bool = False) -> list[dict]:
    """Train specs into their run dirs and return their results (each also written to its
    run_dir/result.json). One spec is one run; specs that differ only in the seed are one
    ensemble, or run one after the other when that would not be exact. compile: the training
    step's forward through torch.compile (evaluation stays eager: its shapes vary)."""
    trackers = trackers or [None] * len(specs)
    # Weight decay drives unused weights into subnormal floats, which made CPU steps up to
    # 15x slower after grokking; flushing them to zero is deterministic (no result changed here).
    torch.set_flush_denormal(True)
    b = build(specs, device)  # fails on bad input before anything is written
    if b.sequential_reason:
        print(f"{len(specs)} seeds run one after the other: {b.sequential_reason}", file=sys.stderr)
        return [train([s], [d], device, [t], compile)[0] for s, d, t in zip(specs, run_dirs, trackers)]
    members, model, K = b.members, b.model, len(specs)
    how = {"ensemble_size": K, "device": str(device), "compiled": compile,  # recorded in each result
           "git_commit": git_commit()}
    cfg = TrainConfig(**specs[0]["train"])
    loss_fn = LOSSES[cfg.loss]

    # Claim the run dirs and find where each member stands.
    states = []
    for m, run_dir, tracker in zip(members, run_dirs, trackers):
        m.run_dir, m.tracker = RunDir(run_dir), tracker
        m.run_dir.lock()
        states.append(None if m.run_dir.finished else m.run_dir.load_checkpoint(device))
    finished = [m.run_dir.finished for m in members]
    steps = {int(s["step"]) if s else 0 for s in states}
    if any(finished) or len(steps) > 1:  # finished by another process meanwhile, or resumed apart
        for m in members:
            m.run_dir.unlock()
        if K == 1:
            return [read_json(members[0].run_dir / "result.json")]
        print(f"{K} seeds run one after the other: some finished meanwhile, or they stand at different steps",
              file=sys.stderr)
        return [train([s], [d], device, [t], compile)[0] for s, d, t in zip(specs, run_dirs, trackers)]

    # Resume: restore the state after `start` updates and replay the metrics logged before it.
    start = steps.pop()
    if start:
        model.load_member_state_dicts([s["model"] for s in states])
        b.optimizer.load_state_dict(model.join([s["optimizer"] for s in states]))
        if b.grad_filter is not None:
            b.grad_filter.load_state_dict(model.join([s["filter"] for s in states]))
        set_rng_states(states[0], device)  # torch's global RNG, for anything that draws from it
    for m, state in zip(members, states):
        write_json(m.run_dir / "spec.json", m.spec)
        if state is not None:
            if hasattr(m.sampler, "load_state_dict"):  # samplers that keep a position (epoch)
                m.sampler.load_state_dict(state["sampler"])
            m.generator.set_state(state["generator"].cpu())
            m.wall_before = float(state["wall_s"])
            print(f"resuming {m.run_dir.path} from step {start}", file=sys.stderr)
        history = [r for r in m.run_dir.read_metrics() if r["step"] < start]
        m.milestones = Milestones(cfg.memorization, cfg.target)
        for record in history:
            m.milestones.update(record)
        m.metrics_file = m.run_dir.restart_metrics(history)

    live = list(members)  # the members still training, in the order of the stack
    stacked = {k: torch.stack([getattr(m.data, k) for m in live]) for k in ("x_train", "y_train", "x_val", "y_val")}
    rows = torch.arange(K, device=device)[:, None]  # member i's batch comes from member i's data
    step_forward = torch.compile(model) if compile else model
    progress = Progress(cfg.steps, start, spec_id(specs[0])[:8] + (f" x{K}" if K > 1 else ""))
    clock, step = WallShare(K), start
    with _StopFlag() as stop:
        for step in range(start, cfg.steps + 1):
            if step > start and (step % cfg.checkpoint_every == 0 or stop.raised):
                _save_checkpoints(b, live, step, device, clock.now())
                if stop.raised:
                    progress.close()
                    for m in live:
                        m.metrics_file.close()
                        m.run_dir.unlock()
                    raise Preempted(f"{stop.raised} at step {step}: checkpointed in "
                                    + ", ".join(str(m.run_dir.path) for m in live))

            if step % cfg.eval_every == 0 or step == cfg.steps:
                model.eval()
                train_loss, train_correct = evaluate(model, stacked["x_train"], stacked["y_train"], loss_fn, cfg.eval_batch)
                val_loss, val_correct = evaluate(model, stacked["x_val"], stacked["y_val"], loss_fn, cfg.eval_batch)
                model.train()
                notes = []
                for i, m in enumerate(live):
                    record = {"step": step, "train_loss": train_loss[i], "train_acc": train_correct[i].float().mean().item(),
                              "val_loss": val_loss[i], "val_acc": val_correct[i].float().mean().item()}
                    for name, mask in m.data.val_groups.items():
                        record[f"val_acc_{name}"] = val_correct[i][mask].float().mean().item()
                    record |= progress_measures(model.member(i), m.data)
                    if cfg.hessian_every and step % (cfg.eval_every * cfg.hessian_every) == 0:  # K == 1 (blocker)
                        record |= hessian_measures(model.alone(), m.data.x_train, m.data.y_train, loss_fn, cfg.eval_batch)
                    notes += _log(m, record, f"seed {m.spec['seed']} " if K > 1 else "")
                    if cfg.patience is not None and m.milestones.held_since is not None \
                            and step - m.milestones.held_since >= cfg.patience:
                        _finish(m, step, "target held", m.wall_before + clock.now(), how)
                progress.update(step, _summary([m.record for m in members]), " ".join(notes))
                if all(m.result is not None for m in live):
                    break
                if any(m.result is not None for m in live):  # members that stopped leave the stack
                    keep = [i for i, m in enumerate(live) if m.result is None]
                    opt_states = model.split(b.optimizer.state_dict())
                    filter_states = model.split(b.grad_filter.state_dict()) if b.grad_filter is not None else None
                    model.keep(keep)
                    b.optimizer, b.grad_filter = optimizer_and_filter(specs[0], model)
                    b.optimizer.load_state_dict(model.join([opt_states[i] for i in keep]))
                    if b.grad_filter is not None:
                        b.grad_filter.load_state_dict(model.join([filter_states[i] for i in keep]))
                    live = [live[i] for i in keep]
                    stacked = {k: v[keep] for k, v in stacked.items()}
                    rows = rows[: len(keep)]
                    clock.resize(len(live))
            if step == cfg.steps:
                break

            batch = torch.stack([m.sampler.next() for m in live])  # [K, batch]
            for group in b.optimizer.param_groups:
                group["lr"] = group["base_lr"] * (min(step / cfg.warmup_steps, 1.0) if cfg.warmup_steps else 1.0)
            y = stacked["y_train"][rows, batch]
            logits = step_forward(stacked["x_train"][rows, batch])
            # The sum of the members' mean losses: each member's gradient is its own run's.
            loss = loss_fn(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1).sum()
            b.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if b.grad_filter is not None:
                b.grad_filter.apply()
            b.optimizer.step()
    progress.close()
    for m in live:
        if m.result is None:
            _finish(m, step, "budget", m.wall_before + clock.now(), how)
    return [m.result for m in members]


class WallShare:
    """A member's share of the wall time: the time elapsed divided by the members training in
    it. Members that stop leave the stack, and from then on the rest share the time."""

    def __init__(self, size: int):
        self.before, self.since, self.size = 0.0, time.monotonic(), size

    def now(self) -> float:
        return self.before + (time.monotonic() - self.since) / self.size

    def resize(self, size: int) -> None:
        self.before, self.since, self.size = self.now(), time.monotonic(), size


def _log(m: Member, record: dict, who: str) -> list[str]:
    """Record one evaluation of one member; the milestones it just reached, for the progress line."""
    before = (m.milestones.memorization_step, m.milestones.grok_step)
    m.milestones.update(record)
    m.record = record
    m.metrics_file.write(json.dumps(record) + "\n")
    m.metrics_file.flush()
    if m.tracker is not None:
        m.tracker.log(record, record["step"])
    return [who + what for what, was, now in (("memorized", before[0], m.milestones.memorization_step),
                                              ("grokked", before[1], m.milestones.grok_step)) if was is None and now is not None]


def _summary(records: list[dict]) -> dict:
    """What the progress line shows: one member's record, or the members' means."""
    if len(records) == 1:
        return records[0]
    return {k: sum(r[k] for r in records) / len(records) for k in ("train_acc", "val_acc", "val_loss")}


def _save_checkpoints(b: Built, live: list[Member], step: int, device, wall_share: float) -> None:
    """One checkpoint per running member, each in the format of a separate run."""
    models = b.model.member_state_dicts()
    optimizers = b.model.split(b.optimizer.state_dict())
    filters = b.model.split(b.grad_filter.state_dict()) if b.grad_filter is not None else [{}] * len(live)
    for i, m in enumerate(live):
        m.run_dir.save_checkpoint({
            "model": models[i], "optimizer": optimizers[i], "filter": filters[i],
            "sampler": m.sampler.state_dict() if hasattr(m.sampler, "state_dict") else {},
            "generator": m.generator.get_state(), **rng_states(device), "step": step,
            "wall_s": m.wall_before + wall_share,
        })


def _finish(m: Member, step: int, stop_reason: str, wall: float, how: dict) -> None:
    m.metrics_file.close()
    record = m.record
    m.result = {
        "spec": m.spec,
        "run_id": spec_id(m.spec),
        "memorization_step": m.milestones.memorization_step,
        "grok_step": m.milestones.grok_step,
        "delay": m.milestones.delay,
        "final_train_acc": record["train_acc"],
        "final_val_acc": record["val_acc"],
        "final_train_loss": record["train_loss"],
        "final_val_loss": record["val_loss"],
        "steps": step,
        "stop_reason": stop_reason,
        "wall_s": wall,  # in an ensemble, this member's share of its wall time (WallShare)
        "steps_per_s": step / wall if wall > 0 else None,
        **how,
        "task_info": m.data.info,
        "suite_version": suite.__version__,
        "torch_version": torch.__version__,
        "python": platform.python_version(),
    }
    write_json(m.run_dir / "result.json", m.result)
    if m.tracker is not None:
        m.tracker.finish(m.result)
    m.run_dir.drop_checkpoints()
    m.run_dir.unlock()
