"""W&B tracking, offline: the files a compute node writes for `wandb sync` hold the right run."""

import json
import math
import os
import signal
import string
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TINY, TINY_FIXED, as_args, cli, wait_for_step

from suite.cli import main
from suite.launch.grid import load
from suite.launch.tracking import ID_FILE, default_mode, job_type, kept_run_id, make_tracker, problem
from suite.specs.cell import Cell
from suite.specs.spec import canonical, cell_id, spec_id

# a grid's workers run in this process (chunks_here): W&B's files are the point, not the processes
pytestmark = pytest.mark.usefixtures("chunks_in_process")
OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
ARGS = as_args({**TINY, "train.steps": 20})


def read_records(path: Path) -> list:
    """The records of a .wandb file (W&B's LevelDB-style log: 7-byte header, 32 KiB blocks of
    records, each with a 7-byte header: crc32, length, type FULL/FIRST/MIDDLE/LAST)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        block_left = 32768 - pos % 32768
        if block_left < 7:  # block trailer
            pos += block_left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        if length == 0 and kind == 0:
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def kept_id(run_dir: Path) -> str:
    return (run_dir / ID_FILE).read_text().strip()


def offline_runs(wandb_dir: Path, run: str) -> list[dict]:
    """What W&B would upload for a run id, one entry per attempt (a resumed run writes another
    offline run with the same id), oldest first."""
    files = sorted(wandb_dir.glob(f"wandb/offline-run-*-{run}/run-{run}.wandb"))
    return [read_offline(f) for f in files]


def offline_run(wandb_dir: Path, run: str) -> dict:
    """What W&B would upload for one offline run: the run record, history and summary."""
    runs = offline_runs(wandb_dir, run)
    assert len(runs) == 1, runs
    return runs[0]


def read_offline(path: Path) -> dict:
    out = {"history": [], "summary": {}, "exit": None, "artifacts": [], "artifact_files": []}
    for record in read_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
            out["config"] = {i.key: json.loads(i.value_json) for i in record.run.config.update}
        elif kind == "history":
            out["history"].append(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            )
        elif kind == "summary":
            out["summary"].update({i.key: json.loads(i.value_json) for i in record.summary.update})
        elif kind == "exit":
            out["exit"] = record.exit.exit_code
        elif kind == "artifact":
            out["artifacts"].append(record.artifact.name)
            out["artifact_files"] += [entry.path for entry in record.artifact.manifest.contents]
    return out


def test_grid_cell_offline_run_has_group_job_type_config_curves_and_summary(tmp_path):
    grid = tmp_path / "wb.toml"
    grid.write_text('name = "wbgrid"\n' + TINY_FIXED + '[axes]\nopt = ["adamlr", "adam"]\n')
    env = {"WANDB_DIR": str(tmp_path), "WANDB_PROJECT": "suite-test", **OFFLINE}
    proc = cli("grid", grid, "--root", tmp_path / "runs", env=env)  # --wandb defaults to WANDB_MODE
    assert proc.returncode == 0, proc.stderr
    cell, other = load(grid, tmp_path / "runs").cells
    run, other_run = (offline_run(tmp_path, kept_id(c.run_dir)) for c in (cell, other))
    # the group is the problem (the cell without its method and seed): both methods' runs side by side
    assert run["run"].run_group == other_run["run"].run_group == problem(cell.spec)
    assert run["run"].job_type == "adamlr+none+random" and other_run["run"].job_type == "adam+none+random"
    assert run["run"].project == "suite-test"
    tags = list(run["run"].tags)
    assert {"modular", "mlp", "adamlr", "random", "seed0", "wbgrid"} <= set(tags) and len(tags) == len(set(tags))
    assert {k: v for k, v in run["config"].items() if not k.startswith("_")} == canonical(cell.spec) | {
        "spec_id": spec_id(cell.spec),
        "cell_id": cell_id(cell.spec),
        "method": "adamlr+none+random",
        "grid": "wbgrid",
        "experiment": "wbgrid",
    }
    metrics = [json.loads(line) for line in (cell.run_dir / "metrics.jsonl").read_text().splitlines()]
    history = [{k: v for k, v in h.items() if not k.startswith("_")} for h in run["history"]]
    assert [h["val_acc"] for h in history] == [m["val_acc"] for m in metrics]
    assert [h["_step"] for h in run["history"]] == [m["step"] for m in metrics] == [0, 10, 20, 30, 40]
    result = json.loads((cell.run_dir / "result.json").read_text())
    for key in ("memorization_step", "grok_step", "delay", "final_val_acc", "steps", "best_val_acc"):
        assert run["summary"][key] == result[key]
    grokked = result["grok_step"] is not None
    assert run["summary"]["grokked"] == grokked and run["summary"]["time_to_target_censored"] == (not grokked)
    assert run["summary"]["time_to_target"] == (result["grok_step"] if grokked else math.inf)  # as on the board
    assert run["artifacts"] == [f"run-{spec_id(cell.spec)}"]
    assert run["exit"] == 0


def test_run_flag_overrides_the_environment(tmp_path):
    env = {"WANDB_DIR": str(tmp_path), "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    proc = cli("run", *ARGS, "--out", tmp_path / "off", env=env)
    assert proc.returncode == 0 and not (tmp_path / "wandb").exists() and not (tmp_path / "off" / ID_FILE).exists()
    proc = cli("run", *ARGS, "--wandb", "offline", "--out", tmp_path / "on", env=env)
    assert proc.returncode == 0, proc.stderr
    run = offline_run(tmp_path, kept_id(tmp_path / "on"))
    assert run["run"].job_type == "adam+none+random"


def test_modes(monkeypatch, tmp_path):
    for env, mode in (("offline", "offline"), ("online", "online"), ("disabled", "off"), ("", "off")):
        monkeypatch.setenv("WANDB_MODE", env)
        assert default_mode() == mode
    monkeypatch.setenv("WANDB_SWEEP_ID", "abc123")  # a sweep agent's run: tracked unless WANDB_MODE says otherwise
    assert default_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert default_mode() == "offline"
    assert make_tracker("off", Cell({}, tmp_path)) is None
    with pytest.raises(Exception, match="--wandb takes off, offline, online"):
        make_tracker("sometimes", Cell({}, tmp_path))


def test_a_run_dir_keeps_its_id_and_a_fresh_one_gets_a_new_one(tmp_path):
    ids = {kept_run_id(tmp_path / "fresh") for _ in range(20)}
    # 8 of [a-z0-9], as W&B makes them (not str.islower: an id of digits alone has no case and is valid)
    assert len(ids) == 20 and all(len(i) == 8 and set(i) <= set(string.ascii_lowercase + string.digits) for i in ids)
    (tmp_path / "resumed").mkdir()
    (tmp_path / "resumed" / ID_FILE).write_text("kept1234\n")
    assert kept_run_id(tmp_path / "resumed") == "kept1234"


def test_bad_input_with_tracking_on_leaves_no_run_dir(tmp_path):
    proc = cli(
        "run",
        "--model",
        "resnet18",
        "--wandb",
        "offline",
        "--out",
        tmp_path / "run",
        env={"WANDB_DIR": str(tmp_path), **OFFLINE},
    )
    assert proc.returncode == 2 and "takes" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


ENVIRONMENTS = {  # what W&B would do without a word -> what the line says
    "a misspelled WANDB_MODE (tracking off)": ({"WANDB_MODE": "ofline"}, "'ofline' (from --wandb or WANDB_MODE)"),
    "WANDB_DIR a file (runs go to /tmp)": ({"WANDB_DIR": "file", **OFFLINE}, "WANDB_DIR: cannot write to file"),
    "WANDB_DIR under a file": ({"WANDB_DIR": "file/wandb", **OFFLINE}, "WANDB_DIR: cannot write to file/wandb"),
}


@pytest.mark.parametrize("command", ["run", "grid"])
@pytest.mark.parametrize("kind", ENVIRONMENTS)
def test_a_wandb_environment_that_would_lose_the_runs_is_one_line_before_anything_runs(tmp_path, kind, command):
    env, message = ENVIRONMENTS[kind]
    (tmp_path / "file").write_text("in the way")
    (tmp_path / "g.toml").write_text(TINY_FIXED)
    args = ["run", *ARGS, "--out", "run"] if command == "run" else ["grid", "g.toml", "--root", "runs"]
    proc = cli(*args, env=env, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "g.toml"]
    assert cli(*args, "--wandb", "off", env=env, cwd=tmp_path).returncode == 0  # the flag says what to do


def test_a_resumed_run_continues_its_wandb_run_and_a_fresh_run_of_the_spec_starts_another(tmp_path):
    args = [
        "run",
        "--set",
        "p=23",
        "--set",
        "batch_size=64",
        "--set",
        "d=32",
        "--set",
        "hidden=64",
        "--set",
        "eval_every=50",
        "--set",
        "checkpoint_every=100",
        "--set",
        "patience=none",
        "--steps",
        "600",
        "--wandb",
        "offline",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_DIR": str(tmp_path), **OFFLINE}
    out = tmp_path / "run"
    proc = subprocess.Popen(  # a process of its own: Slurm's signal stops it
        [sys.executable, "-m", "suite", *args, "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_step(proc, out, 200)
    proc.send_signal(signal.SIGUSR1)  # Slurm's warning before a requeue
    assert proc.wait(timeout=120) == 3, proc.communicate()[1]
    first = kept_id(out)
    resumed = cli(*args, "--out", out, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert kept_id(out) == first
    attempts = offline_runs(tmp_path, first)
    assert [a["exit"] for a in attempts] == [3, 0]
    assert attempts[1]["history"][-1]["_step"] == 600 and attempts[1]["summary"]["steps"] == 600
    fresh = cli(*args, "--out", tmp_path / "again", env=env)  # the same spec in another run folder
    assert fresh.returncode == 0, fresh.stderr
    assert kept_id(tmp_path / "again") != first
    assert offline_run(tmp_path, kept_id(tmp_path / "again"))["config"]["spec_id"] == spec_id(
        json.loads((out / "spec.json").read_text())
    )


def test_dotted_flags_set_settings_and_bad_ones_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--set",
                "p=11",
                "--sampler.batch_size",
                "16",
                "--model.d=16",
                "--model.hidden",
                "32",
                "--opt.lr",
                "3e-3",
                "--train.steps=20",
                "--train.eval_every",
                "10",
                "--wandb",
                "off",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    spec = json.loads((out / "spec.json").read_text())
    assert (spec["model"]["d"], spec["model"]["hidden"], spec["opt"]["lr"]) == (16, 32, 0.003)
    assert (spec["train"]["steps"], spec["train"]["eval_every"]) == (20, 10)
    capsys.readouterr()
    assert main(["run", "--opt.nosuch", "1", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --set opt.nosuch: the opt 'adam' does not take 'nosuch'; it takes betas, decoupled_weight_decay, eps, "
        "lr, weight_decay"
    )
    for leftover in (["--bogus", "1"], ["--opt.lr"], ["--opt.lr", "--train.steps=5"], ["1e-3"]):
        with pytest.raises(SystemExit) as stop:
            main(["run", *leftover, "--out", str(tmp_path / "bad")])
        assert stop.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # other commands take no settings
        main(["status", "grid.toml", "--opt.lr", "1e-3"])
    assert not (tmp_path / "bad").exists()


def test_the_readme_sweep_drives_suite_run(tmp_path):
    """The README's sweep, run as its agent would run it (the command with ${args} filled in and
    the environment and config file set up by wandb's own code), offline, with the first value of
    each parameter and a tiny cell."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args
    from wandb.sdk.lib import config_util

    readme = (REPO / "README.md").read_text()
    sweep = yaml.safe_load(readme.split("<!-- sweep -->\n", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0])
    params = {k: v["values"][0] if "values" in v else v["value"] for k, v in sweep["parameters"].items()}
    params |= {
        "task.p": 11,
        "sampler.batch_size": 16,
        "model.d": 16,
        "model.hidden": 32,
        "train.steps": 20,
        "train.eval_every": 10,
    }
    command_args = {k: {"value": v} for k, v in params.items()}
    args = create_sweep_command_args({"args": command_args})["args"]
    assert "--opt.lr=0.003" in args
    filled = {"${env}": [], "${interpreter}": [sys.executable], "${args}": args}
    command = [part for c in sweep["command"] for part in filled.get(c, [c])]
    config_util.save_config_file_from_dict(tmp_path / "sweep-config.yaml", command_args)
    agent = {
        "WANDB_SWEEP_ID": "sweep1",
        "WANDB_RUN_ID": "agentrun",
        "WANDB_SWEEP_PARAM_PATH": str(tmp_path / "sweep-config.yaml"),
    }
    assert command[:3] == [sys.executable, "-m", "suite"]  # `python -m suite ARGS`: run here, in this process
    proc = cli(*command[3:], cwd=tmp_path, env={"WANDB_DIR": str(tmp_path), **OFFLINE, **agent})
    assert proc.returncode == 0, proc.stderr
    run_dir = (tmp_path / proc.stdout.strip().splitlines()[-1]).parent
    spec = json.loads((run_dir / "spec.json").read_text())
    assert spec["opt"]["name"] == "adamlr" and spec["seed"] == params["seed"]
    assert all(spec[k.split(".")[0]][k.split(".")[1]] == v for k, v in params.items() if "." in k)
    assert kept_id(run_dir) == "agentrun"  # the agent names the W&B run; the run folder records that name
    config = offline_run(tmp_path, "agentrun")["config"]
    assert config["spec_id"] == spec_id(spec) and config["method"] == "adamlr+none+random"
    assert config["opt.lr"] == 0.003 and config["opt"] == canonical(spec)["opt"]


