"""Bad input, one kind per case: a setting of a registered component (or of the loop) that makes
no sense, or a file the suite reads that is damaged. Each is one line on stderr starting with
"error:", exit code 2, and nothing written. The cases call the CLI's main() in this process (the
argument parsing, the commands and their error handling; tests/test_run.py runs one as a separate
process, the way a user does)."""

import textwrap

import pytest
import torch
from conftest import TINY, TINY_FIXED, as_args, run_cli

from suite.cli import main
from suite.launch.grid import load
from suite.results.rundir import write_json
from suite.specs.spec import resolve

MODULAR = as_args({**TINY, "train.steps": 20})  # 60 training pairs
TRANSFORMER = ["--set", "p=11", "--set", "batch_size=16", "--set", "eval_every=10", "--steps", "20"]


def refused(capsys, *args) -> str:
    code = main([str(a) for a in args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def snapshot(folder):
    """Every file under folder with its bytes (the run folder lock aside)."""
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
    return resolve({}, {**TINY, "train.steps": 20})  # what RUN runs


RUN = [*MODULAR]


def run_dir_holding(tmp_path, **files) -> tuple:
    """A run folder of tiny_spec() holding spec.json and the given files (name -> bytes)."""
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


RUN_DIR_FILES = {  # kind -> (files in the run folder, what the line says)
    "corrupt checkpoint": ({"checkpoint_pt": b"\x00not a checkpoint" * 10}, "no readable checkpoint"),
    "checkpoint of another run": (
        {"checkpoint_pt": checkpoint_bytes({"step": 10, "model": {"w": torch.ones(2)}})},
        "does not fit this run",
    ),
    "empty result.json of a run": ({"result_json": b""}, "result.json is not valid JSON"),
    "result.json that is not a result": ({"result_json": b"[1, 2]"}, "is not a result"),
    "corrupt spec.json": ({"spec_json": b'{"task": '}, "spec.json is not valid JSON"),
    "code.json that is a list": ({"code_json": b"[1, 2]"}, "code.json is not a code record of this suite"),
    "code.json whose entry is text": (
        {"code_json": b'{"opt": "adam"}', "checkpoint_pt": checkpoint_bytes({"step": 10})},
        "code.json is not a code record of this suite",
    ),
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


DAMAGED_RESULTS = {  # content -> what the line says after the file's name
    b"": "is not valid JSON",
    b'{"spec": ': "is not valid JSON",
    b"{}": "is not a result (no full spec)",  # `status` called it done
    b'{"spec": {}, "grok_step": 10}': "is not a result (no full spec)",
}


@pytest.mark.parametrize("command", ["status", "grid"])
@pytest.mark.parametrize("content", DAMAGED_RESULTS, ids=["empty", "corrupt", "an empty object", "an empty spec"])
def test_a_damaged_result_under_a_status_or_grid_root(tmp_path, capsys, grid, command, content):
    root = tmp_path / "runs"
    run_dir = load(grid).cells[1].under(root).run_dir
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_bytes(content)
    before = snapshot(tmp_path)
    line = refused(capsys, command, grid, "--root", root)
    assert f"{run_dir / 'result.json'} {DAMAGED_RESULTS[content]}" in line
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


# --- every class the hostile-input review found (issue 28): one line, exit 2, the folder unchanged ---

HUGE = str(2**70)  # no integer setting takes it: torch and numpy hold 64-bit integers
FULL_BATCH = as_args({k: v for k, v in {**TINY, "train.steps": 20}.items() if k != "batch_size"})  # full: no batch
SETTINGS_MORE = {  # kind -> (run arguments, what the line says)
    "seed past 2^63": ([*MODULAR, "--seed", str(2**63)], "seed must be a non-negative integer below 2^63"),
    "seed 2^64": ([*MODULAR, "--seed", str(2**64)], "below 2^63"),
    "data seed 2^64": ([*MODULAR, "--set", f"data_seed={2**64}"], "data_seed takes an integer below 2^63"),
    "steps 2^70": ([*MODULAR[:-2], "--steps", HUGE], "steps takes an integer below 2^63"),
    "eval batch 2^70": ([*MODULAR, "--set", f"eval_batch={HUGE}"], "eval_batch takes an integer below 2^63"),
    "checkpoint interval 2^70": ([*MODULAR, "--set", f"checkpoint_every={HUGE}"], "below 2^63"),
    "hold 2^70": ([*MODULAR, "--set", f"hold={HUGE}"], "hold takes an integer below 2^63"),
    "MLP hidden width 1e11": ([*MODULAR, "--set", "hidden=100000000000"], "do not fit in memory"),
    "MLP embedding width 1e11": ([*MODULAR, "--set", "d=100000000000"], "do not fit in memory"),
    "transformer width 1e9": (
        ["--model", "transformer", "--set", "d_model=1000000000", "--set", "n_heads=1", *TRANSFORMER],
        "do not fit in memory",
    ),
    "transformer mlp width 1e12": (
        ["--model", "transformer", "--set", "d_mlp=1000000000000", *TRANSFORMER],
        "do not fit in memory",
    ),
    "grokfast window 1e20": (
        ["--filter", "grokfast_ma", *MODULAR, "--set", "window=100000000000000000000"],
        "window takes an integer below 2^63",
    ),
    "grokfast window of 1e12 gradients": (
        ["--filter", "grokfast_ma", *MODULAR, "--set", "window=1000000000000"],
        "keeps 1000000000000 copies of every gradient",
    ),
    "sampler power 1e300": (
        ["--sampler", "frequency", *MODULAR, "--set", "power=1e300"],
        "takes the example weights out of float32's range",
    ),
    "sampler power -1e300": (["--sampler", "frequency", *MODULAR, "--set", "power=-1e300"], "float32's range"),
    "skew 1e6": ([*MODULAR, "--set", "split=skewed", "--set", "skew=1e6"], "skew 1000000.0 is too strong"),
    "holdout skew 1e6": ([*MODULAR, "--set", "split=skewed_holdout", "--set", "skew=1e6"], "is too strong"),
    "train-only skew 1e6": ([*MODULAR, "--set", "split=skewed_train", "--set", "skew=1e6"], "is too strong"),
    "p a huge prime": ([*MODULAR, "--set", "p=1000000007"], "p must be a prime in [3, 8191]"),
    "p just past the largest": ([*MODULAR, "--set", "p=8209"], "p must be a prime in [3, 8191]"),
    "p 2^70": ([*MODULAR, "--set", f"p={HUGE}"], "p takes an integer below 2^63"),
    "lr 1e308": ([*MODULAR, "--set", "lr=1e308"], "past float32's range"),
    "sgd lr 1e39": (["--opt", "sgd", *MODULAR, "--set", "lr=1e39"], "past float32's range"),
    "adamlr lr x c past float32": (
        ["--opt", "adamlr", *MODULAR, "--set", "lr=1e30", "--set", "c=1e10"],
        "lr x c = 1e+40 is past float32's range",
    ),
    "weight decay 1e39": ([*MODULAR, "--set", "weight_decay=1e39"], "weight_decay = 1e+39 is past float32's range"),
    "an empty training set": ([*MODULAR, "--set", "train_frac=0.001"], "0 training"),
    "an empty training set under full batches": (
        ["--sampler", "full", *FULL_BATCH, "--set", "train_frac=0.001"],
        "0 training",
    ),
    "an empty validation set": ([*MODULAR, "--set", "test_frac=0.001"], "0 validation"),
    "hold longer than patience": (
        [*MODULAR, "--set", "hold=500", "--set", "patience=100"],
        "patience (100) is shorter than hold (500)",
    ),
    "negative hold": ([*MODULAR, "--set", "hold=-1"], "hold and patience must be >= 0"),
    "transformer on images, before any image is drawn": (
        ["--task", "polygons", "--model", "transformer"],
        "takes tokens inputs, but task 'polygons' gives image",
    ),
    "a list for a number": ([*MODULAR, "--set", "lr=[1]"], "lr takes float"),
    "betas with three values": ([*MODULAR, "--set", "betas=0.9,0.99,0.999"], "betas takes 2 comma-separated"),
    "a word for a number": ([*MODULAR, "--set", "hidden=wide"], "hidden takes int"),
    "a float for an integer": ([*MODULAR, "--set", "hidden=16.5"], "hidden takes int"),
    "a bool for an integer": ([*MODULAR, "--set", "hidden=true"], "hidden takes int"),
    "an unknown choice": ([*MODULAR, "--set", "op=pow"], "op='pow' is not one of"),
    "an unknown loss": ([*MODULAR, "--set", "loss=mse"], "loss='mse' is not one of"),
}


@pytest.mark.parametrize("kind", SETTINGS_MORE)
def test_an_unbounded_or_mistyped_setting(tmp_path, capsys, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    args, message = SETTINGS_MORE[kind]
    assert message in refused(capsys, "run", *args)
    assert list(tmp_path.iterdir()) == []  # no run folder, no error.json, no W&B folder


DEVICES = ["meta", "mps", "tpu", "xla", "cuda:-1", "gpu", "cpu:x"] + ([] if torch.cuda.is_available() else ["cuda:0"])


@pytest.mark.parametrize("device", DEVICES)
def test_a_device_the_suite_does_not_run_on(tmp_path, capsys, monkeypatch, device):
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, "run", *MODULAR, "--device", device)
    assert f"device '{device}'" in line
    assert list(tmp_path.iterdir()) == []


SEEDS = {
    "0-100000000": "names 100000001 seeds; at most 10000",
    "-1": "--seeds takes a list",
    "3-1": "first <= last",
    "a-b": "--seeds takes a list",
    "0,,1": "--seeds takes a list",
    f"0-{2**64}": "at most 10000",
}


@pytest.mark.parametrize("seeds", SEEDS)
def test_a_seed_list_that_cannot_run(tmp_path, capsys, monkeypatch, seeds):
    monkeypatch.chdir(tmp_path)
    assert SEEDS[seeds] in refused(capsys, "run", *MODULAR, "--seeds", seeds)
    assert list(tmp_path.iterdir()) == []


GRID_VALUES = {  # kind -> (grid file text, what the line says)
    "a list where a number goes": ("[fixed]\np = [11]\n", "p=[11]: p takes int"),
    "a date where a number goes": ("[fixed]\np = 1979-05-27\n", "p takes int"),
    "a nested list for an axis": ("[axes]\np = [[11]]\n", "p takes int"),
    "a float for an integer": ("[fixed]\np = 11.5\n", "p takes int"),
    "a bool for an integer": ("[fixed]\np = true\n", "p takes int"),
    "a table for a value": ("[fixed]\np = {a = 1}\n", "'p' must be a value, got a table"),
    "a time for a float": ("[fixed]\nlr = 07:32:00\n", "lr takes float"),
    "a list for a name": ('[fixed]\nopt = ["adam"]\n', "opt takes a component name"),
    "a number for a name": ("[fixed]\nopt = 3\n", "opt takes a component name"),
    "a list for a string setting": ('[fixed]\nsplit = ["random"]\n', "split takes str"),
    "an integer past 2^63": (f"[fixed]\nbatch_size = {2**63}\n", "takes an integer below 2^63"),
    "an axis that is not a list": ("[axes]\nseed = 3\n", "axis 'seed' must be a list"),
    "an empty file": ("", "the file is empty"),
    "a name that climbs out": ('name = ".."\n[fixed]\np = 11\n', "name must be 1-100 letters"),
    "a name with a slash": ('name = "a/b"\n[fixed]\np = 11\n', "name must be 1-100 letters"),
    "a hidden name": ('name = ".grid"\n[fixed]\np = 11\n', "name must be 1-100 letters"),
    "a name with a space": ('name = "my grid"\n[fixed]\np = 11\n', "name must be 1-100 letters"),
    "a name too long": (f'name = "{"g" * 101}"\n[fixed]\np = 11\n', "name must be 1-100 letters"),
    "a name that is a number": ("name = 3\n[fixed]\np = 11\n", "name must be 1-100 letters"),
    "an unknown top-level key": ("[fixd]\np = 11\n", "unknown key 'fixd'"),
    "experiments that are not tables": ('experiment = ["a"]\n', "experiment must be an array of tables"),
    "an override without '='": ('[axes]\nopt = ["adam"]\n[overrides.opt]\nlr = 1\n', "must read KEY=VALUE"),
    "an override that matches nothing": ('[axes]\nopt = ["adam"]\n[overrides."opt=sgd"]\nlr = 1\n', "matches no cell"),
    "a key both fixed and an axis": ("[fixed]\np = 11\n[axes]\np = [13]\n", "'p' is both fixed and an axis"),
    "a cell that cannot be built": ("[fixed]\np = 11\nbatch_size = 1000\n", "cannot be built: batch_size 1000"),
    "a cell whose model cannot read the task": (
        '[fixed]\ntask = "polygons"\nmodel = "transformer"\n',
        "takes tokens inputs, but task 'polygons' gives image",
    ),
    "an unknown slurm key": ("[fixed]\np = 11\n[slurm]\nqueue = 'gpu'\n", "unknown key 'queue'"),
    "an experiment named by a number": ("[fixed]\np = 11\n[[experiment]]\nname = 5\n", "an experiment's name is text"),
    "an experiment named by nothing": ('[fixed]\np = 11\n[[experiment]]\nname = " "\n', "an experiment's name is text"),
    "10^8 cells": (  # counted from the axes, refused before one cell is built
        "[axes]\n" + "".join(f"{key} = {list(range(1, 101))}\n" for key in ("seed", "p", "d", "hidden")),
        "up to 100,000,000 cells",
    ),
}


@pytest.mark.parametrize(
    "kind, command",
    # status and a dry run read a grid's cells and build none of them: a cell that cannot be built is grid's to refuse
    [(k, c) for k in GRID_VALUES for c in ("grid", "grid --dry-run", "status") if not (c != "grid" and "built" in k)],
)
def test_a_grid_file_that_cannot_run(tmp_path, capsys, monkeypatch, kind, command):
    text, message = GRID_VALUES[kind]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.toml").write_text(text)
    before = snapshot(tmp_path)
    assert message in refused(capsys, *command.split(), "g.toml")
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()


GRID_FLAGS = {  # kind -> (flags, what the line says)
    "stack 0": (["--stack", "0"], "--stack must be at least 1"),
    "stack 0 in a dry run": (["--stack", "0", "--dry-run"], "--stack must be at least 1"),
    "stack -3": (["--stack", "-3"], "--stack must be at least 1"),
    "workers 0": (["--workers", "0"], "--workers must be at least 1"),
    "workers 0 in a dry run": (["--workers", "0", "--dry-run"], "--workers must be at least 1"),
    "cells per task 0": (["--backend", "slurm", "--dry-run", "--cells-per-task", "0"], "cells_per_task must be"),
    "max parallel 0": (["--backend", "slurm", "--dry-run", "--max-parallel", "0"], "max_parallel must be"),
    "slurm time shorter than the warning": (
        ["--backend", "slurm", "--dry-run", "--time", "5:00"],
        "is not longer than the USR1 warning",
    ),
    "slurm time of seconds": (["--backend", "slurm", "--dry-run", "--time", "0:59"], "not longer than the USR1"),
    "slurm time in no format": (["--backend", "slurm", "--dry-run", "--time", "soon"], "slurm time must read"),
    "negative requeues": (["--backend", "slurm", "--dry-run", "--max-requeues", "-1"], "max_requeues must be"),
    "an unknown experiment": (["--experiment", "nope"], "has no experiment 'nope'"),
    "an unknown device": (["--device", "tpu"], "device 'tpu' is not one"),
    "cuda without cuda": (["--device", "cuda"], "CUDA is not available")
    if not torch.cuda.is_available()
    else (["--device", "tpu"], "device 'tpu'"),
}


@pytest.mark.parametrize("kind", GRID_FLAGS)
def test_a_grid_flag_that_cannot_run(tmp_path, capsys, monkeypatch, grid, kind):
    flags, message = GRID_FLAGS[kind]
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    assert message in refused(capsys, "grid", grid, "--root", "runs", *flags)
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()


def _paths(tmp_path):
    """A file and a folder in the way, and names that cannot be made."""
    (tmp_path / "file").write_text("in the way")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "note").write_text("kept")
    (tmp_path / "g.toml").write_text(TINY_FIXED)


PATHS = {  # kind -> (arguments, what the line says)
    "run --out a file": (["run", *MODULAR, "--out", "file"], "cannot write to file"),
    "run --out under a file": (["run", *MODULAR, "--out", "file/run"], "cannot write to file/run"),
    "run --root a file": (["run", *MODULAR, "--root", "file"], "cannot write to file"),
    "run --out a name over 255 bytes": (["run", *MODULAR, "--out", "r" * 300], "File name too long"),
    "run --root a name over 255 bytes": (["run", *MODULAR, "--root", "r" * 300], "File name too long"),
    "grid file a folder": (["grid", "folder"], "is a folder, not a grid file"),
    "grid file missing": (["grid", "nope.toml"], "does not exist"),
    "grid file a folder, dry run": (["grid", "folder", "--dry-run"], "is a folder, not a grid file"),
    "grid --root a file": (["grid", "g.toml", "--root", "file"], "cannot write to file"),
    "grid --root under a file": (["grid", "g.toml", "--root", "file/runs"], "cannot write to file/runs"),
    "grid --root a name over 255 bytes": (["grid", "g.toml", "--root", "r" * 300], "File name too long"),
    "status file a folder": (["status", "folder"], "is a folder, not a grid file"),
    "status --root a file": (["status", "g.toml", "--root", "file"], "file is not a folder of runs"),
    "leaderboard root a file": (["leaderboard", "file"], "file: no such directory of runs"),
    "leaderboard root missing": (["leaderboard", "nope"], "nope: no such directory of runs"),
    "leaderboard --out a file": (["leaderboard", "folder", "--out", "file"], "cannot write to file"),
    "leaderboard --out under a file": (["leaderboard", "folder", "--out", "file/board"], "cannot write to file/board"),
    "leaderboard --out a name over 255 bytes": (["leaderboard", "folder", "--out", "b" * 300], "File name too long"),
    "leaderboard tau-max inf": (["leaderboard", "folder", "--tau-max", "inf"], "--tau-max must be a finite number"),
    "leaderboard tau-max nan": (["leaderboard", "folder", "--tau-max", "nan"], "--tau-max must be a finite number"),
    "leaderboard tau-max 1": (["leaderboard", "folder", "--tau-max", "1"], "--tau-max must be a finite number"),
    "export root a file": (["export", "file"], "file: no such directory of runs"),
    "export root missing": (["export", "nope"], "no such directory of runs"),
    "export --out a file": (["export", "folder", "--out", "file"], "cannot write to file"),
    "export --out under a file": (["export", "folder", "--out", "file/x"], "cannot write to file/x"),
    "bench --out a folder": (["bench", "--quick", "--out", "folder"], "cannot write to folder: Is a directory"),
    "bench --out under a file": (["bench", "--quick", "--out", "file/b.json"], "cannot write to file"),
}


@pytest.mark.parametrize("kind", PATHS)
def test_a_path_that_cannot_be_used(tmp_path, capsys, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    _paths(tmp_path)
    args, message = PATHS[kind]
    before = snapshot(tmp_path)
    assert message in refused(capsys, *args)
    assert snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder", "g.toml"]


@pytest.mark.parametrize("args, message", [
    ([*MODULAR, "--set", "batch_size=61"], "larger than the training set"),  # found while building the run
    ([*MODULAR, "--set", "hidden=100000000000"], "do not fit in memory"),
], ids=["batch", "memory"])  # fmt: skip
def test_nothing_is_tracked_before_the_run_is_known_to_build(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert message in refused(capsys, "run", *args, "--wandb", "offline")
    assert list(tmp_path.iterdir()) == []  # no wandb/ offline-run folder either


MISSPELLED = {  # arguments -> what the one line says
    "grid g.toml --backend slrum": "python -m suite grid: argument --backend: invalid choice: 'slrum'",
    "grid g.toml --workers two": "argument --workers: invalid int value: 'two'",
    "tune g.toml --wandb ofline": "python -m suite tune: argument --wandb: 'ofline' (from --wandb or WANDB_MODE)",
    "leaderboard runs --tau-max x": "argument --tau-max: invalid float value: 'x'",
    "lsit": "python -m suite: argument command: invalid choice: 'lsit'",
    "grid g.toml --wrokers 2": "unrecognized arguments: --wrokers 2",
}


@pytest.mark.parametrize("args", MISSPELLED)
def test_a_misspelled_flag_or_value_is_one_line_not_the_usage_block(tmp_path, capsys, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(args.split())
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and MISSPELLED[args] in lines[0]
    assert list(tmp_path.iterdir()) == []


def _like_folder(tmp_path, edit) -> str:
    """A run folder whose spec.json is tiny_spec() after an edit."""
    spec = tiny_spec()
    edit(spec)
    folder = tmp_path / "theirs"
    folder.mkdir()
    write_json(folder / "spec.json", spec)
    return str(folder)


LIKE_SPECS = {  # kind -> (edit of the spec, what the line says)
    "no seed": (lambda s: s.pop("seed"), "is not a spec of this suite (a task, a model and a seed)"),
    "a seed that is text": (lambda s: s.update(seed="../../x"), "seed must be a non-negative integer"),
    "a task that is a list": (lambda s: s.update(task=[1]), "is not a spec of this suite"),
    "an optimizer named by a number": (lambda s: s["opt"].update(name=3), "opt names no component"),
    "a setting of the wrong type": (lambda s: s["task"].update(p="many"), "is not a spec this suite runs: p="),
    "a setting the component lacks": (lambda s: s["opt"].update(evil=1), "does not take 'evil'"),
}


@pytest.mark.parametrize("kind", LIKE_SPECS)
def test_a_damaged_spec_under_run_like_is_one_line_naming_it(tmp_path, capsys, kind):
    edit, message = LIKE_SPECS[kind]
    line = refused(capsys, "run", "--like", _like_folder(tmp_path, edit), "--out", tmp_path / "mine")
    assert message in line and "--like" in line
    assert not (tmp_path / "mine").exists()


def test_run_like_never_lets_a_file_run_a_model_s_code(tmp_path, capsys, monkeypatch):
    """A spec.json from someone else's folder that names a local transformers model with
    trust_remote_code on: the model's Python would run. Refused unless this command's own flag says so
    (the model is never built here: the refusal comes before anything loads)."""
    spec = resolve({"task": "number_probe", "model": "hf"}, {"path": str(tmp_path), "trust_remote_code": True})
    folder = tmp_path / "theirs"
    folder.mkdir()
    write_json(folder / "spec.json", spec)
    monkeypatch.setattr("suite.models.pretrained.load", lambda *a, **k: pytest.fail("the model was loaded"))
    line = refused(capsys, "run", "--like", folder, "--out", tmp_path / "mine")
    assert "model.trust_remote_code = true" in line and "--set model.trust_remote_code=true" in line
    assert not (tmp_path / "mine").exists()
    from suite.cli import make_parser
    from suite.commands.run import resolve_specs

    for flag in ("trust_remote_code=true", "model.trust_remote_code=true"):
        args = make_parser().parse_args(["run", "--like", str(folder), "--set", flag])
        assert resolve_specs(args)[0]["model"]["trust_remote_code"] is True  # said on the command: granted


def test_a_grid_file_never_lets_a_model_run_its_code(tmp_path, capsys):
    (tmp_path / "g.toml").write_text(
        '[fixed]\ntask = "number_probe"\nmodel = "hf"\npath = "models/x"\ntrust_remote_code = true\n'
    )
    line = refused(capsys, "grid", tmp_path / "g.toml", "--dry-run", "--root", tmp_path / "runs")
    assert "model.trust_remote_code = true would run the code of the model's folder" in line
    assert not (tmp_path / "runs").exists()
