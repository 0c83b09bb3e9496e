"""The studies: what each adds to the leaderboard, registered with @section instead of written
into the engine. Every module of this package is imported before a leaderboard is made, so a
module here that registers a section is all a new study needs; this file holds what they
register with and what a section is given. The modules: grokking.py (the Adam-LR c sweep, the
sampling comparison), embedding_questions.py (Hessian, val by token frequency, weight decay x
frequency), number_probes.py (the probes' page), precision.py (fp32 against bf16), tuning.py
(how a board's final runs were tuned).

Three places a section can go:

- "table": fn(table: Table) -> [(alt text, file suffix, PNG bytes or None)]. Figures under each
  problem's table on the task/model pages, after the accuracy and embedding-norm plots, written
  to <page>/<problem>.<suffix>.png (<problem>: its label as a file name; None: nothing to show for this
  problem).
- "page": fn(page: Page) -> [(heading, label, file suffix, PNG bytes, markdown)]. Sections at the
  end of each task/model page: "## heading", the figure, written to <page>/<label>.<suffix>.png,
  and the markdown under it ("" for none: a table of what the figure shows, with its intervals).
- "board": fn(board: Board) -> lines for index.md. Pages of its own, from every result of its
  runner (board.results), written with board.files.add(rel, data); called only when the runs
  hold such results.

"table" and "page" sections read training runs (runner "train"); a "board" names the runner
whose results it reads (suite.results.result.runner_of). Sections run in the order registered.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from suite.leaderboard.collect import Collection
from suite.results.result import TRAIN

PLACES = ("table", "page", "board")


class Files(dict):
    """What a leaderboard writes: path under the output dir -> bytes or text, in the order made."""

    def add(self, rel: str, data: bytes | str | None) -> str | None:
        """Returns rel, or None for no data (a plot with nothing to draw is not written)."""
        if data is None:
            return None
        self[rel] = data
        return rel


@dataclass(frozen=True)
class Table:
    """One problem's table on its task/model page, what a "table" section draws under it."""

    col: Collection
    rows: pd.DataFrame  # the problem's rows of stats.problem_tables (one per method), in table order
    runs: pd.DataFrame  # the problem's rows of col.runs (one per run)
    title: str

    def series(self) -> list[tuple[str, list]]:
        """(method label, metric frames of its seeds) per row, in table order."""
        return [
            (r.method, [self.col.metrics.get(d) for d in self.runs.loc[self.runs["method_id"] == r.method_id, "dir"]])
            for r in self.rows.itertuples()
        ]


@dataclass(frozen=True)
class Page:
    col: Collection
    rows: pd.DataFrame  # the page's rows of stats.problem_tables, every problem of one task and model


@dataclass(frozen=True)
class Board:
    col: Collection
    results: list  # every result of the section's runner: {"dir", "spec", "result"}, in path order
    command: str  # the command that made the leaderboard, for page headers
    files: Files
    untuned: tuple = ()  # roots of untuned runs a tuned board's rows are checked against (recipes.py)


@dataclass(frozen=True)
class Section:
    fn: Callable
    where: str
    runner: str


SECTIONS: list[Section] = []


def section(where: str, runner: str = TRAIN):
    """Register fn as a section; see the module docstring for where and what fn returns."""
    if where not in PLACES or (where != "board" and runner != TRAIN):
        raise ValueError(f"section: where is one of {PLACES}, and only a board reads another runner than {TRAIN}")

    def register(fn):
        SECTIONS.append(Section(fn, where, runner))
        return fn

    return register


def registered(where: str) -> list[Section]:
    for mod in pkgutil.iter_modules(__path__):  # importing a study registers its sections
        importlib.import_module(f"{__name__}.{mod.name}")
    return [s for s in SECTIONS if s.where == where]
