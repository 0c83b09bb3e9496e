"""Leaderboards from result files: tables (Markdown + CSV), a performance profile, plots.

    python -m suite leaderboard                          # runs/ -> runs/leaderboard/
    python -m suite leaderboard runs/paper --out leaderboards/paper

The output dir lists what the last run wrote in generated.txt: the next run drops files it no
longer writes, and refuses (before writing anything) to overwrite a file not on that list.

Everything comes from the run folders the suite writes (result.json, metrics.jsonl),
never from a tracker. The output is a pure function of those files: rows are sorted,
numbers have fixed formats, and headers record the command and the git commits stored in
the results (not the time, not the current commit), so running the command again over the
same runs rewrites every table byte for byte.

Words used in the tables (AlgoPerf's habit, Dahl et al. arXiv 2306.07179):
- problem: a task with all its settings x a model with all its settings x the targets
  (train.memorization, train.target, train.hold). One section per problem, one file per (task, model).
  What a board writes calls it a cell (index.md's definitions, the "cell" columns of its CSVs and
  tables); in the code it is a problem, and a cell is the suite's (suite/__init__.py).
- method: optimizer + filter + sampler with all their settings, plus the train settings that
  change training (loss, warmup_steps, ...). The budget and evaluation settings (steps,
  eval_every, patience, eval_batch, checkpoint_every, hessian_every, keep_weights) are conditions, not methods.
- budget of a problem: the smallest train.steps among its runs; a seed that ran with several
  budgets counts once (its longest run), judged on its evaluations up to the budget.
- success: the grok step (the target held for train.hold steps) was reached within the budget.
- time to target: the median grok step over seeds, a seed that failed counting as infinity
  (AlgoPerf's median over studies), so it is inf when at least half the seeds failed.
- baseline of a row: a plain Adam / AdamW row of its problem, the rule in baseline.py.
  speed-up = baseline's time to target / row's, with a bootstrap interval, an exact
  permutation p-value and a verdict (speedup.py).
- performance profile: in every problem and batch size where at least two methods ran and one
  reached the target, ratio r = a method's time to target / the best (inf for a failure);
  rho(tau) = share of the problems a method ran in with r <= tau; score = area under rho over
  [1, tau_max] / (tau_max - 1), so 1 = best everywhere it ran, 0 = never within tau_max.

Layout: collect.py reads the runs, stats.py computes the numbers (baseline.py picks each row's
baseline, speedup.py the intervals, p-values and verdicts), tables.py writes text, plots.py
draws, pages.py makes the training runs' pages, compare.py sets two sets of runs side by side
(`suite compare`, no board written). studies/ holds what is particular to each study, added
through the registry in studies/__init__.py without touching any of those: every module of
suite/leaderboard/studies/ is imported before a leaderboard is made, so a new study is one
module there, for instance suite/leaderboard/studies/my_study.py:

    from suite.leaderboard.plots import figure, to_png
    from suite.leaderboard.studies import Table, section

    @section("table")  # a figure under every problem's table; "page" and "board" also exist
    def wall_time(table: Table) -> list:
        fig = figure(figsize=(6, 4))
        fig.subplots().bar(table.rows["method"], table.rows["wall_s_median"])
        return [("wall time", "wall_time", to_png(fig))]  # -> <page>/<problem>.wall_time.png

What is specific to the studies this suite was built for (the c sweep and sampling figures, the
number probes' page) lives in that package; which rows are the plain baselines, in baseline.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import sys
from pathlib import Path

from suite.errors import SuiteError
from suite.leaderboard import baseline
from suite.leaderboard.collect import Collection, collect
from suite.leaderboard.pages import terminal_summary, training_pages
from suite.leaderboard.stats import TAU_MAX
from suite.leaderboard.studies import Board, Files, registered
from suite.leaderboard.tables import commits_text
from suite.results.result import TRAIN
from suite.results.rundir import check_writable, read_text, write_atomic

__all__ = ["default_out", "generate", "terminal_summary"]

GENERATED = "generated.txt"  # what the last run wrote, so the next one can drop stale files


def default_out(root: str | Path) -> Path:
    return Path(root) / "leaderboard"  # beside the runs it describes, never a committed directory


def generate(
    root: str | Path = "runs", out: str | Path | None = None, tau_max: float | None = None, untuned: tuple = ()
) -> list[str]:
    """Write every table and plot for the runs under root into out (default: default_out(root));
    returns the files written. untuned: roots of untuned runs that a tuned board's rows are checked
    against (suite/leaderboard/recipes.py)."""
    tau_max = TAU_MAX if tau_max is None else tau_max
    if not 1 < tau_max < math.inf:
        raise SuiteError(f"--tau-max must be a finite number above 1, got {tau_max}")
    if not Path(root).is_dir():
        raise SuiteError(f"{root}: no such directory of runs")
    check_writable(default_out(root) if out is None else out)  # before reading every run
    col = collect(root)
    for other in untuned:
        if not Path(other).is_dir():
            raise SuiteError(f"--untuned {other}: no such directory of runs")
    command = f"python -m suite leaderboard {os.path.normpath(str(root))}" + (
        f" --tau-max {tau_max:g}" if tau_max != TAU_MAX else ""
    )
    command += "".join(f" --untuned {os.path.normpath(str(other))}" for other in untuned)
    files, index = Files(), []
    if TRAIN in col.results:
        index += training_pages(col, command, tau_max, files, tuned=(Path(root) / "tuning.json").is_file())
    for s in registered("board"):
        if s.runner in col.results:
            index += s.fn(Board(col, col.results[s.runner], command, files, tuple(map(Path, untuned))))
    files.add("index.md", _index(col, index, command))
    _write(default_out(root) if out is None else Path(out), files)
    return list(files)


def _index(col: Collection, sections: list[str], command: str) -> str:
    results = [r for by_runner in col.results.values() for r in by_runner]
    return "\n".join(
        [
            "# Leaderboards\n",
            f"Generated by `{command}` from {len(results)} result files "
            f"(git commits recorded in them: {commits_text([r['result'].get('git_commit') for r in results])}). "
            "Regenerate with the same command; every number comes from those files.\n",
            *sections,
            DEFINITIONS,
        ]
    )


def _write(out: Path, files: Files) -> None:
    """Write files under out, then drop what the previous run listed in GENERATED but this one did
    not write. A file in the way that no run listed is someone else's: stop before writing any.
    A second leaderboard writing into out meanwhile waits for this one (a lock on the folder)."""
    out.mkdir(parents=True, exist_ok=True)
    with _only_writer(out):
        _write_listed(out, files)


@contextlib.contextmanager
def _only_writer(out: Path):
    """An exclusive lock on the folder itself (no file of its own in it): two leaderboards writing
    into one folder at once deleted each other's temporaries, and the loser failed on them."""
    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for the leaderboard being written into {out}", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_listed(out: Path, files: Files) -> None:
    listing = out / GENERATED
    old = set(read_text(listing).split()) if listing.exists() else set()
    old = {rel for rel in old if (out / rel).resolve().is_relative_to(out.resolve())}  # one outside is none of ours
    foreign = [rel for rel in files if rel not in old and (out / rel).exists()]
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise SuiteError(
            f"{out / foreign[0]}{more} exists and was not written by a leaderboard (not in {listing}); "
            "choose another --out or move it"
        )
    for rel in old | set(files) | {GENERATED}:  # write_atomic's temporaries, left by a leaderboard killed mid-write
        for tmp in (out / rel).parent.glob(f".{Path(rel).name}.*.tmp"):
            tmp.unlink()
    # Listed before any is written: a run stopped halfway (killed, a full disk) leaves only files
    # the listing names, so the next run takes them as its own.
    write_atomic(listing, "".join(f"{rel}\n" for rel in sorted(old | set(files))))
    for rel, data in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    for rel in sorted(old - set(files)):
        path = (out / rel).resolve()
        if out.resolve() in path.parents and path.is_file():
            path.unlink()
            for parent in path.parents:
                if parent == out.resolve() or any(parent.iterdir()):
                    break
                parent.rmdir()
    write_atomic(listing, "".join(f"{rel}\n" for rel in sorted(files)))


