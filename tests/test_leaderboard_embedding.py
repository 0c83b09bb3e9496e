"""The embedding paper's sections (suite/leaderboard/studies/embedding_questions.py): each figure
is drawn from the columns it needs, and only where the runs recorded them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from suite.leaderboard import generate
from suite.leaderboard.collect import collect
from suite.leaderboard.sections import Cell
from suite.leaderboard.stats import cell_tables
from suite.leaderboard.studies import embedding_questions as study

STEPS, EVERY = 1000, 100


def write_run(root: Path, seed: int, opt: str = "adam", wd: float = 1e-3, grok_step: int | None = 300,
              extra=lambda step, seed: {}) -> None:
    """A synthetic training run: spec, result and one metrics record per evaluation, the
    record's extra columns given by extra(step, seed)."""
    spec = {"task": {"name": "modular", "p": 23}, "model": {"name": "mlp"},
            "opt": {"name": opt, "lr": 0.001, "weight_decay": wd}, "filter": {"name": "none"},
            "sampler": {"name": "random", "batch_size": 64},
            "train": {"steps": STEPS, "eval_every": EVERY, "memorization": 0.99, "target": 0.95}, "seed": seed}
    run = root / f"{opt}-wd{wd:g}" / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps(spec))
    (run / "result.json").write_text(json.dumps({"spec": spec, "runner": "train", "memorization_step": 100,
                                                 "grok_step": grok_step, "wall_s": 1.0, "git_commit": "a" * 40}))
    records = [{"step": s, "train_acc": min(1.0, s / 200), "val_acc": 1.0 if grok_step and s >= grok_step else 0.1,
                "emb_norm_rare": 1.0, "emb_norm_frequent": 2.0, **extra(s, seed)} for s in range(0, STEPS + 1, EVERY)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def one_cell(root: Path) -> Cell:
    col = collect(root)
    rows = cell_tables(col).sort_values("row")
    return Cell(col, rows, col.runs, "test cell")


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
    fig = study.hessian_eigenvalues(one_cell(tmp_path))[0][2]
    acc, curvature = fig.axes[:2]
    assert curvature.get_yscale() == "log"
    hessian_e = curvature.lines[0]
    assert list(hessian_e.get_xdata()) == [200, 400, 600, 800, 1000]  # not the steps in between
    assert list(hessian_e.get_ydata()) == [20.0] * 5  # median of 10, 20, 30
    band = curvature.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == 10.0 and band.max() == 30.0
    assert [line.get_label() for line in acc.lines][0] == "adam"


def frequency_groups(step, seed):
    return {"val_acc_rare": step / 2000 + seed / 100, "val_acc_middle": step / 1500,
            "val_acc_frequent": step / 1000, "emb_norm_rare": 0.5, "emb_norm_frequent": 1.5}


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
    fig = study.val_by_frequency(one_cell(tmp_path))[0][2]
    rare, middle, frequent, norms = fig.axes[:4]
    assert "rare" in rare.get_title() and "frequent" in frequent.get_title()
    np.testing.assert_allclose(rare.lines[0].get_ydata(), [s / 2000 + 0.01 for s in range(EVERY, STEPS + 1, EVERY)])
    np.testing.assert_allclose(frequent.lines[0].get_ydata(), [s / 1000 for s in range(EVERY, STEPS + 1, EVERY)])
    assert [line.get_ydata()[0] for line in norms.lines] == [1.5, 0.5]  # frequent, then rare

