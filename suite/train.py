"""The one training loop. Read it top to bottom: build, (resume), train and evaluate, record.

A run is a pure function of its spec: the seed fixes the model's initialisation, the task's
split (unless the task is given its own data_seed) and the generator that draws every batch.
A checkpoint holds everything that changes during training (model, optimizer, filter,
generator, step), so a run that is killed and resumed writes the same numbers as one that
never stopped.
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
from suite.components.optimizers import ParamGroups
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
    eval_batch: int = 8192
    checkpoint_every: int = 2_000
    hessian_every: Optional[int] = None  # every k evaluations, top Hessian eigenvalue of the E and W blocks


class Preempted(Exception):
    """Raised after a checkpoint when SIGUSR1/SIGTERM asked the run to stop (Slurm requeue)."""


@dataclass
class Built:
    data: object
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    sampler: object
    grad_filter: object
    generator: torch.Generator


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


def build(spec: dict, device: torch.device) -> Built:
    """Everything a run needs, from its spec. Raises SuiteError on bad input, before any file is written."""
    check_train_config(TrainConfig(**spec["train"]))
    data, model_entry = task_data(spec)
    data = data.to(device)
    torch.manual_seed(spec["seed"])  # the model's initialisation
    model = model_entry.build(data, **component_settings(spec, "model")).to(device)
    groups = ParamGroups.of(model)
    optimizer = ALL["opt"].get(spec["opt"]["name"]).build(groups, **component_settings(spec, "opt"))
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]  # warmup scales from here
    generator = torch.Generator(device=device).manual_seed(spec["seed"])
    sampler = ALL["sampler"].get(spec["sampler"]["name"]).build(data, generator, **component_settings(spec, "sampler"))
    grad_filter = ALL["filter"].get(spec["filter"]["name"]).build(groups.all, **component_settings(spec, "filter"))
    return Built(data, model, optimizer, sampler, grad_filter, generator)


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


def train(spec: dict, run_dir: Path, device: torch.device, tracker=None) -> dict:
    """Train one spec into run_dir and return its result (also written to run_dir/result.json)."""
    cfg = TrainConfig(**spec["train"])
    # Weight decay drives unused weights into subnormal floats, which made CPU steps up to
    # 15x slower after grokking; flushing them to zero is deterministic (no result changed here).
    torch.set_flush_denormal(True)
    b = build(spec, device)  # fails on bad input before anything is written
    rd = RunDir(run_dir)
    rd.lock()
    if rd.finished:  # another process finished this spec while this one was building it
        rd.unlock()
        return read_json(rd / "result.json")
    write_json(rd / "spec.json", spec)
    loss_fn = LOSSES[cfg.loss]
    data, model, opt = b.data, b.model, b.optimizer

    # Resume: restore the state after `step` updates and replay the metrics logged before it.
    start, wall_before = 0, 0.0
    state = rd.load_checkpoint(device)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        if b.grad_filter is not None:
            b.grad_filter.load_state_dict(state["filter"])
        if hasattr(b.sampler, "load_state_dict"):  # samplers that keep a position (epoch)
            b.sampler.load_state_dict(state["sampler"])
        b.generator.set_state(state["generator"].cpu())
        set_rng_states(state, device)  # torch's global RNG, for anything that draws from it (dropout)
        start, wall_before = int(state["step"]), float(state["wall_s"])
        print(f"resuming {run_dir} from step {start}", file=sys.stderr)
    history = [r for r in rd.read_metrics() if r["step"] < start]
    milestones = Milestones(cfg.memorization, cfg.target)
    for record in history:
        milestones.update(record)
    metrics_file = rd.restart_metrics(history)

    progress = Progress(cfg.steps, start, spec_id(spec)[:8])
    t0, step, stop_reason, record = time.monotonic(), start, "budget", None
    with _StopFlag() as stop:
        for step in range(start, cfg.steps + 1):
            if step > start and (step % cfg.checkpoint_every == 0 or stop.raised):
                rd.save_checkpoint({
                    "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "filter": b.grad_filter.state_dict() if b.grad_filter is not None else {},
                    "sampler": b.sampler.state_dict() if hasattr(b.sampler, "state_dict") else {},
                    "generator": b.generator.get_state(), **rng_states(device), "step": step,
                    "wall_s": wall_before + time.monotonic() - t0,
                })
                if stop.raised:
                    progress.close()
                    metrics_file.close()
                    rd.unlock()
                    raise Preempted(f"{stop.raised} at step {step}: checkpointed in {run_dir}")

            if step % cfg.eval_every == 0 or step == cfg.steps:
                model.eval()
                train_loss, train_correct = evaluate(model, data.x_train, data.y_train, loss_fn, cfg.eval_batch)
                val_loss, val_correct = evaluate(model, data.x_val, data.y_val, loss_fn, cfg.eval_batch)
                model.train()
                record = {"step": step, "train_loss": train_loss, "train_acc": train_correct.float().mean().item(),
                          "val_loss": val_loss, "val_acc": val_correct.float().mean().item()}
                for name, mask in data.val_groups.items():
                    record[f"val_acc_{name}"] = val_correct[mask].float().mean().item()
                record |= progress_measures(model, data)
                if cfg.hessian_every and step % (cfg.eval_every * cfg.hessian_every) == 0:
                    record |= hessian_measures(model, data.x_train, data.y_train, loss_fn, cfg.eval_batch)
                before = (milestones.memorization_step, milestones.grok_step)
                milestones.update(record)
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                if tracker is not None:
                    tracker.log(record, step)
                note = ("memorized" if before[0] is None and milestones.memorization_step is not None else "") + \
                       (" grokked" if before[1] is None and milestones.grok_step is not None else "")
                progress.update(step, record, note.strip())
                if cfg.patience is not None and milestones.held_since is not None \
                        and step - milestones.held_since >= cfg.patience:
                    stop_reason = "target held"
                    break
            if step == cfg.steps:
                break

            batch = b.sampler.next()
            for group in opt.param_groups:
                group["lr"] = group["base_lr"] * (min(step / cfg.warmup_steps, 1.0) if cfg.warmup_steps else 1.0)
            loss = loss_fn(model(data.x_train[batch]), data.y_train[batch])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if b.grad_filter is not None:
                b.grad_filter.apply()
            opt.step()
    progress.close()
    metrics_file.close()

    wall = wall_before + time.monotonic() - t0
    result = {
        "spec": spec,
        "run_id": spec_id(spec),
        "memorization_step": milestones.memorization_step,
        "grok_step": milestones.grok_step,
        "delay": milestones.delay,
        "final_train_acc": record["train_acc"],
        "final_val_acc": record["val_acc"],
        "final_train_loss": record["train_loss"],
        "final_val_loss": record["val_loss"],
        "steps": step,
        "stop_reason": stop_reason,
        "wall_s": wall,
        "steps_per_s": step / wall if wall > 0 else None,
        "device": str(device),
        "task_info": data.info,
        "suite_version": suite.__version__,
        "git_commit": git_commit(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
    }
    write_json(rd / "result.json", result)
    if tracker is not None:
        tracker.finish(result)
    rd.drop_checkpoints()
    rd.unlock()
    return result
