"""The tuning race: a trial that can no longer win its method's search stops early, exactly.

A tuning trial is one point of a method's space, run on every tuning seed; the search picks the
trial with the smallest median held time to target (suite/launch/tuning.py). Once some rival
trial of the same cell and method has finished with a finite median (the bar), a trial whose
median cannot end below the bar cannot win, and its runs stop with stop_reason "raced". Whether
it can is known from lower bounds on each seed's grok step (a grok is never earlier than):

- a finished seed: its grok step (infinity if it never grokked);
- a seed training here: its grok step so far (a collapse only moves it later), else where its
  current streak at the target began, else the step it last evaluated (it is below the target
  there); one of this process not evaluated yet (a later stack) knows nothing: 0;
- a seed elsewhere, not finished: 0.

The median of lower bounds is a lower bound of the median, so a trial stopped when it exceeds the
bar had a median above the winner's: the winner is the one a search without the race picks (ties
included, since the stop needs a strictly larger bound). What a raced run records is cut short:
its own numbers depend on when its rivals finished, and only the choice is exact.
A cell's race (Cell.race) names its trial's run folders and its rivals'.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from suite.results.rundir import RunDir, read_json


class Race:
    def __init__(self, members: list):
        self.here = {str(m.cell.run_dir): m for m in members}
        self.finished: dict[str, float] = {}  # run folder -> its grok step (inf: none), once finished

    def lost(self, member) -> bool:
        """Can the member's trial no longer win at this evaluation?"""
        race = member.cell.race
        if not race:
            return False
        bars = [self._median_if_finished(trial) for trial in race["rivals"]]
        bar = min((b for b in bars if b is not None and math.isfinite(b)), default=None)
        return bar is not None and float(np.median([self._lower_bound(d) for d in race["trial"]])) > bar

    def _lower_bound(self, run_dir: str) -> float:
        m = self.here.get(run_dir)
        if m is not None and m.result is None:
            if m.record is None:  # not evaluated yet (its stack has not begun)
                return 0.0
            return float(m.milestones.earliest_grok(m.record["step"]))
        grok = self._grok_if_finished(run_dir)
        return 0.0 if grok is None else grok

    def _median_if_finished(self, trial: list[str]) -> float | None:
        times = [self._grok_if_finished(d) for d in trial]
        return None if any(t is None for t in times) else float(np.median(times))

    def _grok_if_finished(self, run_dir: str) -> float | None:
        if run_dir not in self.finished:
            m = self.here.get(run_dir)
            if m is not None and m.result is not None:
                result = m.result
            elif RunDir(Path(run_dir)).finished:
                result = read_json(Path(run_dir) / "result.json")
            else:
                return None
            self.finished[run_dir] = math.inf if result.get("grok_step") is None else float(result["grok_step"])
        return self.finished[run_dir]