def test_a_training_run_sends_its_curves_plot_and_a_probe_run_its_scores_per_layer(tmp_path):
    env = {"WANDB_DIR": str(tmp_path), **OFFLINE, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = cli("run", *ARGS, "--out", tmp_path / "train", env=env)
    assert proc.returncode == 0, proc.stderr
    trained = offline_run(tmp_path, kept_id(tmp_path / "train"))
    assert sorted(trained["artifact_files"]) == ["curves.png", "metrics.jsonl", "result.json"]
    probe = ["--task", "number_probe", "--model", "minilm", "--set", "runs=2", "--set", "per_group=8"]
    proc = cli("run", *probe, "--out", tmp_path / "probe", env=env)
    assert proc.returncode == 0, proc.stderr
    run = offline_run(tmp_path, kept_id(tmp_path / "probe"))
    result = json.loads((tmp_path / "probe" / "result.json").read_text())
    assert run["run"].job_type == "number_probe" and run["config"]["model"] == {
        "name": "minilm",
        **result["spec"]["model"],
    }
    rho = [h["numbers/rho"] for h in run["history"] if "numbers/rho" in h]
    assert rho == [row["rho"]["mean"] for row in result["numbers"]["layers"]]  # step = layer, 0..6
    best = result["numbers"]["best"]["by_r2"]
    assert run["summary"]["numbers/best_layer"] == best["layer"]
    assert run["summary"]["numbers/best_pls_r2"] == best["pls_r2"]["mean"]
    assert run["artifacts"] == [f"run-{result['run_id']}"] and run["exit"] == 0
    assert sorted(run["artifact_files"]) == ["probe.csv", "probe_layers.png", "probe_pc1.png", "result.json"]


def test_track_logs_finished_run_folders_grouped_by_problem_and_typed_by_tuned_method(tmp_path):
    from test_leaderboard_embedding import write_run

    root = tmp_path / "board"
    for opt in ("adam", "adamw"):
        write_run(root, 0, opt=opt, grok_step=300 if opt == "adam" else None)
    result_of = {p.parent: json.loads(p.read_text()) for p in root.rglob("result.json")}
    tuned = next(d for d, r in result_of.items() if r["spec"]["opt"]["name"] == "adamw")
    result_of[tuned] |= {"grid": "tuned-final", "experiment": "grokfast_control"}  # a tuned method's final run
    (tuned / "result.json").write_text(json.dumps(result_of[tuned]))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    env = {"WANDB_DIR": str(tmp_path), **OFFLINE}
    proc = cli("track", root, "--wandb", "offline", env=env)
    assert proc.returncode == 0, proc.stderr
    said = proc.stderr.splitlines()  # one line a run, none of W&B's own (7,701 lines for 220 runs before)
    assert len(said) == 3 and said[0].startswith("[1/2] logged ") and said[-1] == "2 runs logged to W&B (offline)"
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # nothing written into them
    runs = {d: offline_run(tmp_path, "r" + spec_id(r["spec"])[:7]) for d, r in result_of.items()}
    assert len({run["run"].run_group for run in runs.values()}) == 1  # one problem, two methods
    assert {run["run"].job_type for run in runs.values()} == {"adam+none+random", "grokfast_control"}
    assert runs[tuned]["summary"]["time_to_target"] == math.inf and len(runs[tuned]["history"]) > 0
    assert job_type(result_of[tuned]["spec"], "tuned-tuning", "tuning/adamw") == "adamw"
    refused = cli("track", root, "--wandb", "off", env=env)
    assert refused.returncode == 2 and "give --wandb offline" in refused.stderr
