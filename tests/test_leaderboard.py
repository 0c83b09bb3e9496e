"""Leaderboards: tables regenerate byte for byte from real result files, and their numbers mean
what the headers say (medians, failures as inf, the baseline row, the performance profile)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from suite.cli import main
from suite.engine.milestones import Milestones
from suite.leaderboard import generate
from suite.leaderboard.baseline import is_plain, pick_baseline
from suite.leaderboard.collect import CellLabels, MethodLabels
from suite.leaderboard.stats import outcome, performance_profile, summarise

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "leaderboard"
RUNS = "tests/fixtures/leaderboard/runs"  # as typed from the repository root: headers record it
TABLES = (".md", ".csv")


def run_leaderboard(out: Path, root: str = RUNS, **kwargs) -> list[str]:
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        return generate(root, out, **kwargs)
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("board")
    run_leaderboard(out)
    return out


def files(out: Path, suffixes=None) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and (suffixes is None or p.suffix in suffixes)
    }


def test_tables_match_the_committed_copy(board):
    expected, got = files(FIXTURE / "expected", TABLES), files(board, TABLES)
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name] == expected[name], f"{name} differs from tests/fixtures/leaderboard/expected/{name}"


def test_regenerating_writes_the_same_bytes_plots_included(board, tmp_path):
    run_leaderboard(tmp_path)
    assert files(tmp_path) == files(board)
    assert any(name.endswith(".png") for name in files(board))
    run_leaderboard(tmp_path)  # over its own output: nothing changes
    assert files(tmp_path) == files(board)


COMMITTED = sorted(p.parent.name for p in (REPO / "leaderboards").glob("*/runs"))


@pytest.mark.parametrize("name", COMMITTED)
def test_each_committed_leaderboard_regenerates_from_its_committed_runs(name, tmp_path):
    # leaderboards/<grid>/runs holds the result files the grid wrote on this project's machine;
    # the tables beside them must be exactly what the leaderboard makes of those files.
    committed = REPO / "leaderboards" / name
    run_leaderboard(tmp_path, root=f"leaderboards/{name}/runs")
    generated_elsewhere = ("runs/", "compare/")  # compare/: `suite compare` pages, checked below
    expected = {
        k: v for k, v in files(committed, TABLES).items() if not k.startswith(generated_elsewhere) and k != "README.md"
    }
    got = files(tmp_path, TABLES)
    assert sorted(got) == sorted(expected)
    for table in expected:
        assert got[table] == expected[table], f"leaderboards/{name}/{table} is not what its runs give"


COMPARISONS = sorted(
    p.parent.relative_to(REPO).as_posix() for p in (REPO / "leaderboards").glob("*/compare/*/compare.md")
)


@pytest.mark.parametrize("where", COMPARISONS)
def test_each_committed_comparison_regenerates_from_the_command_in_its_header(where, tmp_path, monkeypatch):
    committed = REPO / where
    line = committed.joinpath("compare.md").read_text().splitlines()[2]
    assert line.startswith("`python -m suite compare ") and line.endswith("`")
    monkeypatch.chdir(REPO)  # the header's roots are as typed from the repository root
    assert main([*line.strip("`").split()[3:], "--out", str(tmp_path)]) == 0
    assert files(tmp_path) == files(committed), f"{where} is not what its command gives"


def test_every_committed_leaderboard_keeps_its_runs():
    boards = {p.parent.name for p in (REPO / "leaderboards").glob("*/index.md")}
    assert boards and boards == set(COMMITTED)


def test_headers_say_how_the_tables_were_made(board):
    page, index = (board / "modular-mlp.md").read_text(), (board / "index.md").read_text()
    commits = {json.loads(p.read_text())["git_commit"][:12] for p in (FIXTURE / "runs").rglob("result.json")}
    assert len(commits) == 2  # HEAD moved while the fixture ran: both are named
    assert f"`python -m suite leaderboard {RUNS}`" in page and all(c in index for c in commits)
    assert "Budget 1500 steps" in page and "seeds 0, 1" in page


def results_by_cell_and_method() -> dict:
    """Straight from the result files, without the leaderboard's code."""
    out: dict = {}
    for path in (FIXTURE / "runs").rglob("result.json"):
        r = json.loads(path.read_text())
        s = r["spec"]
        cell = (s["model"]["name"], s["task"]["p"], s["task"]["split"])
        method = (s["opt"]["name"], s["opt"].get("c"), s["filter"]["name"], s["sampler"]["batch_size"])
        out.setdefault(cell, {}).setdefault(method, []).append(r)
    return out


