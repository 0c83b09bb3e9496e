"""Samplers: which training examples make the next batch.

A sampler is built once from the task's data and the run's generator (seeded from the
run's seed, on the run's device); `next()` returns the batch's indices into the training
set, drawn on the device. All the randomness goes through that generator, whose state
the checkpoint carries, so a resumed run draws the same batches.
"""

from __future__ import annotations

import torch

from suite.data import TaskData
from suite.contracts import Sampler
from suite.registry import SuiteError, register_sampler


def _check_batch(batch_size: int, data: TaskData) -> None:
    if batch_size <= 0:
        raise SuiteError(f"batch_size must be positive, got {batch_size}")
    if batch_size > len(data.y_train):  # a smaller batch than asked, silently: say so instead
        raise SuiteError(f"batch_size {batch_size} is larger than the training set ({len(data.y_train)} examples); "
                         "--sampler full trains on all of it")


@register_sampler("random")
class RandomBatches(Sampler):
    """Uniform minibatches: batch_size distinct training examples per step."""

    def __init__(self, data: TaskData, generator: torch.Generator, *, batch_size: int = 512):
        _check_batch(batch_size, data)
        self.n, self.batch_size, self.generator = len(data.y_train), batch_size, generator

    def next(self) -> torch.Tensor:
        perm = torch.randperm(self.n, generator=self.generator, device=self.generator.device)
        return perm[: self.batch_size]


@register_sampler("full")
class FullBatch(Sampler):
    """Full batch: every training example at every step."""

    def __init__(self, data: TaskData, generator: torch.Generator):
        self.all = torch.arange(len(data.y_train), device=data.y_train.device)

    def next(self) -> torch.Tensor:
        return self.all


@register_sampler("frequency")
class FrequencyAware(Sampler):
    """Frequency-aware minibatches: every token gets a gradient equally often in expectation.

    Example i is drawn (with replacement) with probability proportional to w_i ** power,
    where w solves: for every token t that varies across examples,
        sum over examples i of w_i * (occurrences of t in x_i) = the same for all t.
    w is found by iterative proportional fitting (each round multiplies w_i by the geometric
    mean, over its varying tokens, of target / current total). Under plain random batches a
    token's update rate is its training frequency f_t, so rare tokens mostly see weight decay
    (the paper's stagnation mechanism); here all rates are equal. Tokens present in every
    example (the operator, '=') carry no choice and are left out. power = 0 is uniform.
    """

    def __init__(self, data: TaskData, generator: torch.Generator, *, batch_size: int = 512, power: float = 1.0,
                 rounds: int = 200):
        if data.token_freq is None:
            raise SuiteError("sampler 'frequency' needs a task that reports token frequencies (a token task)")
        _check_batch(batch_size, data)
        if rounds < 0:
            raise SuiteError(f"rounds must be >= 0, got {rounds}")
        x, freq = data.x_train.flatten(1), data.token_freq
        varies = (freq > 0) & (freq < len(x))
        counts = varies[x].double()  # which positions count toward balance
        w = torch.ones(len(x), dtype=torch.float64, device=x.device)
        for _ in range(rounds):
            total = torch.bincount(x.flatten(), weights=(w[:, None] * counts).flatten(), minlength=len(freq))
            log_ratio = torch.where(varies, total[varies].mean().log() - total.clamp(min=1e-300).log(), 0.0)
            w = w * torch.exp((log_ratio[x] * counts).sum(1) / counts.sum(1).clamp(min=1))
            w = w / w.mean()
        self.weights = w.pow(power).float()
        self.batch_size, self.generator = batch_size, generator

    def next(self) -> torch.Tensor:
        return torch.multinomial(self.weights, self.batch_size, replacement=True, generator=self.generator)


@register_sampler("epoch")
class EpochBatches(Sampler):
    """Shuffled epochs: a fresh permutation each epoch cut into batches, the last one short.

    This is Grokfast's loop (ironjr/grokfast main.py): 4,656 examples at batch 512 make 9
    batches of 512 and one of 48 per epoch. Where an epoch stands is state, which
    state_dict() / load_state_dict() hand to the checkpoint.
    """

    def __init__(self, data: TaskData, generator: torch.Generator, *, batch_size: int = 512):
        _check_batch(batch_size, data)
        self.n, self.batch_size, self.generator = len(data.y_train), batch_size, generator
        self.perm = torch.empty(0, dtype=torch.long, device=generator.device)
        self.pos = 0

    def next(self) -> torch.Tensor:
        if self.pos >= len(self.perm):
            self.perm = torch.randperm(self.n, generator=self.generator, device=self.generator.device)
            self.pos = 0
        batch = self.perm[self.pos : self.pos + self.batch_size]
        self.pos += len(batch)
        return batch

    def state_dict(self) -> dict:
        return {"perm": self.perm.clone(), "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.perm, self.pos = state["perm"].to(self.generator.device), int(state["pos"])
