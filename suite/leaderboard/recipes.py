"""The recipe check of a tuned board: does any untuned run of a tuned row's method family, in an
identical problem, beat the tuned row? Then the tuning failed (its search did not find what a
published recipe already gets), and the row gets no verdict.

Identical problem: the same task and model settings and targets (train.memorization, train.target) and
the same batch size; every untuned run is judged here by the tuned problem's hold and within its
budget (stats.outcome), so a run made with another hold or a longer budget counts as the tuned
runs do; one that stopped earlier without a grok counts as never reaching the target. Family: the
same optimizer (AdamW is Adam with decoupled decay; Adam-LR with decoupled decay is adamwlr; Adam-LR
at c = 1 is Adam step for step, so it is a recipe of Adam's family too), filter, sampler, loss and
precision, whatever their settings. The untuned runs must share 5 or more
seeds with the tuned row; they are paired with it by seed (seed i trains on the same split). The
recipe beats the row when its median time on those seeds is below the row's: a tuned row must be at
least as good as every recipe of its family, so a loss by the median alone fails the tuning, whether or
not the interval of the speed-up (shown beside it) lies above 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from suite.leaderboard.collect import Collection, collect
from suite.leaderboard.speedup import MIN_SEEDS, median_time, rank_test, ratio, speedup_interval
from suite.leaderboard.stats import outcome

ALIASES = {"adamw": "adam", "adamwlr": "adamlr"}  # the same optimizer with decoupled decay
JUDGED_HERE = ("train.hold",)  # a problem setting the tuned problem's value replaces


@dataclass(frozen=True)
class Recipe:
    """An untuned method of a tuned row's family in its problem, on the seeds both ran."""

    settings: str
    root: str  # the runs it came from
    seeds: list[int]
    speedup: float  # the tuned row's median time over the recipe's: above 1, the recipe is sooner
    low: float
    high: float
    p: float
    beats: bool  # its median time is below the tuned row's (the speed-up above 1)

    @property
    def label(self) -> str:
        return f"{self.settings} ({self.root})"


def family(method: dict) -> tuple:
    opt = method["opt.name"]
    return (
        ALIASES.get(opt, opt),
        method.get("filter.name", "none"),
        method.get("sampler.name"),
        method.get("train.loss", "ce"),
        method.get("train.precision", "fp32"),
    )


def families(method: dict) -> set[tuple]:
    """The families whose tuned rows a run is a recipe for: its own, and Adam's where it is Adam-LR at c = 1."""
    own = family(method)
    return {own, ("adam", *own[1:])} if own[0] == "adamlr" and method.get("opt.c") == 1 else {own}


def untuned(roots: list[Path]) -> list[Collection]:
    return [collect(root) for root in roots]


def recipes_against(row: dict, problem: dict, others: list[Collection]) -> list[Recipe]:
    """Every untuned method of the row's family in an identical problem, compared with the row (a row of
    stats.problem_tables, its problem's settings `problem`)."""
    out = []
    times_by_seed = dict(zip(row["seed_list"], row["times"]))
    for col in others:
        for problem_id, other in col.problems.items():
            if not _identical(problem, other) or problem_id not in set(col.runs["problem_id"]):
                continue
            judged = other | {k: problem[k] for k in JUDGED_HERE}
            runs = col.runs[col.runs["problem_id"] == problem_id]
            for method_id, group in runs.groupby("method_id", sort=True):
                method = col.methods[method_id]
                if family(row["settings"]) not in families(method) or not _same_batch(method, row["settings"]):
                    continue
                group = group[group["seed"].isin(times_by_seed)].sort_values("seed", kind="stable")
                if len(group) < MIN_SEEDS:
                    continue
                theirs = [
                    outcome(col.metrics.get(r.dir), col.result_of[r.dir], judged, row["budget"])["time"]
                    for r in group.itertuples()
                ]
                ours = [times_by_seed[s] for s in group["seed"]]
                out.append(_compare(col, method, list(group["seed"]), ours, theirs))
    return out


def _compare(col: Collection, method: dict, seeds: list[int], ours: list[float], theirs: list[float]) -> Recipe:
    low, high = speedup_interval(ours, theirs, paired=True)
    p, _ = rank_test(ours, theirs, paired=True)
    neither = math.isinf(median_time(ours)) and math.isinf(median_time(theirs))
    speedup = math.nan if neither else ratio(median_time(ours), median_time(theirs))
    return Recipe(
        _label(method),
        col.root.as_posix(),
        seeds,
        speedup,
        low,
        high,
        p,
        speedup > 1,  # False where neither reached the target (nan)
    )


def _identical(tuned: dict, other: dict) -> bool:
    keys = (tuned.keys() | other.keys()) - set(JUDGED_HERE)
    return all(tuned.get(k) == other.get(k) for k in keys)


def _same_batch(a: dict, b: dict) -> bool:
    return a.get("sampler.batch_size") == b.get("sampler.batch_size")


QUIET = ("name", "betas", "eps", "ns_dtype", "batch_size")  # left out of a label: the same across a family
PLAIN = {"filter.name": "none", "sampler.name": "random", "train.loss": "ce", "train.precision": "fp32"}


def _label(method: dict) -> str:
    """The recipe's optimizer settings, then its filter's and sampler's where it has one, and a loss or
    precision other than the default: "adam lr=0.001 weight_decay=0.001 coupled + grad_softmax gamma=1 beta=0.99"."""
    from suite.leaderboard.tables import fmt_value

    def settings(kind: str) -> list[str]:
        return [
            ("decoupled" if value else "coupled") if bare == "decoupled_weight_decay" else f"{bare}={fmt_value(value)}"
            for key, value in method.items()
            for k, _, bare in [key.partition(".")]
            if k == kind and bare not in QUIET
        ]

    parts = [method["opt.name"], *settings("opt")]
    for kind in ("filter", "sampler"):
        name = method.get(f"{kind}.name", PLAIN[f"{kind}.name"])
        if name != PLAIN[f"{kind}.name"]:
            parts += ["+", name, *settings(kind)]
    parts += [
        f"{key.split('.')[1]}={method[key]}"
        for key in ("train.loss", "train.precision")
        if key in method and method[key] != PLAIN[key]
    ]
    return " ".join(parts)
