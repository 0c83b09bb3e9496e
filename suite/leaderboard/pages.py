"""The training runs' pages: one per task and model (per problem: its table, its accuracy and
embedding-norm plots, the registered "table" sections; then the "page" sections), the
performance profile across problems, and what the command prints of them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from suite.leaderboard.collect import ABSENT, Collection
from suite.leaderboard.plots import plot_accuracy, plot_emb_norms, plot_profile
from suite.leaderboard.stats import performance_profile, problem_tables
from suite.leaderboard.studies import Files, Page, Table, registered
from suite.leaderboard.tables import (
    accuracy_text,
    commits_text,
    fmt_value,
    interval_text,
    md_table,
    milestone_text,
    p_text,
    range_text,
    ratio_text,
    settings_text,
    slug,
    steps_text,
    write_csv,
)
from suite.specs.spec import LATER_DEFAULTS, LATER_DEFAULTS_BY_NAME

HEADING = "# Leaderboard: "  # a task/model page's first line: terminal_summary prints those pages
CSV_COLUMNS = [
    "cell",  # the problem's label: a written column, under the name boards have always given it
    "row",
    "method",
    "seeds",
    "grokked",
    "success_rate",
    "touched",
    "collapsed",
    "memorization_median",
    "memorization_min",
    "memorization_max",
    "grok_median",
    "grok_min",
    "grok_max",
    "delay_median",
    "delay_min",
    "delay_max",
    "best_val_median",
    "best_val_min",
    "best_val_max",
    "final_val_median",
    "final_val_min",
    "final_val_max",
    "time_to_target",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "p_value",
    "verdict",
    "baseline",
    "wall_s_median",
    "budget",
    "method_settings",
]


def training_pages(col: Collection, command: str, tau_max: float, files: Files, tuned: bool = False) -> list[str]:
    """Adds the task/model pages and the profile to files; returns what index.md says of them. tuned: a
    tuned board, whose verdicts are tuning.md's alone (against each method's tuned baseline, Holm-adjusted,
    recipe-checked): its pages judge no row against a plain row of their own."""
    table = problem_tables(col, judged=not tuned)
    pages = [
        _pair_page(files, col, task, model, rows, command, tuned)
        for (task, model), rows in table.groupby(["task", "model"], sort=True)
    ]
    ratios, scores = performance_profile(table, tau_max)
    _profile_page(files, ratios, scores, tau_max, command)
    body = [
        [f"[{p['task']} / {p['model']}]({p['name']}.md)", str(p["problems"]), str(p["methods"]), str(p["runs"])]
        for p in pages
    ]
    return [
        f"Budgets: {range_text(sorted(col.runs['budget'].unique()))} steps per run; seeds: "
        f"{', '.join(str(s) for s in sorted(col.runs['seed'].unique()))}.\n",
        md_table(["task / model", "cells", "methods", "runs"], body, right={1, 2, 3}),
        f"Across cells: [performance profile](profile.md) (tau_max {tau_max:g}).\n",
    ]


def terminal_summary(out: Path, written: list[str]) -> list[str]:
    """What `leaderboard` prints: every task/model page's headings and tables, and the paths of
    its accuracy plots (the pages themselves hold the rest), then one sentence of the verdicts found."""
    lines = []
    verdict_rows = []
    for rel in written:
        if not rel.endswith(".md") or "/" in rel:
            continue
        text = (Path(out) / rel).read_text()
        if not text.startswith(HEADING):
            continue
        page = [line for line in text.splitlines() if line.startswith(("#", "|"))]
        # a heading only where a table follows it (sampling sections hold just a plot)
        lines += [
            line
            for i, line in enumerate(page)
            if line.startswith(("|", "# ")) or (i + 1 < len(page) and page[i + 1].startswith("|"))
        ]
        lines += [
            f"plot: {Path(out) / png}"
            for png in written
            if png.startswith(rel[:-3] + "/") and png.endswith(".accuracy.png")
        ]
        lines.append("")
        title = text.splitlines()[0].removeprefix(HEADING)
        verdict_rows += [
            (title, r) for r in pd.read_csv(Path(out) / f"{rel[:-3]}.csv", keep_default_na=False).itertuples()
        ]
    return lines + [closing_sentence(out, written, verdict_rows)]


NAMED = 4  # the faster / slower rows the closing sentence names; the rest it counts


def closing_sentence(out: Path, written: list[str], rows: list) -> str:
    """The verdicts found, in one sentence: a tuned board's one verdict per method (tuning.md), else
    every row judged faster or slower than its baseline, named up to NAMED, and how many were not resolved."""
    if "tuning.md" in written:
        from suite.leaderboard.headline import verdicts, word

        _, methods = verdicts((Path(out) / "tuning.md").read_text())
        if methods:
            said = [
                f"{m['method']} {word(m['verdict'])} ({m['speed-up [95% CI]']}"
                f"{', in ' + m['cells'] + ' only' if m.get('left out', '-') != '-' else ''})"
                for m in methods
            ]
            return f"One verdict per method over every cell (tuning.md), against its tuned baseline: {'; '.join(said)}."
    judged = [
        f"{r.method} {r.verdict} than {r.baseline} in {title}{' ' + r.cell if r.cell else ''} "
        f"({interval_text(float(r.speedup), float(r.speedup_ci_low), float(r.speedup_ci_high))})"
        for title, r in rows
        if r.verdict in ("faster", "slower")
    ]
    unresolved = sum(str(r.verdict).startswith("not resolved") for _, r in rows)
    if not judged and not unresolved:
        return "No verdicts: no row had a plain Adam / AdamW row of its cell to be compared with."
    named = "; ".join(judged[:NAMED]) + (
        f"; and {len(judged) - NAMED} more faster or slower" if len(judged) > NAMED else ""
    )
    rest = f"; {unresolved} row{'s' * (unresolved != 1)} not resolved" if unresolved else ""
    return f"Verdicts: {named}{rest}." if judged else f"Verdicts: none faster or slower than its baseline{rest}."


TABLE_HEADER = (
    "# | method | seeds | success | touched | collapsed | memorization | grok | delay | best val | final val | "
    "time to target | speed-up [95% CI] | p | verdict | baseline | wall s".split(" | ")
)


def _pair_page(
    files: Files, col: Collection, task: str, model: str, rows: pd.DataFrame, command: str, tuned: bool
) -> dict:
    name = slug(f"{task}-{model}", set())
    runs = col.runs[(col.runs["task"] == task) & (col.runs["model"] == model)]
    taken: set = set()
    lines = [
        f"{HEADING}{task} / {model}\n",
        f"Generated by `{command}` from the {len(runs)} result files of this task and model "
        f"(git commits recorded in them: {commits_text(runs['git_commit'])}). "
        "Columns are defined in [index.md](index.md#how-to-read-the-tables).\n",
        "On this tuned board each method is judged in [tuning.md](tuning.md), against its tuned baseline: the "
        "tables below give each row's runs, and no verdict.\n"
        if tuned
        else "",
    ]
    csv_rows = []
    for _, problem_rows in rows.groupby("problem_label", sort=True):
        problem_rows = problem_rows.sort_values("row")
        problem_runs = runs[runs["problem_id"] == problem_rows["problem_id"].iloc[0]]
        label = problem_rows["problem_label"].iloc[0]
        lines += [f"## {label or 'all runs'}\n", _problem_header(col, problem_rows, problem_runs)]
        lines.append(
            md_table(
                TABLE_HEADER,
                [_table_row(r) for r in problem_rows.itertuples()],
                right=set(range(len(TABLE_HEADER))) - {1, 14},
            )
        )
        csv_rows += [_csv_row(r, label) for r in problem_rows.itertuples()]
        table = Table(col, problem_rows, problem_runs, label or f"{task} / {model}")
        images = _table_plots(files, table, f"{name}/{slug(label, taken)}")
        lines.append("\n".join(f"![{alt}]({path})" for alt, path in images) + "\n" if images else "")
    for s in registered("page"):
        for heading, label, suffix, png, text in s.fn(Page(col, rows)):
            path = files.add(f"{name}/{slug(label, taken)}.{suffix}.png", png)
            if path:
                lines.append(f"## {heading}\n\n![{suffix}]({path})\n" + (f"\n{text}" if text else ""))
    files.add(f"{name}.md", "\n".join(line for line in lines if line))
    files.add(f"{name}.csv", write_csv(pd.DataFrame(csv_rows, columns=CSV_COLUMNS)))
    methods, problems = rows["method"].nunique(), rows["problem_id"].nunique()
    return {"name": name, "task": task, "model": model, "problems": problems, "methods": methods, "runs": len(runs)}


def _problem_header(col: Collection, problem_rows: pd.DataFrame, problem_runs: pd.DataFrame) -> str:
    """What a problem's table is of: its settings, budget, evaluations, seeds, targets and commits."""
    settings = col.problems[problem_rows["problem_id"].iloc[0]]
    budget_text = f"Budget {int(problem_rows['budget'].iloc[0])} steps"
    target = settings.get("train.target", 0.99)
    watched = sorted(w for ws in problem_rows["watched_after_grok"] for w in ws)
    if problem_runs["budget"].nunique() > 1:
        budget_text += (
            f" (runs had {range_text(sorted(problem_runs['budget']))}; later milestones count as not reached)"
        )
    return (
        f"Task {settings_text(settings, 'task')}; model {settings_text(settings, 'model')}.  \n"
        f"{budget_text}, evaluated every {range_text(sorted(problem_runs['eval_every']))} steps; "
        f"seeds {', '.join(str(s) for s in sorted(problem_runs['seed'].unique()))}; memorized = train acc >= "
        f"{fmt_value(settings.get('train.memorization'))}, grokked = val acc >= "
        f"{fmt_value(settings.get('train.target'))} held {settings['train.hold']} steps and never below "
        f"{fmt_value(target / 2)} after; "
        + (f"grokked runs watched {range_text(watched)} steps past their grok step" if watched else "no run grokked")
        + f"; commits {commits_text(problem_runs['git_commit'])}.\n"
    )


