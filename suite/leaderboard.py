"""Leaderboards from result files: tables (Markdown + CSV), a performance profile, plots.

    python -m suite leaderboard                          # runs/ -> leaderboards/
    python -m suite leaderboard runs/paper --out leaderboards/paper

Everything comes from the run directories the suite writes (result.json, metrics.jsonl),
never from a tracker. The output is a pure function of those files: rows are sorted,
numbers have fixed formats, and headers record the command and the git commits stored in
the results (not the time, not the current commit), so running the command again over the
same runs rewrites every table byte for byte.

Words used in the tables (AlgoPerf's habit, Dahl et al. arXiv 2306.07179):
- cell: a task with all its settings x a model with all its settings x the targets
  (train.memorization, train.target). One section per cell, one file per (task, model).
- method: optimizer + filter + sampler with all their settings, plus the train settings that
  change training (loss, warmup_steps, ...). The budget and evaluation settings (steps,
  eval_every, patience, eval_batch, checkpoint_every, hessian_every) are conditions, not methods.
- budget of a cell: the smallest train.steps among its runs; a milestone after it does not count.
- success: the grok step was reached within the budget.
- time to target: the median grok step over seeds, a seed that failed counting as infinity
  (AlgoPerf's median over studies), so it is inf when at least half the seeds failed.
- baseline of a row: among the cell's plain rows (optimizer adam or adamw, no filter, sampler
  random, epoch or full, loss ce), the one that agrees with the row on the most method
  settings; ties go to the faster baseline (smaller time to target), then to more seeds, then
  to the label. A plain row is its own baseline. speed-up = baseline's time to target / row's.
- performance profile: in every cell where at least two methods ran and one reached the
  target, ratio r = a method's time to target / the best in that cell (inf for a failure);
  rho(tau) = share of the cells a method ran in with r <= tau; score = area under rho over
  [1, tau_max] / (tau_max - 1), so 1 = best everywhere it ran, 0 = never within tau_max.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from suite.registry import SuiteError
from suite.rundir import write_atomic
from suite.spec import spec_id

COMPONENTS = ("opt", "filter", "sampler")
CELL_TRAIN = ("memorization", "target")  # part of the cell: steps to different targets do not compare
CONDITION_TRAIN = ("steps", "eval_every", "patience", "eval_batch", "checkpoint_every", "hessian_every")
BASELINE_OPTS, BASELINE_SAMPLERS = ("adam", "adamw"), ("random", "epoch", "full")
SHORT = {"batch_size": "bs", "weight_decay": "wd"}
TAU_MAX = 4.0  # AlgoPerf's
GENERATED = "generated.txt"  # what the last run wrote, so the next one can drop stale files
SPLIT_ORDER = ("uniform", "random", "skewed")
PROBE_SHOWN = ("pca_ev", "pls_r2", "rho", "beta")  # the paper's columns, in the probes' summary
_ABSENT = ("<absent>",)


# --------------------------------------------------------------------------- collect

def _frozen(value):
    """A JSON value as something hashable, so settings can key groups."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def _key(settings: dict) -> tuple:
    return tuple(sorted(settings.items()))


