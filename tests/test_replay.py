"""`python -m suite replay`: a recorded run's first steps trained again and compared, value by value."""

import json
import os
import shutil
import tempfile

import pytest
from conftest import TINY, as_args, cli


@pytest.fixture
def stacked(tmp_path):
    """Seeds 0 and 1 of a tiny cell trained as one stack, 40 steps, evaluated every 10."""
    assert cli("run", "--seeds", "0-1", *as_args(TINY), "--root", tmp_path / "runs").returncode == 0
    return sorted((tmp_path / "runs").glob("*/seed1-*"))[0]


def snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def edited(run_dir, step, key, value):
    """run_dir's metrics.jsonl with one value changed at one step."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if row["step"] == step:
            row[key] = value
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_a_stack_member_replays_alone_to_the_same_bits_and_its_folder_is_only_read(stacked, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    before = snapshot(stacked)
    proc = cli("replay", stacked, "--steps", "30")
    assert proc.returncode == 0, proc.stderr
    line, where = proc.stdout.splitlines()
    # its losses and accuracies are the record's; the stack measured its members' norms together
    assert line.startswith(f"{stacked}: ") and "the same bits at steps 0-30 (4 evaluations)" in line
    assert where.strip().startswith("at ") and ", in a stack of 2; replayed at " in where
    assert "replaying 1 of 1" in proc.stderr
    assert snapshot(stacked) == before and not any((tmp_path / "tmp").iterdir())  # nothing left behind


def test_a_changed_loss_is_named_with_its_step_and_the_exit_code_is_1(stacked):
    recorded = json.loads((stacked / "metrics.jsonl").read_text().splitlines()[2])["train_loss"]
    edited(stacked, 20, "train_loss", recorded * 1.01)
    proc = cli("replay", stacked)  # the default 200 steps: cut to the 40 the run logged
    assert proc.returncode == 1
    line = proc.stdout.splitlines()[0]
    assert f"differs from step 20: train_loss {recorded * 1.01!r} recorded, {recorded!r} replayed" in line
    assert line.endswith("largest relative difference 9.9e-03 (train_loss at step 20), over steps 0-40 (5 evaluations)")


def test_a_measure_that_parts_from_the_same_training_is_said_apart_and_still_exits_0(stacked):
    edited(stacked, 10, "emb_norm_rare", 1e6)
    proc = cli("replay", stacked, "--steps", "20")
    assert proc.returncode == 0
    assert "trained the same bits at steps 0-20 (3 evaluations); measures of the weights differ by up to 1.0e+00 " in (
        proc.stdout
    )
    assert "(emb_norm_rare at step 10)" in proc.stdout


def test_several_runs_are_counted_at_the_end(stacked):
    seed0 = next(stacked.parent.glob("seed0-*"))
    edited(stacked, 10, "val_loss", 0.0)
    proc = cli("replay", seed0, stacked, "--steps", "10")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{seed0}: ") and lines[2].startswith(f"{stacked}: differs from step 10: val_loss ")
    assert lines[-1] == "1 of 2 runs trained the same bits" and len(lines) == 5


def test_a_step_the_replay_never_logged_differs(stacked):
    rows = (stacked / "metrics.jsonl").read_text().splitlines()
    extra = json.loads(rows[2]) | {"step": 25}  # as if the run had been evaluated at step 25
    (stacked / "metrics.jsonl").write_text("\n".join(rows[:3] + [json.dumps(extra)] + rows[3:]) + "\n")
    proc = cli("replay", stacked, "--steps", "30")
    assert proc.returncode == 1
    assert "differs from step 25: the replay logged no such step" in proc.stdout


@pytest.mark.parametrize(
    "args, said",
    [
        (["{nowhere}"], "replay {nowhere}: no spec.json there (a run folder holds one from its start)"),
        (["{run}", "--steps", "0"], "--steps takes a positive number of steps, got 0"),
        (["{run}", "--steps", "5"], "replay {run}: it logged no step after 0 within 5 steps; replay more --steps"),
        (
            ["{broken}"],
            "replay {broken}: {broken}/metrics.jsonl: line 2 is not valid JSON; the run's history is damaged "
            "(delete the run folder to run it again)",
        ),
        (
            ["{run}", "{nowhere}"],
            "replay {nowhere}: no spec.json there (a run folder holds one from its start)",
        ),  # checked before the first replay
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_trained(stacked, tmp_path, args, said):
    names = {"run": stacked, "nowhere": tmp_path / "nowhere", "broken": tmp_path / "broken"}
    shutil.copytree(stacked, names["broken"])
    (names["broken"] / "metrics.jsonl").write_text('{"step": 0, "train_loss": 1.0}\n{"step": 10, "tr\n{"step": 20}\n')
    proc = cli("replay", *[a.format(**names) for a in args])
    assert proc.returncode == 2 and proc.stderr.strip() == "error: " + said.format(**names)
    assert proc.stdout == ""


def test_a_spec_this_suite_no_longer_runs_names_the_commit_that_made_it(stacked):
    spec = json.loads((stacked / "spec.json").read_text())
    spec["task"]["zipf_s"] = 1.0  # a setting renamed since
    (stacked / "spec.json").write_text(json.dumps(spec))
    result = json.loads((stacked / "result.json").read_text())
    (stacked / "result.json").write_text(json.dumps(result | {"git_commit": "c8aedd33f00d"}))
    for command in (["replay", stacked], ["run", "--like", stacked]):
        proc = cli(*command)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1
        assert (
            f"{stacked / 'spec.json'} is not a spec this suite runs (made at c8aedd33: check it out to rerun it): "
            in (proc.stderr)
            and "'zipf_s'" in proc.stderr
        )


def test_a_run_without_result_json_replays_what_it_logged(stacked):
    # an interrupted run: its metrics so far, no result.json to say where it was made
    (stacked / "result.json").unlink()
    proc = cli("replay", stacked, "--steps", "20")
    assert proc.returncode == 0, proc.stderr
    line, where = proc.stdout.splitlines()
    assert "the same bits at steps 0-20 (3 evaluations)" in line
    assert where.strip().startswith("where not recorded (no result.json); replayed at ")


def test_a_torn_last_line_is_what_a_killed_run_leaves_and_the_steps_before_it_replay(stacked):
    lines = (stacked / "metrics.jsonl").read_text().splitlines(keepends=True)
    (stacked / "metrics.jsonl").write_text("".join(lines[:3]) + lines[3][:15])
    os.remove(stacked / "result.json")
    os.mkfifo(stacked / "result.json")  # read as a file, it would keep replay waiting forever
    proc = cli("replay", stacked, "--steps", "30")
    assert proc.returncode == 0, proc.stderr
    line, where = proc.stdout.splitlines()
    assert "the same bits at steps 0-20 (3 evaluations)" in line
    assert where.strip().startswith("where not recorded (no result.json); replayed at ")
