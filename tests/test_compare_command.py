"""`suite compare`: two roots, or two methods of one root, side by side, checked against numbers
worked out by hand."""

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
from conftest import REPO
from test_leaderboard_embedding import write_run

from suite.cli import main

# the workers of a grid or tune run in this process: what they compute is the point, not their processes
pytestmark = pytest.mark.usefixtures("chunks_in_process")


def _roots(tmp_path, grok_a, grok_b, opt="adam"):
    for root, steps in (("a", grok_a), ("b", grok_b)):
        for seed, step in enumerate(steps):
            write_run(tmp_path / root, seed, opt=opt, grok_step=step)
    return str(tmp_path / "a"), str(tmp_path / "b")


def _rows(out) -> list[dict]:
    with open(out / "compare.csv") as f:
        return list(csv.DictReader(f))


def test_two_roots_give_the_paired_speedup_its_interval_p_and_verdict(tmp_path, capsys):
    # every seed twice as fast in B: the speed-up is 2 in every resample, and the exact signed-rank p
    # of 6 pairs all one way is 2 / 2^6, below 0.05
    a, b = _roots(tmp_path, [400, 400, 500, 600, 400, 500], [200, 200, 250, 300, 200, 250])
    assert main(["compare", a, b, "--out", str(tmp_path / "out")]) == 0
    (row,) = _rows(tmp_path / "out")
    assert float(row["time_a"]) == 450 and float(row["time_b"]) == 225
    assert float(row["speedup"]) == 2.0 and float(row["speedup_ci_low"]) == 2.0 == float(row["speedup_ci_high"])
    assert math.isclose(float(row["p_value"]), 2 / 64) and row["verdict"] == "faster" and row["paired"] == "True"
    assert "| faster |" in capsys.readouterr().out
    assert (tmp_path / "out" / "compare.md").read_text().startswith("# B against A")


def test_a_failed_seed_counts_as_infinity_and_too_few_seeds_resolve_nothing(tmp_path):
    a, b = _roots(tmp_path, [400, None, 400], [200, 200, None])
    assert main(["compare", a, b, "--out", str(tmp_path / "out")]) == 0
    (row,) = _rows(tmp_path / "out")
    assert float(row["time_a"]) == 400 and float(row["time_b"]) == 200  # medians of {400, 400, inf}, {200, 200, inf}
    assert row["verdict"] == "not resolved (n = 3)"


