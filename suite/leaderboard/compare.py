"""Two sets of runs side by side (`suite compare`): two result roots (two commits, two machines),
two methods within one root, or one method in two problems of one root. Per pair, each side's time
to target (the median held grok step, a failed seed counting as infinity) with its bootstrap
interval, the speed-up of B over A (A's median / B's) with its interval and exact p-value, and a
verdict: the rules of suite/leaderboard/speedup.py.

Two roots: a problem's method on one side meets the same method (the same settings) on the other.
One root with `--a` / `--b` filters on method settings (opt.name=adam): every method the A filter
keeps meets every method the B filter keeps, in each problem. Filters on a problem's settings
(model.embed_init=0.03, task.skew=3) compare across problems: a method in a problem A keeps meets the
same method in each problem B keeps that differs only in the filtered settings. A side's runs are
judged within the smaller of the two budgets. Seeds are paired when both sides ran the same seeds
on the same data: the same task settings (a seed draws the split from them), so two problems that
differ in a model setting pair, two that differ in the task's do not. (What the command prints and writes
calls a problem a cell, in its messages and its "cell" column.)
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from suite.errors import SuiteError
from suite.leaderboard.collect import collect, settings_key
from suite.leaderboard.speedup import (
    EQUIVALENCE_LEVEL,
    EQUIVALENCE_MARGIN,
    equivalence,
    median_interval,
    median_time,
    rank_test,
    ratio,
    speedup_interval,
    verdict,
)
from suite.leaderboard.stats import outcome
from suite.leaderboard.tables import bound_text, interval_text, md_table, steps_text

# When a run stops early (at chance, or never having learned) is a condition of the run, as its budget
# is, not what its method computes: a quick run and a committed board's run of the same problem and method
# meet whatever stopping rules each ran under (a run stopped early is judged a failure either way).
STOP_RULES = ("train.chance_patience", "train.learn_patience")


@dataclass
class Side:
    root: Path
    where: dict = field(default_factory=dict)  # setting ("opt.name", "task.op") -> value: runs kept


def parse_where(items: list[str], flag: str) -> dict:
    """KEY=VALUE filters; a value is read as a number or a bool when it is one."""
    where = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise SuiteError(f"{flag} takes KIND.KEY=VALUE (e.g. opt.name=adamlr, task.op=mul), got {item!r}")
        if key in where:  # a side keeps runs with one value per setting: the second would replace the first
            raise SuiteError(f"{flag} names {key} twice ({where[key]}, {value}); compare one value per side")
        where[key] = value
    return where


def _matches(settings: dict, where: dict) -> bool:
    for key, text in where.items():
        value = settings.get(key)
        if isinstance(value, bool) or value is None:
            if str(value).lower() != text.lower():
                return False
        elif isinstance(value, int | float):
            try:
                if float(text) != float(value):
                    return False
            except ValueError:
                return False
        elif str(value) != text:
            return False
    return True


def _groups(side: Side) -> dict:
    """(problem key, method key) -> {"problem", "method", "labels", "runs"} of the side's kept runs."""
    col = collect(side.root)
    known = {k for c in col.problems.values() for k in c} | {k for m in col.methods.values() for k in m}
    for key in side.where:
        if key not in known:
            raise SuiteError(f"{side.root}: no run has a setting '{key}' (known: {', '.join(sorted(known))})")
    groups = {}
    for run in col.runs.itertuples():
        problem, method = col.problems[run.problem_id], col.methods[run.method_id]
        if not _matches(problem | method, side.where):
            continue
        group = groups.setdefault(
            (settings_key(problem), settings_key({k: v for k, v in method.items() if k not in STOP_RULES})),
            {
                "problem": problem,
                "method": method,
                "labels": (col.problem_label(problem), col.method_label(method)),
                "runs": [],
            },
        )
        group["runs"].append((run.seed, run.budget, col.metrics.get(run.dir), col.result_of[run.dir]))
    for group in groups.values():
        group["runs"] = _one_per_seed(group["runs"])
    return groups


def _one_per_seed(runs: list) -> list:
    """A seed counts once in a group, as on a board (collect.one_run_per_seed): where it ran under two
    stop rules, or two budgets, its longest budget stands for it, then the run that went furthest."""
    order = sorted(runs, key=lambda r: (r[0], -r[1], -(r[3].get("steps") or 0)))
    kept = [r for i, r in enumerate(order) if i == 0 or r[0] != order[i - 1][0]]
    if len(kept) < len(runs):
        print(f"note: {len(runs) - len(kept)} runs of a seed that also ran otherwise were left out", file=sys.stderr)
    return kept


def _times(group: dict, budget: int) -> tuple[list, list]:
    runs = group["runs"]  # in seed order, one run each
    return [r[0] for r in runs], [outcome(m, result, group["problem"], budget)["time"] for _, _, m, result in runs]


def compare(a: Side, b: Side) -> pd.DataFrame:
    """One row per pair of groups that meet (see the module)."""
    groups_a, groups_b = _groups(a), _groups(b)
    same_root = Path(a.root).resolve() == Path(b.root).resolve()
    # problem settings the two filters set apart (one named on both sides alike only narrows both)
    problem_keys = {k for g in [*groups_a.values(), *groups_b.values()] for k in g["problem"]}
    across = {k for k in a.where.keys() | b.where.keys() if k in problem_keys and a.where.get(k) != b.where.get(k)}
    rows = []
    for (problem_key, method_key), ga in groups_a.items():
        for (problem_key_b, method_key_b), gb in groups_b.items():
            if across:
                meet = (
                    method_key_b == method_key
                    and problem_key_b != problem_key
                    and _outside(ga["problem"], across) == _outside(gb["problem"], across)
                )
            else:
                meet = problem_key_b == problem_key and (method_key_b != method_key) != (not same_root)
            if meet:
                rows.append(_row(ga, gb, across))
    if not rows:
        raise SuiteError(
            "no cell where both sides ran"
            + (
                " (one root: give --a and --b filters that keep different methods or cells)"
                if same_root
                else " the same method (two roots pair each cell's method with that method in the other root; to "
                "compare two methods, give one root that holds both and --a / --b filters)"
            )
        )
    order = ["task", "model", "cell", "method_a", "method_b"]
    return pd.DataFrame(rows).sort_values(order, kind="stable", ignore_index=True)


