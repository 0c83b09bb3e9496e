"""The members that train together, and everything the loop does to them besides the update.

A Stack holds K members (seeds of one cell; K = 1 for a single run): one model with their
parameters stacked (suite/ensemble.py), its optimizer and gradient filter, and per member its
data, batches, run dir and record. Tensors carry the member axis first: x_train is
[K, n, ...], logits [K, batch, classes]. The loop (suite/train.py) asks it to resume, step,
evaluate, checkpoint, let stopped members go and finish; each of those is one method here.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch

import suite
from suite import ensemble, weights
from suite.components.optimizers import ParamGroups
from suite.config import TrainConfig
from suite.contracts import GradFilter, Sampler, Tracker
from suite.data import TaskData
from suite.ensemble import Ensemble
from suite.hessian import hessian_measures
from suite.measures import LOSSES, evaluate, progress_columns, sigma_ratio, to_host
from suite.milestones import Milestones
from suite.registry import ALL, SuiteError
from suite.results import TRAIN, git_commit, git_dirty
from suite.rundir import RunDir, UnreadableFile, rng_states, set_rng_states, write_json
from suite.spec import component_settings, spec_id, task_data


@dataclass
class Member:
    """One seed of a cell: its own data, batches, run dir and record. The model, optimizer and
    filter are the stack's (shared, stacked)."""
    spec: dict
    data: TaskData
    sampler: Sampler
    generator: torch.Generator
    tracker: Tracker | None = None
    run_dir: RunDir | None = None
    milestones: Milestones | None = None
    metrics_file: TextIO | None = None  # the open metrics.jsonl
    record: dict | None = None  # the last evaluation
    wall_before: float = 0.0  # this member's share of the wall time before a resume
    result: dict | None = None  # set once it stops (target held, diverged, or the budget)
    diverged: bool = False  # its loss or parameters stopped being finite
    notes: list[str] = field(default_factory=list)


def build_member(spec: dict, device: torch.device) -> tuple[Member, torch.nn.Module]:
    """One seed's data, batches and (plain, unstacked) model."""
    TrainConfig(**spec["train"])  # its checks
    data, model_entry = task_data(spec)
    data = data.to(device)
    torch.manual_seed(spec["seed"])  # the model's initialisation
    model = model_entry.build(data, **component_settings(spec, "model")).to(device)
    generator = torch.Generator(device=device).manual_seed(spec["seed"])
    sampler = ALL["sampler"].get(spec["sampler"]["name"]).build(data, generator, **component_settings(spec, "sampler"))
    _check_built("sampler", spec["sampler"]["name"], sampler, Sampler)
    if sampler.reads_embedding_grad and getattr(model, "embedding_weight", None) is None:
        raise SuiteError(f"sampler '{spec['sampler']['name']}' reads the token-embedding gradients, "
                         f"but model '{spec['model']['name']}' here has no token embedding")
    return Member(spec, data, sampler, generator), model


def optimizer_and_filter(spec: dict, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, GradFilter]:
    groups = ParamGroups.of(model)
    optimizer = ALL["opt"].get(spec["opt"]["name"]).build(groups, **component_settings(spec, "opt"))
    _check_built("optimizer", spec["opt"]["name"], optimizer, torch.optim.Optimizer)
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]  # warmup scales from here
    grad_filter = ALL["filter"].get(spec["filter"]["name"]).build(groups.all, **component_settings(spec, "filter"))
    _check_built("filter", spec["filter"]["name"], grad_filter, GradFilter)
    return optimizer, grad_filter


def _check_built(kind: str, name: str, obj, base: type) -> None:
    if not isinstance(obj, base):
        raise SuiteError(f"{kind} '{name}' built a {type(obj).__name__}, not a {base.__module__}.{base.__qualname__} "
                         "(see suite/contracts.py)")


def build(specs: list[dict], device: torch.device) -> Stack:
    """Everything a run needs, from its specs (one per member: seeds, or cells that differ in their
    task's settings). Raises SuiteError on bad input, before any file is written. Members that
    cannot train as one exact stack come back as a Stack with no model, a `sequential_reason`,
    and the `parts` that can (members whose tensors have the same shapes; else one each)."""
    members, models = zip(*(build_member(spec, device) for spec in specs))
    members, models = list(members), list(models)
    reason = ensemble.blocker(specs, models, [m.data for m in members])
    model = None
    if reason is None:
        model = Ensemble(models)
        try:  # the first vmapped forward and backward: a model whose ops have no batching rule fails here
            model.lay_out_like_gradients(torch.stack([m.data.x_train[:8] for m in members]))
        except Exception as err:  # noqa: BLE001 (the plain model then runs, and raises its own errors)
            reason = f"model '{specs[0]['model']['name']}' cannot be vmapped ({type(err).__name__}: " \
                     f"{(str(err).splitlines() or [''])[0]})"
    if reason and len(specs) > 1:
        parts = None
        if reason == ensemble.SHAPES_DIFFER:  # members of the same shapes can still stack together
            by_shape: dict = {}
            for i, (m, model) in enumerate(zip(members, models)):
                by_shape.setdefault(ensemble.shapes(model, m.data), []).append(i)
            parts = list(by_shape.values())
        return Stack(specs[0], members, None, device, sequential_reason=reason, parts=parts)
    if reason:  # a single run never needs the stack: the plain model
        model = Ensemble(models, stacked=False)
    return Stack(specs[0], members, model, device)


