"""The embedding paper's open questions (arXiv 2505.15624), each drawn only where the runs
measured it:

- "hessian" beside a cell whose runs recorded hessian_E / hessian_W (train.hessian_every):
  accuracy above, the top Hessian eigenvalue of the embedding block and of the first weight
  reading it below (the paper's Fig. 7, with seeds);
- "val_by_frequency" beside a cell whose runs recorded val accuracy by the next token's
  frequency (val_acc_rare / _middle / _frequent): do rare tokens lag, and do their
  embeddings stay small, as the paper's mechanism predicts.
"""

from __future__ import annotations

from suite.leaderboard.plots import _curves, figure, style, to_png
from suite.leaderboard.sections import Cell, section

FREQUENCY_GROUPS = ("rare", "middle", "frequent")  # tasks/zipf_text.py's val_groups


def method_series(cell: Cell) -> list[tuple[str, list]]:
    """(method label, metric frames of its seeds) per row, in table order."""
    return [(r.method, [cell.col.metrics.get(d) for d in cell.runs.loc[cell.runs["method_id"] == r.method_id, "dir"]])
            for r in cell.rows.itertuples()]


def recorded(series: list[tuple[str, list]], column: str) -> bool:
    return any(f is not None and column in f and f[column].notna().any() for _, frames in series for f in frames)


def draw_band(ax, frames: list, column: str, i: int, label: str | None = None, linestyle: str = "-") -> None:
    """Median over seeds as a line, min-max as a band. Only the records that hold the column
    count: hessian_E is measured every hessian_every evaluations, not in between."""
    frames = [f[["step", column]].dropna() for f in frames if f is not None and column in f]
    c = _curves(frames, column)
    if c is None or not len(c[0]):
        return
    color = style(i)["color"]
    ax.plot(c[0], c[1], color=color, linestyle=linestyle, label=label)
    ax.fill_between(c[0], c[2], c[3], color=color, alpha=0.15, linewidth=0)


@section("cell")
def hessian_eigenvalues(cell: Cell) -> list:
    series = method_series(cell)
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
    fig.suptitle(f"{cell.title}: median over seeds, band = min-max")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return [("Hessian eigenvalues", "hessian", to_png(fig))]


@section("cell")
def val_by_frequency(cell: Cell) -> list:
    series = method_series(cell)
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
    for ax in axes[1:len(groups)]:
        ax.sharey(axes[0])
    axes[-1].set_title("embedding norm\nrare (dashed), frequent (solid)")
    axes[-1].set_yscale("log")  # rare and frequent rows can differ by orders of magnitude
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{cell.title}: by token frequency, median over seeds, band = min-max")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return [("val accuracy by token frequency", "val_by_frequency", to_png(fig))]

