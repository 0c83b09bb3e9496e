"""The embedding paper's sections (suite/leaderboard/studies/embedding_questions.py): each figure
is drawn from the columns it needs, and only where the runs recorded them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from suite.leaderboard import generate
from suite.leaderboard.collect import collect
from suite.leaderboard.stats import problem_tables
from suite.leaderboard.studies import Page, Table
from suite.leaderboard.studies import embedding_questions as study

STEPS, EVERY = 1000, 100


def write_run(
    root: Path,
    seed: int,
    opt: str = "adam",
    wd: float = 1e-3,
    grok_step: int | None = 300,
    extra=lambda step, seed: {},
    task: dict | None = None,
    model: dict | None = None,
) -> None:
    """A synthetic training run: spec, result and one metrics record per evaluation (and one at
    the grok step), the record's extra columns given by extra(step, seed); task and model: settings
    beside the defaults."""
    spec = {
        "task": {"name": "modular", "p": 23, **(task or {})},
        "model": {"name": "mlp", **(model or {})},
        "opt": {"name": opt, "lr": 0.001, "weight_decay": wd},
        "filter": {"name": "none"},
        "sampler": {"name": "random", "batch_size": 64},
        "train": {"steps": STEPS, "eval_every": EVERY, "memorization": 0.99, "target": 0.95, "hold": 0},
        "seed": seed,
    }
    problem = "".join(f"-{k}{v}" for k, v in {**(task or {}), **(model or {})}.items())
    run = root / f"{opt}-wd{wd:g}{problem}" / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps(spec))
    (run / "result.json").write_text(
        json.dumps(
            {
                "spec": spec,
                "runner": "train",
                "memorization_step": 100,
                "grok_step": grok_step,
                "wall_s": 1.0,
                "git_commit": "a" * 40,
            }
        )
    )
    records = [
        {
            "step": s,
            "train_acc": min(1.0, s / 200),
            "val_acc": 1.0 if grok_step and s >= grok_step else 0.1,
            "emb_norm_rare": 1.0,
            "emb_norm_frequent": 2.0,
            **extra(s, seed),
        }
        for s in sorted(set(range(0, STEPS + 1, EVERY)) | ({grok_step} if grok_step else set()))
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def one_table(root: Path) -> Table:
    col = collect(root)
    rows = problem_tables(col).sort_values("row")
    return Table(col, rows, col.runs, "test problem")


@pytest.fixture
def figures(monkeypatch):
    """Sections return the matplotlib figure instead of its PNG, so a test can read what was drawn."""
    monkeypatch.setattr(study, "to_png", lambda fig: fig)


def hessian_every_other(step, seed):
    # measured every second evaluation, as train.hessian_every=2 writes it
    return {"hessian_E": 10.0 * (seed + 1), "hessian_W": 1.0} if step % (2 * EVERY) == 0 else {}


def test_hessian_figure_is_written_only_where_the_runs_measured_it(tmp_path):
    for seed in (0, 1, 2):
        write_run(tmp_path / "runs", seed, extra=hessian_every_other)
        write_run(tmp_path / "runs", seed, opt="adamlr", extra=hessian_every_other)
        write_run(tmp_path / "plain", seed)
    written = generate(tmp_path / "runs", tmp_path / "out")
    assert "modular-mlp/all.hessian.png" in written
    assert (tmp_path / "out/modular-mlp/all.hessian.png").read_bytes().startswith(b"\x89PNG")
    assert "![Hessian eigenvalues](modular-mlp/all.hessian.png)" in (tmp_path / "out/modular-mlp.md").read_text()
    assert not any(f.endswith(("val_by_frequency.png", "wd_frequency.png")) for f in written)
    assert not any(f.endswith("hessian.png") for f in generate(tmp_path / "plain", tmp_path / "plain_out"))


def test_hessian_draws_the_median_and_band_over_seeds_of_the_measured_steps(tmp_path, figures):
    for seed in (0, 1, 2):
        write_run(tmp_path, seed, extra=hessian_every_other)
    fig = study.hessian_eigenvalues(one_table(tmp_path))[0][2]
    acc, curvature = fig.axes[:2]
    assert curvature.get_yscale() == "log"
    hessian_e = curvature.lines[0]
    assert list(hessian_e.get_xdata()) == [200, 400, 600, 800, 1000]  # not the steps in between
    assert list(hessian_e.get_ydata()) == [20.0] * 5  # median of 10, 20, 30
    band = curvature.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == 10.0 and band.max() == 30.0
    assert [line.get_label() for line in acc.lines][0] == "adam"


def frequency_groups(step, seed):
    return {
        "val_acc_rare": step / 2000 + seed / 100,
        "val_acc_middle": step / 1500,
        "val_acc_frequent": step / 1000,
        "emb_norm_rare": 0.5,
        "emb_norm_frequent": 1.5,
    }


def test_val_by_frequency_is_written_only_where_the_runs_recorded_the_groups(tmp_path):
    for seed in (0, 1):
        write_run(tmp_path / "runs", seed, extra=frequency_groups)
        write_run(tmp_path / "plain", seed)
    written = generate(tmp_path / "runs", tmp_path / "out")
    assert "modular-mlp/all.val_by_frequency.png" in written
    assert "modular-mlp/all.hessian.png" not in written
    assert not any(f.endswith("val_by_frequency.png") for f in generate(tmp_path / "plain", tmp_path / "plain_out"))


def test_val_by_frequency_has_a_panel_per_group_and_the_rare_vs_frequent_norms(tmp_path, figures):
    for seed in (0, 1, 2):
        write_run(tmp_path, seed, extra=frequency_groups)
    fig = study.val_by_frequency(one_table(tmp_path))[0][2]
    rare, middle, frequent, norms = fig.axes[:4]
    assert "rare" in rare.get_title() and "frequent" in frequent.get_title()
    np.testing.assert_allclose(rare.lines[0].get_ydata(), [s / 2000 + 0.01 for s in range(EVERY, STEPS + 1, EVERY)])
    np.testing.assert_allclose(frequent.lines[0].get_ydata(), [s / 1000 for s in range(EVERY, STEPS + 1, EVERY)])
    assert [line.get_ydata()[0] for line in norms.lines] == [1.5, 0.5]  # frequent, then rare


def test_log_log_slope_recovers_the_power_of_one_over_lambda():
    wd = np.array([1e-3, 3e-3, 1e-2, 3e-2, 0.1])
    assert study.log_log_slope(1 / wd, 5.0 / wd) == pytest.approx(1.0)
    assert study.log_log_slope(1 / wd, 0.2 / wd**2) == pytest.approx(2.0)
    assert math.isnan(study.log_log_slope([100.0], [300.0]))  # one point: no slope


def equilibrium_norm(wd):
    # the prediction: a rare row settles at ~ p / lambda, so norm x lambda = 0.5 whatever lambda
    return lambda step, seed: {"emb_norm_rare": 0.5 / wd * (1 + seed**2 / 10) if step == STEPS else 1.0}


def write_wd_sweep(root: Path, wds, opts=("adam",)) -> None:
    for opt in opts:
        for wd in wds:
            for seed in (0, 1, 2):
                grok = None if wd == min(wds) else round(0.3 / wd) + 100 * seed  # ~ 1 / lambda
                write_run(root, seed, opt=opt, wd=wd, grok_step=grok, extra=equilibrium_norm(wd))


def test_weight_decay_groups_hold_grok_steps_and_norm_x_lambda_per_lambda(tmp_path):
    write_wd_sweep(tmp_path, (1e-4, 1e-3, 2e-3, 3e-3), opts=("adam", "adamw"))
    write_run(tmp_path, 0, opt="sgd", wd=1e-3)  # one lambda only: no line of its own
    col = collect(tmp_path)
    groups = study.weight_decay_groups(Page(col, problem_tables(col)))
    assert [label for label, _ in groups] == ["adam", "adamw"]
    df = groups[0][1]
    assert list(df["wd"]) == [1e-4, 1e-3, 2e-3, 3e-3]
    assert list(df["grokked"]) == [0, 3, 3, 3] and list(df["seeds"]) == [3] * 4
    assert list(df["grok_median"][1:]) == [400, 250, 200] and list(df["grok_min"][1:]) == [300, 150, 100]
    assert list(df["grok_max"][1:]) == [500, 350, 300]
    for stat, value in (("min", 0.5), ("median", 0.55), ("max", 0.7)):  # seeds' norms x lambda: 0.5, 0.55, 0.7
        np.testing.assert_allclose(df[f"norm_x_wd_{stat}"], value)


def test_weight_decay_figure_needs_three_lambdas_and_fits_the_slope(tmp_path, figures):
    write_wd_sweep(tmp_path / "two", (1e-3, 2e-3))
    assert not any(f.endswith("wd_frequency.png") for f in generate(tmp_path / "two", tmp_path / "two_out"))
    write_wd_sweep(tmp_path / "runs", (1e-4, 1e-3, 3e-3, 1e-2))
    col = collect(tmp_path / "runs")
    page = Page(col, problem_tables(col))
    ((heading, label, suffix, fig, _),) = study.weight_decay_x_frequency(page)
    assert suffix == "wd_frequency"
    grok, norm = fig.axes[:2]
    assert grok.get_xscale() == grok.get_yscale() == "log"
    (legend,) = fig.legends
    slope = study.log_log_slope([1e3, 1 / 3e-3, 1e2], [400, 200, 130])
    assert [t.get_text() for t in legend.get_texts()] == [f"adam (slope {slope:.2f})"]
    open_marker = [line for line in grok.lines if line.get_markerfacecolor() == "none"][0]
    assert list(open_marker.get_xdata()) == [1e4] and list(open_marker.get_ydata()) == [STEPS]  # 1e-4 never grokked


def test_weight_decay_figure_is_written_at_the_end_of_the_page(tmp_path):
    write_wd_sweep(tmp_path / "runs", (1e-4, 1e-3, 3e-3))
    written = generate(tmp_path / "runs", tmp_path / "out")
    assert "modular-mlp/weight_decay.wd_frequency.png" in written
    page = (tmp_path / "out/modular-mlp.md").read_text()
    last = page[page.rindex("\n## ") + 1 :]
    assert last.startswith(
        "## Weight decay x token frequency\n\n![wd_frequency](modular-mlp/weight_decay.wd_frequency.png)\n\nPredicted:"
    )
    assert last.rstrip().splitlines()[-1].startswith("| adam | 0.0001, 0.001, 0.003 | 0/3, 3/3, 3/3 |")


def test_the_slope_leaves_out_rows_where_only_some_seeds_grokked(tmp_path, figures):
    for wd, groks in ((1e-3, (300, 300, 300)), (2e-3, (150, 150, 150)), (4e-3, (10, None, None))):
        for seed, grok in enumerate(groks):
            write_run(tmp_path, seed, wd=wd, grok_step=grok)
    col = collect(tmp_path)
    ((_, _, _, fig, text),) = study.weight_decay_x_frequency(Page(col, problem_tables(col)))
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["adam (slope 1.00)"]  # 1/3 at 4e-3 would pull it to ~3
    # the table says the same, and every seed of a level alike leaves no width to the interval; the
    # rare norm stays 1.0 whatever lambda, so norm x lambda grows as lambda (slope 1, not flat)
    assert (
        "| adam | 0.001, 0.002, 0.004 | 3/3, 3/3, 1/3 | 1.00 [1.00, 1.00] | 1.00 [1.00, 1.00] | 0.50 [0.50, 0.50] |"
        in text
    )


def test_slope_interval_resamples_each_levels_seeds():
    assert study.slope_interval([1, 2], [[5, 5], [10, 10]]) == pytest.approx((1.0, 1.0))
    assert all(math.isnan(v) for v in study.slope_interval([1, 1], [[5], [10]]))
    # medians at x = 1 range over 1..4 and at x = 2 are 4: slopes from log(4/4) to log(4/1) / log 2 = 2
    low, high = study.slope_interval([1, 2], [[1, 4], [4, 4]])
    assert low == pytest.approx(0.0) and high == pytest.approx(2.0)


def test_weight_decay_table_gives_both_slopes_with_intervals_and_the_norm_ratio(tmp_path):
    def norms(wd):
        rare = equilibrium_norm(wd)
        return lambda step, seed: rare(step, seed) | {"emb_norm_frequent": 2 * rare(step, seed)["emb_norm_rare"]}

    for wd in (1e-3, 2e-3, 4e-3):
        for seed in (0, 1, 2):
            write_run(tmp_path / "runs", seed, wd=wd, grok_step=round(0.3 / wd) + 50 * seed, extra=norms(wd))
    generate(tmp_path / "runs", tmp_path / "out")
    page = (tmp_path / "out/modular-mlp.md").read_text()
    header = "| rows | weight decays | grokked | grok step vs 1 / lambda: slope | rare norm x lambda vs lambda: slope |"
    assert header in page
    (line,) = [x for x in page.splitlines() if x.startswith("| adam |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:3] == ["0.001, 0.002, 0.004", "3/3, 3/3, 3/3"]
    grok_slope = study.log_log_slope([1e3, 500, 250], [350, 200, 125])  # medians: 300 / 150 / 75 + 50
    assert cells[3].startswith(f"{grok_slope:.2f} [")
    # norm x lambda is 0.5, 0.55, 0.7 over the seeds at every lambda: flat, and the interval holds 0
    low, high = (float(v) for v in cells[4].removeprefix("0.00 [").removesuffix("]").split(", "))
    assert low < 0 < high
    assert cells[5] == "0.50 [0.50, 0.50]"
