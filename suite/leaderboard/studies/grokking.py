"""The grokking studies' figures: the Adam-LR c sweep (embedding lr = c x lr) beside each problem's
table that sweeps c, and the sampling comparison (how the training pairs are split x sampler x batch
size) at the end of each task/model page that has one, with each split's token probabilities;
and their plotters, which no other page draws."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.errors import SuiteError
from suite.leaderboard.collect import settings_key
from suite.leaderboard.plots import figure, style, to_png
from suite.leaderboard.studies import Page, Table, section
from suite.leaderboard.tables import fmt_value

SPLIT_ORDER = ("uniform", "random", "skewed")  # the modular task's splits, as the sampling plots list them
# Runs whose specs hold this train setting were made by task code whose splits are today's; the
# token-probability figure rebuilds a split from today's code, so it draws only for them (older runs
# recorded no code identity to compare: suite/specs/code.py).
CURRENT_SPLITS = "hold"


@section("table")
def c_sweep(table: Table) -> list:
    """Rows that differ only in the optimizer's c, two values or more: one line each, labelled by the rest."""
    families: dict = {}
    for r in table.rows.itertuples():
        if "opt.c" in r.settings and isinstance(r.settings["opt.c"], (int, float)):
            rest = settings_key({k: v for k, v in r.settings.items() if k != "opt.c"})
            families.setdefault(rest, []).append(r)
    lines = []
    for members in families.values():
        if len({m.settings["opt.c"] for m in members}) < 2:
            continue
        df = pd.DataFrame(
            [{"c": m.settings["opt.c"], "times": m.times, "time_to_target": m.time_to_target} for m in members]
        ).sort_values("c")
        label = table.col.method_label(members[0].settings, drop=("opt.c",))
        base = table.rows.loc[table.rows["method"] == members[0].baseline, "time_to_target"]
        lines.append((label, df, float(base.iloc[0]) if len(base) else math.nan))
    if not lines:
        return []
    png = plot_c_sweep(table.title, sorted(lines, key=lambda line: line[0]), int(table.rows["budget"].iloc[0]))
    return [("c sweep", "c_sweep", png)]


@section("page")
def sampling(page: Page) -> list:
    """Problems that differ only in how the training pairs are drawn (task.split, and task.skew for the
    skewed splits) x methods that differ only in the sampler (name, batch size): one figure per such
    group with two or more combinations, and beside it each split's token probabilities in train
    and test (the paper's Fig. 8), rebuilt by today's task code: only where every run of the group
    was made by code whose splits are today's (see CURRENT_SPLITS)."""
    col, groups, tasks, current = page.col, {}, {}, {}
    for r in page.rows.itertuples():
        problem = col.problems[r.problem_id]
        # The skew is part of the split: the random and uniform splits do not read it.
        where = settings_key({k: v for k, v in problem.items() if k not in ("task.split", "task.skew")})
        split = split_label(problem)
        tasks.setdefault(where, {})[split] = problem
        dirs = col.runs.loc[col.runs["problem_id"] == r.problem_id, "dir"]
        current[where] = current.get(where, True) and all(
            CURRENT_SPLITS in col.result_of[d]["spec"]["train"] for d in dirs
        )
        family = settings_key({k: v for k, v in r.settings.items() if not k.startswith("sampler.")})
        groups.setdefault((where, family), []).append(
            {
                "split": split,
                "sampler": r.settings["sampler.name"],
                "bs": r.settings.get("sampler.batch_size", "-"),
                "times": r.times,
                "time_to_target": r.time_to_target,
                "budget": r.budget,
                "family": col.method_label(r.settings, drop=("sampler",)),
                "where": col.problem_label(problem, drop=("task.split", "task.skew")),
            }
        )
    figures = []
    for (where, _), entries in sorted(groups.items(), key=lambda item: label_of(item[1])):
        df = pd.DataFrame(entries)
        if len(df.drop_duplicates(["split", "sampler", "bs"])) < 2:
            continue
        label, order = label_of(entries), split_order(tasks[where])
        figures.append(
            (f"Sampling: {label}", label, "sampling", plot_sampling(label, df, int(df["budget"].min()), order), "")
        )
        if current[where] and (probs := split_tokens(tasks[where])) and len(probs) > 1:
            figures.append(
                (
                    f"Token probabilities by split: {label}",
                    label,
                    "split_tokens",
                    plot_split_tokens(f"{label} (the split of seed 0)", probs),
                    "",
                )
            )
    return figures


def label_of(entries: list) -> str:
    return entries[0]["family"] + (f", {entries[0]['where']}" if entries[0]["where"] else "")


def split_label(problem: dict) -> str:
    """The split's name, with its strength for the skewed splits ("skewed skew=5")."""
    split = str(problem.get("task.split", "-"))
    return (
        f"{split} skew={fmt_value(problem['task.skew'])}"
        if split.startswith("skewed") and "task.skew" in problem
        else split
    )


def split_order(problems: dict) -> tuple:
    """The labels of problems (label -> problem) in the plots' order: uniform, random, skewed, then the rest
    by name; a split's strengths in rising order."""

    def key(label):
        split = str(problems[label].get("task.split", "-"))
        rank = SPLIT_ORDER.index(split) if split in SPLIT_ORDER else len(SPLIT_ORDER)
        skew = problems[label].get("task.skew")
        return rank, split, skew if isinstance(skew, (int, float)) and split.startswith("skewed") else 0

    return tuple(sorted(problems, key=key))


def split_tokens(problems: dict) -> list | None:
    """Per split, the operands' value probabilities in the training and test sets of seed 0's split,
    rebuilt from the task's settings; None for a task that is not built from operand pairs, or
    whose settings this version no longer takes (runs of an older suite)."""
    import torch

    from suite.specs.registry import ALL

    out = []
    for split in split_order(problems):
        problem = problems[split]
        settings = {
            k.removeprefix("task."): v for k, v in problem.items() if k.startswith("task.") and k != "task.name"
        }
        try:
            data = ALL["task"].get(problem["task.name"]).build(0, **settings)
        except (SuiteError, TypeError):
            return None
        if data.kind != "tokens" or data.number_tokens is None or data.x_train.shape[1] != 4:
            return None
        n = len(data.number_tokens)
        sets = {
            which: tuple((torch.bincount(x[:, column], minlength=n)[:n] / len(x)).numpy() for column in (0, 2))
            for which, x in (("train", data.x_train), ("test", data.x_val))
        }
        out.append((split, sets))
    return out


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


def plot_sampling(title: str, rows: pd.DataFrame, budget: int, order: tuple[str, ...]) -> bytes:
    """rows: split, sampler, bs, times (each seed's grok step, inf if none) and time_to_target; one
    panel per sampler, a bar per split over batch sizes up to the median over every seed (a failed
    seed counting as infinity: no bar once half failed), each seed a dot. order: the splits in
    the legend's order (split_order); others follow by name."""
    from matplotlib.patches import Patch

    samplers = sorted(rows["sampler"].unique())
    fig = figure(figsize=(5 * len(samplers) + 1.5, 4.5))
    axes = fig.subplots(1, len(samplers), sharey=True, squeeze=False)[0]
    splits = sorted(rows["split"].unique(), key=lambda s: (order.index(s) if s in order else 99, s))
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
