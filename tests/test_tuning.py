"""The tuning protocol (suite/tuning.py, `suite tune`): the same budget for every method, the best
point by held time to target on the tuning seeds, rerun on final seeds tuning never saw."""

import json
import textwrap

import pytest
from conftest import TINY_FIXED

from suite import SuiteError
from suite.cli import main
from suite.grid import load
from suite.leaderboard import generate
from suite.leaderboard.studies import tuning
from suite.tuning import Method, parse

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
LEARNED = TUNED.replace(
    TINY_FIXED,
    textwrap.dedent("""
        [fixed]
        task = "sparse_parity"
        n_bits = 8
        k = 2
        n_examples = 256
        batch_size = 32
        d = 16
        hidden = 32
        "train.steps" = 100
        eval_every = 10
        hold = 20
        patience = 20
    """),
)


def test_tune_runs_both_phases_and_only_fresh_seeds_reach_the_board(tmp_path, capsys, monkeypatch):
    (tmp_path / "g.toml").write_text(LEARNED)
    root = tmp_path / "runs"
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
    written = generate(root / "final", tmp_path / "board")
    assert "tuning.md" in written and "[tuning](tuning.md)" in (tmp_path / "board" / "index.md").read_text()
    verdicts = (tmp_path / "board" / "tuning.md").read_text().split("## Verdicts on the final seeds")[1]
    sgd = next(line for line in verdicts.splitlines() if "| sgd |" in line)
    assert "| adam |" in sgd and sgd.rstrip(" |").endswith(("faster", "slower", "not resolved (n = 5)"))
    # a bound just above 1 prints the digits that put it above 1, as on the board (tables.bound_text)
    monkeypatch.setattr("suite.leaderboard.stats.speedup_interval", lambda *a: (1.0026, 1.5))
    generate(root / "final", tmp_path / "board")
    verdicts = (tmp_path / "board" / "tuning.md").read_text().split("## Verdicts on the final seeds")[1]
    sgd = next(line for line in verdicts.splitlines() if "| sgd |" in line)
    assert "[1.003x, 1.50x]" in sgd and sgd.rstrip(" |").endswith("faster")


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
    grid = TINY_FIXED + textwrap.dedent("""
        [[experiment]]
        name = "sum"
        fixed = { op = "add" }
        [[experiment]]
        name = "product"
        fixed = { op = "mul" }
        [tuning]
        trials = 1
        tuning_seeds = [100]
        final_seeds = [0, 1, 2, 3, 4]
        [tuning.methods.adam]
        opt = "adam"
        space = { lr = [0.01] }
    """)
    (tmp_path / "g.toml").write_text(grid)
    root = tmp_path / "runs"
    for name in ("sum", "product"):
        assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root), "--experiment", name]) == 0
    record = json.loads((root / "final" / "tuning.json").read_text())
    assert sorted(c["cell"] for c in record["chosen"]) == ["product", "sum"]
    final = [json.loads(p.read_text())["spec"]["task"]["op"] for p in (root / "final").rglob("result.json")]
    assert sorted(final) == ["add"] * 5 + ["mul"] * 5


def test_a_method_whose_search_found_no_working_point_gets_no_verdict(tmp_path):
    # no point reached the target on a tuning seed: its winner is the tie-break's (best val), and a
    # speed-up over it would measure the search, not the method
    (tmp_path / "g.toml").write_text(
        TUNED.replace('"train.steps" = 40', '"train.steps" = 10').replace("eval_every = 10", "eval_every = 5")
    )
    root = tmp_path / "runs"
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(root), "--workers", "2"]) == 0
    generate(root / "final", tmp_path / "board")
    verdicts = (tmp_path / "board" / "tuning.md").read_text().split("## Verdicts on the final seeds")[1]
    rows = {
        line.split("|")[2].strip(): [c.strip() for c in line.strip(" |").split("|")]
        for line in verdicts.splitlines()
        if line.startswith("| ")
    }
    assert rows["adam"][3] == "0/5"
    cells = rows["sgd"]
    assert cells[3] == "0/5" and cells[5] == "adam" and cells[6] == "-"
    assert cells[8] == "no verdict: both winners reached the target on no tuning seed"
    chosen = (tmp_path / "board" / "tuning.md").read_text().split("## Chosen")[1]
    assert chosen.count("inf (tie-break)") == 2


def test_the_profile_by_method_keeps_a_method_one_row_when_it_chose_different_points():
    # profile.md keys rows by settings; tuning.md's profile must not split a tuned method in two
    def row(cell, label, time):
        return {
            "task": "modular",
            "model": "mlp",
            "cell_label": cell,
            "settings": {},
            "method": label,
            "time_to_target": time,
        }

    rows = {
        ("add", "adamw"): row("op=add", "adamw lr=0.01", 500.0),
        ("add", "adamlr"): row("op=add", "adamlr lr=0.003 c=4", 1000.0),
        ("mul", "adamw"): row("op=mul", "adamw lr=0.01", 600.0),
        ("mul", "adamlr"): row("op=mul", "adamlr lr=0.002 c=10", 300.0),
    }
    table = [line.split("|")[1:-1] for line in tuning.profile_by_method(rows)[2].splitlines()[2:]]
    by_method = {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in table}
    assert set(by_method) == {"adamw", "adamlr"}
    assert by_method["adamw"][:2] == ["2", "1"] and by_method["adamlr"][:2] == ["2", "1"]
