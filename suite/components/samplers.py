"""Samplers: which training examples make the next batch.

A sampler is built once from the task's data and the run's generator (seeded from the
run's seed, on the run's device); `next()` returns the batch's indices into the training
set, drawn on the device. All the randomness goes through that generator, whose state
the checkpoint carries, so a resumed run draws the same batches.
"""

from __future__ import annotations

import torch

from suite.data import TaskData
from suite.registry import SuiteError, register_sampler


def _check_batch(batch_size: int) -> None:
    if batch_size <= 0:
        raise SuiteError(f"batch_size must be positive, got {batch_size}")


@register_sampler("random")
class RandomBatches:
    """Uniform minibatches: batch_size distinct training examples per step (all of them if fewer)."""

    def __init__(self, data: TaskData, generator: torch.Generator, *, batch_size: int = 512):
        _check_batch(batch_size)
        self.n, self.batch_size, self.generator = len(data.y_train), batch_size, generator

    def next(self) -> torch.Tensor:
        perm = torch.randperm(self.n, generator=self.generator, device=self.generator.device)
        return perm[: self.batch_size]


@register_sampler("full")
class FullBatch:
    """Full batch: every training example at every step."""

    def __init__(self, data: TaskData, generator: torch.Generator):
        self.all = torch.arange(len(data.y_train), device=data.y_train.device)

    def next(self) -> torch.Tensor:
        return self.all


@register_sampler("frequency")
class FrequencyAware:
    """Frequency-aware minibatches: examples with rare tokens are drawn more often.

    Example i is drawn with probability proportional to w_i = sum over its input tokens t
    of (1 / f_t) ** power, f_t = occurrences of t in the training inputs (tokens present in
    every example, like the operator and '=', contribute a constant). A token then gets a
    gradient at nearly the same rate whatever its frequency, which is what the paper's
    analysis asks for (rare tokens otherwise only see weight decay). power = 0 is uniform.
    batch_size distinct examples per step, drawn on the device without replacement.
    """

    def __init__(self, data: TaskData, generator: torch.Generator, *, batch_size: int = 512, power: float = 1.0):
        _check_batch(batch_size)
        if data.token_freq is None:
            raise SuiteError("sampler 'frequency' needs a task that reports token frequencies (a token task)")
        inv = data.token_freq.float().clamp(min=1).pow(-power)
        self.weights = inv[data.x_train].sum(dim=1)
        self.batch_size = min(batch_size, len(self.weights))
        self.generator = generator

    def next(self) -> torch.Tensor:
        return torch.multinomial(self.weights, self.batch_size, replacement=False, generator=self.generator)