def _read_metrics(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(lines) if lines else None


@dataclass
class Collection:
    root: Path
    runs: pd.DataFrame  # one row per grokking run
    cells: dict  # cell id -> settings ("task.p": 97, ...)
    methods: dict  # method id -> settings ("opt.name": "adam", ...)
    metrics: dict = field(default_factory=dict)  # run dir -> DataFrame of metrics.jsonl
    probes: list = field(default_factory=list)  # dicts: dir, spec, result

    def __post_init__(self):
        self.method_label, self.cell_label = MethodLabels(self.methods), CellLabels(self.cells)


def collect(root: str | Path) -> Collection:
    """Every result.json under root (recursively), in path order; the same spec found twice counts once."""
    root = Path(root)
    if not root.is_dir():
        raise SuiteError(f"{root}: no such directory of runs")
    rows, cell_ids, method_ids, cells, methods, metrics, probes, seen = [], {}, {}, {}, {}, {}, [], set()
    for path in sorted(root.rglob("result.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise SuiteError(f"{path}: unreadable result file ({err})") from None
        spec = result.get("spec") if isinstance(result, dict) else None
        probe = isinstance(spec, dict) and bool(probe_series(result))  # per-layer scores, no grok step
        needed = ("task", "model", "seed") if probe else ("task", "model", *COMPONENTS, "train", "seed")
        if not isinstance(spec, dict) or not all(k in spec for k in needed):
            raise SuiteError(f"{path}: not a result file of this suite (no full spec)")
        run_id = result.get("run_id") or spec_id(spec)
        if run_id in seen:
            continue
        seen.add(run_id)
        rel = path.parent.relative_to(root).as_posix()
        if probe:
            probes.append({"dir": rel, "spec": spec, "result": result})
            continue
        train = spec["train"]
        cell = {f"{kind}.{k}": _frozen(v) for kind in ("task", "model") for k, v in spec[kind].items()}
        cell |= {f"train.{k}": _frozen(train[k]) for k in CELL_TRAIN if k in train}
        method = {f"{kind}.{k}": _frozen(v) for kind in COMPONENTS for k, v in spec[kind].items()}
        method |= {f"train.{k}": _frozen(v) for k, v in train.items() if k not in CELL_TRAIN + CONDITION_TRAIN}
        cell_id = cell_ids.setdefault(_key(cell), len(cell_ids))
        method_id = method_ids.setdefault(_key(method), len(method_ids))
        cells.setdefault(cell_id, cell)  # in the spec's order, for the headers
        methods.setdefault(method_id, method)
        metrics[rel] = _read_metrics(path.parent / "metrics.jsonl")
        rows.append({
            "dir": rel, "run_id": run_id, "seed": spec["seed"], "task": spec["task"]["name"],
            "model": spec["model"]["name"], "cell_id": cell_id, "method_id": method_id,
            "memorization_step": result.get("memorization_step"), "grok_step": result.get("grok_step"),
            "wall_s": result.get("wall_s"), "budget": train.get("steps"), "eval_every": train.get("eval_every"),
            "git_commit": result.get("git_commit"),
        })
    if not rows and not probes:
        raise SuiteError(f"{root}: no result.json under it")
    runs = pd.DataFrame(rows, columns=["dir", "run_id", "seed", "task", "model", "cell_id", "method_id", "memorization_step",
                                       "grok_step", "wall_s", "budget", "eval_every", "git_commit"])
    return Collection(root, runs, cells, methods, metrics, probes)


# --------------------------------------------------------------------------- labels

def fmt_value(value) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, tuple):
        return ",".join(fmt_value(v) for v in value)
    return str(value)


def _varying(dicts: list[dict]) -> list[str]:
    """Keys whose value differs among dicts (absent counts as a value), in first-seen order."""
    keys = list(dict.fromkeys(k for d in dicts for k in d))
    return [k for k in keys if len({d.get(k, _ABSENT) for d in dicts}) > 1]


def _bare(key: str) -> str:
    name = key.split(".", 1)[1]
    return SHORT.get(name, name)


class MethodLabels:
    """Short unique method names: the optimizer, filter and sampler, each with the settings that
    vary among the collected runs using that same component, then the train settings that vary."""

    def __init__(self, methods: dict):
        settings = list(methods.values())
        self.varying = {}
        for kind in COMPONENTS:
            for name in {m[f"{kind}.name"] for m in settings}:
                same = [{k: v for k, v in m.items() if k.startswith(kind + ".")}
                        for m in settings if m[f"{kind}.name"] == name]
                self.varying[kind, name] = set(_varying(same))
        self.train_varying = [k for k in _varying(settings) if k.startswith("train.")]
        self.sampler_names_vary = len({m["sampler.name"] for m in settings}) > 1

    def __call__(self, m: dict, drop: tuple[str, ...] = ()) -> str:
        """drop: setting keys (opt.c) or whole components (sampler) to leave out."""
        def part(kind):
            shown = " ".join(f"{_bare(k)}={fmt_value(v)}" for k, v in m.items()
                             if k in self.varying[kind, m[f"{kind}.name"]] and k not in drop)
            return f"{m[f'{kind}.name']} {shown}".strip()

        label = part("opt")
        if m["filter.name"] != "none":
            label += " + " + part("filter")
        if "sampler" not in drop and (self.sampler_names_vary or self.varying["sampler", m["sampler.name"]]):
            label += " / " + part("sampler")
        shown = " ".join(f"{_bare(k)}={fmt_value(m[k])}" for k in self.train_varying if k in m and k not in drop)
        return label + (" / " + shown if shown else "")


class CellLabels:
    """Per (task, model): the task / model / target settings that vary among its cells."""

    def __init__(self, cells: dict):
        by_pair = {}
        for c in cells.values():
            by_pair.setdefault((c["task.name"], c["model.name"]), []).append(c)
        self.varying = {pair: _varying(members) for pair, members in by_pair.items()}

    def __call__(self, c: dict, drop: tuple[str, ...] = ()) -> str:
        keys = [k for k in self.varying[c["task.name"], c["model.name"]] if k not in drop]
        bare = [k.split(".", 1)[1] for k in keys]
        names = [b if bare.count(b) == 1 else k for b, k in zip(bare, keys)]
        return " ".join(f"{n}={fmt_value(c.get(k, _ABSENT))}" for n, k in zip(names, keys))


def slug(text: str, taken: set) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("=", "-")).strip("_") or "all"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


# --------------------------------------------------------------------------- numbers

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
            and m["sampler.name"] in BASELINE_SAMPLERS and m.get("train.loss", "ce") == "ce")


def pick_baseline(row_method: dict, candidates: list[dict]) -> dict | None:
    """candidates: summary rows (with 'settings', 'time_to_target', 'seeds', 'method') of plain methods."""
    if not candidates:
        return None

    def rank(c):
        agree = sum(c["settings"].get(k, _ABSENT) == v for k, v in row_method.items())
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


# --------------------------------------------------------------------------- formatting

