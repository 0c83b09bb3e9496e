"""W&B tracking, offline: the files a compute node writes for `wandb sync` hold the right run."""

import json
import struct
from pathlib import Path

import pytest

from conftest import TINY_FIXED, run_cli
from suite.grid import load
from suite.spec import canonical, spec_id
from suite.tracking import default_mode, make_tracker, run_id


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
        length, kind = struct.unpack("<HB", data[pos + 4: pos + 7])
        if length == 0 and kind == 0:
            break
        pending += data[pos + 7: pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def offline_run(wandb_dir: Path, run: str) -> dict:
    """What W&B would upload for one offline run: the run record, history and summary."""
    files = sorted(wandb_dir.glob(f"wandb/offline-run-*-{run}/run-{run}.wandb"))
    assert len(files) == 1, files
    out = {"history": [], "summary": {}, "exit": None}
    for record in read_records(files[0]):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
            out["config"] = {i.key: json.loads(i.value_json) for i in record.run.config.update}
        elif kind == "history":
            out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            out["summary"].update({i.key: json.loads(i.value_json) for i in record.summary.update})
        elif kind == "exit":
            out["exit"] = record.exit.exit_code
    return out


def test_grid_cell_offline_run_has_group_job_type_config_curves_and_summary(tmp_path):
    grid = tmp_path / "wb.toml"
    grid.write_text('name = "wbgrid"\n' + TINY_FIXED + 'opt = "adamlr"\n')
    env = {"WANDB_DIR": str(tmp_path), "WANDB_MODE": "offline", "WANDB_PROJECT": "suite-test",
           "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
    proc = run_cli("grid", grid, "--root", tmp_path / "runs", env=env)  # --wandb defaults to WANDB_MODE
    assert proc.returncode == 0, proc.stderr
    cell = load(grid).cells[0]
    run = offline_run(tmp_path, run_id(cell.spec))
    assert run["run"].run_group == "wbgrid/modular/mlp" and run["run"].job_type == "adamlr"
    assert run["run"].project == "suite-test" and run["run"].run_id == f"cell-{spec_id(cell.spec)}"
    assert {"modular", "mlp", "adamlr", "random", "seed0", "wbgrid"} <= set(run["run"].tags)
    assert {k: v for k, v in run["config"].items() if not k.startswith("_")} == canonical(cell.spec)
    metrics = [json.loads(line) for line in (cell.run_dir(tmp_path / "runs") / "metrics.jsonl").read_text().splitlines()]
    history = [{k: v for k, v in h.items() if not k.startswith("_")} for h in run["history"]]
    assert [h["val_acc"] for h in history] == [m["val_acc"] for m in metrics]
    assert [h["_step"] for h in run["history"]] == [m["step"] for m in metrics] == [0, 10, 20, 30, 40]
    result = json.loads((cell.run_dir(tmp_path / "runs") / "result.json").read_text())
    for key in ("memorization_step", "grok_step", "delay", "final_val_acc", "steps"):
        assert run["summary"][key] == result[key]
    assert run["exit"] == 0


def test_run_flag_overrides_the_environment(tmp_path):
    env = {"WANDB_DIR": str(tmp_path), "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    args = ["--set", "p=11", "--set", "batch_size=16", "--set", "d=16", "--set", "hidden=32", "--steps", "20",
            "--set", "eval_every=10"]
    proc = run_cli("run", *args, "--out", tmp_path / "off", env=env)
    assert proc.returncode == 0 and not (tmp_path / "wandb").exists()
    proc = run_cli("run", *args, "--wandb", "offline", "--out", tmp_path / "on", env=env)
    assert proc.returncode == 0, proc.stderr
    spec = json.loads((tmp_path / "on/spec.json").read_text())
    run = offline_run(tmp_path, run_id(spec))
    assert run["run"].run_group == "run/modular/mlp" and run["run"].job_type == "adam"


def test_modes(monkeypatch):
    for env, mode in (("offline", "offline"), ("online", "online"), ("disabled", "off"), ("", "off")):
        monkeypatch.setenv("WANDB_MODE", env)
        assert default_mode() == mode
    assert make_tracker("off", {}) is None
    with pytest.raises(Exception, match="--wandb takes off, offline, online"):
        make_tracker("sometimes", {})
