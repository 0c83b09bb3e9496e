"""Bad input, one kind per case: a setting of a registered component (or of the loop) that makes
no sense, or a file the suite reads that is damaged. Each is one line on stderr starting with
"error:", exit code 2, and nothing written. The cases call the CLI's main() in this process (the
argument parsing, the commands and their error handling; tests/test_run.py runs a few of them as
separate processes, the way a user does)."""

import textwrap

import pytest
import torch
from conftest import TINY_FIXED, run_cli

from suite.cli import main
from suite.grid import load
from suite.rundir import write_json
from suite.spec import resolve

MODULAR = [
    "--set",
    "p=11",
    "--set",
    "train_frac=0.5",
    "--set",
    "test_frac=0.3",
    "--set",
    "batch_size=16",
    "--set",
    "d=8",
    "--set",
    "hidden=16",
    "--set",
    "eval_every=10",
    "--steps",
    "20",
]  # 60 training pairs
TRANSFORMER = ["--set", "p=11", "--set", "batch_size=16", "--set", "eval_every=10", "--steps", "20"]


def refused(capsys, *args) -> str:
    code = main([str(a) for a in args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def snapshot(folder):
    """Every file under folder with its bytes (the run dir lock aside)."""
    return {
        p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"
    }


SETTINGS = {  # kind -> (arguments, what the line says)
    "negative lr": ([*MODULAR, "--set", "lr=-0.01"], "lr must be positive"),
    "zero lr": (["--opt", "sgd", *MODULAR, "--set", "lr=0"], "lr must be positive"),
    "negative embedding lr (adamlr c)": (["--opt", "adamlr", *MODULAR, "--set", "c=-1"], "c must be positive"),
    "negative adamw lr": (["--opt", "adamw", *MODULAR, "--set", "lr=-1"], "lr must be positive"),
    "negative weight decay": ([*MODULAR, "--set", "weight_decay=-0.1"], "weight_decay must be >= 0"),
    "beta of 1": ([*MODULAR, "--set", "betas=0.9,1.0"], "betas must lie in [0, 1)"),
    "zero eps": ([*MODULAR, "--set", "eps=0"], "eps must be positive"),
    "momentum above 1": (["--opt", "sgd", *MODULAR, "--set", "momentum=1.5"], "momentum must lie in [0, 1)"),
    "adaptive c_min above c_max": (
        ["--opt", "adamlr_adaptive", *MODULAR, "--set", "c_min=5", "--set", "c_max=1"],
        "need 0 <= c_min <= c_max",
    ),
    "adaptive every 0": (["--opt", "adamlr_adaptive", *MODULAR, "--set", "every=0"], "every must be positive"),
    "nan setting": ([*MODULAR, "--set", "lr=nan"], "lr takes a finite float"),
    "infinite setting": ([*MODULAR, "--set", "train_frac=inf"], "train_frac takes a finite float"),
    "zero batch": ([*MODULAR, "--set", "batch_size=0"], "batch_size must be positive"),
    "batch larger than the training set": ([*MODULAR, "--set", "batch_size=61"], "larger than the training set (60"),
    "epoch batch larger than the training set": (
        ["--sampler", "epoch", *MODULAR, "--set", "batch_size=100"],
        "larger than the training set",
    ),
    "gradient sampler without an embedding": (
        ["--sampler", "grad_softmax", *MODULAR, "--set", "inputs=onehot"],
        "has no token embedding",
    ),
    "zero gamma": (["--sampler", "grad_softmax", *MODULAR, "--set", "gamma=0"], "gamma must be a finite number > 0"),
    "negative sampler rounds": (["--sampler", "frequency", *MODULAR, "--set", "rounds=-1"], "rounds must be >= 0"),
    "grokfast alpha of 1": (["--filter", "grokfast_ema", *MODULAR, "--set", "alpha=1"], "alpha must be in [0, 1)"),
    "negative grokfast lamb": (["--filter", "grokfast_ema", *MODULAR, "--set", "lamb=-2"], "lamb must be >= 0"),
    "zero grokfast window": (["--filter", "grokfast_ma", *MODULAR, "--set", "window=0"], "window must be positive"),
    "negative skew": ([*MODULAR, "--set", "split=skewed", "--set", "skew=-1"], "skew must be a finite number >= 0"),
    "negative data seed": ([*MODULAR, "--set", "data_seed=-3"], "data_seed must be >= 0"),
    "held-out block past p": ([*MODULAR, "--set", "split=rec", "--set", "k=20"], "k must be in [0, 9]"),
    "image resolution 0": (["--task", "polygons", "--set", "resolution=0"], "resolution must be in [8, 1024]"),
    "no validation images": (["--task", "polygons", "--set", "n_val=0"], "n_val must be in [1,"),
    "text context 0": (["--task", "zipf_text", "--set", "context=0"], "context >= 1"),
    "zero-width MLP": ([*MODULAR, "--set", "d=0"], "d and hidden must be positive"),
    "heads that do not divide the width": (
        ["--model", "transformer", "--set", "n_heads=3", *TRANSFORMER],
        "must be a multiple of n_heads",
    ),
    "zero heads": (["--model", "grokfast_transformer", "--set", "heads=0", *TRANSFORMER], "must be positive"),
    "evaluation interval past the budget": ([*MODULAR, "--set", "eval_every=50"], "eval_every (50) is past the budget"),
    "target accuracy above 1": ([*MODULAR, "--set", "target=1.5"], "target is an accuracy in (0, 1]"),
    "memorization accuracy 0": ([*MODULAR, "--set", "memorization=0"], "memorization is an accuracy in (0, 1]"),
    "zero gradient clip": ([*MODULAR, "--set", "grad_clip=0"], "grad_clip must be positive"),
    "zero hessian interval": ([*MODULAR, "--set", "hessian_every=0"], "hessian_every must be positive"),
    "negative warmup": ([*MODULAR, "--set", "warmup_steps=-1"], "warmup_steps, hold and patience must be >= 0"),
    "probe with one query per group": (["--task", "number_probe", "--set", "per_group=1"], "per_group >= 2"),
    "probe with zero threads": (["--task", "number_probe", "--set", "threads=0"], "threads must be >= 1"),
}


@pytest.mark.parametrize("kind", SETTINGS)
def test_a_setting_that_makes_no_sense(tmp_path, capsys, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    args, message = SETTINGS[kind]
    line = refused(capsys, "run", *args, "--out", tmp_path / "run")
    assert message in line
    assert list(tmp_path.iterdir()) == []


# --- files the suite reads ---------------------------------------------------------------------------


def tiny_spec():
    return resolve(
        {},
        {
            "p": 11,
            "train_frac": 0.5,
            "test_frac": 0.3,
            "batch_size": 16,
            "d": 8,
            "hidden": 16,
            "eval_every": 10,
            "train.steps": 20,
        },
    )


RUN = [*MODULAR]


def run_dir_holding(tmp_path, **files) -> tuple:
    """A run dir of tiny_spec() holding spec.json and the given files (name -> bytes)."""
    out = tmp_path / "run"
    out.mkdir()
    write_json(out / "spec.json", tiny_spec())
    for name, data in files.items():
        (out / name.replace("_", ".", 1)).write_bytes(data)
    return out


def checkpoint_bytes(state) -> bytes:
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


RUN_DIR_FILES = {  # kind -> (files in the run dir, what the line says)
    "corrupt checkpoint": ({"checkpoint_pt": b"\x00not a checkpoint" * 10}, "no readable checkpoint"),
    "checkpoint of another run": (
        {"checkpoint_pt": checkpoint_bytes({"step": 10, "model": {"w": torch.ones(2)}})},
        "does not fit this run",
    ),
    "empty result.json of a run": ({"result_json": b""}, "result.json is not valid JSON"),
    "result.json that is not a result": ({"result_json": b"[1, 2]"}, "is not a result"),
    "corrupt spec.json": ({"spec_json": b'{"task": '}, "spec.json is not valid JSON"),
    "metrics damaged mid-file": (
        {"metrics_jsonl": b'{"step": 0}\nGARBAGE\n{"step": 20}\n', "checkpoint_pt": checkpoint_bytes({"step": 10})},
        "line 2 is not valid JSON",
    ),
}


@pytest.mark.parametrize("kind", RUN_DIR_FILES)
def test_a_damaged_file_in_the_run_dir(tmp_path, capsys, kind):
    files, message = RUN_DIR_FILES[kind]
    out = run_dir_holding(tmp_path, **files)
    before = snapshot(out)
    line = refused(capsys, "run", *RUN, "--out", out)
    assert message in line
    assert snapshot(out) == before


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(TINY_FIXED + "[axes]\nseed = [0, 1]\n")
    return path


@pytest.mark.parametrize("command", ["status", "grid"])
@pytest.mark.parametrize("content", [b"", b'{"spec": '], ids=["empty", "corrupt"])
def test_a_damaged_result_under_a_status_or_grid_root(tmp_path, capsys, grid, command, content):
    root = tmp_path / "runs"
    run_dir = load(grid).cells[1].run_dir(root)
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_bytes(content)
    before = snapshot(tmp_path)
    line = refused(capsys, command, grid, "--root", root)
    assert f"{run_dir / 'result.json'} is not valid JSON" in line
    assert snapshot(tmp_path) == before and not (root / "grids").exists()


GRID_FILES = {  # kind -> (the file's text, what the line says)
    "grid file with a syntax error": ('[fixed]\np = 11\n[axes\nopt = ["adam"]\n', "not a valid TOML file"),
    "grid axis with no values": ("[fixed]\np = 11\n[axes]\nopt = []\n", "axis 'opt' is an empty list"),
}


@pytest.mark.parametrize("kind", GRID_FILES)
def test_a_broken_grid_file(tmp_path, capsys, kind):
    text, message = GRID_FILES[kind]
    (tmp_path / "g.toml").write_text(textwrap.dedent(text))
    for command in ("grid", "status"):
        assert message in refused(capsys, command, tmp_path / "g.toml", "--root", tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_corrupt_grid_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text('{"cells": [')
    proc = run_cli("chunk", tmp_path / "manifest.json", 0)  # a process of its own: it takes over the stop signals
    assert proc.returncode == 2 and proc.stderr.startswith("error: cannot read manifest")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_unwritable_run_dir(tmp_path, capsys):
    (tmp_path / "file").write_text("in the way")
    for out in (tmp_path / "file", tmp_path / "file" / "run"):  # a file where the dir goes, or above it
        assert "cannot write to" in refused(capsys, "run", *RUN, "--out", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_unwritable_grid_root(tmp_path, capsys, grid):
    (tmp_path / "file").write_text("in the way")
    assert "cannot write to" in refused(capsys, "grid", grid, "--root", tmp_path / "file")
    assert (tmp_path / "file").read_text() == "in the way"


def test_an_unwritable_bench_report(tmp_path, capsys):
    (tmp_path / "file").write_text("in the way")
    assert "cannot write to" in refused(capsys, "bench", "--quick", "--out", tmp_path / "file" / "b.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["run", "grid", "bench"])
def test_cuda_asked_for_without_cuda(tmp_path, capsys, grid, command):
    args = {
        "run": ["run", *RUN, "--out", tmp_path / "run"],
        "grid": ["grid", grid, "--root", tmp_path / "runs"],
        "bench": ["bench", "--quick", "--out", tmp_path / "b.json"],
    }[command]
    assert "CUDA is not available" in refused(capsys, *args, "--device", "cuda")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml"]
