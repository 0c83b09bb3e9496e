"""Schedule-Free AdamW (Defazio et al., "The Road Less Scheduled", arXiv 2405.15682; the winner of
AlgoPerf's self-tuning track), as the `schedulefree` package computes it: the [schedulefree] extra.
Without the package it stays listed, and a run that asks for it is one line naming the extra.

It keeps two sequences: the parameters hold y (where gradients are taken) while it trains, and x, the
average of its z iterates, is what it means to be evaluated. That is the optimizer contract's mode
(suite/specs/contracts.py): the loop calls its eval() around every evaluation, so the records, the
milestones and the weights a run keeps are x's, and train() after. Its state (z, the second moments,
the averaging weights and the mode, in its param groups) resumes exactly from a checkpoint.

Every update treats each element on its own, and the averaging weights depend on the learning rate
and step alone: a stack of members with the same settings trains exactly as their separate runs
(elementwise). Its weight decay is AdamW's, at y: lr x weight_decay a step (decoupled). The loop's
train.warmup_steps is its warmup (its own warmup_steps is left at 0: the loop scales lr, which its
averaging weights read).
"""

from __future__ import annotations

from suite import register_optimizer
from suite.components.optimizers import _check
from suite.specs.contracts import ParamGroups


@register_optimizer("schedulefree_adamw", elementwise=True)
def schedulefree_adamw(
    groups: ParamGroups,
    *,
    lr: float = 2.5e-3,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    r: float = 0.0,
    weight_lr_power: float = 2.0,
):
    """Schedule-Free AdamW (the schedulefree package): evaluated at its averaged weights, x."""
    _check(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
    import schedulefree  # the [schedulefree] extra: missing, the run is one line naming it

    optimizer = schedulefree.AdamWScheduleFree(
        groups.all, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, r=r, weight_lr_power=weight_lr_power
    )
    for group in optimizer.param_groups:  # said as torch's AdamW says it, for the cost phase and the board
        group["decoupled_weight_decay"] = True
    return optimizer