def test_numbers_trace_to_the_result_files(board):
    table = pd.read_csv(board / "modular-mlp.csv", keep_default_na=False)
    row = table[(table["cell"] == "p=23 split=random") & (table["method"] == "adamlr c=10 / random bs=64")].iloc[0]
    results = results_by_cell_and_method()[("mlp", 23, "random")][("adamlr", 10.0, "none", 64)]
    grok = sorted(r["grok_step"] for r in results if r["grok_step"] is not None)
    assert row["seeds"] == len(results) and row["grokked"] == len(grok)
    assert float(row["success_rate"]) == len(grok) / len(results)
    if grok:
        assert float(row["grok_median"]) == pd.Series(grok).median()
        assert (float(row["grok_min"]), float(row["grok_max"])) == (grok[0], grok[-1])
    wall = pd.Series([r["wall_s"] for r in results]).median()
    assert float(row["wall_s_median"]) == pytest.approx(wall, rel=1e-5)


def test_each_row_is_compared_with_the_matching_plain_adam_row(board):
    table = pd.read_csv(board / "modular-mlp.csv", keep_default_na=False)
    for cell, rows in table.groupby("cell"):
        ttt = dict(zip(rows["method"], rows["time_to_target"].astype(float)))
        for r in rows.itertuples():
            bs = json.loads(r.method_settings)["sampler.batch_size"]
            plain = f"adam / random bs={bs}"
            assert r.baseline == plain, (cell, r.method)
            base, own = ttt[plain], float(r.time_to_target)
            if math.isfinite(base) and math.isfinite(own):
                assert float(r.speedup) == pytest.approx(base / own, rel=1e-5)
            elif math.isinf(base) and math.isfinite(own):
                assert math.isinf(float(r.speedup))


def test_baseline_is_the_plain_row_that_agrees_most_then_the_fastest():
    def method(opt="adam", lr=1e-3, bs=512, sampler="random", **extra):
        return {
            "opt.name": opt,
            "opt.lr": lr,
            "opt.weight_decay": 1e-3,
            "filter.name": "none",
            "sampler.name": sampler,
            "sampler.batch_size": bs,
            "train.loss": "ce",
            **extra,
        }

    def row(label, settings, ttt, seeds=3):
        return {"method": label, "settings": settings, "time_to_target": ttt, "seeds": seeds}

    plain = [
        row("adam lr=0.001 bs=64", method(bs=64), 900.0),
        row("adam lr=0.001 bs=512", method(), 700.0),
        row("adam lr=0.01 bs=512", method(lr=1e-2), 300.0),
    ]
    assert all(is_plain(r["settings"]) for r in plain)
    assert not is_plain(method(sampler="frequency")) and not is_plain(method(opt="adamlr"))
    assert pick_baseline(method(opt="adamlr", lr=1e-2, **{"opt.c": 10.0}), plain)["method"] == "adam lr=0.01 bs=512"
    assert pick_baseline(method(sampler="frequency", bs=64), plain)["method"] == "adam lr=0.001 bs=64"
    assert pick_baseline(plain[0]["settings"], plain)["method"] == "adam lr=0.001 bs=64"  # its own baseline
    # agreeing equally with two plain rows (batch 128 matches neither): the faster one is the baseline
    assert pick_baseline(method(sampler="frequency", bs=128), plain[:2])["method"] == "adam lr=0.001 bs=512"
    assert pick_baseline(method(), []) is None


CELL = {"train.memorization": 0.99, "train.target": 0.99, "train.hold": 100}


def curve(vals, every=50):
    """metrics.jsonl as the leaderboard reads it: val acc per evaluation, train acc 1 from step 50."""
    return pd.DataFrame([{"step": i * every, "train_acc": 1.0 if i else 0.1, "val_acc": v} for i, v in enumerate(vals)])


def reached(vals, budget=1000, **cell):
    return outcome(curve(vals), {}, CELL | cell, budget)