def _table_row(r) -> list[str]:
    """One row of a problem's table (TABLE_HEADER), from a row of stats.problem_tables."""
    n = r.seeds
    return [
        str(r.row),
        r.method,
        str(n),
        f"{r.grokked}/{n}",
        f"{r.touched}/{n}",
        f"{r.collapsed}/{n}",
        milestone_text(r.memorization_median, r.memorization_min, r.memorization_max, r.memorized, n),
        milestone_text(r.grok_median, r.grok_min, r.grok_max, r.grokked, n),
        milestone_text(r.delay_median, r.delay_min, r.delay_max, r.n_delay, n),
        accuracy_text(r.best_val_median, r.best_val_min, r.best_val_max),
        accuracy_text(r.final_val_median, r.final_val_min, r.final_val_max),
        steps_text(r.time_to_target),
        interval_text(r.speedup, r.speedup_ci_low, r.speedup_ci_high),
        p_text(r.p_value),
        r.verdict or "-",
        "-" if pd.isna(r.baseline_row) else f"#{int(r.baseline_row)}",
        "-" if math.isnan(r.wall_s_median) else f"{r.wall_s_median:.1f}",
    ]


def _csv_row(r, problem_label: str) -> dict:
    columns = {k: getattr(r, k) for k in CSV_COLUMNS if k not in ("cell", "method_settings")}
    # a setting added later, at the value every run had before it, is left out as spec ids leave it out
    later = {f"{kind}.{key}": value for (kind, key), value in LATER_DEFAULTS.items()}
    later |= {
        f"{kind}.{key}": value
        for (kind, name, key), value in LATER_DEFAULTS_BY_NAME.items()
        if r.settings.get(f"{kind}.name") == name
    }
    settings = {k: v for k, v in r.settings.items() if later.get(k, ABSENT) != v}
    return columns | {"cell": problem_label, "method_settings": json.dumps(settings, sort_keys=True)}


