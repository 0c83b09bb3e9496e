"""Optimizers, each built from the model's parameter groups.

`groups.embedding` holds the token embedding matrix E (empty for models without one),
`groups.coupled` the first weight W that reads the embeddings, `groups.rest` everything
but E. Defaults follow the embedding-grokking paper (arXiv 2505.15624): Adam, lr 1e-2,
weight decay 1e-3 (coupled L2, as torch.optim.Adam applies it). A model may bring its own recipe's
(register_model's opt_defaults: the transformer runs adam, adamlr and adamlr_adaptive at Nanda et
al.'s AdamW recipe, decoupled_weight_decay on); `suite list model` shows them, --set wins over both.
Every optimizer here with a choice of decay takes it as decoupled_weight_decay (adam, adamlr,
adamlr_adaptive: coupled by default; muon: decoupled), so a tuning can search it as one setting.

elementwise=True marks an optimizer whose update of each element depends on that element
alone (Adam and its kin, SGD): it trains a stack's stacked parameters exactly as K
separate runs (suite/engine/stacked.py); adam, adamw, adamlr and adamwlr build torch's Adam or
AdamW, so members that differ in their settings (lr, weight decay, betas, eps, c) step as one Adam
over the stack too (suite/engine/stacked_adam.py). adamlr_adaptive reads sigma_max of whole
matrices: it is not elementwise, and a stack steps it once per member. Adam is not built
fused=True although that is faster on CPU: the fused kernel's rounding depends on where an
element sits in its tensor, so a stacked member would no longer equal its separate run bit for
bit (the test caught it).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from suite import SuiteError, register_optimizer
from suite.engine.measures import sigma_max
from suite.specs.contracts import ParamGroups

FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def _check(
    *, weight_decay: float, betas: tuple[float, float] | None = None, eps: float | None = None, **positive: float
) -> None:
    """Settings that make no sense stop the run before it starts. torch takes some of them: a
    negative lr in a param group (Adam-LR's c < 0), a beta of 1, an eps of 0; and a rate past
    float32's range (3.4e38) cannot scale a float32 update at all."""
    for name, value in positive.items():
        if not value > 0:
            raise SuiteError(f"{name} must be positive, got {value}")
    if not weight_decay >= 0:
        raise SuiteError(f"weight_decay must be >= 0, got {weight_decay}")
    rates = {
        "lr": positive.get("lr", 0),
        "lr x c": positive.get("lr", 0) * positive.get("c", 1),
        "weight_decay": weight_decay,
    }
    for name, value in rates.items():
        if value > FLOAT32_MAX:
            raise SuiteError(f"{name} = {value:g} is past float32's range ({FLOAT32_MAX:.3g}): no update can use it")
    if betas is not None and not all(0 <= b < 1 for b in betas):
        raise SuiteError(f"betas must lie in [0, 1), got {betas}")
    if eps is not None and not eps > 0:
        raise SuiteError(f"eps must be positive, got {eps}")


def _need_embedding(groups: ParamGroups, name: str) -> None:
    if not groups.embedding:
        raise SuiteError(
            f"optimizer '{name}' scales the embedding learning rate, but this model has no token embedding"
        )


@register_optimizer("adam", elementwise=True)
def adam(
    groups: ParamGroups,
    *,
    lr: float = 1e-2,
    weight_decay: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    decoupled_weight_decay: bool = False,
):
    """Adam with coupled L2 weight decay (the paper's baseline); decoupled_weight_decay: AdamW's."""
    _check(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
    return torch.optim.Adam(
        groups.all,
        lr=lr,
        weight_decay=weight_decay,
        betas=betas,
        eps=eps,
        decoupled_weight_decay=decoupled_weight_decay,
    )


@register_optimizer("adamw", elementwise=True)
def adamw(
    groups: ParamGroups,
    *,
    lr: float = 1e-3,
    weight_decay: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-8,
):
    """AdamW with decoupled weight decay (defaults: Nanda et al.'s grokking transformer)."""
    _check(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
    return torch.optim.AdamW(groups.all, lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)


@register_optimizer("sgd", elementwise=True)
def sgd(groups: ParamGroups, *, lr: float = 1e-1, momentum: float = 0.9, weight_decay: float = 1e-3):
    """SGD with momentum and L2 weight decay."""
    _check(lr=lr, weight_decay=weight_decay)
    if not 0 <= momentum < 1:
        raise SuiteError(f"momentum must lie in [0, 1), got {momentum}")
    return torch.optim.SGD(groups.all, lr=lr, momentum=momentum, weight_decay=weight_decay)


@register_optimizer("adamlr", elementwise=True)
def adamlr(
    groups: ParamGroups,
    *,
    lr: float = 1e-2,
    c: float = 10.0,
    weight_decay: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    decoupled_weight_decay: bool = False,
):
    """Adam-LR: Adam with the embedding's learning rate at c * lr (paper: c = 10); decoupled_weight_decay:
    AdamW's decay, as adamwlr."""
    _check(lr=lr, c=c, weight_decay=weight_decay, betas=betas, eps=eps)
    _need_embedding(groups, "adamlr")
    return torch.optim.Adam(
        [{"params": groups.embedding, "lr": c * lr}, {"params": groups.rest, "lr": lr}],
        lr=lr,
        weight_decay=weight_decay,
        betas=betas,
        eps=eps,
        decoupled_weight_decay=decoupled_weight_decay,
    )


@register_optimizer("adamwlr", elementwise=True)
def adamwlr(
    groups: ParamGroups,
    *,
    lr: float = 1e-3,
    c: float = 10.0,
    weight_decay: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-8,
):
    """Adam-LR with decoupled weight decay: AdamW with the embedding's learning rate at c * lr
    (defaults: adamw's, Nanda et al.'s grokking transformer). AdamW decays a parameter by its
    group's lr * weight_decay each step, so E's decay is scaled by c with the rest of its step;
    c = 1 is AdamW exactly. It is adamlr with decoupled_weight_decay=true, under its own name and
    defaults (the runs that used it keep their specs)."""
    _need_embedding(groups, "adamwlr")
    return adamlr(groups, lr=lr, c=c, weight_decay=weight_decay, betas=betas, eps=eps, decoupled_weight_decay=True)


class AdaptiveAdamLR(torch.optim.Adam):
    """Adam whose embedding group runs at c * lr, with c re-estimated every `every` steps.

    c = sigma_max(E) / sigma_max(W) * f_W / f_E, the paper's Proposition 4.1, where
    - sigma_max is the largest singular value of the current E and W;
    - f_E is the fraction of embedding rows that received a gradient, averaged over the
      steps since the last estimate (rows of tokens absent from a batch get none), so it
      reflects whatever sampler and batch size the run uses;
    - f_W = 1: the dense weight W gets a gradient at every step.
    c is clamped to [c_min, c_max]. Everything it keeps lives in its param groups, so it is
    saved and restored with the optimizer's state_dict.
    """

    def __init__(self, groups: ParamGroups, lr, every, c_min, c_max, **adam_kw):
        self.E, self.W = groups.embedding[0], groups.coupled
        c = self._clamp(self._sigma_ratio(), c_min, c_max)  # f_E unknown yet: 1
        super().__init__(
            [
                {"params": groups.embedding, "lr": c * lr, "c": c, "rows_hit": 0.0, "steps_seen": 0},
                {"params": groups.rest, "lr": lr},
            ],
            lr=lr,
            **adam_kw,
        )
        self.every, self.c_min, self.c_max = every, c_min, c_max

    @staticmethod
    def _clamp(c, lo, hi):
        return min(max(c, lo), hi)

    def _sigma_ratio(self) -> float:
        return sigma_max(self.E) / max(sigma_max(self.W), 1e-30)  # a W decayed to 0: c goes to c_max

    @torch.no_grad()
    def step(self, closure=None):
        emb, rest = self.param_groups
        if self.E.grad is not None:
            emb["rows_hit"] += (self.E.grad.abs().sum(dim=1) > 0).float().mean().item()
            emb["steps_seen"] += 1
        if emb["steps_seen"] >= self.every:
            f_e = max(emb["rows_hit"] / emb["steps_seen"], 1e-8)
            emb["c"] = self._clamp(self._sigma_ratio() / f_e, self.c_min, self.c_max)
            emb["rows_hit"], emb["steps_seen"] = 0.0, 0
        emb["lr"] = emb["c"] * rest["lr"]  # rest["lr"] already carries any warmup
        return super().step(closure)


@register_optimizer("adamlr_adaptive")
def adamlr_adaptive(
    groups: ParamGroups,
    *,
    lr: float = 1e-2,
    every: int = 100,
    c_min: float = 0.5,
    c_max: float = 100.0,
    weight_decay: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    decoupled_weight_decay: bool = False,
):
    """Adam-LR with c = sigma_max(E)/sigma_max(W) * f_W/f_E re-estimated every `every` steps."""
    _need_embedding(groups, "adamlr_adaptive")
    if groups.coupled is None:
        raise SuiteError("optimizer 'adamlr_adaptive' needs a model that names the weight coupled to its embedding")
    _check(lr=lr, every=every, c_max=c_max, weight_decay=weight_decay, betas=betas, eps=eps)
    if not 0 <= c_min <= c_max:
        raise SuiteError(f"need 0 <= c_min <= c_max, got c_min={c_min}, c_max={c_max}")
    return AdaptiveAdamLR(
        groups,
        lr,
        every,
        c_min,
        c_max,
        weight_decay=weight_decay,
        betas=betas,
        eps=eps,
        decoupled_weight_decay=decoupled_weight_decay,
    )


NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)  # torch.optim.Muon's and Keller Jordan's quintic iteration


class Muon(torch.optim.Optimizer):
    """Muon, as torch.optim.Muon computes it (Nesterov momentum, five Newton-Schulz iterations,
    lr x sqrt(max(1, rows / cols)), decoupled weight decay), with one difference: the iterations
    run in `ns_dtype`. torch's run in bfloat16, which this project's AVX2 CPU emulates: one
    orthogonalization of a 512 x 512 matrix took 9.4 s there against 0.26 s for 15 float32
    products. float32 (the default) is also what a GPU run then computes, so the two agree.

    decoupled_weight_decay=False: coupled L2 instead, weight_decay x p added to the gradient before
    the momentum and the orthogonalization, and no shrink of p by lr x weight_decay."""

    def __init__(
        self,
        params,
        lr: float,
        weight_decay: float,
        momentum: float,
        ns_dtype: torch.dtype,
        decoupled_weight_decay: bool = True,
    ):
        defaults = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum, "ns_dtype": ns_dtype}
        super().__init__(params, defaults | {"decoupled_weight_decay": decoupled_weight_decay})

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:  # a checkpoint from before the setting: Muon decayed decoupled then
            group.setdefault("decoupled_weight_decay", True)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, decay, momentum = group["lr"], group["weight_decay"], group["momentum"]
            decoupled = group["decoupled_weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad if decoupled else p.grad.add(p, alpha=decay)
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(grad, 1 - momentum)
                update = orthogonalize(grad.lerp(buf, momentum), group["ns_dtype"])
                if decoupled:
                    p.mul_(1 - lr * decay)
                p.add_(update, alpha=-lr * math.sqrt(max(1, p.shape[0] / p.shape[1])))


def orthogonalize(g: torch.Tensor, dtype: torch.dtype, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """U S' V^T with S' ~ 1 (Newton-Schulz, NS_COEFFICIENTS) of a 2-D g, in dtype, returned in g's."""
    a, b, c = NS_COEFFICIENTS
    x = g.to(dtype)
    if g.size(0) > g.size(1):
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return (x.T if g.size(0) > g.size(1) else x).to(g.dtype)


class MuonAdamW(torch.optim.Optimizer):
    """Muon on the model's hidden matrices and AdamW on everything else (the embeddings, biases and
    the output head), stepped together: what Muon's own code and the Muon grokking paper (arXiv
    2504.16041) do, since Muon orthogonalizes 2-D matrices and is not meant for embeddings or
    heads. The two keep their own state; this object holds both behind one optimizer's methods.
    With coupled weight decay the second part is Adam with L2 (its state keeps the name "adamw")."""

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer):  # noqa: D107 - no Optimizer state
        self.parts = (muon, adamw)
        self.defaults = {}

    @property
    def param_groups(self) -> list[dict]:
        return [group for part in self.parts for group in part.param_groups]

    @property
    def state(self):
        return {p: s for part in self.parts for p, s in part.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        for part in self.parts:
            part.step()

    def state_dict(self) -> dict:
        return {"muon": self.parts[0].state_dict(), "adamw": self.parts[1].state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.parts[0].load_state_dict(state_dict["muon"])
        self.parts[1].load_state_dict(state_dict["adamw"])


@register_optimizer("muon")
def muon(
    groups: ParamGroups,
    *,
    muon_lr: float = 2e-2,
    momentum: float = 0.95,
    lr: float = 1e-3,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-8,
    ns_dtype: Literal["float32", "bfloat16"] = "float32",
    decoupled_weight_decay: bool = True,
):
    """Muon (Nesterov; Newton-Schulz in ns_dtype) on the hidden matrices at muon_lr, AdamW on the rest
    at lr; decoupled weight decay on both (each shrinks p by its lr x weight_decay a step).
    decoupled_weight_decay=false: coupled L2 on both instead, weight_decay x p added to every
    gradient first (before Muon's momentum and orthogonalization; Adam's L2 for the rest)."""
    if not groups.hidden:
        raise SuiteError("optimizer 'muon' needs a model that names its hidden matrices (hidden_weights)")
    _check(lr=lr, muon_lr=muon_lr, weight_decay=weight_decay, betas=betas, eps=eps)
    if not 0 <= momentum < 1:
        raise SuiteError(f"momentum must lie in [0, 1), got {momentum}")
    hidden = {id(p) for p in groups.hidden}
    rest = [p for p in groups.all if id(p) not in hidden]
    adam_kind = torch.optim.AdamW if decoupled_weight_decay else torch.optim.Adam  # Adam's own decay is coupled L2
    return MuonAdamW(
        Muon(
            groups.hidden,
            lr=muon_lr,
            weight_decay=weight_decay,
            momentum=momentum,
            ns_dtype=getattr(torch, ns_dtype),
            decoupled_weight_decay=decoupled_weight_decay,
        ),
        adam_kind(rest, lr=lr, weight_decay=weight_decay, betas=betas, eps=eps),
    )
