"""Numbers: per (cell, method) summaries over seeds, baselines and speed-ups, the performance profile."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.leaderboard.collect import ABSENT, Collection
from suite.leaderboard.studies import BASELINE_LOSS, BASELINE_OPTS, BASELINE_SAMPLERS

TAU_MAX = 4.0  # AlgoPerf's


def _stats(values: list) -> tuple[float, float, float]:
    if not values:
        return (math.nan,) * 3
    return float(np.median(values)), float(min(values)), float(max(values))


def best_val_acc(metrics: pd.DataFrame | None, budget: int) -> float:
    """The highest val accuracy a run evaluated within the budget (nan without metrics)."""
    if metrics is None or "val_acc" not in metrics:
        return math.nan
    within = metrics.loc[metrics["step"] <= budget, "val_acc"].dropna()
    return float(within.max()) if len(within) else math.nan


def summarise(group: pd.DataFrame, budget: int, best_val: list[float]) -> dict:
    """One method in one cell: milestones reached within the budget, over its seeds; best_val:
    each seed's highest val accuracy within the budget."""
    def within(column):
        return [int(v) for v in group[column] if pd.notna(v) and v <= budget]

    mem, grok = within("memorization_step"), within("grok_step")
    delay = [int(r.grok_step - r.memorization_step) for r in group.itertuples()
             if pd.notna(r.grok_step) and r.grok_step <= budget and pd.notna(r.memorization_step)]
    n = len(group)
    ttt = float(np.median([float(v) if pd.notna(v) and v <= budget else math.inf for v in group["grok_step"]]))
    walls = [float(v) for v in group["wall_s"] if pd.notna(v)]
    best_val = [v for v in best_val if not math.isnan(v)]
    return {
        "seeds": n, "memorized": len(mem), "grokked": len(grok), "success_rate": len(grok) / n,
        **dict(zip(("memorization_median", "memorization_min", "memorization_max"), _stats(mem))),
        **dict(zip(("grok_median", "grok_min", "grok_max"), _stats(grok))),
        "n_delay": len(delay), **dict(zip(("delay_median", "delay_min", "delay_max"), _stats(delay))),
        "time_to_target": ttt, "wall_s_median": float(np.median(walls)) if walls else math.nan,
        **dict(zip(("best_val_median", "best_val_min", "best_val_max"), _stats(best_val))),
    }


def is_plain(m: dict) -> bool:
    return (m["opt.name"] in BASELINE_OPTS and m["filter.name"] == "none"
            and m["sampler.name"] in BASELINE_SAMPLERS and m.get("train.loss", BASELINE_LOSS) == BASELINE_LOSS)


def pick_baseline(row_method: dict, candidates: list[dict]) -> dict | None:
    """candidates: summary rows (with 'settings', 'time_to_target', 'seeds', 'method') of plain methods."""
    if not candidates:
        return None

    def rank(c):
        agree = sum(c["settings"].get(k, ABSENT) == v for k, v in row_method.items())
        return (-agree, c["time_to_target"], -c["seeds"], c["method"])

    return min(candidates, key=rank)


def speedup(baseline: float, own: float) -> float:
    if math.isinf(baseline) and math.isinf(own):
        return math.nan
    if own == 0:  # the target held from the first evaluation
        return 1.0 if baseline == 0 else math.inf
    return baseline / own  # inf / finite = inf; finite / inf = 0


def cell_tables(col: Collection) -> pd.DataFrame:
    """One row per (cell, method), with the baseline chosen and the row numbers within the cell."""
    out = []
    for cell_id, runs in col.runs.groupby("cell_id", sort=True):
        budget = int(runs["budget"].min())
        rows = []
        for method_id, group in runs.groupby("method_id", sort=True):
            cell = col.cells[cell_id]
            rows.append({"task": cell["task.name"], "model": cell["model.name"], "cell_id": cell_id,
                         "cell_label": col.cell_label(cell), "method_id": method_id,
                         "method": col.method_label(col.methods[method_id]), "settings": col.methods[method_id],
                         "budget": budget,
                         **summarise(group, budget, [best_val_acc(col.metrics.get(d), budget) for d in group["dir"]])})
        candidates = [r for r in rows if is_plain(r["settings"])]
        for r in rows:
            base = pick_baseline(r["settings"], candidates)
            r["baseline"] = base["method"] if base else None
            r["speedup"] = speedup(base["time_to_target"], r["time_to_target"]) if base else math.nan
        # fastest first; among equal times (all inf), more successes, then the faster successes
        rows.sort(key=lambda r: (r["time_to_target"], -r["success_rate"],
                                 math.inf if math.isnan(r["grok_median"]) else r["grok_median"], r["method"]))
        numbers = {r["method"]: i for i, r in enumerate(rows, 1)}
        for r in rows:
            r["row"] = numbers[r["method"]]
            r["baseline_row"] = numbers.get(r["baseline"])
        out.extend(rows)
    return pd.DataFrame(out)


def performance_profile(table: pd.DataFrame, tau_max: float = TAU_MAX) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Ratios per (cell, method) in the cells that take part, and per method: cells, wins, rho, score."""
    ratios = []
    for (task, model, cell_label), rows in table.groupby(["task", "model", "cell_label"], sort=True):
        best = rows["time_to_target"].min()
        if len(rows) < 2 or math.isinf(best):
            continue
        for r in rows.itertuples():
            ratio = r.time_to_target / best if best > 0 else (1.0 if r.time_to_target == 0 else math.inf)
            ratios.append({"task": task, "model": model, "cell": cell_label, "method": r.method,
                           "time_to_target": r.time_to_target, "ratio": ratio})
    ratios = pd.DataFrame(ratios, columns=["task", "model", "cell", "method", "time_to_target", "ratio"])
    scores = []
    for method, rows in ratios.groupby("method", sort=True):
        r = rows["ratio"].to_numpy()
        scores.append({"method": method, "cells": len(r), "best_in": int((r <= 1).sum()),
                       "rho_1": float((r <= 1).mean()), "rho_2": float((r <= 2).mean()),
                       "rho_tau_max": float((r <= tau_max).mean()),
                       "score": float(np.mean(np.clip(tau_max - r, 0, None) / (tau_max - 1)))})
    scores = pd.DataFrame(scores, columns=["method", "cells", "best_in", "rho_1", "rho_2", "rho_tau_max", "score"])
    scores = scores.sort_values(["score", "method"], ascending=[False, True], kind="stable").reset_index(drop=True)
    ratios = ratios.sort_values(["task", "model", "cell", "ratio", "method"], kind="stable").reset_index(drop=True)
    return ratios, scores
