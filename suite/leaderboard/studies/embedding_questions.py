"""The embedding paper's open questions (arXiv 2505.15624), each drawn only where the runs
measured it:

- "hessian" beside a problem's table whose runs recorded hessian_E / hessian_W (train.hessian_every):
  accuracy above, the top Hessian eigenvalue of the embedding block and of the first weight
  reading it below (the paper's Fig. 7, with seeds);
- "val_by_frequency" beside a problem's table whose runs recorded val accuracy by the next token's
  frequency (val_acc_rare / _middle / _frequent): do rare tokens lag, and do their
  embeddings stay small, as the paper's mechanism predicts;
- "wd_frequency" at the end of a task/model page whose rows differ only in opt.weight_decay
  (three positive values or more): the paper's Sec. 4.1 / 4.3 predictions, an embedding row
  at equilibrium ~ p_i / lambda (so norm x lambda is flat in lambda) and grok time
  >= (1 / lambda) ln(C / eps) (so grok step ~ 1 / lambda, slope 1 on log-log axes); under the
  figure, a table of both slopes with their 95% bootstrap intervals, so a verdict on either
  prediction rests on an interval.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.leaderboard.collect import settings_key
from suite.leaderboard.plots import curves, figure, style, to_png
from suite.leaderboard.speedup import LEVEL, RESAMPLES
from suite.leaderboard.studies import Page, Table, section
from suite.leaderboard.tables import md_table

FREQUENCY_GROUPS = ("rare", "middle", "frequent")  # tasks/zipf_text.py's val_groups


def recorded(series: list[tuple[str, list]], column: str) -> bool:
    return any(f is not None and column in f and f[column].notna().any() for _, frames in series for f in frames)


def draw_band(ax, frames: list, column: str, i: int, label: str | None = None, linestyle: str = "-") -> None:
    """Median over seeds as a line (while every seed runs), min-max over the seeds measured at each
    step as a band, each ending where its runs stopped. Only the records that hold the column
    count: hessian_E is measured every hessian_every evaluations, not in between."""
    frames = [f[["step", column]].dropna() for f in frames if f is not None and column in f]
    c = curves(frames, column)
    if c is None or not len(c[0]):
        return
    steps, values, median = c
    color = style(i)["color"]
    ax.plot(steps, median, color=color, linestyle=linestyle, label=label)
    measured = ~np.isnan(values).all(0)
    ax.fill_between(
        steps[measured],
        np.nanmin(values[:, measured], 0),
        np.nanmax(values[:, measured], 0),
        color=color,
        alpha=0.15,
        linewidth=0,
    )


@section("table")
def hessian_eigenvalues(table: Table) -> list:
    series = table.series()
    if not (recorded(series, "hessian_E") or recorded(series, "hessian_W")):
        return []
    fig = figure(figsize=(8, 7 + 0.25 * len(series)))
    acc, curvature = fig.subplots(2, 1, sharex=True)
    for i, (label, frames) in enumerate(series):
        draw_band(acc, frames, "val_acc", i, label)
        draw_band(acc, frames, "train_acc", i, linestyle=":")
        draw_band(curvature, frames, "hessian_E", i)
        draw_band(curvature, frames, "hessian_W", i, linestyle="--")
    acc.set_title("accuracy: val (solid), train (dotted)")
    curvature.set_title("top Hessian eigenvalue: embedding E (solid), first weight W (dashed)")
    curvature.set_yscale("log")
    curvature.set_xlabel("step")
    for ax in (acc, curvature):
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{table.title}: median over seeds while all run, band = min-max")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return [("Hessian eigenvalues", "hessian", to_png(fig))]


@section("table")
def val_by_frequency(table: Table) -> list:
    series = table.series()
    groups = [g for g in FREQUENCY_GROUPS if recorded(series, f"val_acc_{g}")]
    if not groups:
        return []
    fig = figure(figsize=(4 * len(groups) + 4.5, 4.5 + 0.25 * len(series)))
    axes = fig.subplots(1, len(groups) + 1)
    for i, (label, frames) in enumerate(series):
        for ax, group in zip(axes, groups):
            draw_band(ax, frames, f"val_acc_{group}", i, label if ax is axes[0] else None)
        draw_band(axes[-1], frames, "emb_norm_frequent", i)
        draw_band(axes[-1], frames, "emb_norm_rare", i, linestyle="--")
    for ax, group in zip(axes, groups):
        ax.set_title(f"val accuracy, {group} next tokens")
    for ax in axes[1 : len(groups)]:
        ax.sharey(axes[0])
    axes[-1].set_title("embedding norm\nrare (dashed), frequent (solid)")
    axes[-1].set_yscale("log")  # rare and frequent rows can differ by orders of magnitude
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{table.title}: by token frequency, median over seeds, band = min-max")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return [("val accuracy by token frequency", "val_by_frequency", to_png(fig))]


def log_log_slope(x, y) -> float:
    """Least-squares slope of log y on log x; nan with fewer than two distinct x."""
    x, y = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if len(set(x)) < 2:
        return math.nan
    return float(np.polyfit(x, y, 1)[0])


def slope_interval(x, samples: list) -> tuple[float, float]:
    """95% percentile-bootstrap interval of log_log_slope(x, the medians of samples): each level's
    values (its seeds) resampled on their own and the slope refitted, with speedup.py's resample
    count and seed, so the table is the same on every machine. nan with fewer than two levels."""
    if len(set(x)) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(0)
    medians = np.stack(
        [np.median(np.asarray(s, dtype=float)[rng.integers(0, len(s), (RESAMPLES, len(s)))], axis=1) for s in samples],
        axis=1,
    )
    lx = np.log(np.asarray(x, dtype=float))
    lx = lx - lx.mean()
    ly = np.log(medians)
    slopes = (ly - ly.mean(axis=1, keepdims=True)) @ lx / (lx @ lx)
    tail = (1 - LEVEL) / 2
    lo, hi = np.quantile(slopes, [tail, 1 - tail], method="inverted_cdf")
    return float(lo), float(hi)


def last_value(frame: pd.DataFrame | None, column: str) -> float:
    if frame is None or column not in frame or not frame[column].notna().any():
        return math.nan
    return float(frame[column].dropna().iloc[-1])


def weight_decay_groups(page: Page) -> list[tuple[str, pd.DataFrame]]:
    """Rows that differ only in opt.weight_decay (three positive values or more), grouped by the
    problem and the rest of the method: (label, one row per lambda with the grok stats and the last
    rare-token embedding norm x lambda, median / min / max over seeds), sorted by label."""
    col, groups, labels = page.col, {}, {}
    for r in page.rows.itertuples():
        wd = r.settings.get("opt.weight_decay")
        if not isinstance(wd, (int, float)) or isinstance(wd, bool) or wd <= 0:
            continue
        rest = settings_key({k: v for k, v in r.settings.items() if k != "opt.weight_decay"})
        runs = col.runs[(col.runs["problem_id"] == r.problem_id) & (col.runs["method_id"] == r.method_id)]
        rare = [last_value(col.metrics.get(d), "emb_norm_rare") for d in runs["dir"]]
        frequent = [last_value(col.metrics.get(d), "emb_norm_frequent") for d in runs["dir"]]
        scaled = [v * wd for v in rare if not math.isnan(v)]
        where = col.problem_label(col.problems[r.problem_id])
        labels.setdefault(
            (r.problem_id, rest),
            col.method_label(r.settings, drop=("opt.weight_decay",)) + (f", {where}" if where else ""),
        )
        groups.setdefault((r.problem_id, rest), []).append(
            {
                "wd": float(wd),
                "grok_median": r.grok_median,
                "grok_min": r.grok_min,
                "grok_max": r.grok_max,
                "grokked": r.grokked,
                "seeds": r.seeds,
                "times": r.times,
                "norms_x_wd": scaled,
                "rare_over_frequent": [a / b for a, b in zip(rare, frequent) if b > 0 and not math.isnan(a)],
                "budget": r.budget,
                "norm_x_wd_median": float(np.median(scaled)) if scaled else math.nan,
                "norm_x_wd_min": min(scaled, default=math.nan),
                "norm_x_wd_max": max(scaled, default=math.nan),
            }
        )
    return sorted(
        (
            (labels[key], pd.DataFrame(entries).sort_values("wd", ignore_index=True))
            for key, entries in groups.items()
            if len({e["wd"] for e in entries}) >= 3
        ),
        key=lambda item: item[0],
    )


@section("page")
def weight_decay_x_frequency(page: Page) -> list:
    groups = weight_decay_groups(page)
    if not groups:
        return []
    fig = figure(figsize=(12, 4.8 + 0.25 * len(groups)))
    grok, norm = fig.subplots(1, 2)
    table = []
    for i, (label, df) in enumerate(groups):
        look = style(i)
        ok = df[df["grokked"] > 0]
        # Only rows where every seed grokked: a median over the grokked seeds alone would sit low;
        # a target held from step 0 has no logarithm.
        fit = ok[(ok["grokked"] == ok["seeds"]) & (ok["grok_min"] > 0)]
        slope = log_log_slope(1 / fit["wd"], fit["grok_median"])
        table.append(slopes_row(label, df, fit, slope))
        grok.errorbar(
            1 / ok["wd"],
            ok["grok_median"],
            capsize=3,
            marker="o",
            **look,
            yerr=[ok["grok_median"] - ok["grok_min"], ok["grok_max"] - ok["grok_median"]],
            label=f"{label} (slope {'-' if math.isnan(slope) else f'{slope:.2f}'})",
        )
        failed = df[df["grokked"] == 0]
        grok.plot(1 / failed["wd"], failed["budget"], "o", markerfacecolor="none", color=look["color"], markersize=8)
        for r in df[df["grokked"] < df["seeds"]].itertuples():
            grok.annotate(
                f"{r.grokked}/{r.seeds}",
                (1 / r.wd, r.grok_median if r.grokked else r.budget),
                textcoords="offset points",
                xytext=(0, 7),
                ha="center",
                fontsize="small",
            )
        has = df[df["norm_x_wd_median"].notna()]
        norm.errorbar(
            has["wd"],
            has["norm_x_wd_median"],
            capsize=3,
            marker="o",
            **look,
            yerr=[has["norm_x_wd_median"] - has["norm_x_wd_min"], has["norm_x_wd_max"] - has["norm_x_wd_median"]],
        )
    _label_wd_axes(grok, norm, all(df["norm_x_wd_median"].isna().all() for _, df in groups))
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    text = (
        "Predicted: grok step ~ 1 / lambda (slope 1) and rare-token norm x lambda flat in lambda (slope 0). "
        "Slopes are least-squares fits of the median over seeds on log-log axes, the grok step's only over the "
        "weight decays where every seed grokked; [95% bootstrap interval], each weight decay's seeds resampled "
        "on their own. A prediction is contradicted where its interval excludes it. Last rare / frequent: "
        "each run's last rare-quarter over frequent-quarter embedding norm, median [min, max] over the runs.\n\n"
        + md_table(WD_TABLE_HEADER, table, right={3, 4, 5})
    )
    return [("Weight decay x token frequency", "weight decay", "wd_frequency", to_png(fig), text)]


WD_TABLE_HEADER = [
    "rows",
    "weight decays",
    "grokked",
    "grok step vs 1 / lambda: slope",
    "rare norm x lambda vs lambda: slope",
    "last rare / frequent norm",
]


def slopes_row(label: str, df: pd.DataFrame, fit: pd.DataFrame, grok_slope: float) -> list[str]:
    """A group's line of the weight-decay table: both slopes with their intervals, the norm ratio."""
    normed = df[df["norm_x_wd_median"].notna()]
    norm_slope = log_log_slope(normed["wd"], normed["norm_x_wd_median"])
    ratios = [v for vs in df["rare_over_frequent"] for v in vs]
    return [
        label,
        ", ".join(f"{wd:g}" for wd in df["wd"]),
        ", ".join(f"{g}/{n}" for g, n in zip(df["grokked"], df["seeds"])),
        slope_text(grok_slope, slope_interval(1 / fit["wd"], list(fit["times"]))),
        slope_text(norm_slope, slope_interval(normed["wd"], list(normed["norms_x_wd"]))),
        f"{np.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]" if ratios else "-",
    ]


