"""Files in a root that no run of the suite writes, as a hostile or careless hand leaves them: JSON
nested 100,000 deep, a FIFO where a result or a history goes, a result whose seed is text or whose
grok step is NaN. Each command that reads a root says so in one line and goes on with the rest (a
board, an export), or refuses whole before it acts (track); none hangs or prints a traceback."""

import json
import os

import pandas as pd
import pytest
from conftest import run_cli
from test_leaderboard_embedding import write_run

from suite.cli import main

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def root(tmp_path):
    """Two seeds of two methods, and a run folder whose result.json is JSON nested 100,000 deep."""
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_run(root, seed, opt="adam")
        write_run(root, seed, opt="adamw", grok_step=200)
    (root / "deep").mkdir()
    (root / "deep" / "result.json").write_text(DEEP)
    return root


@pytest.mark.parametrize("command", ["leaderboard", "export", "compare"])
def test_json_nested_too_deep_is_a_warning_naming_the_file_and_the_rest_is_read(root, tmp_path, capsys, command):
    args = {
        "leaderboard": ["leaderboard", root, "--out", tmp_path / "board"],
        "export": ["export", root, "--out", tmp_path / "table"],
        "compare": ["compare", root, "--a", "opt.name=adam", "--b", "opt.name=adamw"],
    }[command]
    assert main([str(a) for a in args]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert any(str(root / "deep" / "result.json") in line and "nested too deep" in line for line in err.splitlines())


def test_a_deep_metrics_line_leaves_out_that_run_s_curves_only(root, tmp_path, capsys):
    history = next(root.glob("adam-*/seed0")) / "metrics.jsonl"
    history.write_text(DEEP + "\n" + history.read_text())
    assert main(["leaderboard", str(root), "--out", str(tmp_path / "board")]) == 0
    assert f"warning: {history}: line 1 is not an evaluation" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["result.json", "metrics.jsonl"])
@pytest.mark.parametrize("command", ["leaderboard", "export"])
def test_a_fifo_in_a_run_folder_is_never_opened_for_reading(root, tmp_path, command, name):
    """A reader that opened it would wait forever for a writer: the commands run as processes of their
    own, so that a hang fails the test instead of stopping it."""
    run = next(root.glob("adamw-*/seed1"))
    (run / name).unlink()
    os.mkfifo(run / name)
    out = tmp_path / "out"
    proc = run_cli(command, root, "--out", out, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{run / name} is not a regular file" in proc.stderr


@pytest.mark.parametrize(
    "damage, says",
    [
        ({"spec": "seed", "value": "0"}, "no integer seed"),
        ({"grok_step": float("nan")}, "grok_step is nan, not an integer or null"),
        ({"grok_step": None, "drop": "grok_step"}, "it has no grok_step"),  # not "never grokked"
    ],
)
def test_track_refuses_a_damaged_run_before_it_logs_any(tmp_path, capsys, monkeypatch, damage, says):
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_run(root, seed)
    damaged = root / "z-last" / "seed0"  # sorted after the good ones: they would be logged first
    damaged.parent.mkdir()
    (next(root.glob("adam-*/seed1"))).rename(damaged)
    result = json.loads((damaged / "result.json").read_text())
    if "spec" in damage:
        result["spec"]["seed"] = damage["value"]
    elif "drop" in damage:
        del result[damage["drop"]]
    else:
        result |= damage
    (damaged / "result.json").write_text(json.dumps(result))  # NaN as JSON's NaN, as Python writes it
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    (tmp_path / "wandb").mkdir()
    assert main(["track", str(root), "--wandb", "offline"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(damaged / "result.json") in err[0] and says in err[0], err
    assert list((tmp_path / "wandb").iterdir()) == []  # nothing logged


@pytest.mark.parametrize("line", ["[1, 2]", '{"val_acc": 0.5}', '{"step": "100"}'])
def test_a_metrics_line_that_is_no_evaluation_is_named_in_one_line(tmp_path, line):
    from suite.results.rundir import RunDir, UnreadableFile

    (tmp_path / "metrics.jsonl").write_text(f'{{"step": 0}}\n{line}\n{{"step": 100}}\n')
    with pytest.raises(UnreadableFile, match="line 2 is no evaluation of this suite"):
        RunDir(tmp_path).read_metrics()


@pytest.mark.parametrize("spec", ["[1, 2]", '{"task": 3}'])
def test_a_run_into_a_folder_whose_spec_json_is_no_spec_is_refused_in_one_line(tmp_path, capsys, spec):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "spec.json").write_text(spec)
    assert main(["run", "--steps", "100", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path / 'o'} holds a different spec; choose another --out"]


def test_a_result_without_its_grok_step_is_neither_done_nor_a_failure_to_grok(root, tmp_path, capsys):
    # a null grok step is a run that never grokked; a missing one is a file the suite did not write
    from suite.results.rundir import RunDir, UnreadableFile

    run = next(root.glob("adamw-*/seed1"))
    result = json.loads((run / "result.json").read_text())
    del result["grok_step"]
    (run / "result.json").write_text(json.dumps(result))
    with pytest.raises(UnreadableFile, match="it has no grok_step"):
        assert not RunDir(run).finished
    assert main(["leaderboard", str(root), "--out", str(tmp_path / "board")]) == 0
    assert f"warning: {run / 'result.json'}: it has no grok_step" in capsys.readouterr().err
    table = pd.read_csv(tmp_path / "board" / "modular-mlp.csv").set_index("method")
    assert table.loc["adamw", ["seeds", "grokked"]].tolist() == [1, 1]  # skipped, not counted as a failure
