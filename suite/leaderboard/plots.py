"""Figures, as PNG bytes: accuracy and embedding-norm curves, the performance profile, and the
studies' plots (Adam-LR c sweep, sampling, number probes). A study's own figure may use the
helpers here: figure() for an empty figure, style(i) for the i-th line's look, to_png() to save.

The bytes are deterministic (no pyplot state, no version stamp), so regenerating over the same
runs rewrites every plot byte for byte.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd

from suite.leaderboard.tables import fmt_value


def figure(**kwargs):
    from matplotlib.figure import Figure  # no pyplot: no global backend state, Agg by default on save

    return Figure(layout="constrained", **kwargs)


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})  # no version stamp in the bytes
    return buf.getvalue()


def style(i: int) -> dict:
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    return {"color": palette[i % 10], "linestyle": ("-", "--", ":", "-.")[(i // 10) % 4]}


def _curves(frames: list[pd.DataFrame], column: str):
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
            c = _curves(frames, column)
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
            c = _curves(frames, column)
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


def _spread(n: int, width: float) -> np.ndarray:
    """Offsets that set n seeds' dots side by side over `width`, so that equal steps stay visible."""
    return np.linspace(-width / 2, width / 2, n) if n > 1 else np.zeros(n)


def _seed_points(ax, xs, times: list[float], top: float, color) -> None:
    """Every seed of one row: a dot at its grok step, an x on the failure line `top` if it never grokked."""
    for x, t in zip(xs, times):
        ax.plot(
            x,
            t if math.isfinite(t) else top,
            "o" if math.isfinite(t) else "x",
            color=color,
            markersize=4 if math.isfinite(t) else 6,
            alpha=0.7,
        )


