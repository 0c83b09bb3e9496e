"""Grid files: expansion, stable ids, bad input, the local backend, re-runs and status."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, TINY_FIXED, cli

from suite.cli import PINNED, cpu_flags, main, make_parser
from suite.launch.grid import load
from suite.results.rundir import RunDir
from suite.specs.spec import canonical, resolve, spec_id


def write(tmp_path, text, name="g.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_expansion_order_overrides_and_experiments(tmp_path):
    grid = load(
        write(
            tmp_path,
            """
        name = "demo"
        [fixed]
        p = 11
        [axes]
        opt = ["adam", "adamlr"]
        seeds = [0, 1]
        [overrides."opt=adamlr"]
        "opt.lr" = 0.003
        axes = { c = [2, 8] }

        [[experiment]]
        name = "main"
        [[experiment]]
        name = "mul"
        fixed = { op = "mul", opt = "adam" }
        [[experiment]]
        name = "primes"
        fixed = { opt = "sgd", seed = 3 }
        axes = { p = [13, 17] }
    """,
        )
    )
    labels = [(c.experiment, c.label) for c in grid.cells]
    assert labels == [
        ("main", "opt=adam seed=0"),
        ("main", "opt=adam seed=1"),
        ("main", "opt=adamlr seed=0 c=2"),
        ("main", "opt=adamlr seed=0 c=8"),
        ("main", "opt=adamlr seed=1 c=2"),
        ("main", "opt=adamlr seed=1 c=8"),
        ("mul", "seed=0"),
        ("mul", "seed=1"),
        ("primes", "p=13"),
        ("primes", "p=17"),  # the block's own axis wins over the file's fixed p
    ]
    specs = [c.spec for c in grid.cells]
    assert [s["task"]["p"] for s in specs] == [11] * 8 + [13, 17]
    assert [s["seed"] for s in specs[8:]] == [3, 3] and specs[8]["opt"]["name"] == "sgd"
    assert [s["opt"]["lr"] for s in specs[:6]] == [
        0.01,
        0.01,
        0.003,
        0.003,
        0.003,
        0.003,
    ]  # override only where opt=adamlr
    assert [s["opt"]["c"] for s in specs[2:6]] == [2.0, 8.0, 2.0, 8.0]
    assert specs[6]["task"]["op"] == "mul" and specs[6]["opt"]["name"] == "adam"
    # each cell is exactly what `suite run` would resolve, with the same id and run folder
    assert specs[3] == resolve({"opt": "adamlr"}, {"p": 11, "opt.lr": 0.003, "c": 8}, 0)
    assert grid.cells[3].id == spec_id(specs[3])
    assert str(grid.cells[3].run_dir).startswith("runs/modular-mlp-adamlr-random/seed0-")


def test_same_spec_twice_is_one_cell(tmp_path):
    grid = load(
        write(
            tmp_path,
            """
        [axes]
        "opt.lr" = [0.01, 1e-2]
        [[experiment]]
        [[experiment]]
    """,
        )
    )
    assert len(grid.cells) == 1


def test_cell_ids_are_stable_across_processes(tmp_path):
    """A hash of the spec, never Python's salted hash(): another interpreter agrees."""
    path = REPO / "suite/grids/tiny.toml"
    here = [c.id for c in load(path).cells]
    code = f"from suite.launch.grid import load; print(' '.join(c.id for c in load({str(path)!r}).cells))"
    there = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout.split()
    assert here == there and len(set(here)) == 4


