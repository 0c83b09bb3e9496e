"""The verdicts of a tuned board (`suite tune`, its tuning.json beside the final runs): each method's final
runs against its baseline's in every problem, Holm-adjusted over the board, and one verdict per method over
every problem, Holm-adjusted over the methods; with what each is read with: the recipe check (recipes.py),
the cost (cost.json), no delay left to shorten, a winner at an edge of its space. Numbers only:
studies/tuning.py writes them into tuning.md, and a summary can read them from here alike.

Per problem, a verdict is withheld (with the reason) where a search found no point that reached the target
on any of its tuning seeds, or where an untuned run of the row's family in an identical problem beats the
tuned row (by its median time: recipes.py): either way the tuning, not the method, was measured; and
where the row or its baseline has not finished every final run its search drew. The pooled verdict of a
method takes every problem where it was judged: the sign of every paired seed (exact sign test) and the
geometric mean of the per-problem speed-ups with a stratified bootstrap interval (speedup.pooled).

A problem is named here as tuning.json names the base cell a method was tuned in (a choice's "cell":
suite/launch/tuning.py's cell_name, the grid cell without its method and seed), whose final runs are
one problem's rows on the board; tuning.md shows that name in its "cell" columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from suite.leaderboard.collect import Collection
from suite.leaderboard.recipes import Recipe, recipes_against, untuned
from suite.leaderboard.speedup import holm, median_time, pooled, verdict
from suite.leaderboard.stats import TAU_MAX, against_baseline, performance_profile, problem_tables
from suite.leaderboard.tables import interval_text
from suite.results.rundir import UnreadableFile, read_json
from suite.results.tuning_record import reached

NO_DELAY = 0.10  # a tuned baseline whose delay is at most this share of its time to target has none left
FAILED = "'s tuning failed"  # after a tuned method's name, where a recipe beats it (the headline reads it back)


@dataclass
class Verdict:
    """One method's final runs in one problem, against its baseline's."""

    problem: str  # its name in tuning.json (a choice's "cell")
    method: str
    row: dict | None  # its row of stats.problem_tables; None where it has no final runs (withheld says why)
    settings: dict  # the settings it ran with: its chosen point, and the shared ones its method fixes
    cost: dict | None  # its entry of cost.json
    baseline: str | None
    speedup: dict | None = None  # stats.against_baseline's numbers, where it was judged
    p_holm: float = math.nan
    verdict: str = ""
    withheld: str = ""  # why it was not judged (no verdict)
    notes: list[str] = field(default_factory=list)  # what the verdict is read with


@dataclass
class Pooled:
    """One method over every problem where it was judged."""

    method: str
    baseline: str
    problems: list[str]
    numbers: dict  # speedup.pooled's
    p_holm: float
    verdict: str
    left_out: list[str]  # the problems where it was not judged, each "problem: why" (its Verdict's withheld)


@dataclass
class Judgement:
    verdicts: list[Verdict]
    pooled: list[Pooled]
    checks: dict  # (problem, method) -> [Recipe]: the recipe check, where untuned roots were given


def judge(col: Collection, record: dict, untuned_roots: tuple = ()) -> Judgement:
    """Every (problem, method) of the record that has final runs, judged (see the module)."""
    rows = final_rows(col, record)
    cost = cost_of(col.root).get("specs", {})
    others = untuned(untuned_roots) if untuned_roots else []
    checks = (
        {key: recipes_against(row, col.problems[row["problem_id"]], others) for key, row in rows.items()}
        if others
        else {}
    )
    searched = {(c["cell"], c["method"]): c for c in record["chosen"]}
    verdicts, pairs = [], {}
    for c in record["chosen"]:
        problem, method = c["cell"], c["method"]
        base_name = record["methods"][method].get("baseline")
        row = rows.get((problem, method))
        v = Verdict(problem, method, row, ran_with(record, c), cost.get(f"{problem}/{method}"), base_name)
        verdicts.append(v)
        if row is None:
            v.withheld = f"no final runs: {_missing(c)}"
            continue
        if base_name is None:  # the baseline's own row
            continue
        base = rows.get((problem, base_name))
        if base is None:
            v.withheld = f"{base_name} has no final runs: {_missing(searched[problem, base_name])}"
            continue
        v.withheld = _withheld(problem, (method, base_name), searched, checks, rows)
        v.notes = _notes(None if v.withheld else base, [searched[problem, name] for name in (method, base_name)])
        if not v.withheld:
            v.speedup = against_baseline(row, base)
            base_times, times = _paired(base, row)
            if times:
                pairs.setdefault(method, []).append((problem, base_times, times))
    judged = [v for v in verdicts if v.speedup is not None]
    for v, p in zip(judged, holm([v.speedup["p_value"] for v in judged])):
        n = min(v.row["seeds"], rows[v.problem, v.baseline]["seeds"])
        s = v.speedup
        v.p_holm, v.verdict = p, verdict(s["speedup_ci_low"], s["speedup_ci_high"], p, n, s["favours"])
    left_out = {}
    for v in verdicts:
        if v.baseline is not None and v.speedup is None:
            left_out.setdefault(v.method, []).append(f"{v.problem}: {v.withheld}")
    return Judgement(verdicts, _pooled(pairs, left_out, record), checks)


def _missing(choice: dict) -> str:
    """Why a choice has no final runs on the board."""
    return "its search reached the target on no tuning seed" if not reached(choice) else "not under this root yet"


def _unfinished(row: dict, choice: dict) -> str:
    """ "k of n" where a row has fewer final seeds than its search drew (a campaign still running: its
    verdict would rest on the seeds that happened to finish first), else ""."""
    drawn = len(choice.get("final_runs", []))
    return f"{row['seeds']} of {drawn}" if row["seeds"] < drawn else ""


def _withheld(problem: str, names: tuple, searched: dict, checks: dict, rows: dict) -> str:
    """Why these two tuned rows cannot be compared (their tuning would be measured, or part of their
    final seeds): "" if they can."""
    no_search = [name for name in names if not reached(searched[problem, name])]
    if no_search:
        whose = {1: f"{no_search[0]}'s winner", 2: "both winners"}[len(no_search)]
        return f"{whose} reached the target on no tuning seed"
    unfinished = [f"{n} {u}" for n in names if (u := _unfinished(rows[problem, n], searched[problem, n]))]
    if unfinished:
        return f"final runs not all finished ({', '.join(unfinished)})"
    beaten: list[tuple[str, Recipe]] = [(n, r) for n in names for r in checks.get((problem, n), []) if r.beats]
    if beaten:
        name, r = beaten[0]
        return f"{name}{FAILED}: {r.label} beats tuned {name} ({interval_text(r.speedup, r.low, r.high, 'x')})"
    return ""


def _paired(base: dict, row: dict) -> tuple[list[float], list[float]]:
    """Both rows' times on the seeds both ran, in the row's order."""
    base_time = dict(zip(base["seed_list"], base["times"]))
    common = [(base_time[seed], time) for seed, time in zip(row["seed_list"], row["times"]) if seed in base_time]
    return [b for b, _ in common], [t for _, t in common]


def _pooled(pairs: dict, left_out: dict, record: dict) -> list[Pooled]:
    found = {m: pooled([(b, r) for _, b, r in paired]) for m, paired in pairs.items()}
    out = []
    for (method, numbers), p in zip(found.items(), holm([f["p"] for f in found.values()])):
        word = verdict(numbers["low"], numbers["high"], p, numbers["n"], numbers["favours"])
        problems = [problem for problem, _, _ in pairs[method]]
        baseline = record["methods"][method]["baseline"]
        out.append(Pooled(method, baseline, problems, numbers, p, word, left_out.get(method, [])))
    return out


def _notes(base: dict | None, searches: list[dict]) -> list[str]:
    """What a verdict is read with: no delay left to shorten (the baseline's median delay, a seed that
    never grokked counting as an endless one, as in its time to target; None: no verdict to read), and
    winners at an edge of their space (a search's, verdict or not)."""
    notes = []
    delay = median_time(base["delays"]) if base and base["delays"] else math.nan
    time = base["time_to_target"] if base else math.nan
    if math.isfinite(time) and math.isfinite(delay) and delay <= NO_DELAY * time:
        notes.append("no delay to shorten")
    return notes + [f"{c['method']}'s winner at an edge" for c in searches if c.get("edges")]


def final_rows(col: Collection, record: dict) -> dict:
    """(problem, method) -> the board's row (stats.problem_tables) of that method's final runs."""
    runs = col.runs.set_index("run_id")
    table = problem_tables(col)
    rows = {}
    for c in record["chosen"]:
        found = [r for r in c.get("final_runs", []) if r in runs.index]
        if found:
            problem_id, method_id = runs.loc[found[0], ["problem_id", "method_id"]]
            match = table[(table["problem_id"] == problem_id) & (table["method_id"] == method_id)]
            rows[c["cell"], c["method"]] = match.iloc[0].to_dict()
    return rows


def profile_by_method(rows: dict, record: dict) -> pd.DataFrame | None:
    """The performance profile's scores with one row per tuned method over every problem with final runs,
    whichever point it chose in each (profile.md keys rows by settings, so a method that chose
    differently in two problems is split there); a problem where the method has no final runs counts as a
    failure (inf)."""
    problems = {problem: row for (problem, _), row in rows.items()}
    table = pd.DataFrame(
        [
            {**(rows.get((problem, method)) or problems[problem] | {"time_to_target": math.inf}), "method": method}
            for problem in problems
            for method in record["methods"]
        ]
    )
    return None if table.empty else performance_profile(table, TAU_MAX)[1]


def cost_of(root: Path) -> dict:
    """ROOT/cost.json (suite tune's last phase: each chosen setting's ms per step and decay per step), or {}."""
    path = Path(root) / "cost.json"
    if not path.exists():
        return {}
    cost = read_json(path)
    entries = cost.get("specs") if isinstance(cost, dict) else None
    if not isinstance(entries, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("ms_per_step"), int | float) and isinstance(e.get("groups"), list)
        for e in entries.values()
    ):
        raise UnreadableFile(f"{path} is not a cost record of this suite; delete it and run `suite tune` again")
    return cost


def ran_with(record: dict, choice: dict) -> dict:
    """The settings a choice ran with: its tuned ones, and the shared ones its method fixes (⊥AdamW's wd 0)."""
    fixed = record["methods"][choice["method"]]["fixed"]
    return choice["settings"] | {k: fixed[k] for k in record.get("shared", {}) if k in fixed}


def chosen(choice: dict) -> dict:
    return next(t for t in choice["tried"] if t["point"] == choice["chosen"])


def by_time(choice: dict) -> bool:
    """The chosen point won by its median time on the tuning seeds (a finite one), not by the tie-break."""
    return math.isfinite(chosen(choice)["median_time"])
