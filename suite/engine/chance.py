"""A run that fell back to chance: the loop reports it when it happens and, with
`train.chance_patience`, stops it (stop_reason "at chance"). Torch-free, like suite.engine.milestones.

A run is at chance at an evaluation when it has memorized (train acc >= `train.memorization`) at
some earlier one, and its train and val accuracy are now both within MARGIN of the way from chance
(1 / classes) to 1: <= 0.109 on a+b mod 97, where the committed transformer runs that collapsed fell
to train acc 0.006-0.013 (leaderboards/adamlr_transformer). Loss is not the test: a loss that is not
finite is already "diverged", one that explodes comes with accuracy at chance, and a spike alone is
no sign of death (an MLP under Adam-LR, c = 32, reached train loss 15.8, then grokked:
leaderboards/adamlr).

Runs do climb back: in the committed runs an MLP under Adam-LR (c = 24) sat at chance 800 steps
and grokked again, and a transformer sat there ~1,000 steps and memorized again. So a stretch at
chance stops a run only once it has lasted `chance_patience` steps (2,000 by default, twice the
longest such stretch a run climbed out of), and any evaluation above chance ends the stretch.
"""

from __future__ import annotations

MARGIN = 0.1


class ChanceWatch:
    """Replayed one evaluation at a time, as the milestones are (the loop, and a resume):

    - first_step: the first evaluation at chance (result.json's `chance_step`; None: never);
    - since: where the current stretch at chance began (None: above chance now)."""

    def __init__(self, n_classes: int):
        chance = 1 / n_classes
        self.level = chance + MARGIN * (1 - chance)
        self.first_step = self.since = None

    def update(self, record: dict, memorized: bool) -> bool:
        """Read one evaluation (memorized: at an earlier one); True when the run has just fallen to chance."""
        if not (memorized and max(record["train_acc"], record["val_acc"]) <= self.level):
            self.since = None
            return False
        fell = self.since is None
        if fell:
            self.since = record["step"]
            self.first_step = record["step"] if self.first_step is None else self.first_step
        return fell