def slope_text(slope: float, interval: tuple[float, float]) -> str:
    def text(v: float) -> str:
        return f"{round(v, 2) + 0.0:.2f}"  # + 0.0: a flat fit's -1e-17 prints as 0.00, not -0.00

    return "-" if math.isnan(slope) else f"{text(slope)} [{text(interval[0])}, {text(interval[1])}]"


def _label_wd_axes(grok, norm, no_norms: bool) -> None:
    """The weight-decay figure's two panels: titles, labels, log axes; no norms (a model without
    embeddings) leaves the right one empty with a note."""
    grok.set_xlabel("1 / weight decay")
    grok.set_ylabel("grok step (median, bars min-max)")
    grok.set_title(
        "grok step vs 1 / lambda (prediction: slope 1; fitted where every seed grokked)\n"
        "open circle = no seed grokked within the budget",
        fontsize="medium",
    )
    norm.set_xlabel("weight decay lambda")
    norm.set_ylabel("last rare-token embedding norm x lambda")
    norm.set_title("rare-token norm x lambda (prediction: flat, norm ~ p / lambda)", fontsize="medium")
    for ax in (grok, norm):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    if no_norms:
        norm.clear()
        norm.set_axis_off()
        norm.text(0.5, 0.5, "no embedding norms recorded", ha="center", transform=norm.transAxes)
