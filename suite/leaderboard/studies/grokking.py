"""The grokking studies' figures: the Adam-LR c sweep (embedding lr = c x lr) beside each cell
that sweeps c, and the sampling comparison (how the training pairs are split x sampler x batch
size) at the end of each task/model page that has one."""

from __future__ import annotations

import math

import pandas as pd

from suite.errors import SuiteError
from suite.leaderboard.collect import settings_key
from suite.leaderboard.plots import plot_c_sweep, plot_sampling, plot_split_tokens
from suite.leaderboard.sections import Cell, Page, section
from suite.leaderboard.tables import fmt_value

SPLIT_ORDER = ("uniform", "random", "skewed")  # the modular task's splits, as the sampling plots list them
# `split=skewed` took its present meaning (train and test drawn alike) in the commit that added
# train.hold; earlier runs named other constructions so. A run whose spec has this train setting
# was made by code whose splits are today's, so the token-probability figure can rebuild them.
CURRENT_SPLITS = "hold"


@section("cell")
def c_sweep(cell: Cell) -> list:
    """Rows that differ only in the optimizer's c, two values or more: one line each, labelled by the rest."""
    families: dict = {}
    for r in cell.rows.itertuples():
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
        label = cell.col.method_label(members[0].settings, drop=("opt.c",))
        base = cell.rows.loc[cell.rows["method"] == members[0].baseline, "time_to_target"]
        lines.append((label, df, float(base.iloc[0]) if len(base) else math.nan))
    if not lines:
        return []
    png = plot_c_sweep(cell.title, sorted(lines, key=lambda line: line[0]), int(cell.rows["budget"].iloc[0]))
    return [("c sweep", "c_sweep", png)]


@section("page")
def sampling(page: Page) -> list:
    """Cells that differ only in how the training pairs are drawn (task.split, and task.skew for the
    skewed splits) x methods that differ only in the sampler (name, batch size): one figure per such
    group with two or more combinations, and beside it each split's token probabilities in train
    and test (the paper's Fig. 8), rebuilt by today's task code: only where every run of the group
    was made by code whose splits are today's (see CURRENT_SPLITS)."""
    col, groups, tasks, current = page.col, {}, {}, {}
    for r in page.rows.itertuples():
        cell = col.cells[r.cell_id]
        # The skew is part of the split: the random and uniform splits do not read it.
        where = settings_key({k: v for k, v in cell.items() if k not in ("task.split", "task.skew")})
        split = split_label(cell)
        tasks.setdefault(where, {})[split] = cell
        dirs = col.runs.loc[col.runs["cell_id"] == r.cell_id, "dir"]
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
                "where": col.cell_label(cell, drop=("task.split", "task.skew")),
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


def split_label(cell: dict) -> str:
    """The split's name, with its strength for the skewed splits ("skewed skew=5")."""
    split = str(cell.get("task.split", "-"))
    return (
        f"{split} skew={fmt_value(cell['task.skew'])}" if split.startswith("skewed") and "task.skew" in cell else split
    )


def split_order(cells: dict) -> tuple:
    """The labels of cells (label -> cell) in the plots' order: uniform, random, skewed, then the rest
    by name; a split's strengths in rising order."""

    def key(label):
        split = str(cells[label].get("task.split", "-"))
        rank = SPLIT_ORDER.index(split) if split in SPLIT_ORDER else len(SPLIT_ORDER)
        skew = cells[label].get("task.skew")
        return rank, split, skew if isinstance(skew, (int, float)) and split.startswith("skewed") else 0

    return tuple(sorted(cells, key=key))


def split_tokens(cells: dict) -> list | None:
    """Per split, the operands' value probabilities in the training and test sets of seed 0's split,
    rebuilt from the task's settings; None for a task that is not built from operand pairs, or
    whose settings this version no longer takes (runs of an older suite)."""
    import torch

    from suite.registry import ALL

    out = []
    for split in split_order(cells):
        cell = cells[split]
        settings = {k.removeprefix("task."): v for k, v in cell.items() if k.startswith("task.") and k != "task.name"}
        try:
            data = ALL["task"].get(cell["task.name"]).build(0, **settings)
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