# what index.md says of the tables (a cell there is a problem here); the plain rows are printed from
# baseline.py's rule itself
DEFINITIONS = f"""\
## How to read the tables

- **cell**: a task with all its settings x a model with all its settings x the targets. Each
  section lists the cell's full settings, its budget (steps per run; the smallest train.steps
  of its runs: a milestone after it does not count), how often it was evaluated, its seeds
  and the git commits recorded in its results. A seed that ran with several budgets counts once.
- **method**: optimizer + filter + sampler with their settings, plus train settings that
  change training (loss, warmup). Labels show the settings that vary among the collected runs.
- **grok**: the success that lasts: the first evaluated step from which val acc stays >= the
  target for the hold (train.hold steps) and never falls below half the target at any later
  evaluation within the budget; a collapse takes a grok back, and a later streak that holds and
  lasts counts instead. Each cell's header says how long past their grok step its grokked runs
  were watched (runs stop train.patience steps into a held streak; runs made before the hold
  existed stopped once the target had held train.patience steps, and are judged on that window).
  **memorization**: the first evaluated
  step with train acc >= its threshold; **delay** = grok - memorization. Each: median over the
  seeds that reached it, [min, max] over the same seeds, (k/n) when only k of n seeds did.
- **success**: seeds that grokked (held) within the budget / seeds. **touched**: seeds whose val
  acc reached the target at least once. **collapsed**: seeds whose val acc fell below half the
  target at some evaluation after first touching it (a grok it took back included).
- **best val** / **final val**: each seed's highest / last evaluated val accuracy within the
  budget: median [min, max] over the seeds.
- **time to target**: median grok step over all seeds, a seed that failed counting as
  infinity (AlgoPerf), so `inf` when at least half the seeds failed.
- **speed-up [95% CI]**: the baseline row's time to target / this row's (`inf`: only this row
  reached the target; `0.00`: only the baseline did; `-`: neither, and then no interval), and a
  95% bootstrap interval over the seeds (paired by seed when both rows ran the same seeds). **p**:
  exact two-sided permutation test on ranks (signed ranks when paired). **verdict**: `faster` /
  `slower` when the interval lies above / below 1 and p < 0.05 with the ranks pointing the same
  way, with 5 seeds or more in both rows, else `not resolved (n = k)` (5 pairs cannot give p below
  0.0625). The **baseline** (`#k`) is, among the cell's plain rows
  ({" or ".join(baseline.OPTIMIZERS)}, no filter, sampler {" / ".join(baseline.SAMPLERS)},
  loss {baseline.LOSS}), the one that agrees with the row on the most method settings; ties go
  to the faster baseline, then more seeds, then the label. A plain row is its own baseline.
- **wall s**: median wall-clock seconds of the whole run (to its stop, not to the target),
  taken under whatever else shared the machine.
- **performance profile**: in each cell and batch size where at least two methods ran and one
  reached the target, r = time to target / the best (inf for a failure). rho(tau) = share of the
  cells a method ran in with r <= tau; **score** = area under rho over [1, tau_max] /
  (tau_max - 1): 1 = best in every cell it ran in, 0 = never within tau_max of the best.
"""