def steps_text(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf"
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def milestone_text(median: float, lo: float, hi: float, k: int, n: int) -> str:
    if k == 0:
        return "-"
    text = f"{steps_text(median)} [{steps_text(lo)}, {steps_text(hi)}]"
    return text + (f" ({k}/{n})" if k < n else "")


def accuracy_text(median: float, lo: float, hi: float) -> str:
    return "-" if math.isnan(median) else f"{median:.3f} [{lo:.3f}, {hi:.3f}]"


def ratio_text(x: float) -> str:
    if math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.2f}"


def md_table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def commits_text(commits) -> str:
    counts = pd.Series([c[:12] if isinstance(c, str) else "unknown" for c in commits]).value_counts()
    pairs = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{c} ({n} run{'s' if n > 1 else ''})" for c, n in pairs)


def range_text(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def settings_text(settings: dict, kind: str) -> str:
    items = [(k.split(".", 1)[1], v) for k, v in settings.items() if k.startswith(kind + ".")]
    name = dict(items).pop("name")
    rest = " ".join(f"{k}={fmt_value(v)}" for k, v in items if k != "name")
    return f"`{name}` {rest}".strip()


CSV_COLUMNS = ["cell", "row", "method", "seeds", "grokked", "success_rate", "memorization_median", "memorization_min",
               "memorization_max", "grok_median", "grok_min", "grok_max", "delay_median", "delay_min", "delay_max",
               "best_val_median", "best_val_min", "best_val_max", "time_to_target", "speedup", "baseline",
               "wall_s_median", "budget", "method_settings"]


def write_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, float_format="%.6g", lineterminator="\n")
    return buf.getvalue()


# --------------------------------------------------------------------------- plots

def _figure(**kwargs):
    from matplotlib.figure import Figure  # no pyplot: no global backend state, Agg by default on save

    return Figure(layout="constrained", **kwargs)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})  # no version stamp in the bytes
    return buf.getvalue()


