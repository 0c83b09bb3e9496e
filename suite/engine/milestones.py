"""What a run reached, from its evaluations: one rule for the loop, a resume and the leaderboard.
Torch-free, so that reading results does not import torch."""

from __future__ import annotations

import math


class Milestones:
    """What a run's evaluations reached, replayed one record at a time (the loop, a resume and the
    leaderboard all read a run through this one rule):

    - memorization_step: the first evaluation with train acc >= `memorization`;
    - first_touch_step: the first evaluation with val acc >= `target`;
    - grok_step: the success that lasts: the first evaluation from which val acc stays >= `target`
      for `hold` steps (every evaluation in [grok_step, grok_step + hold]) *and* never falls below
      half the target at any later evaluation. A touch that falls back before the hold ends does
      not count; a collapse after the hold takes the grok back, and a later streak that holds (and
      lasts) counts instead. So a run's grok step is only final where the run ends;
    - held_since: where the current streak of evaluations at the target began (None: below it now);
    - collapsed: val acc fell below half the target at some evaluation after the first touch
      (before or after a hold: a grok it took back included);
    - best_val_acc: the highest val acc evaluated."""

    def __init__(self, memorization: float, target: float, hold: int = 0):
        self.memorization, self.target, self.hold = memorization, target, hold
        self.memorization_step = self.first_touch_step = self.grok_step = self.held_since = None
        self.collapsed, self.best_val_acc = False, None

    def update(self, record: dict) -> None:
        step, val = record["step"], record["val_acc"]
        if self.memorization_step is None and record["train_acc"] >= self.memorization:
            self.memorization_step = step
        self.best_val_acc = val if self.best_val_acc is None else max(self.best_val_acc, val)
        if val >= self.target:
            if self.first_touch_step is None:
                self.first_touch_step = step
            if self.held_since is None:
                self.held_since = step
            if self.grok_step is None and step - self.held_since >= self.hold:
                self.grok_step = self.held_since
        else:
            self.held_since = None
            if self.first_touch_step is not None and val < self.target / 2:
                self.collapsed, self.grok_step = True, None

    @property
    def delay(self):
        if self.memorization_step is None or self.grok_step is None:
            return None
        return self.grok_step - self.memorization_step

    def earliest_grok(self, last_step: float) -> float:
        """A lower bound of the grok step of a run evaluated up to last_step (the tuning race's):
        its grok so far (a collapse only moves it later), else where its streak at the target
        began, else last_step (it is below the target there)."""
        return next(s for s in (self.grok_step, self.held_since, last_step) if s is not None)

    @classmethod
    def of(cls, records, memorization: float, target: float, hold: int, until: float = math.inf) -> Milestones:
        """The milestones of a run's records up to step `until` (a leaderboard's budget)."""
        milestones = cls(memorization, target, hold)
        for record in records:
            if record["step"] <= until:
                milestones.update(record)
        return milestones
