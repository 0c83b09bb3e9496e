"""Gradient filters: applied to the gradients after backward, before the optimizer step.

A filter is built from the list of trainable parameters; `apply()` rewrites their .grad in
place; `state_dict()` / `load_state_dict()` carry its state through checkpoints (tensors
and numbers only, so checkpoints load with weights_only=True). 'none' changes nothing.
Filters sit between backward and the optimizer, so they compose with every optimizer
(Adam-LR included). A filter registered with elementwise=True treats every gradient element
on its own and keeps any state with the parameter's axes first, so it runs exactly on
a stack's parameters (suite/engine/stacked.py); orthograd takes norms over whole tensors
and is not.

- grokfast_ema / grokfast_ma: Grokfast (Lee et al. 2024, arXiv 2405.20233) amplifies the
  slow part of each gradient: g <- g + lamb * lowpass(g). The update order and the MA warmup
  follow its public code (ironjr/grokfast, grokfast.py).
- orthograd: the orthogonal gradient of "Grokking at the edge of numerical stability"
  (Prieto et al. 2025, arXiv 2501.04697): the part of g along w is removed and the rest
  rescaled to |g|.

Defaults: grokfast_ema alpha 0.98, lamb 2 (g <- g + lamb * ema(g); the EMA starts at the first
gradient and is updated before it is added); grokfast_ma window 100, lamb 5 (the mean of the
last `window` raw gradients; like their code it changes nothing until the window is full). The
EMA and the window are checkpointed, so a resumed run continues exactly. What they measured in
Grokfast's own setting (`--preset grokfast`, suite/specs/presets.py): leaderboards/README.md.

    python -m suite run --filter grokfast_ema                 # any cell; composes with any optimizer
    python -m suite run --opt adamlr --filter grokfast_ma --set window=50
    python -m suite run --filter orthograd --set loss=stablemax
"""

from __future__ import annotations

import os

import torch

from suite import GradFilter, SuiteError, register_filter


@register_filter("none", elementwise=True)
class NoFilter(GradFilter):
    """No filter: the optimizer sees the raw gradients."""

    def __init__(self, params):
        pass

    def apply(self) -> None:
        pass


class GrokfastEMA(GradFilter):
    """Per parameter, ema <- alpha * ema + (1 - alpha) * g, then g <- g + lamb * ema.

    The EMA is updated with the current gradient before it is added (as in grokfast.py), and
    starts at the first gradient a parameter receives, so the first step adds lamb * g.
    """

    def __init__(self, params, alpha: float, lamb: float):
        self.params, self.alpha, self.lamb = list(params), alpha, lamb
        self.ema: list[torch.Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def apply(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if self.ema[i] is None:
                self.ema[i] = p.grad.detach().clone()
            else:
                self.ema[i].mul_(self.alpha).add_(p.grad, alpha=1 - self.alpha)
            p.grad.add_(self.ema[i], alpha=self.lamb)

    def state_dict(self) -> dict:
        return {"ema": [None if e is None else e.clone() for e in self.ema]}

    def load_state_dict(self, state: dict) -> None:
        self.ema = [None if e is None else e.clone() for e in state["ema"]]


class GrokfastMA(GradFilter):
    """Per parameter, g <- g + lamb * mean of the last `window` gradients (this one included).

    As in grokfast.py (warmup=True), gradients are collected from the first step but the
    filter changes nothing until the window is full. The window is a ring buffer of shape
    (*param.shape, window), last axis the window so that a stack's member axis stays
    first, with the number of gradients seen so far: memory (and checkpoint size) is
    `window` copies of the parameters, as in their code.
    """

    def __init__(self, params, window: int, lamb: float):
        self.params, self.window, self.lamb = list(params), window, lamb
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)
        self.seen = [0] * len(self.params)

    @torch.no_grad()
    def apply(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if self.buffers[i] is None:
                self.buffers[i] = torch.zeros((*p.shape, self.window), dtype=p.grad.dtype, device=p.grad.device)
            self.buffers[i][..., self.seen[i] % self.window] = p.grad
            self.seen[i] += 1
            if self.seen[i] >= self.window:
                p.grad.add_(self.buffers[i].mean(dim=-1), alpha=self.lamb)

    def state_dict(self) -> dict:
        return {"buffers": [None if b is None else b.clone() for b in self.buffers], "seen": list(self.seen)}

    def load_state_dict(self, state: dict) -> None:
        self.buffers = [None if b is None else b.clone() for b in state["buffers"]]
        self.seen = [int(n) for n in state["seen"]]


class OrthoGrad(GradFilter):
    """Per parameter w with gradient g: g_perp = g - (w.g / w.w) w, then g <- g_perp * |g| / |g_perp|.

    The tiny epsilons (1e-30) of the paper's code guard a zero weight or a gradient parallel
    to the weight. Stateless.
    """

    def __init__(self, params):
        self.params = list(params)

    @torch.no_grad()
    def apply(self) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            # sums, not torch.dot: BLAS's dot rounds by the address's alignment, and a member of a
            # stack is a slice at an offset
            w, g = p.detach().flatten(), p.grad.flatten()
            g_perp = g - ((w * g).sum() / ((w * w).sum() + 1e-30)) * w
            p.grad.copy_((g_perp * (g.norm() / (g_perp.norm() + 1e-30))).view_as(p.grad))


def _check_lamb(lamb: float) -> None:
    if not lamb >= 0:  # Grokfast amplifies the slow part of the gradient; lamb < 0 would damp it
        raise SuiteError(f"lamb must be >= 0, got {lamb}")


@register_filter("grokfast_ema", elementwise=True)
def grokfast_ema(params, *, alpha: float = 0.98, lamb: float = 2.0):
    """Grokfast: g <- g + lamb * EMA_alpha(g) (arXiv 2405.20233)."""
    if not 0 <= alpha < 1:
        raise SuiteError(f"alpha must be in [0, 1), got {alpha}")
    _check_lamb(lamb)
    return GrokfastEMA(params, alpha, lamb)


@register_filter("grokfast_ma", elementwise=True)
def grokfast_ma(params, *, window: int = 100, lamb: float = 5.0):
    """Grokfast-MA: g <- g + lamb * mean of the last `window` gradients, once the window is full."""
    if window <= 0:
        raise SuiteError(f"window must be positive, got {window}")
    _check_lamb(lamb)
    params = list(params)
    need = window * sum(p.numel() * p.element_size() for p in params)
    if params and need > (have := _memory_of(params[0].device)):
        raise SuiteError(
            f"window {window} keeps {window} copies of every gradient, {need / 2**30:.3g} GiB: more than "
            f"the {have / 2**30:.3g} GiB of memory here"
        )
    return GrokfastMA(params, window, lamb)


def _memory_of(device: torch.device) -> int:
    """Bytes of memory the device has in all."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@register_filter("orthograd")
def orthograd(params):
    """Orthogonal gradient: drop g's component along w, rescale to |g| (arXiv 2501.04697)."""
    return OrthoGrad(params)
