"""A run that fell back to chance: the loop reports it when it happens and, with
`train.chance_patience`, stops it (stop_reason "at chance"). Torch-free, like suite.engine.milestones.

A run is at chance at an evaluation when it has memorized (train acc >= `train.memorization`) at
some earlier one, and its train and val accuracy are now both within MARGIN of the way from chance
(1 / classes) to 1: <= 0.109 on a+b mod 97, where the committed transformer runs that collapsed fell
to train acc 0.006-0.013 (leaderboards/adamlr_transformer). Loss is not the test: a loss that is not
finite is already "diverged", one that explodes comes with accuracy at chance, and a spike alone is
no sign of death (an MLP under Adam-LR, c = 32, reached train loss 15.8, then grokked:
leaderboards/adamlr).

A run that never left chance (train and val at or below that level at every evaluation so far, and
so never memorized) is another case: points of a search where the lr or the decay leaves the model
nothing to learn. With `train.learn_patience` (None by default: such a run goes on to its budget)
it stops once it has stayed there that many steps from its start ("never learned").

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
    - since: where the current stretch at chance began (None: above chance now);
    - left: whether any evaluation so far was above chance."""

    def __init__(self, n_classes: int):
        chance = 1 / n_classes
        self.level = chance + MARGIN * (1 - chance)
        self.first_step = self.since = None
        self.left = False

    def update(self, record: dict, memorized: bool) -> bool:
        """Read one evaluation (memorized: at an earlier one); True when the run has just fallen to chance."""
        at_chance = max(record["train_acc"], record["val_acc"]) <= self.level
        self.left = self.left or not at_chance
        if not (memorized and at_chance):
            self.since = None
            return False
        fell = self.since is None
        if fell:
            self.since = record["step"]
            self.first_step = record["step"] if self.first_step is None else self.first_step
        return fell