def test_one_root_compares_the_methods_its_filters_keep(tmp_path):
    for seed in range(5):
        write_run(tmp_path / "r", seed, opt="adam", grok_step=600)
        write_run(tmp_path / "r", seed, opt="adamw", grok_step=300)
    args = [
        "compare",
        str(tmp_path / "r"),
        "--a",
        "opt.name=adam",
        "--b",
        "opt.name=adamw",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(args) == 0
    (row,) = _rows(tmp_path / "o")
    assert (row["method_a"], row["method_b"], float(row["speedup"])) == ("adam", "adamw", 2.0)


def test_filters_on_a_problem_setting_compare_each_method_with_itself_across_problems(tmp_path):
    # embed_init 1 grokks at 600, 0.03 at 300, for adam and adamw alike; a third problem (op mul) differs
    # in a setting the filters do not name, so nothing meets it
    for seed in range(5):
        for opt in ("adam", "adamw"):
            write_run(tmp_path / "r", seed, opt=opt, grok_step=600, model={"embed_init": 1.0})
            write_run(tmp_path / "r", seed, opt=opt, grok_step=300, model={"embed_init": 0.03})
        write_run(tmp_path / "r", seed, grok_step=300, model={"embed_init": 0.03}, task={"op": "mul"})
    args = ["compare", str(tmp_path / "r"), "--a", "model.embed_init=1", "--b", "model.embed_init=0.03"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 0
    rows = _rows(tmp_path / "o")
    assert sorted((r["method_a"], r["method_b"]) for r in rows) == [
        ("adam model.embed_init=1.0", "adam model.embed_init=0.03"),
        ("adamw model.embed_init=1.0", "adamw model.embed_init=0.03"),
    ]
    # a model setting leaves each seed's data alike: paired, 5 pairs all one way, p = 2 / 2^5, so the
    # interval [2, 2] alone does not make it faster
    for row in rows:
        assert float(row["speedup"]) == 2.0 and row["paired"] == "True" and row["verdict"] == "not resolved (n = 5)"
        assert math.isclose(float(row["p_value"]), 2 / 32)


def test_problems_of_different_task_settings_are_not_paired(tmp_path):
    for seed in range(5):
        write_run(tmp_path / "r", seed, grok_step=600, task={"skew": 0})
        write_run(tmp_path / "r", seed, grok_step=300, task={"skew": 3})
    args = ["compare", str(tmp_path / "r"), "--a", "task.skew=0", "--b", "task.skew=3", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    (row,) = _rows(tmp_path / "o")
    # a seed draws other pairs under another skew: unpaired, the rank sum's extreme 2 of C(10, 5), which
    # 5 seeds a side can reach
    assert row["paired"] == "False" and math.isclose(float(row["p_value"]), 2 / 252) and row["verdict"] == "faster"


def test_a_problem_setting_both_filters_name_alike_only_narrows_both_sides(tmp_path):
    for seed in range(5):
        for op, slow in (("add", 600), ("mul", 900)):
            write_run(tmp_path / "r", seed, opt="adam", grok_step=slow, task={"op": op})
            write_run(tmp_path / "r", seed, opt="adamw", grok_step=300, task={"op": op})
    args = ["compare", str(tmp_path / "r"), "--a", "opt.name=adam", "--a", "task.op=mul"]
    assert main([*args, "--b", "opt.name=adamw", "--b", "task.op=mul", "--out", str(tmp_path / "o")]) == 0
    (row,) = _rows(tmp_path / "o")
    assert (row["method_a"], row["method_b"], float(row["speedup"])) == ("adam", "adamw", 3.0)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--a", "opt.name"], "--a takes KIND.KEY=VALUE"),
        (["--a", "opt.nmae=adam", "--b", "opt.name=adam"], "no run has a setting 'opt.nmae'"),
        ([], "give --a and --b filters"),
        (["--a", "opt.name=adam", "--a", "opt.name=sgd"], "--a names opt.name twice (adam, sgd)"),  # one was dropped
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, extra, message):
    write_run(tmp_path / "r", 0)
    assert main(["compare", str(tmp_path / "r"), *extra, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_an_out_that_cannot_be_written_is_one_line_before_any_run_is_read(tmp_path, capsys, monkeypatch):
    write_run(tmp_path / "r", 0)
    (tmp_path / "file").write_text("in the way")
    monkeypatch.setattr("suite.leaderboard.compare.collect", lambda root: pytest.fail("read the runs first"))
    assert main(["compare", str(tmp_path / "r"), "--a", "opt.name=adam", "--out", str(tmp_path / "file" / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write to" in err[0] and (tmp_path / "file").read_text() == "in the way"


def test_two_roots_of_different_methods_say_that_two_roots_pair_a_method_with_itself(tmp_path, capsys):
    for seed in range(5):
        write_run(tmp_path / "a", seed, opt="adam", grok_step=400)
        write_run(tmp_path / "b", seed, opt="adamlr", grok_step=200)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no cell where both sides ran the same method" in err and "--a / --b filters" in err
    assert not (tmp_path / "out").exists()


def test_a_quick_run_compares_with_the_committed_board_of_its_problem(tmp_path, capsys):
    # README's quick grid stops a run sat at chance (train.chance_patience 2,000), the adamlr board's
    # runs never stopped so: that stopping rule split the same method in two, and nothing met
    (tmp_path / "quick.toml").write_text(
        'name = "quick"\n[fixed]\ntask = "modular"\nmodel = "mlp"\n"train.steps" = 50\n'
        '[axes]\nopt = ["adam", "adamlr"]\nseed = [0, 1]\n'
    )
    assert main(["grid", str(tmp_path / "quick.toml"), "--root", str(tmp_path / "runs")]) == 0
    board = REPO / "leaderboards" / "adamlr" / "runs"
    assert main(["compare", str(tmp_path / "runs"), str(board), "--out", str(tmp_path / "out")]) == 0
    rows = _rows(tmp_path / "out")
    assert sorted((r["method_a"], r["method_b"]) for r in rows) == [("adam", "adam"), ("adamlr", "adamlr c=10")]
    assert all(r["seeds_a"] == "2" and r["seeds_b"] == "10" and r["budget"] == "50" for r in rows)


def test_a_seed_run_under_two_stop_rules_counts_once(tmp_path, capsys):
    # each root holds every seed twice, once with an early stop at chance: 3 seeds a side, not 6 pairs
    # (6 pairs all one way would give p = 2 / 64 and "faster")
    a, b = _roots(tmp_path, [400, 400, 500], [200, 200, 250])
    for root in (a, b):
        for run in list(Path(root).glob("*/seed*")):
            copy = Path(root) / f"{run.parent.name}-chance" / run.name
            shutil.copytree(run, copy)
            for name in ("spec.json", "result.json"):
                data = json.loads((copy / name).read_text())
                (data if name == "spec.json" else data["spec"])["train"]["chance_patience"] = 500
                (copy / name).write_text(json.dumps(data))
    assert main(["compare", a, b, "--out", str(tmp_path / "out")]) == 0
    (row,) = _rows(tmp_path / "out")
    assert (row["seeds_a"], row["seeds_b"], row["paired"]) == ("3", "3", "True")
    assert row["verdict"] == "not resolved (n = 3)"
    assert "runs of a seed that also ran otherwise were left out" in capsys.readouterr().err
