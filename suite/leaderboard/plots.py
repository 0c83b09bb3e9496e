"""Figures, as PNG bytes, that every board draws: accuracy and embedding-norm curves, the
performance profile; and the helpers a study's own figures use (suite/leaderboard/studies/):
figure() for an empty figure, style(i) for the i-th line's look, curves() for a metric over
seeds, to_png() to save.

The bytes are deterministic (no pyplot state, no version stamp), so regenerating over the same
runs rewrites every plot byte for byte.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd


def figure(**kwargs):
    from matplotlib.figure import Figure  # no pyplot: no global backend state, Agg by default on save

    return Figure(layout="constrained", **kwargs)


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})  # no version stamp in the bytes
    if _legend_outside(fig):  # a board's method labels can make a legend wider than the figure: grow to hold it
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None}, bbox_inches="tight")
    return buf.getvalue()


def _legend_outside(fig) -> bool:
    """Whether a legend of the figure, as last drawn, reaches past its edges (the PNG cut it off)."""
    edges = fig.bbox
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return any(
        box.x0 < edges.x0 - 1 or box.x1 > edges.x1 + 1 or box.y0 < edges.y0 - 1 or box.y1 > edges.y1 + 1
        for box in (legend.get_window_extent() for legend in legends)
    )


def style(i: int) -> dict:
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    return {"color": palette[i % 10], "linestyle": ("-", "--", ":", "-.")[(i // 10) % 4]}


def curves(frames: list[pd.DataFrame], column: str):
    """One metric over the seeds: (steps, per-seed values [seeds, steps], median), on the union of
    their steps (step > 0: the x-axis is logarithmic). A seed's values end where its run stopped
    (NaN after), and the median is drawn only while every seed is still running: a run that
    stopped once its target held is never carried on as if it had been measured."""
    frames = [f for f in frames if f is not None and column in f]
    if not frames:
        return None
    steps = sorted(set().union(*(f["step"] for f in frames)))
    values = np.stack(
        [
            f.set_index("step")[column]
            .reindex(steps)
            .ffill()
            .where(pd.Series(steps, index=steps) <= f["step"].max())
            .to_numpy(dtype=float)
            for f in frames
        ]
    )
    steps = np.asarray(steps, dtype=float)
    keep = steps > 0
    steps, values = steps[keep], values[:, keep]
    everyone = ~np.isnan(values).any(0)
    median = np.full(len(steps), np.nan)
    if everyone.any():
        median[everyone] = np.median(values[:, everyone], 0)
    return steps, values, median


def plot_accuracy(title: str, series: list[tuple[str, list]]) -> bytes | None:
    """series: (method label, metric frames of its seeds), in table order."""
    fig = figure(figsize=(11, 4 + 0.25 * len(series)))
    axes = fig.subplots(1, 2, sharey=True)
    drawn = False
    for i, (label, frames) in enumerate(series):
        for ax, column in zip(axes, ("train_acc", "val_acc")):
            c = curves(frames, column)
            if c is None or not len(c[0]):
                continue
            drawn = True
            steps, values, median = c
            for seed in values:
                ax.plot(steps, seed, color=style(i)["color"], linewidth=0.6, alpha=0.35)
            ax.plot(steps, median, label=label if column == "train_acc" else None, **style(i))
    if not drawn:
        return None
    for ax, name in zip(axes, ("train accuracy", "val accuracy")):
        ax.set_xscale("log")
        ax.set_xlabel("step")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: thin = each seed, to where it stopped; thick = median while every seed runs")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return to_png(fig)


def plot_emb_norms(title: str, series: list[tuple[str, list]]) -> bytes | None:
    fig = figure(figsize=(8, 4.5 + 0.25 * len(series)))
    ax = fig.subplots()
    drawn = False
    for i, (label, frames) in enumerate(series):
        for column, dash, name in (("emb_norm_frequent", "-", "frequent"), ("emb_norm_rare", "--", "rare")):
            c = curves(frames, column)
            if c is None or not len(c[0]):
                continue
            drawn = True
            ax.plot(c[0], c[2], color=style(i)["color"], linestyle=dash, label=f"{label} ({name})")
    if not drawn:
        return None
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("mean embedding norm")
    ax.set_title(f"{title}: rare (dashed) vs frequent (solid) tokens, median over seeds while all run")
    ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return to_png(fig)


def plot_profile(ratios: pd.DataFrame, scores: pd.DataFrame, tau_max: float) -> bytes:
    fig = figure(figsize=(9, 4.5 + 0.25 * len(scores)))
    ax = fig.subplots()
    taus = np.linspace(1, tau_max, 301)
    for i, method in enumerate(scores["method"]):
        r = ratios.loc[ratios["method"] == method, "ratio"].to_numpy()
        rho = [(r <= t).mean() for t in taus]
        ax.step(taus, rho, where="post", label=f"{method} (score {scores['score'].iloc[i]:.3f})", **style(i))
    ax.set_xlabel("tau (time to target / best in the cell)")
    ax.set_ylabel("rho(tau): share of its cells within tau")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(1, tau_max)
    ax.grid(alpha=0.3)
    ax.set_title("Performance profile (grok step to target)")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return to_png(fig)
