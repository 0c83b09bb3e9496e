"""Samplers: which training examples make the next batch.

A sampler is built once from the task's data and the run's generator (seeded from the
run's seed), both on the CPU whatever device the run trains on, so that a seed draws the same
batches on a GPU as on the CPU; `next()` returns the batch's indices into the training set,
which the loop moves to the device (and a sampler that adapts gets the gradient on the CPU).
All the randomness goes through that generator, whose state the checkpoint carries, so a
resumed run draws the same batches.

The samplers registered here:
- random: uniform minibatches (batch_size distinct examples); full: every training example at
  every step; epoch: shuffled epochs cut into batches, the last one short (Grokfast's loop);
- frequency (ours): example weights that give every token the same update rate;
- grad_softmax: the embedding paper's Appendix-A optimum (arXiv 2505.15624, eq. 19), which the
  paper never runs: token probabilities p_i = softmax(L_i^2 / gamma), L_i a running mean (decay
  `beta`) of token i's embedding-gradient norm per example, gamma in units of the mean L_i^2;
  examples are drawn with weight prod_t p_t / f_t over their tokens, so tokens come up with
  probability ~ p. A sampler that adapts this way reads each run's embedding gradient after
  backward (`reads_embedding_grad`), so it needs a model with a token embedding.

    python -m suite run --sampler grad_softmax --set gamma=1
"""

from __future__ import annotations

import torch

from suite import Sampler, SuiteError, TaskData, register_sampler


def _check_batch(batch_size: int, data: TaskData) -> None:
    if batch_size <= 0:
        raise SuiteError(f"batch_size must be positive, got {batch_size}")
    if batch_size > len(data.y_train):  # a smaller batch than asked, silently: say so instead
        raise SuiteError(
            f"batch_size {batch_size} is larger than the training set ({len(data.y_train)} examples); "
            "--sampler full trains on all of it"
        )


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

    def __init__(
        self,
        data: TaskData,
        generator: torch.Generator,
        *,
        batch_size: int = 512,
        power: float = 1.0,
        rounds: int = 200,
    ):
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
        if not (torch.isfinite(self.weights).all() and self.weights.sum() > 0):
            raise SuiteError(f"power {power} takes the example weights out of float32's range")
        self.batch_size, self.generator = batch_size, generator

    def next(self) -> torch.Tensor:
        return torch.multinomial(self.weights, self.batch_size, replacement=True, generator=self.generator)


@register_sampler("grad_softmax")
class GradSoftmax(Sampler):
    """The embedding paper's own frequency-aware proposal (arXiv 2505.15624, Appendix A, eq. 19):
    token probabilities p_i = softmax(L_i^2 / gamma), L_i bounding token i's embedding-gradient
    norm. The paper derives it and runs no experiment with it.

    The estimator of L_i (ours; the paper gives none): after every step, token i's row of the
    embedding gradient, ||dLoss/dE_i||, times batch_size / (the occurrences of i in the batch),
    is its gradient norm per example; L_i is a running mean of that (decay `beta`) over the
    steps whose batch holds i, started at its first value. Tokens not yet seen take the mean of
    the seen ones; before any step every p_i is equal.

    gamma is in units of the current mean of L_i^2 over the tokens (gamma = 1: softmax(L_i^2 /
    mean L^2)), so one setting works whatever the gradients' scale; the paper leaves gamma free.
    Only tokens that vary across examples (the numbers, not the operator or '=') have a p_i.

    Examples are drawn with replacement, example e with weight prod over its varying tokens t of
    p_t / f_t (f_t: t's occurrences in the training inputs), so that each token is drawn with
    probability ~ p_t: exactly when an example's tokens are independent in the training set
    (close to it for the random and uniform splits).
    """

    reads_embedding_grad = True

    def __init__(
        self,
        data: TaskData,
        generator: torch.Generator,
        *,
        batch_size: int = 512,
        gamma: float = 1.0,
        beta: float = 0.99,
    ):
        if data.token_freq is None:
            raise SuiteError("sampler 'grad_softmax' needs a task that reports token frequencies (a token task)")
        _check_batch(batch_size, data)
        if not 0 < gamma < float("inf"):
            raise SuiteError(f"gamma must be a finite number > 0, got {gamma}")
        if not 0 <= beta < 1:
            raise SuiteError(f"beta must be in [0, 1), got {beta}")
        self.x, freq = data.x_train.flatten(1), data.token_freq
        self.varies = (freq > 0) & (freq < len(self.x))
        self.inverse_freq = torch.where(self.varies, 1.0 / freq.clamp(min=1).float(), 1.0)
        self.batch_size, self.gamma, self.beta, self.generator = batch_size, gamma, beta, generator
        self.L = torch.zeros(len(freq), device=freq.device)
        self.seen = torch.zeros(len(freq), dtype=torch.bool, device=freq.device)
        self.batch = None

    def token_probabilities(self) -> torch.Tensor:
        """p over the vocabulary (0 for the tokens that do not vary)."""
        seen = self.seen & self.varies
        if seen.any():
            L = torch.where(seen, self.L, self.L[seen].mean())
            scores = L.square() / (self.gamma * L[self.varies].square().mean().clamp(min=1e-30))
        else:
            scores = torch.zeros_like(self.L)
        return torch.softmax(scores.masked_fill(~self.varies, float("-inf")), 0)

    def next(self) -> torch.Tensor:
        ratio = torch.where(self.varies, self.token_probabilities() * self.inverse_freq, 1.0)
        weights = ratio[self.x].prod(1)
        if not (torch.isfinite(weights).all() and weights.sum() > 0):
            # gradients that are no longer finite (a diverging run: its next evaluation stops it)
            weights = torch.ones_like(weights)
        self.batch = torch.multinomial(weights, self.batch_size, replacement=True, generator=self.generator)
        return self.batch

    @torch.no_grad()
    def observe(self, embedding_grad: torch.Tensor) -> None:
        count = torch.bincount(self.x[self.batch].flatten(), minlength=len(self.L)).float()
        present = (count > 0) & self.varies
        per_example = embedding_grad.float().norm(dim=1) * self.batch_size / count.clamp(min=1)
        running = torch.where(self.seen, self.beta * self.L + (1 - self.beta) * per_example, per_example)
        self.L = torch.where(present, running, self.L)
        self.seen |= present

    def state_dict(self) -> dict:  # the last batch is not state: next() draws it before observe() reads it
        return {"L": self.L.clone(), "seen": self.seen.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.L, self.seen = state["L"].to(self.L.device), state["seen"].to(self.L.device)


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
