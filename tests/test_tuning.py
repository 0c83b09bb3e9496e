"""The tuning protocol (suite/launch/tuning.py, `suite tune`): the same budget for every method, the best
point by held time to target on the tuning seeds, rerun on final seeds tuning never saw."""

import json
import math
import re
import shutil
import textwrap

import pandas as pd
import pytest
from conftest import ONE_POINT, PARITY_FIXED, TINY_FIXED
from test_bad_input import refused, snapshot

from suite import SuiteError
from suite.cli import main
from suite.launch.grid import load
from suite.launch.spaces import Method, parse
from suite.leaderboard import generate
from suite.leaderboard.tables import fmt_value
from suite.leaderboard.tuned import profile_by_method
from suite.results.tuning_record import record_of
from suite.specs.spec import spec_id

# the workers of a grid or tune run in this process: what they compute is the point, not their processes
pytestmark = pytest.mark.usefixtures("chunks_in_process")

TUNED = TINY_FIXED + textwrap.dedent("""
    [tuning]
    trials = 2
    tuning_seeds = [100, 101]
    final_seeds = [0, 1, 2, 3, 4]
    [tuning.methods.adam]
    opt = "adam"
    space = { lr = [0.01, 0.001] }
    [tuning.methods.sgd]
    opt = "sgd"
    baseline = "adam"
    space = { lr = { log = [0.01, 0.5] }, momentum = [0.9] }
""")


# sparse parity: every method learns it for good within tens of steps, so each search finds a working point
LEARNED = TUNED.replace(TINY_FIXED, PARITY_FIXED + "patience = 20\n")


def test_tune_runs_both_phases_and_only_fresh_seeds_reach_the_board(tmp_path, capsys, monkeypatch):
    (tmp_path / "g.toml").write_text(LEARNED)
    root = tmp_path / "runs"
    dry = ["tune", str(tmp_path / "g.toml"), "--root", str(root), "--dry-run"]
    assert main(dry) == 0  # where the tune stands, a line a cell
    said = ": 0 of 4 trials finished, in round 1 of 1 (adam, sgd searching); final runs not drawn yet"
    assert said in capsys.readouterr().err
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root), "--workers", "2"]) == 0
    tuning = [json.loads(p.read_text())["spec"] for p in (root / "tuning").rglob("result.json")]
    final = [json.loads(p.read_text())["spec"] for p in (root / "final").rglob("result.json")]
    assert len(tuning) == 2 * 2 * 2 and {s["seed"] for s in tuning} == {100, 101}  # methods x points x seeds
    assert len(final) == 2 * 5 and {s["seed"] for s in final} == {0, 1, 2, 3, 4}  # never a tuning seed
    record = json.loads((root / "final" / "tuning.json").read_text())
    for chosen in record["chosen"]:
        opt = {"adam": "adam", "sgd": "sgd"}[chosen["method"]]
        finals = [s for s in final if s["opt"]["name"] == opt]
        assert len(finals) == 5 and all(s["opt"]["lr"] == chosen["settings"]["lr"] for s in finals)
        best = min(chosen["tried"], key=lambda t: (t["median_time"], -t["median_best_val"], t["point"]))
        assert best["point"] == chosen["chosen"] and len(chosen["tried"]) == 2
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root)]) == 0  # again: nothing left to run
    assert "0 to run" in capsys.readouterr().err
    removed = next((root / "final").rglob("result.json")).parent
    shutil.rmtree(removed)
    assert main(dry) == 0
    assert ": 4 of 4 trials finished; 9 of 10 final runs finished" in capsys.readouterr().err
    assert main(["status", str(tmp_path / "g.toml"), "--root", str(root)]) == 0  # the same, and each run
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(": 4 of 4 trials finished; 9 of 10 final runs finished")
    assert out[-1] == "18 cells: 17 done, 1 missing"  # 8 tuning runs, 10 final runs
    assert re.fullmatch(rf"missing +{re.escape(str(removed))}  \[g method=(adam|sgd) point=\d seed=\d\]", out[-2]), out
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root)]) == 0
    written = generate(root / "final", tmp_path / "board")
    assert "tuning.md" in written and "[tuning](tuning.md)" in (tmp_path / "board" / "index.md").read_text()
    # the cell pages judge nothing: a second, unadjusted verdict against another baseline could contradict tuning.md
    pages = [p for p in (tmp_path / "board").glob("*.csv") if p.name not in ("profile.csv", "time_to_target.csv")]
    assert pages and all(set(pd.read_csv(p, keep_default_na=False)["verdict"]) == {""} for p in pages)
    assert "is judged in [tuning.md](tuning.md)" in pages[0].with_suffix(".md").read_text()
    verdicts = (tmp_path / "board" / "tuning.md").read_text().split("## Verdicts on the final seeds")[1]
    sgd = next(line for line in verdicts.splitlines() if "| sgd |" in line)
    verdict = sgd.rstrip(" |").split("; ")[0]  # what follows a "; " is what it is read with
    assert "| adam |" in sgd and verdict.endswith(("faster", "slower", "not resolved (n = 5)"))
    # the row names the point it ran, tuned settings included (a board label shows only what varies)
    sgd_choice = next(c for c in record["chosen"] if c["method"] == "sgd")["settings"]
    assert f"lr={fmt_value(sgd_choice['lr'])} momentum=0.9" in sgd
    # a bound just above 1 prints the digits that put it above 1, as on the board (tables.bound_text)
    monkeypatch.setattr("suite.leaderboard.stats.speedup_interval", lambda *a: (1.0026, 1.5))
    monkeypatch.setattr("suite.leaderboard.stats.rank_test", lambda *a: (0.01, 1))  # 5 pairs never reach 0.05
    generate(root / "final", tmp_path / "board")
    verdicts = (tmp_path / "board" / "tuning.md").read_text().split("## Verdicts on the final seeds")[1]
    sgd = next(line for line in verdicts.splitlines() if "| sgd |" in line)
    assert "[1.003x, 1.50x]" in sgd and sgd.rstrip(" |").split("; ")[0].endswith("faster")
    # a campaign stopped before every final run finished: no verdict on the seeds that finished first
    monkeypatch.undo()
    specs = {p.parent: json.loads(p.read_text())["spec"] for p in (root / "final").rglob("result.json")}
    shutil.rmtree(next(d for d, s in specs.items() if s["opt"]["name"] == "sgd" and s["seed"] == 4))
    generate(root / "final", tmp_path / "board")
    page = (tmp_path / "board" / "tuning.md").read_text()
    sgd = next(line for line in page.split("## Verdicts on the final seeds")[1].splitlines() if "| sgd |" in line)
    assert sgd.endswith("| no verdict: final runs not all finished (sgd 4 of 5) |")
    assert "## One verdict per method" not in page  # sgd was judged nowhere