def test_outcome_judges_a_run_by_the_held_rule_within_the_budget():
    run = reached([0.01, 0.5, 0.995, 0.3, 0.995, 0.995, 0.995, 0.9])
    assert (run["first_touch_step"], run["grok_step"], run["collapsed"], run["time"]) == (100, 200, True, 200)
    assert (run["memorization_step"], run["best_val"], run["final_val"]) == (50, 0.995, 0.9)
    # the hold must end within the budget; the evaluations after the budget do not count
    assert math.isinf(reached([0.01, 0.5, 0.995, 0.995, 0.995], budget=150)["time"])
    cut = reached([0.01, 0.5, 0.3, 0.995, 0.995, 0.995, 0.2], budget=250)
    assert (cut["grok_step"], cut["collapsed"], cut["final_val"]) == (150, False, 0.995)
    # without metrics: result.json's milestones, those within the budget
    old = outcome(None, {"memorization_step": 50, "grok_step": 1200, "first_touch_step": 900}, CELL, 1000)
    assert (old["memorization_step"], old["grok_step"], old["first_touch_step"]) == (50, None, 900)


def test_time_to_target_is_the_median_with_failures_as_inf():
    def row(*vals_per_seed, budget=1000):
        return summarise([reached(vals, budget) for vals in vals_per_seed], [1.0] * len(vals_per_seed))

    held, never, late = [0.1, 0.995, 0.995, 0.995], [0.1, 0.5, 0.5, 0.5], [0.1, 0.2, 0.3, 0.995, 0.995, 0.995]
    assert row(held, never, late)["time_to_target"] == 150  # 50, inf, 150
    assert math.isinf(row(held, never)["time_to_target"])
    touched = row([0.1, 0.995, 0.2, 0.1], held)  # touched then collapsed: a failure, and counted as touched
    assert (touched["grokked"], touched["touched"], touched["collapsed"], touched["times"]) == (
        1,
        2,
        1,
        [math.inf, 50.0],
    )
    assert (touched["best_val_median"], touched["final_val_min"], touched["final_val_max"]) == (0.995, 0.1, 0.995)


def test_performance_profile_scores():
    rows = [
        ("A", "m1", 100),
        ("A", "m2", 200),
        ("A", "m3", math.inf),
        ("B", "m1", 300),
        ("B", "m2", 100),
        ("C", "m1", 50),  # one method only: compares nothing
        ("D", "m1", math.inf),
        ("D", "m2", math.inf),
    ]  # nobody reached the target
    table = pd.DataFrame(
        [
            {"task": "t", "model": "m", "cell_label": c, "method": m, "time_to_target": float(t), "settings": {}}
            for c, m, t in rows
        ]
    )
    ratios, scores = performance_profile(table, tau_max=4)
    assert sorted(ratios["cell"].unique()) == ["A", "B"]
    by = scores.set_index("method")
    assert list(scores["method"]) == ["m2", "m1", "m3"]
    assert by.loc["m1", "score"] == pytest.approx((1 + 1 / 3) / 2)  # r = 1 and 3
    assert by.loc["m2", "score"] == pytest.approx((2 / 3 + 1) / 2)  # r = 2 and 1
    assert by.loc["m3", "score"] == 0 and by.loc["m3", "cells"] == 1
    assert (by.loc["m1", "rho_2"], by.loc["m1", "best_in"]) == (0.5, 1)


def test_labels_name_only_what_varies():
    base = {
        "opt.name": "adam",
        "opt.lr": 0.01,
        "filter.name": "none",
        "sampler.name": "random",
        "sampler.batch_size": 512,
        "train.loss": "ce",
    }
    methods = [
        base,
        {**base, "opt.name": "adamlr", "opt.c": 4.0},
        {**base, "opt.name": "adamlr", "opt.c": 10.0},
        {**base, "filter.name": "grokfast_ema", "filter.alpha": 0.98},
        {**base, "sampler.batch_size": 64},
        {**base, "train.loss": "stablemax"},
    ]
    label = MethodLabels({i: m for i, m in enumerate(methods)})
    assert [label(m) for m in methods] == [
        "adam / random bs=512 / loss=ce",
        "adamlr c=4 / random bs=512 / loss=ce",
        "adamlr c=10 / random bs=512 / loss=ce",
        "adam + grokfast_ema / random bs=512 / loss=ce",
        "adam / random bs=64 / loss=ce",
        "adam / random bs=512 / loss=stablemax",
    ]
    assert label(methods[1], drop=("opt.c", "sampler", "train.loss")) == "adamlr"
    cells = [{"task.name": "modular", "task.p": p, "model.name": "mlp", "model.d": 32} for p in (23, 31)]
    assert [CellLabels({i: c for i, c in enumerate(cells)})(c) for c in cells] == ["p=23", "p=31"]