class Stack:
    def __init__(self, spec: dict, members: list[Member], model: Ensemble | None, device: torch.device,
                 sequential_reason: str | None = None, parts: list[list[int]] | None = None):
        self.members, self.live, self.model, self.device = members, list(members), model, device
        self.spec, self.sequential_reason = spec, sequential_reason
        self.parts = parts  # with a sequential_reason: the members that can stack among themselves; None: none
        # Each member's correct predictions on the batches it trained on since the last evaluation
        # (train mode, before the update): Grokking-Insight's train accuracy, `train_acc_running`.
        self.running_correct, self.running_seen = None, 0
        self.cfg = TrainConfig(**spec["train"])
        self.loss_fn = LOSSES[self.cfg.loss]
        if model is not None:
            self.optimizer, self.grad_filter = optimizer_and_filter(spec, model)

    # --- start: claim the run dirs, resume ------------------------------------------------------

    def claim(self, run_dirs: list[Path], trackers: list) -> int | None:
        """Lock the run dirs and restore every member to where its checkpoint stands. Returns
        the step to start from, or None (run dirs released) when some member finished meanwhile
        (another process) or the members stand at different steps (they were resumed apart)."""
        try:
            resumed = self._resume(run_dirs, trackers)
        except SuiteError:  # a damaged file, or another process on a run dir: nothing written, all let go
            self._unlock()
            raise
        if resumed is None:
            self._unlock()
            return None
        start, histories = resumed
        for m, history in zip(self.members, histories):
            write_json(m.run_dir / "spec.json", m.spec)
            if start:
                print(f"resuming {m.run_dir.path} from step {start}", file=sys.stderr)
            m.milestones = Milestones(self.cfg.memorization, self.cfg.target, self.cfg.hold)
            for record in history:
                m.milestones.update(record)
            m.metrics_file = m.run_dir.restart_metrics(history)
        self.x_train, self.y_train, self.x_val, self.y_val = (
            torch.stack([getattr(m.data, k) for m in self.live]) for k in ("x_train", "y_train", "x_val", "y_val"))
        if self.running_correct is None:  # not restored from checkpoints
            self.running_correct = torch.zeros(len(self.live), dtype=torch.long, device=self.device)
        return start

    def _resume(self, run_dirs: list[Path], trackers: list) -> tuple[int, list[list[dict]]] | None:
        """Lock the run dirs and read where they stand: the step to start from and each member's
        metrics before it (to replay), the members restored to their checkpoints."""
        states = []
        for m, run_dir, tracker in zip(self.members, run_dirs, trackers):
            m.run_dir, m.tracker = RunDir(run_dir), tracker
            m.run_dir.lock()
            states.append(None if m.run_dir.finished else m.run_dir.load_checkpoint(self.device))
        steps = {int(s["step"]) if s else 0 for s in states}
        if any(m.run_dir.finished for m in self.members) or len(steps) > 1:
            return None
        start = steps.pop()
        histories = [[r for r in m.run_dir.read_metrics() if r["step"] < start] for m in self.members]
        if start:
            try:
                self._restore(states)
            except Exception as err:  # noqa: BLE001 - it was read, but it is not this run's: any failure says so
                raise UnreadableFile(f"the checkpoint in {', '.join(str(m.run_dir.path) for m in self.members)} "
                                     f"does not fit this run ({type(err).__name__}: {(str(err).splitlines() or [''])[0]}); "
                                     "delete it to run it again from step 0") from None
        return start, histories

    def _unlock(self) -> None:
        for m in self.members:
            if m.run_dir is not None:
                m.run_dir.unlock()

    def _restore(self, states: list[dict]) -> None:
        self.model.load_member_state_dicts([s["model"] for s in states])
        self.optimizer.load_state_dict(self.model.join([s["optimizer"] for s in states]))
        self.grad_filter.load_state_dict(self.model.join([s["filter"] for s in states]))
        for m, state in zip(self.members, states):
            m.sampler.load_state_dict(state["sampler"])
            m.generator.set_state(state["generator"].cpu())
            m.wall_before = float(state["wall_s"])
        set_rng_states(states[0], self.device)  # torch's global RNG, for anything that draws from it
        running = [s.get("running", (0, 0)) for s in states]  # (correct, seen); older checkpoints have none
        self.running_correct = torch.tensor([c for c, _ in running], dtype=torch.long, device=self.device)
        self.running_seen = running[0][1]

    # --- train ------------------------------------------------------------------------------------

    def update(self, step: int, forward) -> None:
        """One step of every live member: each its own batch, the sum of their mean losses (so
        each member's gradient is its own run's), filter, optimizer."""
        batch = torch.stack([m.sampler.next() for m in self.live])  # [K, batch]
        warmup = min(step / self.cfg.warmup_steps, 1.0) if self.cfg.warmup_steps else 1.0
        for group in self.optimizer.param_groups:
            group["lr"] = group["base_lr"] * warmup
        rows = torch.arange(len(self.live), device=self.device)[:, None]  # member i's batch from member i's data
        y = self.y_train[rows, batch]
        logits = forward(self.x_train[rows, batch])
        self.running_correct += (logits.detach().argmax(-1) == y).sum(1)
        self.running_seen += y.shape[1]
        loss = self.loss_fn(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1).sum()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.live[0].sampler.reads_embedding_grad:  # one cell: every member has the same sampler
            grad = self.model.embedding_weight.grad
            for i, m in enumerate(self.live):
                m.sampler.observe(grad if self.model.single is not None else grad[i])
        self.grad_filter.apply()
        if self.cfg.grad_clip is not None:
            self.model.clip_grad_norms(self.cfg.grad_clip)
        self.optimizer.step()

    # --- evaluate, record, stop -------------------------------------------------------------------

    def evaluate(self, step: int) -> None:
        """Evaluate every live member on its whole train and val sets and record it (metrics.jsonl,
        tracker, milestones); the milestones reached go to each member's notes. A member whose loss
        or parameters are no longer finite is marked diverged instead, and records nothing.
        Everything is computed for all members at once on the device and read back with one
        synchronisation (suite.measures.to_host)."""
        cfg = self.cfg
        self.model.eval()
        train_loss, train_correct = evaluate(self.model, self.x_train, self.y_train, self.loss_fn, cfg.eval_batch)
        val_loss, val_correct = evaluate(self.model, self.x_val, self.y_val, self.loss_fn, cfg.eval_batch)
        self.model.train()
        columns = {"train_loss": train_loss, "train_acc": train_correct.float().mean(1),
                   "val_loss": val_loss, "val_acc": val_correct.float().mean(1)}
        for name in self.live[0].data.val_groups:
            mask = torch.stack([m.data.val_groups[name] for m in self.live])
            columns[f"val_acc_{name}"] = (val_correct & mask).sum(1).float() / mask.sum(1).float()
        if self.running_seen:
            columns["train_acc_running"] = self.running_correct.double() / self.running_seen
        E, W = self.model.stacked_weights()
        datas = [m.data for m in self.live]
        measured = E is not None and all(d.token_freq is not None for d in datas)
        if measured:
            progress = progress_columns(E, datas)
            columns |= {k: progress[k] for k in ("emb_norm_rare", "emb_norm_middle", "emb_norm_frequent")}
        names = list(columns)
        extra = {}  # sigma_ratio needs E and W on the host; a model may have E without W, a task no numbers
        if measured and W is not None:
            extra |= {"E": E, "W": W}
        if measured and "med" in progress:
            extra["med"] = progress["med"]
        packed, finite, *copies = to_host([torch.stack([c.double() for c in columns.values()]), self.model.finite(),
                                           *extra.values()])
        on_host = dict(zip(extra, copies))
        for i, m in enumerate(self.live):
            record = {"step": step, **dict(zip(names, packed[:, i].tolist()))}
            if not (finite[i] and math.isfinite(record["train_loss"]) and math.isfinite(record["val_loss"])):
                m.diverged = True
                m.notes.append("diverged")
                continue
            if "W" in on_host:
                record["sigma_ratio"] = sigma_ratio(on_host["E"][i], on_host["W"][i])
            if "med" in on_host:
                record["med"] = on_host["med"][i].item()
            if cfg.hessian_every and step % (cfg.eval_every * cfg.hessian_every) == 0:  # K == 1 (blocker)
                record |= hessian_measures(self.model.alone(), m.data.x_train, m.data.y_train, self.loss_fn,
                                           cfg.eval_batch)
            _record(m, record)
            if cfg.keep_weights:
                # the grok step is known only once the target has held: keep the weights at the start
                # of every streak until one holds (finish() drops them if none did)
                candidate = m.milestones.grok_step in (None, step)
                for moment, reached in (("memorization", m.milestones.memorization_step),
                                        ("grok", m.milestones.held_since if candidate else None)):
                    if reached == step:
                        weights.save(m.run_dir.path, moment, self.model.member_state_dicts()[i], step)
        self.running_correct.zero_()
        self.running_seen = 0

    def stop_reason(self, m: Member, step: int) -> str | None:
        """Why m stops at this evaluation ("diverged", "target held"), or None."""
        if m.diverged:
            return "diverged"
        if self.cfg.patience is not None and m.milestones.held_since is not None \
                and step - m.milestones.held_since >= self.cfg.patience:
            return "target held"
        return None

    def leave(self) -> None:
        """Members that stopped leave the stack; the rest go on in a smaller one, each with its
        own optimizer and filter state."""
        keep = [i for i, m in enumerate(self.live) if m.result is None]
        if len(keep) == len(self.live):
            return
        self.live = [self.live[i] for i in keep]
        if not keep:  # every member stopped: nothing left to train
            return
        opt_states = self.model.split(self.optimizer.state_dict())
        filter_states = self.model.split(self.grad_filter.state_dict())
        self.model.keep(keep)
        self.optimizer, self.grad_filter = optimizer_and_filter(self.spec, self.model)
        self.optimizer.load_state_dict(self.model.join([opt_states[i] for i in keep]))
        self.grad_filter.load_state_dict(self.model.join([filter_states[i] for i in keep]))
        self.x_train, self.y_train, self.x_val, self.y_val, self.running_correct = (
            t[keep] for t in (self.x_train, self.y_train, self.x_val, self.y_val, self.running_correct))

    def checkpoint(self, step: int, wall_share: float) -> None:
        """One checkpoint per live member, each in the format of a separate run."""
        models = self.model.member_state_dicts()
        optimizers = self.model.split(self.optimizer.state_dict())
        filters = self.model.split(self.grad_filter.state_dict())
        for i, m in enumerate(self.live):
            m.run_dir.save_checkpoint({
                "model": models[i], "optimizer": optimizers[i], "filter": filters[i],
                "sampler": m.sampler.state_dict(), "generator": m.generator.get_state(),
                **rng_states(self.device), "step": step, "wall_s": m.wall_before + wall_share,
                "running": (int(self.running_correct[i]), self.running_seen),
            })

    def release(self) -> None:
        """Close and unlock the live members' run dirs (preempted: their checkpoints stay)."""
        for m in self.live:
            m.metrics_file.close()
            m.run_dir.unlock()

    def finish(self, m: Member, step: int, stop_reason: str, wall: float, how: dict) -> None:
        """Write m's result.json (its last finite evaluation, milestones, provenance) and close its run dir."""
        m.metrics_file.close()
        record = m.record or dict.fromkeys(("train_acc", "val_acc", "train_loss", "val_loss"))  # diverged at once
        m.result = {
            "spec": m.spec,
            "run_id": spec_id(m.spec),
            "runner": TRAIN,
            "memorization_step": m.milestones.memorization_step,
            "grok_step": m.milestones.grok_step,  # held for train.hold steps (suite.measures.Milestones)
            "delay": m.milestones.delay,
            "first_touch_step": m.milestones.first_touch_step,
            "collapsed": m.milestones.collapsed,
            "best_val_acc": m.milestones.best_val_acc,
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
        if self.cfg.keep_weights and not m.diverged:  # before result.json: a finished run has its weights
            weights.save(m.run_dir.path, "final", self.model.member_state_dicts()[self.live.index(m)], step)
        if self.cfg.keep_weights and m.milestones.grok_step is None:  # a streak that never held
            weights.drop(m.run_dir.path, "grok")
        write_json(m.run_dir / "result.json", m.result)
        if m.tracker is not None:
            m.tracker.finish(m.result)
        m.run_dir.drop_checkpoints()
        m.run_dir.unlock()


def provenance(size: int, device: torch.device, compile: bool) -> dict:
    """How a result was made, recorded in it. Threads change the rounding on CPU (README, "Many seeds at
    once") and the wait policy the speed, so both are recorded beside the commit."""
    return {"ensemble_size": size, "device": str(device), "compiled": compile, "git_commit": git_commit(),
            "git_dirty": git_dirty(), "threads": torch.get_num_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}


def _record(m: Member, record: dict) -> None:
    """Write one evaluation of one member; the milestones it just reached go to m.notes."""
    before = (m.milestones.memorization_step, m.milestones.grok_step)
    m.milestones.update(record)
    m.record = record
    m.metrics_file.write(json.dumps(record) + "\n")
    m.metrics_file.flush()
    if m.tracker is not None:
        m.tracker.log(record, record["step"])
    m.notes += [what for what, was, now in (("memorized", before[0], m.milestones.memorization_step),
                                            ("grokked", before[1], m.milestones.grok_step)) if was is None and now is not None]
