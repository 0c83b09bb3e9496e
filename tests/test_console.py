"""What a user sees on the terminal while a grid runs, and when `status` finds nothing."""

import contextlib
import io
import shutil
import subprocess
from types import SimpleNamespace

from conftest import TINY_FIXED, ChunkHere

from suite.cli import main
from suite.launch import local
from suite.launch.local import progress_lines


def test_progress_echoes_each_running_log_s_latest_line_once(tmp_path):
    a, b = tmp_path / "0000.log", tmp_path / "0001.log"
    a.write_text("[abc x8] step 50 train_acc 0.2\n[abc x8] step 100 train_acc 0.5 seed 3 memorized\n")
    b.write_text("")
    shown = {}
    assert progress_lines([a, b], shown) == ["  [abc x8] step 100 train_acc 0.5 seed 3 memorized"]
    assert progress_lines([a, b], shown) == []  # nothing new
    b.write_text("[def x2] step 50 train_acc 0.1\n")
    assert progress_lines([a, b, tmp_path / "gone.log"], shown) == ["  [def x2] step 50 train_acc 0.1"]


def test_status_says_so_when_no_cell_has_run_under_the_root(tmp_path, capsys):
    (tmp_path / "g.toml").write_text(TINY_FIXED + "[axes]\nseed = [0, 1]\n")
    assert main(["status", str(tmp_path / "g.toml"), "--root", str(tmp_path / "elsewhere")]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "2 cells: 0 done, 2 missing" and "if the grid ran elsewhere, pass that --root" in err


def test_status_of_a_tuned_grid_says_where_its_search_stands_and_lists_its_tuning_runs(tmp_path, capsys):
    tuned = (
        '[tuning]\ntrials = 1\ntuning_seeds = [9]\nfinal_seeds = [0, 1, 2, 3, 4]\n[tuning.methods.adam]\nopt = "adam"\n'
    )
    (tmp_path / "g.toml").write_text(TINY_FIXED + tuned)
    assert main(["status", str(tmp_path / "g.toml"), "--root", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(": 0 of 1 trials finished, in round 1 of 1 (adam searching); final runs not drawn yet")
    assert out[1].startswith(f"missing     {tmp_path / 'runs' / 'tuning'}") and out[-1] == "1 cells: 0 done, 1 missing"


def test_a_run_says_what_it_trains_before_its_first_evaluation_and_names_its_method(tmp_path, capsys):
    # a hash named the stack, and nothing was said before the first evaluation (minutes for ResNet-18)
    settings = [
        "--set",
        "p=11",
        "--set",
        "train_frac=0.5",
        "--set",
        "d=8",
        "--set",
        "hidden=16",
        "--set",
        "batch_size=8",
    ]
    argv = ["run", "--opt", "adamlr", "--filter", "grokfast_ema", *settings, "--steps", "20", "--set", "eval_every=10"]
    assert main([*argv, "--seeds", "0,1", "--root", str(tmp_path)]) == 0
    said = capsys.readouterr().err.splitlines()
    assert (
        said[0]
        == "[adamlr+grokfast_ema modular/mlp x2] steps 0 to 20, evaluating every 10 on 60 train and 24 val examples"
    )
    assert any(line.startswith("[adamlr+grokfast_ema modular/mlp x2] step 0 train_acc ") for line in said)


def test_progress_names_an_optimizer_by_the_decay_it_runs_where_its_name_says_another():
    from suite.engine.train import stack_label
    from suite.specs.spec import Spec, resolve

    def label(choices, settings=None, K=1):
        return stack_label(Spec.of(resolve(choices, settings or {})), K)

    # the transformer's recipe runs adam with AdamW's decoupled decay: the line says so
    assert label({"model": "transformer", "opt": "adam"}) == "adam (decoupled decay) modular/transformer"
    assert label({"model": "transformer", "opt": "adamw"}) == "adamw modular/transformer"
    assert label({"opt": "adam"}) == "adam modular/mlp"
    assert label({"opt": "muon"}, {"decoupled_weight_decay": False}, 2) == "muon (coupled decay) modular/mlp x2"


def test_status_calls_the_cells_a_running_local_grid_has_yet_to_start_queued(tmp_path, capsys, monkeypatch):
    # while a local grid runs, the cells it has not started are its, not missing; once it has
    # ended, a cell of its manifest that has no folder is missing again
    (tmp_path / "g.toml").write_text(TINY_FIXED + "[axes]\nseed = [0, 1, 2]\n")
    status = ["status", str(tmp_path / "g.toml"), "--root", str(tmp_path / "runs")]
    seen = []

    def start(argv, **kwargs):  # each worker as it starts: what status says first, then the chunk
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(status) == 0
        seen.append(out.getvalue().splitlines()[-1])
        return ChunkHere(argv, **kwargs)

    monkeypatch.setattr(local, "subprocess", SimpleNamespace(Popen=start, STDOUT=subprocess.STDOUT))
    grid = ["grid", str(tmp_path / "g.toml"), "--root", str(tmp_path / "runs"), "--workers", "1", "--stack", "1"]
    assert main(grid) == 0
    assert seen == ["3 cells: 0 done, 3 queued", "3 cells: 1 done, 2 queued", "3 cells: 2 done, 1 queued"]
    capsys.readouterr()
    shutil.rmtree(next((tmp_path / "runs").glob("*/seed2-*")))
    assert main(status) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 cells: 2 done, 1 missing"
