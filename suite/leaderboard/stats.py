"""Numbers: per (problem, method) summaries over seeds, each row's speed-up over its baseline
(baseline.py picks it, speedup.py judges it), the performance profile."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.engine.milestones import Milestones
from suite.leaderboard.baseline import is_plain, pick_baseline
from suite.leaderboard.collect import Collection
from suite.leaderboard.speedup import median_time, rank_test, ratio, speedup_interval, verdict

TAU_MAX = 4.0  # AlgoPerf's


def _stats(values: list) -> tuple[float, float, float]:
    if not values:
        return (math.nan,) * 3
    return float(np.median(values)), float(min(values)), float(max(values))


def outcome(metrics: pd.DataFrame | None, result: dict, problem: dict, budget: int) -> dict:
    """What one run reached within the problem's budget, read from its metrics by the loop's own rule
    (suite.engine.measures.Milestones, with the problem's targets and hold): a run that ran longer than the
    budget is judged on its evaluations up to it. Without metrics, its result.json's milestones
    (those within the budget). time: the grok step, or inf."""
    mem, target, hold = (
        problem.get("train.memorization", 0.99),
        problem.get("train.target", 0.99),
        problem["train.hold"],
    )
    if metrics is not None and {"step", "train_acc", "val_acc"} <= set(metrics):
        within = metrics[metrics["step"] <= budget]
        m = Milestones.of(within[["step", "train_acc", "val_acc"]].to_dict("records"), mem, target, hold)
        final = float(within["val_acc"].iloc[-1]) if len(within) else math.nan
        reached = {
            "memorization_step": m.memorization_step,
            "grok_step": m.grok_step,
            "first_touch_step": m.first_touch_step,
            "collapsed": m.collapsed,
            "best_val": math.nan if m.best_val_acc is None else float(m.best_val_acc),
            "final_val": final,
            "last_step": int(within["step"].iloc[-1]) if len(within) else None,
        }
    else:

        def step(key):
            value = result.get(key)
            return (
                int(value)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= budget
                else None
            )

        reached = {
            "memorization_step": step("memorization_step"),
            "grok_step": step("grok_step"),
            "first_touch_step": step("first_touch_step"),
            "collapsed": bool(result.get("collapsed")),
            "best_val": math.nan,
            "final_val": math.nan,
            "last_step": step("steps"),
        }
    reached["time"] = math.inf if reached["grok_step"] is None else float(reached["grok_step"])
    return reached


def summarise(outcomes: list[dict], walls: list) -> dict:
    """One method in one problem, over its seeds: outcome() of each (in seed order), wall seconds."""

    def reached(key):
        return [o[key] for o in outcomes if o[key] is not None]

    mem, grok = reached("memorization_step"), reached("grok_step")
    # each seed's delay, a seed that never grokked waiting forever (as its time to target does)
    delays = [
        math.inf if o["grok_step"] is None else o["grok_step"] - o["memorization_step"]
        for o in outcomes
        if o["grok_step"] is None or o["memorization_step"] is not None
    ]
    delay = [d for d in delays if d != math.inf]
    times = [o["time"] for o in outcomes]
    grokked = [o for o in outcomes if o["grok_step"] is not None and o["last_step"] is not None]
    watched = [o["last_step"] - o["grok_step"] for o in grokked]  # how long a collapse had to show
    walls = [float(v) for v in walls if pd.notna(v)]
    best_val = [o["best_val"] for o in outcomes if not math.isnan(o["best_val"])]
    final_val = [o["final_val"] for o in outcomes if not math.isnan(o["final_val"])]
    n = len(outcomes)
    return {
        "seeds": n,
        "memorized": len(mem),
        "grokked": len(grok),
        "success_rate": len(grok) / n,
        "touched": len(reached("first_touch_step")),
        "collapsed": sum(o["collapsed"] for o in outcomes),
        **dict(zip(("memorization_median", "memorization_min", "memorization_max"), _stats(mem))),
        **dict(zip(("grok_median", "grok_min", "grok_max"), _stats(grok))),
        "n_delay": len(delay),
        "watched_after_grok": watched,
        **dict(zip(("delay_median", "delay_min", "delay_max"), _stats(delay))),
        "delays": delays,
        "time_to_target": median_time(times),
        "times": times,
        "wall_s_median": float(np.median(walls)) if walls else math.nan,
        **dict(zip(("best_val_median", "best_val_min", "best_val_max"), _stats(best_val))),
        **dict(zip(("final_val_median", "final_val_min", "final_val_max"), _stats(final_val))),
    }


def against_baseline(row: dict, base: dict | None) -> dict:
    """The row's speed-up over its baseline, with its interval, p-value, the way the test points and
    the verdict (suite/leaderboard/speedup.py). Paired by seed when both rows ran the same seeds. Where
    neither row's median reached the target there is no ratio of medians, and so no interval of it."""
    none = {
        "speedup": math.nan,
        "speedup_ci_low": math.nan,
        "speedup_ci_high": math.nan,
        "p_value": math.nan,
        "favours": 0,
        "verdict": "",
    }
    if base is None:
        return none
    if base is row:
        return none | {"speedup": 1.0, "verdict": "baseline"}
    paired = row["seed_list"] == base["seed_list"]
    p, favours = rank_test(base["times"], row["times"], paired)
    n = min(row["seeds"], base["seeds"])
    if math.isinf(base["time_to_target"]) and math.isinf(row["time_to_target"]):
        return none | {"p_value": p, "favours": favours, "verdict": f"not resolved (n = {n})"}
    low, high = speedup_interval(base["times"], row["times"], paired)
    return {
        "speedup": ratio(base["time_to_target"], row["time_to_target"]),
        "speedup_ci_low": low,
        "speedup_ci_high": high,
        "p_value": p,
        "favours": favours,
        "verdict": verdict(low, high, p, n, favours),
    }


def problem_tables(col: Collection, judged: bool = True) -> pd.DataFrame:
    """One row per (problem, method), with the baseline chosen and the row numbers within the problem;
    judged: each row's speed-up and verdict against that baseline (a tuned board judges elsewhere)."""
    out = []
    for problem_id, runs in col.runs.groupby("problem_id", sort=True):
        budget = int(runs["budget"].min())
        problem = col.problems[problem_id]
        rows = []
        for method_id, group in runs.groupby("method_id", sort=True):
            group = group.sort_values("seed", kind="stable")
            outcomes = [
                outcome(col.metrics.get(r.dir), col.result_of[r.dir], problem, budget) for r in group.itertuples()
            ]
            rows.append(
                {
                    "task": problem["task.name"],
                    "model": problem["model.name"],
                    "problem_id": problem_id,
                    "problem_label": col.problem_label(problem),
                    "method_id": method_id,
                    "method": col.method_label(col.methods[method_id]),
                    "settings": col.methods[method_id],
                    "budget": budget,
                    "seed_list": list(group["seed"]),
                    **summarise(outcomes, group["wall_s"]),
                }
            )
        candidates = [r for r in rows if is_plain(r["settings"])] if judged else []
        for r in rows:
            base = pick_baseline(r["settings"], candidates)
            r["baseline"] = base["method"] if base else None
            r |= against_baseline(r, base)
        # fastest first; among equal times (all inf), more successes, then the faster successes
        rows.sort(
            key=lambda r: (
                r["time_to_target"],
                -r["success_rate"],
                math.inf if math.isnan(r["grok_median"]) else r["grok_median"],
                r["method"],
            )
        )
        numbers = {r["method"]: i for i, r in enumerate(rows, 1)}
        for r in rows:
            r["row"] = numbers[r["method"]]
            r["baseline_row"] = numbers.get(r["baseline"])
        out.extend(rows)
    return pd.DataFrame(out)


def performance_profile(table: pd.DataFrame, tau_max: float = TAU_MAX) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Ratios per (problem, method) in the problems that take part, and per method: problems, wins, rho,
    score. The columns keep the words the board's CSVs were written with: a ratio's "cell" is its problem's
    label (and batch size, where a problem ran several), a score's "cells" the problems it counts."""
    ratios = []
    table = table.assign(batch=[r.get("sampler.batch_size", "-") for r in table["settings"]])
    for (task, model, problem_label), problem_rows in table.groupby(["task", "model", "problem_label"], sort=True):
        # Methods race only at the same batch size: a smaller batch takes more, cheaper steps, so a
        # step count across batch sizes would rank the batch size, not the method.
        for batch, rows in problem_rows.groupby(problem_rows["batch"].astype(str), sort=True):
            best = rows["time_to_target"].min()
            if len(rows) < 2 or math.isinf(best):
                continue
            label = " ".join(
                p for p in (problem_label, f"bs={batch}" if problem_rows["batch"].nunique() > 1 else "") if p
            )
            for r in rows.itertuples():
                ratios.append(
                    {
                        "task": task,
                        "model": model,
                        "cell": label,
                        "method": r.method,
                        "time_to_target": r.time_to_target,
                        "ratio": ratio(r.time_to_target, best),
                    }
                )
    ratios = pd.DataFrame(ratios, columns=["task", "model", "cell", "method", "time_to_target", "ratio"])
    scores = []
    for method, rows in ratios.groupby("method", sort=True):
        r = rows["ratio"].to_numpy()
        scores.append(
            {
                "method": method,
                "cells": len(r),
                "best_in": int((r <= 1).sum()),
                "rho_1": float((r <= 1).mean()),
                "rho_2": float((r <= 2).mean()),
                "rho_tau_max": float((r <= tau_max).mean()),
                "score": float(np.mean(np.clip(tau_max - r, 0, None) / (tau_max - 1))),
            }
        )
    scores = pd.DataFrame(scores, columns=["method", "cells", "best_in", "rho_1", "rho_2", "rho_tau_max", "score"])
    scores = scores.sort_values(["score", "method"], ascending=[False, True], kind="stable").reset_index(drop=True)
    ratios = ratios.sort_values(["task", "model", "cell", "ratio", "method"], kind="stable").reset_index(drop=True)
    return ratios, scores