def _style(i: int) -> dict:
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    return {"color": palette[i % 10], "linestyle": ("-", "--", ":", "-.")[(i // 10) % 4]}


def _curves(frames: list[pd.DataFrame], column: str):
    """Median and min / max over seeds of one metric, on the union of their steps. A run that
    stopped early (target held) is carried at its last value."""
    frames = [f for f in frames if f is not None and column in f]
    if not frames:
        return None
    steps = sorted(set().union(*(f["step"] for f in frames)))
    values = np.stack([f.set_index("step")[column].reindex(steps).ffill().to_numpy(dtype=float) for f in frames])
    steps = np.asarray(steps, dtype=float)
    keep = steps > 0  # the x-axis is logarithmic
    with warnings.catch_warnings():  # a step no seed reached is all-NaN: its median is NaN, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        return steps[keep], np.nanmedian(values, 0)[keep], np.nanmin(values, 0)[keep], np.nanmax(values, 0)[keep]


def plot_accuracy(title: str, series: list[tuple[str, list]]) -> bytes | None:
    """series: (method label, metric frames of its seeds), in table order."""
    fig = _figure(figsize=(11, 4 + 0.25 * len(series)))
    axes = fig.subplots(1, 2, sharey=True)
    drawn = False
    for i, (label, frames) in enumerate(series):
        for ax, column in zip(axes, ("train_acc", "val_acc")):
            c = _curves(frames, column)
            if c is None or not len(c[0]):
                continue
            drawn = True
            ax.plot(c[0], c[1], label=label if column == "train_acc" else None, **_style(i))
            ax.fill_between(c[0], c[2], c[3], color=_style(i)["color"], alpha=0.15, linewidth=0)
    if not drawn:
        return None
    for ax, name in zip(axes, ("train accuracy", "val accuracy")):
        ax.set_xscale("log")
        ax.set_xlabel("step")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: median over seeds, band = min-max")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return _png(fig)


def plot_emb_norms(title: str, series: list[tuple[str, list]]) -> bytes | None:
    fig = _figure(figsize=(8, 4.5 + 0.25 * len(series)))
    ax = fig.subplots()
    drawn = False
    for i, (label, frames) in enumerate(series):
        for column, style, name in (("emb_norm_frequent", "-", "frequent"), ("emb_norm_rare", "--", "rare")):
            c = _curves(frames, column)
            if c is None or not len(c[0]):
                continue
            drawn = True
            ax.plot(c[0], c[1], color=_style(i)["color"], linestyle=style, label=f"{label} ({name})")
    if not drawn:
        return None
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("mean embedding norm")
    ax.set_title(f"{title}: rare (dashed) vs frequent (solid) tokens, median over seeds")
    ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return _png(fig)


def plot_c_sweep(title: str, lines: list[tuple[str, pd.DataFrame, float]], budget: int) -> bytes:
    """lines: (label, rows with c and the grok stats, baseline time to target or nan)."""
    fig = _figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, (label, rows, base) in enumerate(lines):
        style = _style(i)
        ok = rows[rows["grokked"] > 0]
        ax.errorbar(ok["c"], ok["grok_median"], yerr=[ok["grok_median"] - ok["grok_min"], ok["grok_max"] - ok["grok_median"]],
                    marker="o", capsize=3, label=label, color=style["color"], linestyle=style["linestyle"])
        for r in rows.itertuples():
            if r.grokked < r.seeds:
                y = r.grok_median if r.grokked else budget
                ax.annotate(f"{r.grokked}/{r.seeds}", (r.c, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
        failed = rows[rows["grokked"] == 0]
        ax.plot(failed["c"], [budget] * len(failed), "x", color=style["color"], markersize=9)
        if not math.isnan(base) and not math.isinf(base):
            ax.axhline(base, color=style["color"], linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    cs = sorted({c for _, rows, _ in lines for c in rows["c"]})
    ax.set_xticks(cs, [fmt_value(c) for c in cs])
    ax.minorticks_off()
    ax.set_ylim(0, budget * 1.1)
    ax.set_xlabel("c (embedding lr = c x lr)")
    ax.set_ylabel("grok step (median, bars min-max)")
    ax.set_title(f"{title}\nx = no seed grokked within {budget} steps; dotted = plain baseline", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def plot_sampling(title: str, rows: pd.DataFrame, budget: int) -> bytes:
    """rows: split, sampler, bs and the grok stats; one panel per sampler, bars per split over batch sizes."""
    from matplotlib.patches import Patch

    samplers = sorted(rows["sampler"].unique())
    fig = _figure(figsize=(5 * len(samplers) + 1.5, 4.5))
    axes = fig.subplots(1, len(samplers), sharey=True, squeeze=False)[0]
    splits = sorted(rows["split"].unique(), key=lambda s: (SPLIT_ORDER.index(s) if s in SPLIT_ORDER else 99, s))
    sizes = sorted(rows["bs"].unique(), key=lambda b: (isinstance(b, str), b if not isinstance(b, str) else 0, str(b)))
    width = 0.8 / len(splits)
    for ax, sampler in zip(axes, samplers):
        for r in rows[rows["sampler"] == sampler].itertuples():
            j = splits.index(r.split)
            pos, color = sizes.index(r.bs) - 0.4 + width * (j + 0.5), _style(j)["color"]
            if r.grokked:
                ax.bar(pos, r.grok_median, width, color=color, capsize=2,
                       yerr=[[r.grok_median - r.grok_min], [r.grok_max - r.grok_median]])
            else:
                ax.plot(pos, budget, "x", color=color, markersize=9)
            ax.annotate(f"{r.grokked}/{r.seeds}", (pos, r.grok_median if r.grokked else budget),
                        textcoords="offset points", xytext=(0, 3), ha="center", fontsize="x-small")
        ax.set_xticks(range(len(sizes)), [fmt_value(b) for b in sizes])
        ax.set_xlabel("batch size")
        ax.set_title(f"sampler {sampler}")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("grok step (median, bars min-max)")
    axes[0].set_ylim(0, budget * 1.1)
    fig.legend([Patch(color=_style(j)["color"]) for j in range(len(splits))], [f"split {s}" for s in splits],
               loc="outside right upper", fontsize="small")
    fig.suptitle(f"{title}\nk/n = seeds that grokked; x = none within {budget} steps", fontsize="medium")
    return _png(fig)


def plot_profile(ratios: pd.DataFrame, scores: pd.DataFrame, tau_max: float) -> bytes:
    fig = _figure(figsize=(9, 4.5 + 0.25 * len(scores)))
    ax = fig.subplots()
    taus = np.linspace(1, tau_max, 301)
    for i, method in enumerate(scores["method"]):
        r = ratios.loc[ratios["method"] == method, "ratio"].to_numpy()
        rho = [(r <= t).mean() for t in taus]
        ax.step(taus, rho, where="post", label=f"{method} (score {scores['score'].iloc[i]:.3f})", **_style(i))
    ax.set_xlabel("tau (time to target / best in the cell)")
    ax.set_ylabel("rho(tau): share of its cells within tau")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(1, tau_max)
    ax.grid(alpha=0.3)
    ax.set_title("Performance profile (grok step to target)")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return _png(fig)


def plot_probe(title: str, layers: pd.DataFrame) -> bytes | None:
    measures = [c[: -len("_mean")] for c in layers.columns if c.endswith("_mean")]
    if not measures:
        return None
    ncols = min(4, len(measures))
    nrows = math.ceil(len(measures) / ncols)
    fig = _figure(figsize=(4 * ncols, 3.4 * nrows + 0.6))
    axes = fig.subplots(nrows, ncols, squeeze=False).flatten()
    for ax, measure in zip(axes, measures):
        for i, (series, rows) in enumerate(layers.groupby("series", sort=True)):
            mean, std = rows[f"{measure}_mean"].to_numpy(float), rows[f"{measure}_std"].to_numpy(float)
            ax.plot(rows["layer"], mean, marker=".", label=series or None, **_style(i))
            ax.fill_between(rows["layer"], mean - std, mean + std, color=_style(i)["color"], alpha=0.15, linewidth=0)
        if "beta" in measure and (layers[f"{measure}_mean"].dropna() > 0).all() and layers[f"{measure}_mean"].notna().any():
            ax.set_yscale("log")  # beta ~ 1 log-like, ~ 10 linear
        ax.set_title(measure)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
    for ax in axes[len(measures):]:
        ax.set_axis_off()
    if any(layers["series"] != ""):
        axes[0].legend(fontsize="small")
    fig.suptitle(f"{title}: per layer, mean and band +- std over the probe's runs")
    return _png(fig)


# --------------------------------------------------------------------------- probes

def probe_series(result: dict) -> dict:
    """A number probe's outputs: {data set: {"layers": [...], "best": {...}}}. The probe runner
    writes one such entry per data set (numbers, letters); a bare top-level `layers` is one series."""
    if isinstance(result.get("layers"), list):
        return {"": {"layers": result["layers"], "best": result.get("best")}}
    return {k: v for k, v in sorted(result.items()) if isinstance(v, dict) and isinstance(v.get("layers"), list)}


def _mean_std(value) -> tuple[float, float]:
    """A per-layer measure: {"mean", "std"} (null = undefined) or a bare number."""
    if isinstance(value, dict):
        return tuple(math.nan if value.get(k) is None else float(value[k]) for k in ("mean", "std"))
    return float(value), math.nan


def probe_layers(result: dict) -> pd.DataFrame:
    """Rows (series, layer, <measure>_mean, <measure>_std), in the order the probe wrote its measures."""
    rows = []
    for name, series in probe_series(result).items():
        for i, entry in enumerate(series["layers"]):
            row = {"series": name, "layer": entry.get("layer", i)}
            for k, v in entry.items():
                if k != "layer" and (isinstance(v, dict) and "mean" in v or isinstance(v, (int, float)) and not isinstance(v, bool)):
                    row[f"{k}_mean"], row[f"{k}_std"] = _mean_std(v)
            rows.append(row)
    return pd.DataFrame(rows)


def best_text(row) -> str:
    """A best-layer entry (a layer's row, or null) in a few words."""
    if not isinstance(row, dict) or "layer" not in row:
        return "-" if row is None else fmt_value(_frozen(row))
    shown = [f"{k} {_mean_std(v)[0]:.2f}" for k, v in row.items() if k in PROBE_SHOWN and not math.isnan(_mean_std(v)[0])]
    return f"layer {row['layer']}" + (f" ({', '.join(shown)})" if shown else "")


# --------------------------------------------------------------------------- write

class Output:
    """Writes under out/, remembering every file, and drops what the previous run wrote but this one did not."""

    def __init__(self, out: Path):
        self.out, self.written = out, []

    def write(self, rel: str, data: bytes | str | None) -> str | None:
        if data is None:
            return None
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
        self.written.append(rel)
        return rel

    def finish(self) -> None:
        listing = self.out / GENERATED
        old = listing.read_text().split() if listing.exists() else []
        for rel in sorted(set(old) - set(self.written)):
            path = (self.out / rel).resolve()
            if self.out.resolve() in path.parents and path.is_file():
                path.unlink()
                for parent in path.parents:
                    if parent == self.out.resolve() or any(parent.iterdir()):
                        break
                    parent.rmdir()
        write_atomic(listing, "".join(f"{rel}\n" for rel in sorted(self.written)))


DEFINITIONS = """\
## How to read the tables

- **cell**: a task with all its settings x a model with all its settings x the targets. Each
  section lists the cell's full settings, its budget (steps per run; the smallest train.steps
  of its runs: a milestone after it does not count), how often it was evaluated, its seeds
  and the git commits recorded in its results.
- **method**: optimizer + filter + sampler with their settings, plus train settings that
  change training (loss, warmup). Labels show the settings that vary among the collected runs.
- **memorization / grok / delay**: first evaluated step with train acc >= the memorization
  threshold / val acc >= the target, and grok - memorization: median over the seeds that
  reached it, [min, max] over the same seeds, (k/n) when only k of n seeds reached it.
- **success**: seeds that grokked within the budget / seeds.
- **best val**: each seed's highest evaluated val accuracy within the budget: median [min, max]
  over the seeds. Where nothing groks (one-hot inputs, text) it says how far the runs got.
- **time to target**: median grok step over all seeds, a seed that failed counting as
  infinity (AlgoPerf), so `inf` when at least half the seeds failed.
- **speed-up**: the baseline row's time to target / this row's (`inf`: only this row reached
  the target; `0.00`: only the baseline did; `-`: neither). The **baseline** (`#k`) is,
  among the cell's plain rows (adam or adamw, no filter, sampler random / epoch / full,
  loss ce), the one that agrees with the row on the most method settings; ties go to the
  faster baseline, then more seeds, then the label. A plain row is its own baseline.
- **wall s**: median wall-clock seconds of the whole run (to its stop, not to the target),
  taken under whatever else shared the machine.
- **performance profile**: in each cell where at least two methods ran and one reached the
  target, r = time to target / the cell's best (inf for a failure). rho(tau) = share of the
  cells a method ran in with r <= tau; **score** = area under rho over [1, tau_max] /
  (tau_max - 1): 1 = best in every cell it ran in, 0 = never within tau_max of the best.
"""


def generate(root: str | Path = "runs", out: str | Path = "leaderboards", tau_max: float | None = None) -> list[str]:
    """Write every table and plot for the runs under root into out; returns the files written."""
    tau_max = TAU_MAX if tau_max is None else tau_max
    if not tau_max > 1:
        raise SuiteError(f"tau_max must be > 1, got {tau_max}")
    col = collect(root)
    out = Path(out)
    command = f"python -m suite leaderboard {os.path.normpath(str(root))}" + (
        f" --tau-max {tau_max:g}" if tau_max != TAU_MAX else "")
    writer = Output(out)
    pages = []
    if not col.runs.empty:
        table = cell_tables(col)
        for (task, model), rows in table.groupby(["task", "model"], sort=True):
            pages.append(_write_pair(writer, col, task, model, rows, command))
        ratios, scores = performance_profile(table, tau_max)
        _write_profile(writer, ratios, scores, tau_max, command)
    probe_page = _write_probes(writer, col, command) if col.probes else None
    _write_index(writer, col, pages, probe_page, command, tau_max)
    writer.finish()
    return writer.written


def terminal_summary(out: Path, written: list[str]) -> list[str]:
    """What `leaderboard` prints: every task/model page's headings and tables, and the paths of
    its accuracy plots (the pages themselves hold the rest)."""
    lines = []
    for rel in written:
        if rel.endswith(".md") and "/" not in rel and rel not in ("index.md", "profile.md", "probes.md"):
            page = [line for line in (Path(out) / rel).read_text().splitlines() if line.startswith(("#", "|"))]
            # a heading only where a table follows it (sampling sections hold just a plot)
            lines += [line for i, line in enumerate(page)
                      if line.startswith(("|", "# ")) or (i + 1 < len(page) and page[i + 1].startswith("|"))]
            lines += [f"plot: {Path(out) / png}" for png in written
                      if png.startswith(rel[:-3] + "/") and png.endswith(".accuracy.png")]
            lines.append("")
    return lines


def _write_pair(writer: Output, col: Collection, task: str, model: str, rows: pd.DataFrame, command: str) -> dict:
    name = slug(f"{task}-{model}", set())
    runs = col.runs[(col.runs["task"] == task) & (col.runs["model"] == model)]
    taken: set = set()
    lines = [f"# Leaderboard: {task} / {model}\n",
             f"Generated by `{command}` from the {len(runs)} result files of this task and model "
             f"(git commits recorded in them: {commits_text(runs['git_commit'])}). "
             "Columns are defined in [index.md](index.md#how-to-read-the-tables).\n"]
    csv_rows = []
    for _, cell_rows in rows.groupby("cell_label", sort=True):
        cell_rows = cell_rows.sort_values("row")
        cell_id = cell_rows["cell_id"].iloc[0]
        cell_runs = runs[runs["cell_id"] == cell_id]
        label = cell_rows["cell_label"].iloc[0]
        settings = col.cells[cell_id]
        budget = int(cell_rows["budget"].iloc[0])
        lines.append(f"## {label or 'all runs'}\n")
        budget_text = f"Budget {budget} steps"
        if cell_runs["budget"].nunique() > 1:
            budget_text += f" (runs had {range_text(sorted(cell_runs['budget']))}; later milestones count as not reached)"
        lines.append(
            f"Task {settings_text(settings, 'task')}; model {settings_text(settings, 'model')}.  \n"
            f"{budget_text}, evaluated every {range_text(sorted(cell_runs['eval_every']))} steps; "
            f"seeds {', '.join(str(s) for s in sorted(cell_runs['seed'].unique()))}; memorized = train acc >= "
            f"{fmt_value(settings.get('train.memorization'))}, grokked = val acc >= {fmt_value(settings.get('train.target'))}; "
            f"commits {commits_text(cell_runs['git_commit'])}.\n")
        body = []
        for r in cell_rows.itertuples():
            body.append([str(r.row), r.method, str(r.seeds), f"{r.grokked}/{r.seeds}",
                         milestone_text(r.memorization_median, r.memorization_min, r.memorization_max, r.memorized, r.seeds),
                         milestone_text(r.grok_median, r.grok_min, r.grok_max, r.grokked, r.seeds),
                         milestone_text(r.delay_median, r.delay_min, r.delay_max, r.n_delay, r.seeds),
                         accuracy_text(r.best_val_median, r.best_val_min, r.best_val_max),
                         steps_text(r.time_to_target), ratio_text(r.speedup),
                         f"#{r.baseline_row}" if r.baseline_row else "-",
                         "-" if math.isnan(r.wall_s_median) else f"{r.wall_s_median:.1f}"])
            csv_rows.append({**{k: getattr(r, k) for k in CSV_COLUMNS if k not in ("cell", "method_settings")},
                             "cell": label, "method_settings": json.dumps(r.settings, sort_keys=True)})
        lines.append(md_table(["#", "method", "seeds", "success", "memorization", "grok", "delay", "best val",
                               "time to target", "speed-up", "baseline", "wall s"], body, right=set(range(12)) - {1}))
        images = _cell_plots(writer, col, name, slug(label, taken), label or f"{task} / {model}", cell_rows, cell_runs)
        lines.append("\n".join(f"![{what}]({path})" for what, path in images) + "\n" if images else "")
    for group_label, path in _sampling_plots(writer, col, name, rows, taken):
        lines.append(f"## Sampling: {group_label}\n\n![sampling]({path})\n")
    writer.write(f"{name}.md", "\n".join(line for line in lines if line))
    writer.write(f"{name}.csv", write_csv(pd.DataFrame(csv_rows, columns=CSV_COLUMNS)))
    return {"name": name, "task": task, "model": model, "cells": rows["cell_id"].nunique(),
            "methods": rows["method"].nunique(), "runs": len(runs)}


def _frames(col: Collection, runs: pd.DataFrame, method_id: int) -> list:
    return [col.metrics.get(d) for d in runs.loc[runs["method_id"] == method_id, "dir"]]


def _cell_plots(writer, col, pair, cell_slug, title, cell_rows, cell_runs) -> list[tuple[str, str]]:
    series = [(r.method, _frames(col, cell_runs, r.method_id)) for r in cell_rows.itertuples()]
    images = [("accuracy", writer.write(f"{pair}/{cell_slug}.accuracy.png", plot_accuracy(title, series))),
              ("embedding norms", writer.write(f"{pair}/{cell_slug}.emb_norms.png", plot_emb_norms(title, series)))]
    lines = _c_sweep_lines(col, cell_rows)
    if lines:
        images.append(("c sweep", writer.write(f"{pair}/{cell_slug}.c_sweep.png",
                                               plot_c_sweep(title, lines, int(cell_rows["budget"].iloc[0])))))
    return [(what, path) for what, path in images if path]


def _c_sweep_lines(col: Collection, cell_rows: pd.DataFrame) -> list:
    """Rows that differ only in the optimizer's c, two values or more: one line each, labelled by the rest."""
    families: dict = {}
    for r in cell_rows.itertuples():
        if "opt.c" in r.settings and isinstance(r.settings["opt.c"], (int, float)):
            rest = _key({k: v for k, v in r.settings.items() if k != "opt.c"})
            families.setdefault(rest, []).append(r)
    lines = []
    for members in families.values():
        if len({m.settings["opt.c"] for m in members}) < 2:
            continue
        df = pd.DataFrame([{"c": m.settings["opt.c"], "grok_median": m.grok_median, "grok_min": m.grok_min,
                            "grok_max": m.grok_max, "grokked": m.grokked, "seeds": m.seeds} for m in members]).sort_values("c")
        label = col.method_label(members[0].settings, drop=("opt.c",))
        base = cell_rows.loc[cell_rows["method"] == members[0].baseline, "time_to_target"]
        lines.append((label, df, float(base.iloc[0]) if len(base) else math.nan))
    return sorted(lines, key=lambda line: line[0])


def _sampling_plots(writer, col, pair, rows, taken) -> list[tuple[str, str]]:
    """Cells that differ only in how the training pairs are drawn (task.split) x methods that differ
    only in the sampler (name, batch size): one figure per such group with two or more combinations."""
    groups: dict = {}
    for r in rows.itertuples():
        cell = col.cells[r.cell_id]
        where = _key({k: v for k, v in cell.items() if k != "task.split"})
        family = _key({k: v for k, v in r.settings.items() if not k.startswith("sampler.")})
        groups.setdefault((where, family), []).append(
            {"split": str(cell.get("task.split", "-")), "sampler": r.settings["sampler.name"],
             "bs": r.settings.get("sampler.batch_size", "-"), "grok_median": r.grok_median, "grok_min": r.grok_min,
             "grok_max": r.grok_max, "grokked": r.grokked, "seeds": r.seeds, "budget": r.budget,
             "family": col.method_label(r.settings, drop=("sampler",)),
             "where": col.cell_label(cell, drop=("task.split",))})
    out = []
    for (where, family), entries in groups.items():
        df = pd.DataFrame(entries)
        if len(df.drop_duplicates(["split", "sampler", "bs"])) < 2:
            continue
        label = entries[0]["family"] + (f", {entries[0]['where']}" if entries[0]["where"] else "")
        out.append((label, df))
    paths = []
    for label, df in sorted(out, key=lambda item: item[0]):
        path = writer.write(f"{pair}/{slug(label, taken)}.sampling.png", plot_sampling(label, df, int(df["budget"].min())))
        paths.append((label, path))
    return paths


def _write_profile(writer: Output, ratios: pd.DataFrame, scores: pd.DataFrame, tau_max: float, command: str) -> None:
    lines = ["# Performance profile\n",
             f"Generated by `{command}`. Time to target = median grok step over seeds (failures = inf); "
             f"r = time to target / the best in the cell; rho(tau) = share of a method's cells with r <= tau; "
             f"score = area under rho over [1, {tau_max:g}] / {tau_max - 1:g}. Only cells where two or more methods "
             f"ran and one reached the target take part ({len(ratios.drop_duplicates(['task', 'model', 'cell']))} cells). "
             "See [index.md](index.md#how-to-read-the-tables).\n"]
    body = [[m.method, str(m.cells), str(m.best_in), f"{m.rho_1:.2f}", f"{m.rho_2:.2f}", f"{m.rho_tau_max:.2f}",
             f"{m.score:.3f}"] for m in scores.itertuples()]
    lines.append(md_table(["method", "cells", "best in", "rho(1)", "rho(2)", f"rho({tau_max:g})", "score"], body,
                          right={1, 2, 3, 4, 5, 6}))
    if not scores.empty:
        lines.append(f"![performance profile]({writer.write('profile.png', plot_profile(ratios, scores, tau_max))})\n")
    lines.append("## Time to target per cell\n")
    body = [[f"{r.task} / {r.model}", r.cell or "all runs", r.method, steps_text(r.time_to_target), ratio_text(r.ratio)]
            for r in ratios.itertuples()]
    lines.append(md_table(["task / model", "cell", "method", "time to target", "r"], body, right={3, 4}))
    writer.write("profile.md", "\n".join(lines))
    writer.write("profile.csv", write_csv(scores.rename(columns={"rho_tau_max": f"rho_{tau_max:g}"})))
    writer.write("time_to_target.csv", write_csv(ratios))


def _write_probes(writer: Output, col: Collection, command: str) -> str:
    probes = sorted(col.probes, key=lambda p: p["dir"])
    lines = ["# Number-representation probes\n",
             f"Generated by `{command}` from {len(probes)} probe result files "
             f"(git commits recorded in them: {commits_text([p['result'].get('git_commit') for p in probes])}). "
             "Per layer: mean +- std over the probe's runs; best layers as the probe chose them.\n"]
    summary, sections, frames, taken = [], [], [], set()
    for probe in probes:
        spec, result = probe["spec"], probe["result"]
        title = f"{spec['task']['name']} / {spec['model']['name']} seed {spec['seed']}"
        for name, series in probe_series(result).items():
            best = series.get("best") if isinstance(series.get("best"), dict) else {}
            summary.append([f"`{probe['dir']}`", spec["model"]["name"], name or "-",
                            "; ".join(f"{k}: {best_text(v)}" for k, v in best.items()) or "-"])
        layers = probe_layers(result)
        sections.append(f"## {title}\n")
        sections.append(f"Run `{probe['dir']}`. Task {settings_text({f'task.{k}': _frozen(v) for k, v in spec['task'].items()}, 'task')}; "
                        f"model {settings_text({f'model.{k}': _frozen(v) for k, v in spec['model'].items()}, 'model')}.\n")
        if layers.empty:
            continue
        measures = [c[: -len("_mean")] for c in layers.columns if c.endswith("_mean")]
        body = [[r["series"] or "-", fmt_value(r["layer"])] + [
            "-" if math.isnan(r[f"{m}_mean"]) else f"{r[f'{m}_mean']:.3f}" + (
                "" if math.isnan(r[f"{m}_std"]) else f" +- {r[f'{m}_std']:.3f}") for m in measures]
            for _, r in layers.iterrows()]
        sections.append(md_table(["data", "layer", *measures], body, right=set(range(1, len(measures) + 2))))
        path = writer.write(f"probes/{slug(probe['dir'], taken)}.layers.png", plot_probe(title, layers))
        if path:
            sections.append(f"![per layer]({path})\n")
        frames.append(layers.assign(run=probe["dir"], task=spec["task"]["name"], model=spec["model"]["name"]))
    lines.append(md_table(["run", "model", "data", "best layers"], summary, right=set()))
    writer.write("probes.md", "\n".join(lines + sections))
    if frames:
        df = pd.concat(frames, ignore_index=True)
        first = ["run", "task", "model", "series", "layer"]
        writer.write("probes.csv", write_csv(df[first + [c for c in df.columns if c not in first]]))
    return "probes.md"


def _write_index(writer: Output, col: Collection, pages: list, probe_page: str | None, command: str, tau_max: float) -> None:
    commits = list(col.runs["git_commit"]) + [p["result"].get("git_commit") for p in col.probes]
    lines = ["# Leaderboards\n",
             f"Generated by `{command}` from {len(col.runs) + len(col.probes)} result files "
             f"(git commits recorded in them: {commits_text(commits)}). Regenerate with the same command; "
             "every number comes from those files.\n"]
    if pages:
        budgets = sorted(col.runs["budget"].unique())
        lines.append(f"Budgets: {range_text(budgets)} steps per run; seeds: "
                     f"{', '.join(str(s) for s in sorted(col.runs['seed'].unique()))}.\n")
        body = [[f"[{p['task']} / {p['model']}]({p['name']}.md)", str(p["cells"]), str(p["methods"]), str(p["runs"])]
                for p in pages]
        lines.append(md_table(["task / model", "cells", "methods", "runs"], body, right={1, 2, 3}))
        lines.append(f"Across cells: [performance profile](profile.md) (tau_max {tau_max:g}).\n")
    if probe_page:
        lines.append(f"Number-representation probes: [{probe_page}]({probe_page}).\n")
    lines.append(DEFINITIONS)
    writer.write("index.md", "\n".join(lines))