def _outside(settings: dict, keys: set) -> dict:
    return {k: v for k, v in settings.items() if k not in keys}


def _task_settings(problem: dict) -> dict:
    """What a seed draws its data from: equal task settings, equal data seed for seed."""
    return {k: v for k, v in problem.items() if k.startswith("task.")}


def _row(ga: dict, gb: dict, across: set) -> dict:
    budget = min(r[1] for r in ga["runs"] + gb["runs"])
    seeds_a, times_a = _times(ga, budget)
    seeds_b, times_b = _times(gb, budget)
    paired = seeds_a == seeds_b and _task_settings(ga["problem"]) == _task_settings(gb["problem"])
    low, high = speedup_interval(times_a, times_b, paired)
    p, favours = rank_test(times_a, times_b, paired)
    eq_low, eq_high, equivalent = equivalence(times_a, times_b, paired)
    a_low, a_high = median_interval(times_a)
    b_low, b_high = median_interval(times_b)
    neither = math.isinf(median_time(times_a)) and math.isinf(median_time(times_b))
    problem_label = ga["labels"][0]
    return {
        "task": ga["problem"]["task.name"],
        "model": ga["problem"]["model.name"],
        "cell": problem_label,
        "method_a": _label(ga, across),
        "method_b": _label(gb, across),
        "budget": budget,
        "seeds_a": len(times_a),
        "seeds_b": len(times_b),
        "paired": paired,
        "time_a": median_time(times_a),
        "time_a_low": a_low,
        "time_a_high": a_high,
        "time_b": median_time(times_b),
        "time_b_low": b_low,
        "time_b_high": b_high,
        "speedup": math.nan if neither else ratio(median_time(times_a), median_time(times_b)),
        "speedup_ci_low": low,
        "speedup_ci_high": high,
        "p_value": p,
        "verdict": verdict(low, high, p, min(len(times_a), len(times_b)), favours),
        "eq_ci_low": eq_low,
        "eq_ci_high": eq_high,
        "equivalence": equivalent,
    }


def _label(group: dict, across: set) -> str:
    """The method, and for a comparison across problems the side's values of the filtered settings."""
    problem = group["problem"]
    return group["labels"][1] + "".join(f" {k}={problem[k]}" for k in sorted(across) if k in problem)


def command(a: Side, b: Side) -> str:
    """The command that makes this comparison (the page's header records it, to regenerate it)."""
    roots = f"{a.root}" + (f" {b.root}" if Path(b.root) != Path(a.root) else "")
    filters = [f"--{flag} {k}={v}" for flag, s in (("a", a), ("b", b)) for k, v in s.where.items()]
    return " ".join(["python -m suite compare", roots, *filters])


def to_markdown(table: pd.DataFrame, a: Side, b: Side) -> str:
    def side(s: Side) -> str:
        return f"`{s.root}`" + "".join(f" {k}={v}" for k, v in s.where.items())

    def time(r, which):
        low, high = steps_text(r[f"time_{which}_low"]), steps_text(r[f"time_{which}_high"])
        return f"{steps_text(r[f'time_{which}'])} [{low}, {high}]"

    rows = [
        [
            f"{r['task']}/{r['model']} {r['cell']}".strip(),
            r["method_a"],
            r["method_b"],
            f"{r['seeds_a']}/{r['seeds_b']}" + (" paired" if r["paired"] else ""),
            time(r, "a"),
            time(r, "b"),
            interval_text(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"], "x"),
            f"{r['p_value']:.3g}",
            r["verdict"],
            f"{r['equivalence']} [{bound_text(r['eq_ci_low'], 'x')}, {bound_text(r['eq_ci_high'], 'x')}]",
        ]
        for r in table.to_dict("records")
    ]
    m = EQUIVALENCE_MARGIN
    header = ["cell", "A", "B", "seeds", "A: time to target [95% CI]", "B: time to target [95% CI]"]
    return "\n".join(
        [
            f"# B against A\n\n`{command(a, b)}`\n",
            f"A: {side(a)}; B: {side(b)}. Time to target: the median held grok step over the seeds (a failed seed "
            "is inf), with a bootstrap interval. Speed-up: A's median / B's, so above 1 means B is faster, paired "
            "by seed when both sides ran the same seeds on the same data (the same task settings); the verdict "
            "says `faster` (B faster) or `slower` only when the interval lies off 1 and p < 0.05 with the rank test "
            "pointing the same way, with 5 seeds or more a side (5 pairs cannot give p below 0.0625). "
            f"Equivalence: `equivalent within {m:.0%}` when the {EQUIVALENCE_LEVEL:.0%} interval of the speed-up lies "
            f"inside [1/{1 + m:g}, {1 + m:g}] (the margin declared before the runs, leaderboards/README.md), else `not "
            "shown equivalent`.\n",
            md_table(
                header + ["speed-up of B [95% CI]", "p", "verdict", f"equivalence [{EQUIVALENCE_LEVEL:.0%} CI]"],
                rows,
                right={3, 4, 5, 6, 7},
            ),
        ]
    )