def plot_c_sweep(title: str, lines: list[tuple[str, pd.DataFrame, float]], budget: int) -> bytes:
    """lines: (label, rows with c, times (each seed's grok step, inf if none) and time_to_target,
    baseline time to target or nan)."""
    fig = figure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    top = budget * 1.5  # the failure line, above the budget on the log axis
    for i, (label, rows, base) in enumerate(lines):
        look = style(i)
        shift = 0.3 * (i - (len(lines) - 1) / 2) / max(len(lines), 1)  # lines side by side, in units of log2(c)
        for r in rows.itertuples():
            _seed_points(
                ax, r.c * 2 ** (shift + _spread(len(r.times), 0.25 / max(len(lines), 1))), r.times, top, look["color"]
            )
        medians = [t if math.isfinite(t) else top for t in rows["time_to_target"]]
        ax.plot(
            rows["c"],
            medians,
            marker="_",
            markersize=14,
            label=label,
            color=look["color"],
            linestyle=look["linestyle"],
            linewidth=1,
        )
        if not math.isnan(base) and not math.isinf(base):
            ax.axhline(base, color=look["color"], linestyle=":", linewidth=1)
    ax.axhline(budget, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    cs = sorted({c for _, rows, _ in lines for c in rows["c"]})
    ax.set_xticks(cs, [fmt_value(c) for c in cs])
    ax.minorticks_off()
    ax.set_yscale("log")
    ax.set_xlabel("c (embedding lr = c x lr)")
    ax.set_ylabel("grok step (held)")
    ax.set_title(
        f"{title}\ndot = a seed's grok step; x = no grok within the {budget}-step budget (grey line);\n"
        "dash = median over seeds (failures as infinity); dotted = plain baseline",
        fontsize="small",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return to_png(fig)


def plot_sampling(title: str, rows: pd.DataFrame, budget: int, split_order: tuple[str, ...]) -> bytes:
    """rows: split, sampler, bs, times (each seed's grok step, inf if none) and time_to_target; one
    panel per sampler, a bar per split over batch sizes up to the median over every seed (a failed
    seed counting as infinity: no bar once half failed), each seed a dot. split_order: the splits
    in the legend's order; others follow by name."""
    from matplotlib.patches import Patch

    samplers = sorted(rows["sampler"].unique())
    fig = figure(figsize=(5 * len(samplers) + 1.5, 4.5))
    axes = fig.subplots(1, len(samplers), sharey=True, squeeze=False)[0]
    splits = sorted(rows["split"].unique(), key=lambda s: (split_order.index(s) if s in split_order else 99, s))
    sizes = sorted(rows["bs"].unique(), key=lambda b: (isinstance(b, str), b if not isinstance(b, str) else 0, str(b)))
    width = 0.8 / len(splits)
    top = budget * 1.08
    for ax, sampler in zip(axes, samplers):
        for r in rows[rows["sampler"] == sampler].itertuples():
            j = splits.index(r.split)
            pos, color = sizes.index(r.bs) - 0.4 + width * (j + 0.5), style(j)["color"]
            if math.isfinite(r.time_to_target):
                ax.bar(pos, r.time_to_target, width, color=color, alpha=0.5)
            _seed_points(ax, pos + _spread(len(r.times), width * 0.6), r.times, top, color)
            grokked = sum(math.isfinite(t) for t in r.times)
            ax.annotate(
                f"{grokked}/{len(r.times)}",
                (pos, top),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                va="bottom",
                rotation=90,
                fontsize="x-small",
            )
        ax.axhline(budget, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(sizes)), [fmt_value(b) for b in sizes])
        ax.set_xlabel("batch size")
        ax.set_title(f"sampler {sampler}")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("grok step (held)")
    axes[0].set_ylim(0, budget * 1.3)
    fig.legend(
        [Patch(color=style(j)["color"]) for j in range(len(splits))],
        [f"split {s}" for s in splits],
        loc="outside right upper",
        fontsize="small",
    )
    fig.suptitle(
        f"{title}\nbar = median over all seeds (failures as infinity); dot = a seed; x = no grok within "
        f"{budget} steps (grey line); k/n = seeds that grokked",
        fontsize="medium",
    )
    return to_png(fig)


def plot_split_tokens(title: str, splits: list[tuple[str, dict]]) -> bytes:
    """The paper's Fig. 8: each split's operand probabilities in the training and the test set.
    splits: (split name, {"train": (p_a, p_b), "test": (p_a, p_b)}), p_x over the operand's values."""
    fig = figure(figsize=(10, 1.2 + 2.2 * len(splits)))
    axes = fig.subplots(len(splits), 2, sharex=True, sharey=True, squeeze=False)
    for row, (split, sets) in zip(axes, splits):
        for ax, which in zip(row, ("train", "test")):
            for i, (operand, probs) in enumerate(zip(("a", "b"), sets[which])):
                ax.plot(np.arange(len(probs)), probs, label=operand, **style(i))
            ax.axhline(1 / len(sets[which][0]), color="grey", linewidth=0.8, linestyle=":")
            ax.set_title(f"split {split}: {which}", fontsize="small")
            ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("probability")
    for ax in axes[-1]:
        ax.set_xlabel("operand value")
    axes[0, 0].legend(fontsize="small")
    fig.suptitle(f"{title}\ntoken probabilities of a and b (dotted: even)", fontsize="medium")
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


def plot_probe(title: str, layers: pd.DataFrame) -> bytes | None:
    measures = [c[: -len("_mean")] for c in layers.columns if c.endswith("_mean")]
    if not measures:
        return None
    ncols = min(4, len(measures))
    nrows = math.ceil(len(measures) / ncols)
    fig = figure(figsize=(4 * ncols, 3.4 * nrows + 0.6))
    axes = fig.subplots(nrows, ncols, squeeze=False).flatten()
    for ax, measure in zip(axes, measures):
        for i, (series, rows) in enumerate(layers.groupby("series", sort=True)):
            mean, std = rows[f"{measure}_mean"].to_numpy(float), rows[f"{measure}_std"].to_numpy(float)
            ax.plot(rows["layer"], mean, marker=".", label=series or None, **style(i))
            ax.fill_between(rows["layer"], mean - std, mean + std, color=style(i)["color"], alpha=0.15, linewidth=0)
        if (
            "beta" in measure
            and (layers[f"{measure}_mean"].dropna() > 0).all()
            and layers[f"{measure}_mean"].notna().any()
        ):
            ax.set_yscale("log")  # beta ~ 1 log-like, ~ 10 linear
        ax.set_title(measure)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
    for ax in axes[len(measures) :]:
        ax.set_axis_off()
    if any(layers["series"] != ""):
        axes[0].legend(fontsize="small")
    fig.suptitle(f"{title}: per layer, mean and band +- std over the probe's runs")
    return to_png(fig)