def test_points_are_the_same_on_every_call_and_differ_between_methods():
    space = {"lr": ("log", 1e-4, 1e-2), "c": [1, 3, 10]}
    a, b = Method("a", {}, space).points(5), Method("b", {}, space).points(5)
    assert a == Method("a", {}, space).points(5) and a != b
    assert all(1e-4 <= p["lr"] <= 1e-2 and p["c"] in (1, 3, 10) for p in a + b)


@pytest.mark.parametrize("change, message", [
    ({"final_seeds": [0, 1, 2, 3, 100]}, "both tuning and final seeds"),
    ({"final_seeds": [0, 1, 2]}, "5 seeds or more"),
    ({"trials": 0}, "trials must be an integer in [1, 1000]"),
    ({"methods": {}}, "methods must be a table"),
    ({"methods": {"adam": {"space": {"lr": {"log": [0, 1]}}}}}, "a space is a non-empty list"),
    ({"budget": 3}, "unknown key 'budget'"),
    ({"methods": {"adam": {"opt": ["adam"]}}}, "method 'adam': opt takes a component name, got ['adam']"),  # TypeError
    ({"methods": {"adam": {"opt": 3}}}, "method 'adam': opt takes a component name, got 3"),
    ({"methods": {"adam": {"lr": {"log": 1}}}}, "method 'adam': 'lr' must be a value, got a table"),
    ({"methods": {"a|b\nc": {"opt": "adam"}}}, "method name 'a|b\\nc': letters, digits"),  # breaks tuning.md's tables
])  # fmt: skip
def test_a_tuning_table_that_would_let_tuning_into_the_final_rows_is_refused(change, message):
    raw = {"trials": 2, "tuning_seeds": [100], "final_seeds": [0, 1, 2, 3, 4], "methods": {"adam": {"opt": "adam"}},
           **change}  # fmt: skip
    with pytest.raises(SuiteError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(raw, "g.toml")


def test_grid_refuses_a_tuned_grid_and_tune_a_plain_one(tmp_path, capsys):
    (tmp_path / "tuned.toml").write_text(TUNED)
    (tmp_path / "plain.toml").write_text(TINY_FIXED)
    assert main(["grid", str(tmp_path / "tuned.toml"), "--dry-run"]) == 2
    assert main(["tune", str(tmp_path / "plain.toml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "run it with `python -m suite tune" in err[0] and "has no [tuning] table" in err[1]
    assert load(tmp_path / "tuned.toml").tuning["trials"] == 2


def test_experiments_tuned_one_at_a_time_into_one_root_share_one_record(tmp_path):
    grid = (
        PARITY_FIXED
        + "patience = 20\n"
        + textwrap.dedent("""
        [[experiment]]
        name = "narrow"
        fixed = { hidden = 32 }
        [[experiment]]
        name = "wide"
        fixed = { hidden = 64 }
    """)
        + ONE_POINT
    )
    (tmp_path / "g.toml").write_text(grid)
    root = tmp_path / "runs"
    for name in ("narrow", "wide"):
        assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root), "--experiment", name]) == 0
    record = json.loads((root / "final" / "tuning.json").read_text())
    assert sorted(c["cell"] for c in record["chosen"]) == ["narrow", "wide"]
    final = [json.loads(p.read_text())["spec"]["model"]["hidden"] for p in (root / "final").rglob("result.json")]
    assert sorted(final) == [32] * 5 + [64] * 5


def test_a_search_that_has_chosen_runs_its_final_seeds_while_another_search_is_unfinished(tmp_path, capsys):
    # a search's winner follows from its own trials: its final runs start without waiting for the
    # other searches, its choice recorded first, and the record ends as an uninterrupted tune's
    from suite.launch.tuning import tuning_cells
    from suite.results.rundir import RunDir

    (tmp_path / "g.toml").write_text(LEARNED)
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(whole)]) == 0
    g = load(tmp_path / "g.toml", part)
    cells = tuning_cells(g, parse(g.tuning, str(g.path), g.name), part / "tuning")
    held = RunDir(next(c for c in cells if c.experiment == "tuning/sgd").run_dir)
    held.lock()  # as another process holds a run: sgd's search cannot finish in this call
    tune = ["tune", str(tmp_path / "g.toml"), "--root", str(part)]
    assert main(tune) == 0
    assert "run this command again then" in capsys.readouterr().err
    record = json.loads((part / "final" / "tuning.json").read_text())
    assert [c["method"] for c in record["chosen"]] == ["adam"]
    finals = [json.loads(p.read_text())["spec"] for p in (part / "final").rglob("result.json")]
    assert len(finals) == 5 and {s["opt"]["name"] for s in finals} == {"adam"}
    assert sorted(record["chosen"][0]["final_runs"]) == sorted(spec_id(s) for s in finals)
    assert main([*tune, "--dry-run"]) == 0
    assert ": 3 of 4 trials finished, in round 1 of 1 (sgd searching); 5 of 5 final runs finished (adam)" in (
        capsys.readouterr().err
    )
    held.unlock()
    assert main(tune) == 0
    assert (
        json.loads((part / "final" / "tuning.json").read_text())["chosen"]
        == (json.loads((whole / "final" / "tuning.json").read_text())["chosen"])
    )
    assert len(list((part / "final").rglob("result.json"))) == 10


def test_a_method_whose_search_found_no_working_point_runs_no_final_seeds(tmp_path, capsys):
    # no point reached the target on a tuning seed: its winner is the tie-break's (best val), and its
    # final runs could give no verdict by the board's rule: the choice says so, and they are skipped
    (tmp_path / "g.toml").write_text(
        TUNED.replace('"train.steps" = 40', '"train.steps" = 10').replace("eval_every = 10", "eval_every = 5")
    )
    root = tmp_path / "runs"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root), "--workers", "2"]) == 0
    err = capsys.readouterr().err
    for method in ("adam", "sgd"):
        assert f"method '{method}': no trial reached the target on any tuning seed" in err
    record = json.loads((root / "final" / "tuning.json").read_text())
    assert [c["final_runs"] for c in record["chosen"]] == [[], []]
    assert not list((root / "final").rglob("result.json"))
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root), "--dry-run"]) == 0
    said = "4 of 4 trials finished; no final runs for adam, sgd: no trial of their search reached the target"
    assert said in capsys.readouterr().err


def test_the_profile_by_method_keeps_a_method_one_row_when_it_chose_different_points():
    # profile.md keys rows by settings; tuning.md's profile must not split a tuned method in two
    def row(problem, label, time):
        return {
            "task": "modular",
            "model": "mlp",
            "problem_label": problem,
            "settings": {},
            "method": label,
            "time_to_target": time,
        }

    rows = {
        ("add", "adamw"): row("op=add", "adamw lr=0.01", 500.0),
        ("add", "adamlr"): row("op=add", "adamlr lr=0.003 c=4", 1000.0),
        ("mul", "adamw"): row("op=mul", "adamw lr=0.01", 600.0),
        ("mul", "adamlr"): row("op=mul", "adamlr lr=0.002 c=10", 300.0),
        ("sub", "adamw"): row("op=sub", "adamw lr=0.01", 600.0),  # adamlr has no final runs in sub
    }
    record = {"methods": {"adamw": {}, "adamlr": {}}}
    scores = profile_by_method(rows, record).set_index("method")
    assert set(scores.index) == {"adamw", "adamlr"}
    # every cell counts for every method: a missing one as a failure, never left out of its share
    assert (scores.loc["adamw", "cells"], scores.loc["adamw", "best_in"]) == (3, 2)
    assert (scores.loc["adamlr", "cells"], scores.loc["adamlr", "best_in"]) == (3, 1)
    assert scores.loc["adamlr", "rho_1"] == pytest.approx(1 / 3)


# --- issue 51: a cell's identity, tuning.json's format, damaged files -------------------------------

NOT_TOLD_APART = {  # kind -> (grid file text, what the line says)
    "two experiments of one name": (
        TINY_FIXED + '[[experiment]]\nfixed = { op = "add" }\n[[experiment]]\nfixed = { op = "mul" }\n' + ONE_POINT,
        "two cells are both 'g' (experiment and axis values)",
    ),
    "an axis the method sets": (
        TINY_FIXED + "[axes]\nlr = [0.01, 0.001]\n" + ONE_POINT,
        "method 'adam' replaces what cells [g lr=0.01] and [g lr=0.001] differ in (opt.lr)",
    ),
    "an axis of the optimizer the method replaces": (
        TINY_FIXED + '[axes]\nopt = ["adam", "sgd"]\n' + ONE_POINT,
        "[g opt=adam] and [g opt=sgd] differ in (opt.betas",
    ),
    "a final seed twice": (TINY_FIXED + ONE_POINT.replace("[0, 1,", "[0, 0, 1,"), "final_seeds lists seeds [0] more"),
    "a tuning seed twice": (TINY_FIXED + ONE_POINT.replace("[100]", "[100, 100]"), "tuning_seeds lists seeds [100]"),
    "a baseline that is a list": (
        TINY_FIXED + ONE_POINT + 'baseline = ["sgd"]\n[tuning.methods.sgd]\nopt = "sgd"\n',
        "baseline must name another method, got ['sgd']",
    ),
    "a baseline that is a table": (
        TINY_FIXED + ONE_POINT + 'baseline = { name = "sgd" }\n[tuning.methods.sgd]\nopt = "sgd"\n',
        "baseline must name another method, got {'name': 'sgd'}",
    ),
}


@pytest.mark.parametrize("kind", NOT_TOLD_APART)
def test_a_tuned_grid_whose_cells_or_runs_are_not_told_apart_is_refused_before_anything_runs(
    tmp_path, capsys, monkeypatch, kind
):
    # one cell's final runs trained with another's choice, or final runs that never ran while
    # `tune` said it succeeded: a grid that would do either is refused in one line
    text, message = NOT_TOLD_APART[kind]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.toml").write_text(text)
    before = snapshot(tmp_path)
    assert message in refused(capsys, "tune", "g.toml", "--root", "runs")
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()


def test_two_methods_that_choose_the_same_point_share_their_final_runs_and_both_have_them(tmp_path, capsys):
    # the same final specs twice in one submission: the second copy was "skipped" as if another
    # process held it, so those final runs never ran and `tune` said it had succeeded
    twin = ONE_POINT + '[tuning.methods.adam_again]\nopt = "adam"\nspace = { lr = [0.01] }\n'
    (tmp_path / "g.toml").write_text(PARITY_FIXED + "patience = 20\n" + twin)
    root = tmp_path / "runs"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root)]) == 0
    assert "skipped" not in capsys.readouterr().err
    record = json.loads((root / "final" / "tuning.json").read_text())
    finished = {json.loads(p.read_text())["run_id"] for p in (root / "final").rglob("result.json")}
    (adam, again) = record["chosen"]
    assert adam["final_runs"] == again["final_runs"] and set(adam["final_runs"]) == finished and len(finished) == 5


def test_tuning_json_is_strict_json_and_a_record_with_infinity_literals_still_reads(tmp_path):
    (tmp_path / "g.toml").write_text(TUNED.replace('"train.steps" = 40', '"train.steps" = 10').replace(
        "eval_every = 10", "eval_every = 5"))  # fmt: skip
    root = tmp_path / "runs"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root)]) == 0
    text = (root / "final" / "tuning.json").read_text()

    def refuse(literal):
        raise ValueError(f"{literal} is not JSON")

    record = json.loads(text, parse_constant=refuse)  # what jq and other strict readers do
    assert all(t["median_time"] is None for c in record["chosen"] for t in c["tried"])  # nothing reached the target
    for t in (t for c in record["chosen"] for t in c["tried"]):
        t["times"], t["median_time"] = [math.inf for _ in t["times"]], math.inf
    (root / "final" / "tuning.json").write_text(json.dumps(record))  # Infinity literals, as records were written before
    assert all(t["median_time"] == math.inf for c in record_of(root / "final")["chosen"] for t in c["tried"])


DAMAGED_RECORDS = {"truncated": "{", "a list": "[]", "chosen a number": '{"chosen": 3}', "a list for a baseline": None}


@pytest.mark.parametrize("kind", DAMAGED_RECORDS)
def test_a_damaged_tuning_json_is_one_line_in_tune_and_a_warning_on_the_board(tmp_path, capsys, kind):
    (tmp_path / "g.toml").write_text(PARITY_FIXED + "patience = 20\n" + ONE_POINT)
    root = tmp_path / "runs"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root)]) == 0
    path = root / "final" / "tuning.json"
    record = json.loads(path.read_text())
    record["methods"]["adam"]["baseline"] = ["sgd"]
    path.write_text(DAMAGED_RECORDS[kind] or json.dumps(record))
    shutil.rmtree(root / "tuning")
    before, _ = snapshot(tmp_path), capsys.readouterr()
    assert str(path) in refused(capsys, "tune", tmp_path / "g.toml", "--root", root)
    assert snapshot(tmp_path) == before  # no tuning run started again
    assert "tuning.md" not in generate(root / "final", tmp_path / "board")
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning")]
    assert str(path) in warning and "tuning.md is left out" in warning


DAMAGED_TUNING_RUNS = {  # kind -> (the run's file, what it holds now)
    "metrics emptied": ("metrics.jsonl", ""),
    "an evaluation without a step": ("metrics.jsonl", '{"val_acc": 1.0, "train_acc": 1.0}\n'),
    "a step that is text": ("metrics.jsonl", '{"step": "10", "val_acc": 1.0, "train_acc": 1.0}\n'),
    "a result that is {}": ("result.json", "{}"),
    "a result that is a list": ("result.json", "[1, 2]"),
}


@pytest.mark.parametrize("kind", DAMAGED_TUNING_RUNS)
def test_a_damaged_finished_tuning_run_is_one_line_naming_the_file_not_a_failure(tmp_path, capsys, kind):
    # judged from no evaluations, the run would count as never reaching the target: a wrong choice
    name, content = DAMAGED_TUNING_RUNS[kind]
    (tmp_path / "g.toml").write_text(TINY_FIXED + ONE_POINT)
    root = tmp_path / "runs"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root)]) == 0
    shutil.rmtree(root / "final")
    (damaged,) = (root / "tuning").rglob(name)
    damaged.write_text(content)
    capsys.readouterr()
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root)]) == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert str(damaged) in error and not (root / "final").exists()


def test_a_dry_run_estimates_the_whole_tune_from_measured_step_costs_and_says_when_the_race_cannot_help(
    tmp_path, capsys, monkeypatch
):
    from suite.bench import cost

    measured = []
    real = cost.measure
    monkeypatch.setattr(cost, "measure", lambda spec, *a, **k: measured.append(spec) or real(spec, *a, **k))
    (tmp_path / "g.toml").write_text(TINY_FIXED + ONE_POINT.replace("trials = 1", "trials = 1\nrace = true"))
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(tmp_path / "runs"), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "up to" in err and "for 6 runs, each to its budget" in err  # 1 trial x 1 tuning seed + 5 final seeds
    assert "the race cannot help: a search of one trial has no rival" in err
    assert len(measured) == 1 and not (tmp_path / "runs").exists()  # one shape, measured; nothing written


def test_the_decay_plot_sets_trials_without_a_time_apart_by_why(monkeypatch):
    # a trial that never held the target, or that the race stopped, has no time: it must not read as one
    from suite.leaderboard.studies import tuning as page

    figures = []
    monkeypatch.setattr("suite.leaderboard.plots.to_png", lambda fig: figures.append(fig) or b"png")
    tried = [
        {"settings": {"lr": 1e-2, "weight_decay": 1e-3, "decoupled_weight_decay": False}, "median_time": 900.0},
        {"settings": {"lr": 1e-3, "weight_decay": 1.0, "decoupled_weight_decay": True}, "median_time": 4000.0},
        {"settings": {"lr": 1e-4, "weight_decay": 1e-2, "decoupled_weight_decay": True}, "median_time": math.inf},
        {"settings": {"lr": 3e-2, "weight_decay": 1e-2}, "median_time": math.inf, "raced": [True, True]},
        {"settings": {"lr": 1e-1, "weight_decay": 1e-3}, "median_time": 2000.0},  # SGD: no coupling setting
    ]
    record = {
        "methods": {"adam": {"fixed": {}}},
        "shared": {"lr": None},
        "chosen": [{"cell": "c", "method": "adam", "tried": tried}],
    }
    assert page.tuning_scatter(record) == b"png"
    (ax,) = [ax for ax in figures[0].axes if ax.get_visible()]
    marks = {
        (line.get_marker(), line.get_markerfacecolor() == "none"): line.get_ydata()[0]
        for line in ax.lines
        if len(line.get_ydata())
    }
    band = marks["x", False]
    assert marks["o", True] == 900 and marks["o", False] == 4000  # coupled hollow, decoupled filled
    assert marks["s", False] == 2000  # neither: the decay its optimizer defines
    assert "the decay its optimizer defines" in [t.get_text() for t in figures[0].legends[0].get_texts()]
    assert marks["^", False] == band > 4000 and ax.get_yticklabels()[-1].get_text() == "no time"


def test_the_forest_plot_marks_an_interval_that_goes_past_its_axis(monkeypatch):
    # a seed that failed makes a bound 0 or inf: the clipped end carries an arrow, not a false end
    from suite.leaderboard.studies import tuning as page
    from suite.leaderboard.tuned import Judgement, Verdict

    figures = []
    monkeypatch.setattr("suite.leaderboard.plots.to_png", lambda fig: figures.append(fig) or b"png")
    speedups = {"a": (1.75, 0.0, 2.0), "b": (0.9, 0.67, 1.0)}
    verdicts = [
        Verdict("c", m, {}, {}, None, "adam", {"speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi})
        for m, (s, lo, hi) in speedups.items()
    ]
    assert page.speedup_forest(Judgement(verdicts, [], {})) == b"png"
    arrows = [
        (line.get_marker(), line.get_xdata()[0]) for line in figures[0].axes[0].lines if line.get_marker() in "<>"
    ]
    assert arrows == [("<", 1e-2)]