def test_paper_grid_expands():
    grid = load(REPO / "suite/grids/paper.toml")
    assert grid.name == "paper"
    assert len(grid.cells) == len({c.id for c in grid.cells}) == 455
    experiments = [c.experiment for c in grid.cells]
    assert {e: experiments.count(e) for e in set(experiments)} == {
        "sampling": 360,
        "adam-vs-adamlr": 40,
        "c-sweep": 35,
        "one-hot": 20,
    }  # c = 10 on a+b is shared
    c_sweep = {c.spec["opt"]["c"] for c in grid.cells if c.spec["opt"]["name"] == "adamlr"}
    assert c_sweep == {0.5, 1.0, 4.0, 8.0, 10.0, 16.0, 24.0, 32.0}
    assert all(c.spec["task"]["p"] == 97 and c.spec["opt"]["weight_decay"] == 1e-3 for c in grid.cells)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[axes\nopt = 1", "not a valid TOML file"),
        ("[axis]\nopt = ['adam']", "unknown key 'axis' (did you mean 'axes'?)"),
        ("[axes]\nlrr = [0.1]", "no chosen component takes 'lrr'"),
        ("[axes]\nopt = ['adam', 'adamm']", "unknown optimizer 'adamm' (did you mean 'adam'?)"),
        ("[axes]\nop = ['add', 'pow']", "op='pow' is not one of"),
        ("[fixed]\np = 'eleven'", "p takes int"),
        ("[axes]\nseed = [0, -1]", "seed must be a non-negative integer"),
        ("[axes]\nopt = 'adam'", "axis 'opt' must be a list"),
        ("[axes]\nopt = []", "axis 'opt' is an empty list"),
        ("[axes]\nopt = ['adam']\n[overrides.'opt=adamw']\nlr = 0.1", "override 'opt=adamw' matches no cell"),
        ("[overrides.'optadam']\nlr = 0.1", "must read KEY=VALUE"),
        ("[slurm]\npartiton = 'gpu'", "unknown key 'partiton' (did you mean 'partition'?)"),
        ("[fixed]\nop = 'add'\n[axes]\nop = ['mul']", "'op' is both fixed and an axis"),
    ],
)
def test_bad_grid_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    for command in (["grid", str(path), "--root", str(tmp_path / "runs")], ["status", str(path)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_experiment_flag_picks_blocks_and_names_the_closest_on_a_typo(tmp_path, capsys):
    grid = write(
        tmp_path,
        """
        [fixed]
        p = 11
        batch_size = 16
        [[experiment]]
        name = "optimizers"
        axes = { opt = ["adam", "sgd"] }
        [[experiment]]
        name = "filters"
        axes = { filter = ["grokfast_ema", "orthograd"] }
    """,
    )
    root = tmp_path / "runs"
    cells = load(grid).cells
    assert main(["grid", str(grid), "--dry-run", "--root", str(root), "--experiment", "filters"]) == 0
    listed = capsys.readouterr().out.split()[::2]
    assert listed == [str(c.under(root).run_dir) for c in cells if c.experiment == "filters"] and len(listed) == 2
    assert (
        main(["status", str(grid), "--root", str(root), "--experiment", "optimizers", "--experiment", "filters"]) == 0
    )
    assert capsys.readouterr().out.strip().splitlines()[-1] == "4 cells: 0 done, 4 missing"
    for command in ("grid", "status"):
        assert main([command, str(grid), "--root", str(root), "--experiment", "filter"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"error: {grid} has no experiment 'filter' (did you mean 'filters'?); known: optimizers, filters"
        ]
    assert not root.exists()


def test_missing_grid_file(tmp_path, capsys):
    assert main(["grid", str(tmp_path / "nope.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_dry_run_counts_the_cells_and_builds_one_per_shape_for_its_estimate(tmp_path, capsys, monkeypatch):
    # building paper.toml's 91 groups (data, models, samplers, optimizers) made its dry run take minutes;
    # its cost estimate times a few steps once per model/optimizer shape, here adam's and sgd's
    grid = write(tmp_path, TINY_FIXED + '[axes]\nopt = ["adam", "sgd"]\nseed = [0, 1]\n')
    from suite.bench import cost
    from suite.launch import grid as grids

    build, built, check, checked = cost.build, [], grids.check_builds, []
    monkeypatch.setattr(cost, "build", lambda spec, *a, **k: built.append(spec) or build(spec, *a, **k))
    monkeypatch.setattr(grids, "check_builds", lambda cells: checked.append(len(cells)) or check(cells))
    assert main(["grid", str(grid), "--dry-run", "--root", str(tmp_path / "runs")]) == 0
    out, err = capsys.readouterr()
    count, estimate = err.strip().splitlines()
    assert count == "g: 4 cells, 0 done, 0 running, 4 to run" and len(out.splitlines()) == 4
    assert (
        estimate.startswith("estimate: up to ") and "for 4 runs" in estimate and "2 model/optimizer shapes" in estimate
    )
    assert sorted(spec["opt"]["name"] for spec in built) == ["adam", "sgd"] and not checked
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("result.json"))
    assert main(["grid", str(grid), "--root", str(tmp_path / "runs")]) == 0
    assert checked == [4]  # a run checks that every cell builds before any trains


def test_local_backend_runs_missing_cells_and_a_rerun_skips_finished_ones(tmp_path, capsys):
    grid = write(
        tmp_path,
        TINY_FIXED
        + """
        [axes]
        opt = ["adam", "sgd"]
    """,
    )
    root = tmp_path / "runs"
    cells = load(grid).cells
    dirs = [RunDir(c.under(root).run_dir) for c in cells]
    assert main(["grid", str(grid), "--dry-run", "--root", str(root)]) == 0
    assert capsys.readouterr().out.split() == [str(dirs[0].path), "[opt=adam]", str(dirs[1].path), "[opt=sgd]"]

    # Workers share the cores: one thread each, waiting passively, whatever the caller's environment says.
    proc = cli(
        "grid",
        grid,
        "--backend",
        "local",
        "--workers",
        "2",
        "--root",
        root,
        env={"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 cells, 0 done, 0 running, 2 to run" in proc.stderr and proc.stderr.count("] done ") == 2
    assert all(d.status() == "done" for d in dirs)
    results = [json.loads((d / "result.json").read_text()) for d in dirs]
    assert all(r["threads"] == 1 and r["omp_wait_policy"] == "PASSIVE" for r in results)
    if {"avx2", "fma"} <= (cpu_flags() or set()):  # each says which CPU kernels made it, the ones pinned
        assert all(r["cpu_capability"] == "AVX2" and r["mkl_cbwr"] == PINNED["MKL_CBWR"] for r in results)
    assert [r["spec"] for r in results] == [canonical(c.spec) for c in cells]
    stamp = (dirs[0] / "result.json").stat().st_mtime_ns

    # a cell that failed (error.json, no result) is run again; the finished one is left alone
    (dirs[1] / "result.json").unlink()
    dirs[1].record_failure(RuntimeError("out of memory"))
    assert main(["status", str(grid), "--root", str(root)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("failed") and "RuntimeError: out of memory" in out[0]
    assert out[-1] == "2 cells: 1 done, 1 failed"
    proc = cli("grid", grid, "--root", root)
    assert proc.returncode == 0, proc.stderr
    assert "2 cells, 1 done, 0 running, 1 to run" in proc.stderr
    assert all(d.status() == "done" for d in dirs) and not (dirs[1] / "error.json").exists()
    assert (dirs[0] / "result.json").stat().st_mtime_ns == stamp
    timing = {"wall_s", "steps_per_s", "git_commit", "git_dirty", "created_utc"}  # how long, when, which commit
    again = json.loads((dirs[1] / "result.json").read_text())
    assert {k: v for k, v in again.items() if k not in timing} == {
        k: v for k, v in results[1].items() if k not in timing
    }

    assert main(["grid", str(grid), "--root", str(root)]) == 0
    assert "2 cells, 2 done, 0 running, 0 to run" in capsys.readouterr().err
    assert main(["status", str(grid), "--root", str(root)]) == 0
    assert capsys.readouterr().out.strip() == "2 cells: 2 done"


def test_cells_drawn_while_a_local_grid_runs_join_it_and_a_freed_worker_takes_them_at_once(tmp_path, capsys):
    # a tune's next round of one search is drawn as soon as that search's runs have finished: the
    # worker a short run frees takes it while a long run goes on (before, it waited for the long one)
    from suite.launch.local import run_local
    from suite.launch.manifest import RunOptions

    root = tmp_path / "runs"
    short = load(write(tmp_path, TINY_FIXED + "[axes]\nseed = [0, 1]\n", "short.toml"))
    first, later = (c.under(root) for c in short.cells)
    # thousands of steps against forty: its process outlives the short one's by tens of seconds, enough
    # beside other work too (at 1,500 steps a loaded CI machine once reaped the short one after the slow one)
    slow = TINY_FIXED.replace('"train.steps" = 40', '"train.steps" = 6000').replace("= 10\n", "= 1000\n")
    slow = write(tmp_path, slow, "slow.toml")
    (slow,) = (c.under(root) for c in load(slow).cells)
    asked = []  # each time a process ended: were the first and the slow run finished then

    def more():
        asked.append((RunDir(first.run_dir).finished, RunDir(slow.run_dir).finished))
        return [later] if len(asked) == 1 else []

    assert run_local(short, [first, slow], root, RunOptions(device="cpu"), 2, more) == 0
    assert asked[0] == (True, False) and len(asked) == 3  # drawn while the slow run went on; asked as each ended
    assert all(RunDir(c.run_dir).finished for c in (first, later, slow))
    err = capsys.readouterr().err
    assert "more: 1 cells in 1 processes" in err and "[3/3] done" in err
    assert len(list((root / "grids" / short.name).iterdir())) == 2  # a submission folder each


def test_a_draw_that_fails_while_a_local_grid_runs_draws_nothing_more_and_is_raised_once_its_processes_end(tmp_path):
    from conftest import chunks_here

    from suite import SuiteError
    from suite.launch.local import run_local
    from suite.launch.manifest import RunOptions

    root = tmp_path / "runs"
    g = load(write(tmp_path, TINY_FIXED + '[axes]\nopt = ["adam", "sgd"]\n'))  # two groups: two processes
    cells = [c.under(root) for c in g.cells]
    asked = []

    def more():
        asked.append(len(asked))
        raise SuiteError("g.toml: a drawn cell cannot be built")

    with chunks_here(), pytest.raises(SuiteError, match="cannot be built"):
        run_local(g, cells, root, RunOptions(device="cpu"), 1, more)
    assert asked == [0] and all(RunDir(c.run_dir).finished for c in cells)  # the queued process still ran


def test_status_sees_running_and_interrupted_cells(tmp_path, capsys):
    grid = write(tmp_path, TINY_FIXED + "[axes]\nseed = [0, 1, 2]\n")
    root = tmp_path / "runs"
    cells = load(grid).cells
    running, interrupted = RunDir(cells[0].under(root).run_dir), RunDir(cells[1].under(root).run_dir)
    interrupted.path.mkdir(parents=True)
    (interrupted / "checkpoint.pt").write_bytes(b"")
    evaluations = [{"step": 1000, "val_acc": 0.25}, {"step": 1500, "val_acc": 0.5}]
    (interrupted / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evaluations))
    probe = (
        "import sys, time; from suite.results.rundir import RunDir; rd = RunDir(sys.argv[1]); rd.lock(); "
        "print('locked', flush=True); time.sleep(60)"
    )
    # another process holds the lock, as a running grid's worker does
    holder = subprocess.Popen([sys.executable, "-c", probe, str(running.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["status", str(grid), "--root", str(root)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in out[:3]] == ["running", "interrupted", "missing"]
        assert out[0].endswith(f"[{cells[0].label}]")  # no evaluation yet: nothing to say how far it got
        assert out[1].endswith(f"[{cells[1].label}]  at step 1,500, val acc 0.500")  # how far it had got
        assert out[-1] == "3 cells: 0 done, 1 running, 1 interrupted, 1 missing"
        # a grid run leaves the running cell to its owner and runs the other two
        assert main(["grid", str(grid), "--root", str(root), "--dry-run"]) == 0
        assert "3 cells, 0 done, 1 running, 2 to run" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()


def test_outcome_line_of_a_cell_without_milestones(tmp_path):
    # A number probe's result.json has no grok_step: the local backend still reports the cell
    # (it used to raise KeyError and abandon the rest of the grid).
    from suite.launch.local import _outcome_line

    cell = load(REPO / "suite/grids/probes.toml").cells[0]
    run_dir = cell.under(tmp_path).run_dir
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(json.dumps({"wall_s": 31.25}))
    line = _outcome_line(1, 2, "done", cell.under(tmp_path), "cell.log")
    assert line.endswith("[model=minilm]  31.2 s")
    (run_dir / "result.json").write_text(
        json.dumps(
            {
                "runner": "probe",
                "wall_s": 31.25,
                "numbers": {"best": {"by_ev_ordered": {"layer": 3}}},
                "letters": {"best": {"by_ev_ordered": None}},
            }
        )
    )
    line = _outcome_line(1, 2, "done", cell.under(tmp_path), "cell.log")
    assert line.endswith("[model=minilm]  numbers: ordered layer 3  letters: ordered layer none  31.2 s")


def test_two_workers_share_the_seeds_of_one_cell(tmp_path, capsys):
    # five seeds of one cell are one group at --stack 8: one process, and the other worker idle
    # (a tune's final seeds, its longest phase); they split into groups of an even share instead
    (tmp_path / "g.toml").write_text(TINY_FIXED + "[axes]\nseed = [0, 1, 2, 3, 4]\n")
    assert main(["grid", str(tmp_path / "g.toml"), "--root", str(tmp_path / "runs"), "--workers", "2"]) == 0
    (manifest,) = (tmp_path / "runs" / "grids").rglob("manifest.json")
    chunks = json.loads(manifest.read_text())["chunks"]
    assert sorted(len(group) for chunk in chunks for group in chunk) == [2, 3] and len(chunks) == 2
    assert "5 cells in 2 processes" in capsys.readouterr().err


def test_ensemble_is_the_old_name_of_stack_and_still_works(tmp_path, capsys, chunks_in_process):
    # --ensemble K, --stack's name before the glossary's one word for it: hidden from --help, the
    # same K into the same plan, and said once on stderr however often it is given
    (tmp_path / "g.toml").write_text(TINY_FIXED + "[axes]\nseed = [0, 1, 2]\n")
    plans = {}
    for flag in ("--stack", "--ensemble"):
        root = tmp_path / flag.strip("-")
        assert main(["grid", str(tmp_path / "g.toml"), "--root", str(root), flag, "3", flag, "1"]) == 0
        said = capsys.readouterr().err
        assert said.count("--ensemble is now --stack") == (flag == "--ensemble")
        (manifest,) = (root / "grids").rglob("manifest.json")
        plan = json.loads(manifest.read_text())
        plans[flag] = (plan["stack"], plan["chunks"], sorted(p.parent.name for p in root.rglob("result.json")))
    assert plans["--ensemble"] == plans["--stack"] == (1, [[[0]], [[1]], [[2]]], plans["--stack"][2])
    assert len(plans["--stack"][2]) == 3
    assert make_parser().parse_args(["tune", "g.toml", "--ensemble", "4"]).stack == 4
    assert make_parser().parse_args(["tune", "g.toml"]).stack == 8  # the old name sets no default of its own
    with pytest.raises(SystemExit):
        main(["grid", "--help"])
    shown = capsys.readouterr().out
    assert "--stack K" in shown and "--ensemble" not in shown


def test_a_dry_run_estimates_its_cost_from_measured_step_costs(tmp_path, capsys):
    (tmp_path / "g.toml").write_text(TINY_FIXED + '[axes]\nseed = [0, 1]\nopt = ["adam", "sgd"]\n')
    args = ["grid", str(tmp_path / "g.toml"), "--root", str(tmp_path / "runs"), "--dry-run", "--workers", "2"]
    assert main(args) == 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("estimate:")]
    assert "for 4 runs, each to its budget" in line and "on --workers 2" in line and "2 model/optimizer shapes" in line
    assert not (tmp_path / "runs").exists()
