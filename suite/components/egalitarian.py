"""Egalitarian gradient descent (Pasand & Dohmatob, ICLR 2026, arXiv 2510.04930) as a gradient
filter: each weight matrix's gradient G = U S V^T becomes (G G^T)^(-1/2) G = U V^T, so training moves
along every singular direction of the gradient at the same speed. The paper runs it under plain SGD:

    python -m suite run --preset egd                   # its modular-addition setting
    python -m suite run --preset egd --filter none     # the same SGD without it: the paper's baseline
    python -m suite run --opt adam --filter egd        # composes with any optimizer, as every filter

Following their code (asahebpa/Egalitarian-Gradient-Descent, main-results/mod_add.py), singular
values are floored at 1e-6, so a direction the gradient hardly has is scaled by s / 1e-6, not
blown up. Directions below the gradient's numerical rank (s at most s_max x max(rows, cols) x the
dtype's eps, as torch.linalg.matrix_rank counts) get no step, as (G G^T)^(-1/2) taken as a
pseudo-inverse gives: they are rounding (a one-hot input's unused columns make many; their first
layer has none), and the floor alone would scale them up to a tenth of a real direction's step.
Not as in their code: it whitens every matrix (a tensor of more dimensions as [rows, -1]; the
paper's equation is per layer, their script whitens the first layer only), and it whitens the
gradient the loss gives, before the optimizer adds any coupled weight decay (their L2 sits in the
loss, so it is whitened too); their script also switches to plain SGD once test accuracy passes
95%, which this filter never does.
"""

from __future__ import annotations

import torch

from suite import GradFilter, register_filter

FLOOR = 1e-6  # the smallest singular value divided by, as in their code


class Egalitarian(GradFilter):
    """Per parameter of two dimensions or more: its gradient, as [rows, -1], replaced by U diag(s /
    max(s, FLOOR)) V^T over its numerical rank. Vectors (biases) keep theirs. Stateless."""

    def __init__(self, params):
        self.params = [p for p in params if p.dim() >= 2]

    @torch.no_grad()
    def apply(self) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            g = p.grad.reshape(p.shape[0], -1)
            if not torch.isfinite(g).all():  # diverged: SVD refuses it; the next evaluation stops the run
                continue
            u, s, vh = torch.linalg.svd(g, full_matrices=False)
            rank = s > s.max() * max(g.shape) * torch.finfo(g.dtype).eps
            p.grad.copy_(((u * torch.where(rank, s / s.clamp_min(FLOOR), 0.0)) @ vh).view_as(p.grad))


@register_filter("egd")
def egd(params):
    """Egalitarian gradient descent: every weight matrix's gradient G -> U V^T (arXiv 2510.04930)."""
    return Egalitarian(params)