def test_plots_sit_next_to_their_tables(board):
    names = set(files(board))
    page = (board / "modular-mlp.md").read_text()
    for kind in ("accuracy", "emb_norms"):
        assert f"modular-mlp/p-23_split-random.{kind}.png" in names
    assert "modular-mlp/p-23_split-random.c_sweep.png" in names  # adamlr at c = 4 and 10
    assert any(n.startswith("modular-mlp/") and n.endswith(".sampling.png") for n in names)  # split x batch size
    assert "transformer" in " ".join(names) and "profile.png" in names
    for name in names:
        if name.endswith(".png") and name.startswith("modular-mlp/"):
            assert f"]({name})" in page


def test_missing_or_empty_root_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["leaderboard", str(tmp_path / "nope"), "--out", str(out)]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["leaderboard", str(tmp_path / "empty"), "--out", str(out)]) == 2
    bad = tmp_path / "bad" / "run"
    bad.mkdir(parents=True)
    (bad / "result.json").write_text("{not json")
    assert main(["leaderboard", str(tmp_path / "bad"), "--out", str(out)]) == 2  # its only result is skipped
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["error", "error", "warning", "error"]
    assert str(bad / "result.json") in err[2] and "no readable result.json" in err[3]
    assert not out.exists()


def test_cli_writes_the_index_and_drops_stale_files(tmp_path, capsys):
    out = tmp_path / "board"
    assert main(["leaderboard", str(FIXTURE / "runs"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == str(out / "index.md")
    tables = [line for line in (out / "modular-mlp.md").read_text().splitlines() if line.startswith("|")]
    assert tables == [line for line in printed if line.startswith("|")][: len(tables)]  # the first page's tables
    plots = [line.removeprefix("plot: ") for line in printed if line.startswith("plot: ")]
    assert plots and all(Path(p).is_file() and p.endswith(".accuracy.png") for p in plots)
    (out / "README.md").write_text("written by hand\n")
    (out / "old.md").write_text("from an earlier set of runs\n")
    with open(out / "generated.txt", "a") as listing:
        listing.write("old.md\n")
    assert main(["leaderboard", str(FIXTURE / "runs"), "--out", str(out)]) == 0
    assert not (out / "old.md").exists() and (out / "README.md").exists()


def test_probe_results_get_a_per_layer_table_and_plot(tmp_path):
    # The shape suite/probes/runner.py writes (one entry per data set, each with `layers` and `best`);
    # the values are made up to pin the format, not measured.
    run = tmp_path / "runs" / "number_probe-smollm2" / "seed0-abc"
    run.mkdir(parents=True)

    def layer(i, ev):
        return {"layer": i, "pca_ev": {"mean": ev, "std": 0.01}, "rho": {"mean": 0.5, "std": None}}

    series = {
        name: {
            "layers": [layer(i, scale * i) for i in range(3)],
            "best": {"by_ev": layer(2, 2 * scale), "by_ev_ordered": None},
        }
        for name, scale in (("numbers", 0.1), ("letters", 0.05))
    }
    result = {
        "spec": {"task": {"name": "number_probe"}, "model": {"name": "smollm2"}, "seed": 0},
        **series,
        "git_commit": "f" * 40,
    }
    (run / "result.json").write_text(json.dumps(result))
    written = generate(tmp_path / "runs", tmp_path / "out")
    assert {"probes.md", "probes.csv", "index.md"} <= set(written)
    assert any(w.startswith("probes/") and w.endswith(".png") for w in written)
    assert not any(w.startswith("profile") for w in written)  # no grokking runs, no profile
    csv = pd.read_csv(tmp_path / "out" / "probes.csv")
    numbers = csv[csv["series"] == "numbers"]
    assert list(numbers["layer"]) == [0, 1, 2] and list(numbers["pca_ev_mean"]) == pytest.approx([0, 0.1, 0.2])
    assert csv["rho_std"].isna().all()  # null std stays missing, not 0
    page = (tmp_path / "out" / "probes.md").read_text()
    assert "by_ev: layer 2 (pca_ev 0.20, rho 0.50); by_ev_ordered: -" in page


def write_train_run(root: Path, seed: int, opt: str = "adam", grok_step: int | None = 300) -> Path:
    """A training run's result.json, without metrics (so no curves to draw): cheap to tabulate."""
    spec = {
        "task": {"name": "modular", "p": 23},
        "model": {"name": "mlp"},
        "opt": {"name": opt, "lr": 0.001},
        "filter": {"name": "none"},
        "sampler": {"name": "random", "batch_size": 64},
        "train": {"steps": 1000, "eval_every": 100, "memorization": 0.99, "target": 0.95},
        "seed": seed,
    }
    run = root / f"modular-mlp-{opt}" / f"seed{seed}"
    run.mkdir(parents=True)
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
    return run


def test_default_out_is_beside_the_runs_and_regenerates_over_itself(tmp_path, capsys):
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_train_run(root, seed)
    assert main(["leaderboard", str(root)]) == 0
    out = root / "leaderboard"
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(out / "index.md")
    first = files(out)
    assert {"index.md", "modular-mlp.md", "profile.md", "generated.txt"} <= set(first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing written beside the root
    assert main(["leaderboard", str(root)]) == 0  # over its own output: allowed, same bytes
    assert files(out) == first


def test_never_overwrites_a_file_it_did_not_write(tmp_path, capsys):
    root = tmp_path / "runs"
    write_train_run(root, 0)
    out = tmp_path / "notes"
    out.mkdir()
    (out / "index.md").write_text("my own notes\n")  # no generated.txt: nothing here is the leaderboard's
    assert main(["leaderboard", str(root), "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(out / "index.md") in err[0]
    assert files(out) == {"index.md": b"my own notes\n"}  # nothing written, not even the listing

    assert main(["leaderboard", str(root), "--out", str(tmp_path / "board")]) == 0
    listing = (tmp_path / "board" / "generated.txt").read_text()
    (tmp_path / "board" / "generated.txt").write_text(listing.replace("profile.md\n", ""))
    (tmp_path / "board" / "profile.md").write_text("edited by hand\n")  # listed by no run any more
    before = files(tmp_path / "board")
    assert main(["leaderboard", str(root), "--out", str(tmp_path / "board")]) == 2
    assert "profile.md" in capsys.readouterr().err
    assert files(tmp_path / "board") == before


def test_an_unreadable_result_file_is_skipped_with_one_warning(tmp_path, capsys):
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_train_run(root, seed)
    empty, corrupt = write_train_run(root, 2) / "result.json", write_train_run(root, 3) / "result.json"
    empty.write_text("")
    corrupt.write_text(corrupt.read_text()[:40])  # cut off mid-write
    foreign = root / "other" / "result.json"
    foreign.parent.mkdir()
    foreign.write_text('{"accuracy": 0.5}')  # JSON, but not this suite's
    written = generate(root, tmp_path / "out")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("warning: ") and line.endswith("skipped") for line in err)
    assert [str(p) in line for p, line in zip(sorted((empty, corrupt, foreign)), err)] == [True] * 3
    assert "modular-mlp.md" in written
    table = pd.read_csv(tmp_path / "out" / "modular-mlp.csv")
    assert list(table["seeds"]) == [2]  # the two readable runs, no more


def test_a_study_adds_figures_and_pages_by_registering_sections(tmp_path, monkeypatch):
    from suite.leaderboard import studies

    monkeypatch.setattr(studies, "SECTIONS", list(studies.SECTIONS))  # this test's sections go with it
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_train_run(root, seed)
    toy = root / "toy-m" / "seed0"
    toy.mkdir(parents=True)
    (toy / "result.json").write_text(
        json.dumps({"spec": {"task": {"name": "toy"}, "model": {"name": "m"}, "seed": 0}, "runner": "toy", "score": 7})
    )

    @studies.section("table")
    def seeds(table):
        return [("seeds", "seeds", f"{table.rows['seeds'].sum()} seeds of {table.title}".encode())]

    @studies.section("page")
    def extra(page):
        return [("Extra: everything", "everything", "extra", f"{len(page.rows)} rows".encode(), "| a | table |\n")]

    @studies.section("board", runner="toy")
    def toy_page(board):
        board.files.add("toy.md", f"{len(board.results)} result, score {board.results[0]['result']['score']}\n")
        return ["Toy results: [toy.md](toy.md).\n"]

    out = tmp_path / "out"
    generate(root, out)
    page = (out / "modular-mlp.md").read_text()
    assert (
        "![seeds](modular-mlp/all.seeds.png)" in page
        and "## Extra: everything\n\n![extra](modular-mlp/everything.extra.png)\n\n| a | table |\n" in page
    )
    assert (out / "modular-mlp/all.seeds.png").read_text() == "2 seeds of modular / mlp"
    assert (out / "modular-mlp/everything.extra.png").read_text() == "1 rows"
    assert (out / "toy.md").read_text() == "1 result, score 7\n"
    index = (out / "index.md").read_text()
    assert "from 3 result files" in index and "Toy results: [toy.md](toy.md)." in index
    with pytest.raises(ValueError):
        studies.section("table", runner="toy")  # tables are training runs'


def test_each_split_shows_its_operand_probabilities_in_train_and_test():
    """The paper's Fig. 8 beside the sampling table, rebuilt from the runs' task settings."""
    from suite.leaderboard.studies.grokking import plot_split_tokens, split_tokens
    from suite.specs.spec import resolve

    def cell(split, **extra):
        task = resolve({}, {"p": 31, "split": split, **extra})["task"]
        return {f"task.{k}": v for k, v in task.items()}

    probs = dict(split_tokens({s: cell(s) for s in ("skewed", "random", "uniform")}))
    assert list(probs) == ["uniform", "random", "skewed"]  # the plots' order
    for sets in probs.values():
        for which in ("train", "test"):
            assert all(len(p) == 31 and abs(p.sum() - 1) < 1e-6 for p in sets[which])
    even = 1 / 31
    assert max(abs(p - even).max() for p in probs["uniform"]["train"] + probs["uniform"]["test"]) < 0.5 * even
    a_train, a_test = probs["skewed"]["train"][0], probs["skewed"]["test"][0]
    assert a_train[:10].sum() > 2 * a_train[-10:].sum() and a_test[:10].sum() > 2 * a_test[-10:].sum()
    assert plot_split_tokens("t", list(probs.items())).startswith(b"\x89PNG")
    old = {**cell("skewed"), "task.zipf_s": 1.0}  # a run of an older suite: no figure, no failure
    del old["task.skew"]
    assert split_tokens({"skewed": old, "random": cell("random")}) is None


def test_the_sampling_figure_names_each_skew_and_ignores_it_where_the_split_does_not_read_it():
    """A skewed split at each strength is a split of its own; a random split run when the default
    skew was another still belongs in the same figure."""
    from suite.leaderboard.studies.grokking import split_label, split_order, split_tokens
    from suite.specs.spec import resolve

    def cell(split, skew):
        task = resolve({}, {"p": 31, "split": split, "skew": skew})["task"]
        return {f"task.{k}": v for k, v in task.items()}

    cells = [
        cell("skewed", 5.0),
        cell("random", 3.0),
        cell("skewed", 0.5),
        cell("skewed_train", 3.0),
        cell("uniform", 5.0),
    ]
    labelled = {split_label(c): c for c in cells}
    assert split_order(labelled) == ("uniform", "random", "skewed skew=0.5", "skewed skew=5", "skewed_train skew=3")
    probs = dict(split_tokens(labelled))
    mild, strong = probs["skewed skew=0.5"]["test"][0], probs["skewed skew=5"]["test"][0]
    assert strong[:5].sum() > mild[:5].sum()  # the figure draws each strength's own split


def write_curve_run(
    root: Path, seed: int, vals: list[float], opt: str = "adam", steps: int = 1000, bs: int = 64, split: str = "random"
) -> Path:
    """A training run with its metrics: val acc per evaluation every 100 steps, hold 200."""
    spec = {
        "task": {"name": "modular", "p": 23, "split": split},
        "model": {"name": "mlp"},
        "opt": {"name": opt, "lr": 0.001},
        "filter": {"name": "none"},
        "sampler": {"name": "random", "batch_size": bs},
        "train": {
            "steps": steps,
            "eval_every": 100,
            "memorization": 0.99,
            "target": 0.95,
            "hold": 200,
            "patience": 200,
        },
        "seed": seed,
    }
    run = root / f"modular-mlp-{opt}-{split}-bs{bs}" / f"seed{seed}-{steps}"
    run.mkdir(parents=True)
    records = [
        {"step": 100 * i, "train_acc": 1.0, "val_acc": v, "train_loss": 0.1, "val_loss": 1.0}
        for i, v in enumerate(vals)
    ]
    m = Milestones.of(records, 0.99, 0.95, 200)  # what the loop would have written
    result = {"spec": spec, "runner": "train", "wall_s": 1.0, "git_commit": "a" * 40, "grok_step": m.grok_step,
              "memorization_step": m.memorization_step, "first_touch_step": m.first_touch_step}  # fmt: skip
    (run / "result.json").write_text(json.dumps(result))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


GROKS = [0.1, 0.5, 0.96, 0.97, 0.98, 0.99]  # touches 0.95 at step 200 and holds: grok step 200


def test_a_seed_run_with_two_budgets_counts_once(tmp_path, capsys):
    for seed in range(3):
        write_curve_run(tmp_path / "runs", seed, GROKS + [0.99] * 10, steps=1500)
    write_curve_run(tmp_path / "runs", 0, GROKS, steps=500)  # seed 0 again, a shorter budget
    generate(tmp_path / "runs", tmp_path / "out")
    row = pd.read_csv(tmp_path / "out" / "modular-mlp.csv").iloc[0]
    assert (row["seeds"], row["grokked"], row["budget"]) == (3, 3, 1500)
    assert "1 runs of a seed that also ran with a longer budget were left out" in capsys.readouterr().err


def test_a_touch_that_collapses_is_a_failure_with_its_own_columns(tmp_path):
    root = tmp_path / "runs"
    for seed in range(5):
        write_curve_run(root, seed, GROKS)
        write_curve_run(root, seed, [0.1, 0.96, 0.2, 0.1, 0.1, 0.1], opt="adamlr")  # touched, collapsed
    generate(root, tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "modular-mlp.csv").set_index("method")
    lr = table.loc["adamlr"]
    assert (lr["grokked"], lr["touched"], lr["collapsed"], lr["final_val_max"]) == (0, 5, 5, 0.1)
    assert math.isinf(lr["time_to_target"]) and lr["speedup"] == 0 and lr["speedup_ci_high"] == 0
    # slower on all 5 seeds, but 5 pairs cannot give p below 2 / 2^5: no verdict
    assert lr["p_value"] == pytest.approx(2 / 32) and lr["verdict"] == "not resolved (n = 5)"
    assert "| 0/5 | 5/5 | 5/5 |" in (tmp_path / "out" / "modular-mlp.md").read_text()


def test_a_run_that_held_then_collapsed_is_not_grokked_on_the_board_and_the_header_says_how_long_runs_were_watched(
    tmp_path,
):
    root = tmp_path / "runs"
    for seed in range(5):
        write_curve_run(root, seed, GROKS + [0.99] * 3)  # held from 200, watched to 800
        write_curve_run(root, seed, GROKS + [0.99] * 3 + [0.3, 0.3], opt="adamlr")  # held 500 steps, then chance
    generate(root, tmp_path / "out")
    lr = pd.read_csv(tmp_path / "out" / "modular-mlp.csv").set_index("method").loc["adamlr"]
    assert (lr["grokked"], lr["touched"], lr["collapsed"]) == (0, 5, 5) and math.isinf(lr["time_to_target"])
    page = (tmp_path / "out" / "modular-mlp.md").read_text()
    assert "held 200 steps and never below 0.475 after; grokked runs watched 600 steps past their grok step" in page


def test_the_baseline_column_names_a_row_on_a_board_that_mixes_cells(tmp_path):
    root = tmp_path / "runs"
    write_curve_run(root, 0, GROKS)
    write_curve_run(root, 0, GROKS, opt="adamlr", split="uniform")  # a cell without a plain row
    generate(root, tmp_path / "out")
    page = (tmp_path / "out" / "modular-mlp.md").read_text()
    rows = [line.split(" | ") for line in page.splitlines() if line.startswith("| 1 |")]
    assert sorted(r[-2] for r in rows) == ["#1", "-"]  # never '#1.0' or '#nan'


def test_the_profile_races_methods_only_at_the_same_batch_size():
    rows = [
        ("adam bs=64", 64, 900),
        ("sampler bs=64", 64, 1000),
        ("adam bs=512", 512, 300),
        ("sampler bs=512", 512, 200),
    ]
    table = pd.DataFrame(
        [
            {
                "task": "t",
                "model": "m",
                "cell_label": "A",
                "method": m,
                "time_to_target": float(t),
                "settings": {"sampler.batch_size": bs},
            }
            for m, bs, t in rows
        ]
    )
    ratios, scores = performance_profile(table, tau_max=4)
    assert sorted(ratios["cell"].unique()) == ["A bs=512", "A bs=64"]
    by = ratios.set_index("method")["ratio"]
    assert by["sampler bs=512"] == 1 and by["adam bs=64"] == 1 and by["sampler bs=64"] == pytest.approx(1000 / 900)


def test_curves_end_where_each_run_stopped():
    from suite.leaderboard.plots import curves

    stopped, ran_on = curve([0.1, 0.5, 0.99]), curve([0.1, 0.4, 0.6, 0.7, 0.8])
    steps, values, median = curves([stopped, ran_on], "val_acc")
    assert list(steps) == [50, 100, 150, 200]
    assert list(values[0][:2]) == [0.5, 0.99]
    assert math.isnan(values[0][2]) and math.isnan(values[0][3])  # not carried past its stop
    assert list(median[:2]) == pytest.approx([0.45, 0.795]) and math.isnan(median[2])  # only while both run


def test_the_sampling_figure_counts_failed_seeds(tmp_path, monkeypatch):
    from suite.leaderboard.studies import grokking

    drawn = []
    monkeypatch.setattr(grokking, "plot_sampling", lambda title, df, budget, order: drawn.append(df) or b"png")
    root = tmp_path / "runs"
    for seed in range(3):
        write_curve_run(root, seed, GROKS, bs=64)
        write_curve_run(root, seed, GROKS if seed == 0 else [0.1] * 6, bs=512)  # 1 of 3 grokked
    generate(root, tmp_path / "out")
    (df,) = drawn
    failed = df[df["bs"] == 512].iloc[0]
    assert math.isinf(failed["time_to_target"]) and sorted(failed["times"]) == [200, math.inf, math.inf]


DAMAGE = {  # kind -> (what is done to seed 1's files, what the warning says, seeds left in the row)
    "a torn last metrics line": (lambda run: run.joinpath("metrics.jsonl").write_text(
        run.joinpath("metrics.jsonl").read_text() + '{"step": 60, "val_ac'), None, 2),
    "a garbage metrics line": (lambda run: run.joinpath("metrics.jsonl").write_text(
        "GARBAGE\n" + run.joinpath("metrics.jsonl").read_text()), "line 1 is not an evaluation", 2),
    "metrics cut off mid-file": (lambda run: run.joinpath("metrics.jsonl").write_bytes(
        run.joinpath("metrics.jsonl").read_bytes()[:30] + b"\n" + run.joinpath("metrics.jsonl").read_bytes()[30:]),
        "is not an evaluation", 2),
    "a grok step that is a word": (lambda run: _edit_result(run, grok_step="soon"), "grok_step is 'soon'", 1),
    "a budget that is a string": (lambda run: _edit_result(run, spec_train_steps="1000"), "train.steps is '1000'", 1),
    "a wall time that is a list": (lambda run: _edit_result(run, wall_s=[1]), "wall_s is [1]", 1),
    "a seed that is a float": (lambda run: _edit_result(run, spec_seed=1.5), "no integer seed", 1),
}  # fmt: skip


def _edit_result(run, **changes):
    result = json.loads((run / "result.json").read_text())
    for key, value in changes.items():
        if key.startswith("spec_train_"):
            result["spec"]["train"][key.removeprefix("spec_train_")] = value
        elif key.startswith("spec_"):
            result["spec"][key.removeprefix("spec_")] = value
        else:
            result[key] = value
    (run / "result.json").write_text(json.dumps(result))


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_run_files_are_skipped_with_a_warning_and_the_board_is_made(tmp_path, capsys, kind):
    damage, warning, seeds = DAMAGE[kind]
    for seed in (0, 1):
        write_curve_run(tmp_path / "runs", seed, GROKS)
    damage(next((tmp_path / "runs").glob("*/seed1-*")))
    assert main(["leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert (warning in err) if warning else ("warning" not in err)
    row = pd.read_csv(tmp_path / "out" / "modular-mlp.csv").iloc[0]
    assert row["seeds"] == seeds and row["grokked"] == seeds  # a run without curves is judged by its result.json
