"""The members that train together, as tensors: one model, its optimizer and filter, their data.

A Stack holds the live members that train as one model (planned by engine/plan.py), that model
(Stacked or Alone: engine/stacked.py), its optimizers and gradient filters (engine/updates.py), and
every member's data on a leading member axis: x_train is [K, n, ...], logits [K, batch, classes].
It computes: the learning rate and batch of the next step (the step itself is engine/train.py's),
the evaluation records, each member's checkpoint state, and a smaller stack when members stop.
Files are the members' (engine/member.py).
"""

from __future__ import annotations

import math

import torch

from suite.engine import precision
from suite.engine.draws import Draws
from suite.engine.hessian import hessian_measures
from suite.engine.measures import LOSSES, Progress, evaluate, to_host
from suite.engine.member import Member
from suite.engine.stacked import Alone, Stacked, finite
from suite.engine.updates import elementwise, for_stack, training
from suite.results.rundir import UnreadableFile, set_rng_states


class Stack:
    def __init__(self, members: list[Member], model: Stacked | Alone, device: torch.device):
        self.live, self.model, self.device, self.spec = list(members), model, device, members[0].spec
        self.cfg = members[0].cfg  # one part: the same train settings (suite/engine/plan.py)
        self.loss_fn = LOSSES[self.cfg.loss]
        self.update = for_stack([m.spec for m in members], model, elementwise(self.spec))
        self.x_train, self.y_train, self.x_val, self.y_val = (
            _stack([getattr(m.data, k) for m in members]) for k in ("x_train", "y_train", "x_val", "y_val")
        )
        # Each member's correct predictions on the batches it trained on since the last evaluation
        # (train mode, before the update): Grokking-Insight's train accuracy, `train_acc_running`.
        self.running_correct = torch.zeros(len(members), dtype=torch.long, device=device)
        self.running_seen = 0
        datas = [m.data for m in members]
        self.val_groups = {name: _stack([d.val_groups[name] for d in datas]) for name in datas[0].val_groups}
        self.progress = Progress(datas, device)
        self.draws = Draws(members, device)
        if members[0].start:
            self._restore([m.state for m in members])

    def start(self) -> None:
        """Torch's global RNG where its separate run's stands as it starts (dropout draws from it), and
        every optimizer with modes in train mode (a checkpoint's already is)."""
        set_rng_states(self.live[0].state or self.live[-1].rng, self.device)
        training(self.update)

    def _restore(self, states: list[dict]) -> None:
        """The optimizer, filter and running accuracy from the members' checkpoints (their models,
        samplers and generators were restored as they claimed their run folders)."""
        try:
            self.update.load(states)
        except Exception as err:  # noqa: BLE001 - read, but not these runs': any failure says so
            raise UnreadableFile(
                f"the checkpoints in {', '.join(str(m.run_dir.path) for m in self.live)} do not fit "
                f"these runs ({type(err).__name__}: {(str(err).splitlines() or [''])[0]}); delete them "
                "to run again from step 0"
            ) from None
        running = [s.get("running", (0, 0)) for s in states]  # (correct, seen); older checkpoints have none
        self.running_correct = torch.tensor([c for c, _ in running], dtype=torch.long, device=self.device)
        self.running_seen = running[0][1]

    # --- the step's pieces (suite/engine/train.py's train_step puts them together) ------------------------

    def warm_up(self, step: int) -> None:
        """The learning rate of this step: the warmup's share of each group's base rate."""
        warmup = min(step / self.cfg.warmup_steps, 1.0) if self.cfg.warmup_steps else 1.0
        for group in self.update.param_groups:
            group["lr"] = group["base_lr"] * warmup

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every live member's next batch of its own data, [K, batch, ...] and [K, batch]."""
        batch = self.draws.next().to(self.device, non_blocking=True)  # [K, batch], drawn on the CPU
        rows = torch.arange(len(self.live), device=self.device)[:, None]  # member i's batch from member i's data
        return self.x_train[rows, batch], self.y_train[rows, batch]

    def count_running(self, logits: torch.Tensor, y: torch.Tensor) -> None:
        self.running_correct += (logits.detach().argmax(-1) == y).sum(1)
        self.running_seen += y.shape[1]

    def observe_embedding_grad(self) -> None:
        """Samplers that adapt to training read their own member's token-embedding gradient."""
        if self.live[0].sampler.reads_embedding_grad:  # one cell: every member has the same sampler
            grads = torch.stack(self.model.embedding_grads()).cpu()  # the samplers live on the CPU
            for m, grad in zip(self.live, grads):
                m.sampler.observe(grad)

    # --- evaluate -----------------------------------------------------------------------------------

    def evaluate(self, step: int) -> list[dict | None]:
        """Every live member on its whole train and val sets: its record, or None where its loss or
        parameters are no longer finite. Computed for all members at once on the device and read
        back with one synchronisation (suite.engine.measures.to_host)."""
        columns, extra = self._measure()
        med = columns.pop("med", None)  # recorded after sigma_ratio
        packed, finite_, *copies = to_host(
            [torch.stack([c.double() for c in columns.values()]), finite(self.model), *extra.values()]
            + ([med.double()] if med is not None else [])
        )
        sigma = self.progress.ratios(dict(zip(extra, copies))) if extra else None
        meds = copies[-1].tolist() if med is not None else None
        rows, finite_ = packed.T.tolist(), finite_.tolist()  # plain numbers: nothing below runs per member on a tensor
        records = []
        for i in range(len(self.live)):
            record = {"step": step, **dict(zip(columns, rows[i]))}
            if not (finite_[i] and math.isfinite(record["train_loss"]) and math.isfinite(record["val_loss"])):
                records.append(None)
                continue
            if sigma is not None:
                record["sigma_ratio"] = sigma[i]
            if meds is not None:
                record["med"] = meds[i]
            if self.cfg.hessian_every and step % (self.cfg.eval_every * self.cfg.hessian_every) == 0:  # K == 1 (plan)
                data = self.live[i].data
                record |= hessian_measures(
                    self.model.alone(), data.x_train, data.y_train, self.loss_fn, self.cfg.eval_batch
                )
            records.append(record)
        return records

    def restart_running(self) -> None:
        """The running train accuracy counts anew from an evaluation (once its records are written)."""
        self.running_correct.zero_()
        self.running_seen = 0

    def _measure(self) -> tuple[dict, dict]:
        """On the device: the [K] columns every record holds, and what the host needs besides (the
        E and W, or on a GPU their tridiagonals, for sigma_ratio)."""
        cfg = self.cfg
        self.model.eval()
        with precision.autocast(cfg.precision, self.device):  # the model as it trains
            train_loss, train_correct = evaluate(self.model, self.x_train, self.y_train, self.loss_fn, cfg.eval_batch)
            val_loss, val_correct = evaluate(self.model, self.x_val, self.y_val, self.loss_fn, cfg.eval_batch)
        self.model.train()
        columns = {
            "train_loss": train_loss,
            "train_acc": train_correct.float().mean(1),
            "val_loss": val_loss,
            "val_acc": val_correct.float().mean(1),
        }
        for name, mask in self.val_groups.items():
            columns[f"val_acc_{name}"] = (val_correct & mask).sum(1).float() / mask.sum(1).float()
        if self.running_seen:
            columns["train_acc_running"] = self.running_correct.double() / self.running_seen
        E, W = self.model.stacked_weights()  # a model may have E without W, a task no numbers
        if E is None:
            return columns, {}
        progress, extra = self.progress.columns(E, W)
        return columns | progress, extra

    # --- checkpoints, and members leaving -------------------------------------------------------------

    def states(self) -> list[dict]:
        """Each live member's model, optimizer, filter and running accuracy, in a separate run's format."""
        models, updates = self.model.member_state_dicts(), self.update.states()
        return [
            {"model": models[i], **updates[i], "running": (int(self.running_correct[i]), self.running_seen)}
            for i in range(len(self.live))
        ]

    def leave(self) -> None:
        """Members that stopped leave the stack; the rest go on in a smaller one, each with its own
        optimizer and filter state."""
        keep = [i for i, m in enumerate(self.live) if m.result is None]
        if len(keep) == len(self.live):
            return
        self.live = [self.live[i] for i in keep]
        if not keep:  # every member stopped: nothing left to train
            return
        states = self.update.states()
        self.draws.keep(self.live)
        self.model.keep(keep)
        self.update = self.update.keep([m.spec for m in self.live], [states[i] for i in keep])
        self.x_train, self.y_train, self.x_val, self.y_val, self.running_correct = (
            t[keep] for t in (self.x_train, self.y_train, self.x_val, self.y_val, self.running_correct)
        )
        self.val_groups = {name: mask[keep] for name, mask in self.val_groups.items()}
        self.progress.keep(keep)


def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The members' tensors on a leading axis; one member's as a view (no copy of its data)."""
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)