def _table_plots(files: Files, table: Table, stem: str) -> list[tuple[str, str]]:
    """Every table's accuracy and embedding-norm curves, then the "table" sections' figures: (alt, path)
    of those drawn."""
    series = table.series()
    figures = [
        ("accuracy", "accuracy", plot_accuracy(table.title, series)),
        ("embedding norms", "emb_norms", plot_emb_norms(table.title, series)),
    ]
    figures += [figure for s in registered("table") for figure in s.fn(table)]
    images = [(alt, files.add(f"{stem}.{suffix}.png", png)) for alt, suffix, png in figures]
    return [(alt, path) for alt, path in images if path]


def profile_table(scores: pd.DataFrame, tau_max: float) -> str:
    """The per-method table of a performance profile (stats.performance_profile's scores)."""
    body = [
        [
            m.method,
            str(m.cells),
            str(m.best_in),
            f"{m.rho_1:.2f}",
            f"{m.rho_2:.2f}",
            f"{m.rho_tau_max:.2f}",
            f"{m.score:.3f}",
        ]
        for m in scores.itertuples()
    ]
    return md_table(
        ["method", "cells", "best in", "rho(1)", "rho(2)", f"rho({tau_max:g})", "score"], body, right={1, 2, 3, 4, 5, 6}
    )


def _profile_page(files: Files, ratios: pd.DataFrame, scores: pd.DataFrame, tau_max: float, command: str) -> None:
    lines = [
        "# Performance profile\n",
        f"Generated by `{command}`. Time to target = median grok step over seeds (failures = inf); "
        f"r = time to target / the best in the cell; rho(tau) = share of a method's cells with r <= tau; "
        f"score = area under rho over [1, {tau_max:g}] / {tau_max - 1:g}. Only cells where two or more methods "
        f"ran and one reached the target take part ({len(ratios.drop_duplicates(['task', 'model', 'cell']))} cells). "
        "See [index.md](index.md#how-to-read-the-tables).\n",
        profile_table(scores, tau_max),
    ]
    if not scores.empty:
        lines.append(f"![performance profile]({files.add('profile.png', plot_profile(ratios, scores, tau_max))})\n")
    lines.append("## Time to target per cell\n")
    body = [
        [f"{r.task} / {r.model}", r.cell or "all runs", r.method, steps_text(r.time_to_target), ratio_text(r.ratio)]
        for r in ratios.itertuples()
    ]
    lines.append(md_table(["task / model", "cell", "method", "time to target", "r"], body, right={3, 4}))
    files.add("profile.md", "\n".join(lines))
    files.add("profile.csv", write_csv(scores.rename(columns={"rho_tau_max": f"rho_{tau_max:g}"})))
    files.add("time_to_target.csv", write_csv(ratios))
