"""Plots of a number-probe run: per-layer curves, and PC1 against the value at the best layer."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from suite.results.rundir import write_atomic  # noqa: E402

PANELS = (
    ("rho", "rho = |Spearman(value, PC1)|"),
    ("beta", "beta (1 log-like, 10 linear)"),
    ("pca_ev", "PCA explained variance (PC1)"),
    ("pls_r2", "PLS R^2 (1 component)"),
)


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_atomic(path, buf.getvalue())


def _series(layers: list[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.array([row["layer"] for row in layers])
    mean = np.array([np.nan if row[key]["mean"] is None else row[key]["mean"] for row in layers])
    std = np.array([np.nan if row[key]["std"] is None else row[key]["std"] for row in layers])
    return x, mean, std


def plot_layers(path: Path, tables: dict[str, list[dict]], title: str) -> None:
    """rho, beta, EV and R^2 against the layer; numbers and letters as two curves (mean +- std)."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for ax, (key, label) in zip(axes.flat, PANELS):
        for name, layers in tables.items():
            x, mean, std = _series(layers, key)
            ax.plot(x, mean, marker=".", label=name)
            ax.fill_between(x, mean - std, mean + std, alpha=0.25)
        if key == "beta":
            ax.set_yscale("log")
            for ref in (1, 10):
                ax.axhline(ref, color="grey", lw=0.8, ls="--")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("layer (0 = embeddings)")
    axes[0, 0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def plot_pc1(path: Path, outputs: dict, pc1_plots: dict, title: str) -> None:
    """PC1 score against the value (log x-axis) at the best layer, first run; one panel per data set.

    The best layer is the best by EV among layers whose PC1 orders the values, else the best by EV.
    """
    fig, axes = plt.subplots(1, len(pc1_plots), figsize=(5.5 * len(pc1_plots), 4.5), squeeze=False)
    for ax, (name, (values, groups, scores)) in zip(axes[0], pc1_plots.items()):
        best = outputs[name]["best"]
        row, rule = (
            (best["by_ev_ordered"], f"best EV with rho >= {best['min_rho']:g}")
            if best["by_ev_ordered"]
            else (best["by_ev"], "best EV")
        )
        layer = row["layer"]
        for g in np.unique(groups):
            ax.scatter(values[groups == g], scores[layer][groups == g], s=12, label=f"group {g}")
        ax.set_xscale("symlog", linthresh=1)  # letters can be worth 0 ('a')

        def fmt(k, row=row):
            return "nan" if row[k]["mean"] is None else f"{row[k]['mean']:.2f}"

        ax.set_title(
            f"{name}: layer {layer} ({rule})\nEV {fmt('pca_ev')}  rho {fmt('rho')}  beta {fmt('beta')}", fontsize=10
        )
        ax.set_xlabel("value" + (" (letters read in base 26)" if name == "letters" else ""))
        ax.set_ylabel("PC1")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)
