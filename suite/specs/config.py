"""The train settings every trained run has (`--set train.steps=...`): torch-free, so that
specs can be resolved without importing the loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from suite.errors import SuiteError

LOSS_NAMES = ("ce", "stablemax")  # suite.engine.measures.LOSSES holds their functions
PRECISIONS = ("fp32", "tf32", "bf16")  # suite/engine/precision.py says what runs in which


@dataclass
class TrainConfig:
    steps: int = 20_000  # update budget
    eval_every: int = 50  # evaluate on the whole train and val sets every this many steps
    memorization: float = 0.99  # train accuracy that counts as memorized
    target: float = 0.99  # val accuracy that counts as grokked, once it has held `hold` steps
    hold: int = 1000  # steps val acc must stay >= target from the grok step on (0: the first touch counts)
    patience: Optional[int] = 1000  # stop once val acc has held the target this many steps (>= hold); None = never
    # stop once train and val acc have sat at chance this many steps after memorizing; None = never
    chance_patience: Optional[int] = 2000
    # stop once train and val acc have never left chance in this many steps from the start; None = never
    learn_patience: Optional[int] = None
    warmup_steps: int = 0  # linear warmup from lr 0 (Nanda et al. use 10)
    loss: Literal[LOSS_NAMES] = "ce"  # ce (softmax cross-entropy) or stablemax
    eval_batch: int = 8192  # examples per evaluation chunk (per member of a stack)
    checkpoint_every: int = 2_000
    hessian_every: Optional[int] = None  # every k evaluations, top Hessian eigenvalue of the E and W blocks
    keep_weights: bool = False  # the model's weights at memorization, grok step and end (suite/results/weights.py)
    grad_clip: Optional[float] = None  # max global gradient norm per member (after the filter, before the optimizer)
    precision: Literal[PRECISIONS] = "fp32"  # fp32, tf32 (CUDA only) or bf16 autocast (suite/engine/precision.py)

    def __post_init__(self):
        if self.steps <= 0:
            raise SuiteError(f"steps must be positive, got {self.steps}")
        if self.eval_every <= 0 or self.checkpoint_every <= 0 or self.eval_batch <= 0:
            raise SuiteError("eval_every, checkpoint_every and eval_batch must be positive")
        if self.eval_every > self.steps:
            raise SuiteError(
                f"eval_every ({self.eval_every}) is past the budget (steps {self.steps}): "
                "the run would only be evaluated at its start and end"
            )
        for name in ("memorization", "target"):
            if not 0 < getattr(self, name) <= 1:
                raise SuiteError(f"{name} is an accuracy in (0, 1], got {getattr(self, name)}")
        if self.loss not in LOSS_NAMES:
            raise SuiteError(f"unknown loss '{self.loss}'; known: {', '.join(LOSS_NAMES)}")
        if self.hessian_every is not None and self.hessian_every <= 0:
            raise SuiteError(f"hessian_every must be positive (or None), got {self.hessian_every}")
        if self.warmup_steps < 0 or self.hold < 0 or (self.patience is not None and self.patience < 0):
            raise SuiteError("warmup_steps, hold and patience must be >= 0")
        if self.chance_patience is not None and self.chance_patience < 0:
            raise SuiteError(f"chance_patience must be >= 0 (or None), got {self.chance_patience}")
        if self.learn_patience is not None and self.learn_patience < 0:
            raise SuiteError(f"learn_patience must be >= 0 (or None), got {self.learn_patience}")
        if self.patience is not None and self.patience < self.hold:
            raise SuiteError(
                f"patience ({self.patience}) is shorter than hold ({self.hold}): a run may not stop "
                "before its hold window ends"
            )
        if self.precision not in PRECISIONS:
            raise SuiteError(f"unknown precision '{self.precision}'; known: {', '.join(PRECISIONS)}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise SuiteError(f"grad_clip must be positive (or None), got {self.grad_clip}")
