"""The Slurm backend: the rendered script, bad input, and a real array job on a real cluster.

The cluster tests need sbatch and a cluster that answers (slurm/start-cluster.sh makes one on
this machine); they are skipped without one, unless SUITE_REQUIRE_SLURM=1 (set by .ci/run) says
they must run.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import PARITY_FIXED, REPO, metrics_text, run_cli

from suite.cli import main
from suite.launch.grid import load
from suite.launch.slurm import SlurmOptions, fit_array
from suite.results.rundir import RunDir
from suite.specs.spec import default_run_dir

TINY = REPO / "suite/grids/tiny.toml"


def sbatch_lines(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_dry_run_prints_the_script_with_every_sbatch_line_and_writes_nothing(tmp_path, capsys):
    root = tmp_path / "runs"
    assert (
        main(
            [
                "grid",
                str(TINY),
                "--backend",
                "slurm",
                "--dry-run",
                "--root",
                str(root),
                "--partition",
                "gpu",
                "--time",
                "2:00:00",
                "--gpus",
                "a100:1",
                "--cpus",
                "4",
                "--mem",
                "16G",
                "--account",
                "grok",
                "--max-parallel",
                "3",
                "--cells-per-task",
                "3",
                "--sbatch=--constraint=a100",
                "--sbatch",
                "#SBATCH --qos=low",
            ]
        )
        == 0
    )
    script = capsys.readouterr().out
    assert script.startswith("#!/bin/bash\n")
    assert sbatch_lines(script) == [
        "--job-name=suite-tiny",
        "--array=0-0%3",  # 4 cells in 2 groups of 2: one array task of >= 3 cells
        f"--output={root.resolve()}/grids/tiny/<submission>/logs/%A_%a.out",
        "--open-mode=append",
        "--requeue",
        "--signal=B:USR1@120",
        "--partition=gpu",
        "--time=2:00:00",
        "--gpus=a100:1",
        "--cpus-per-task=4",
        "--mem=16G",
        "--account=grok",
        "--constraint=a100",
        "--qos=low",
    ]
    assert "-m suite chunk" in script and 'scontrol requeue "$task"' in script
    assert script.index("export OMP_WAIT_POLICY=PASSIVE") < script.index("-m suite chunk")  # array tasks share cores
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0  # valid bash
    assert not root.exists()


def test_grid_file_slurm_table_gives_defaults_and_flags_win(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(
        TINY.read_text()
        + textwrap.dedent("""
        [slurm]
        partition = "cpu"
        time = "30:00"
        max_parallel = 2
        signal_seconds = 300
        sbatch = ["--exclusive"]
        setup = ["module load cuda/12"]
    """)
    )
    assert main(["grid", str(grid), "--backend", "slurm", "--dry-run", "--partition", "gpu"]) == 0
    script = capsys.readouterr().out
    lines = sbatch_lines(script)
    assert "--partition=gpu" in lines and "--time=30:00" in lines and "--array=0-1%2" in lines  # 2 groups
    assert "--signal=B:USR1@300" in lines and lines[-1] == "--exclusive"
    assert "\nmodule load cuda/12\n" in script


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sbatch", "constraint=a100"], "must be an option such as --constraint=a100"),
        (["--cpus", "0"], "cpus must be an integer >= 1"),
        (["--max-parallel", "-1"], "max_parallel must be an integer >= 1"),
        (["--partition", "two words"], "partition must be one word"),
        (["--gpus", "-1"], "gpus must be a count >= 1 or type:count"),
        (["--gpus", "a100:0"], "gpus must be a count >= 1 or type:count"),
    ],
)
def test_bad_slurm_options_are_one_line_exit_2(tmp_path, capsys, args, message):
    assert main(["grid", str(TINY), "--backend", "slurm", "--root", str(tmp_path / "runs"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_sbatch_missing_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["grid", str(TINY), "--backend", "slurm", "--root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "sbatch not found" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def fake_command(tmp_path, name: str, body: str, monkeypatch) -> None:
    """A shell script called `name`, found first on PATH (written again: the new body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text("#!/bin/sh\n" + body)
    (bin_dir / name).chmod(0o755)
    if not os.environ["PATH"].startswith(f"{bin_dir}{os.pathsep}"):
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_rejected_submission_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    fake_command(
        tmp_path,
        "sbatch",
        'echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2\nexit 1\n',
        monkeypatch,
    )
    root = tmp_path / "runs"
    assert main(["grid", str(TINY), "--backend", "slurm", "--root", str(root), "--partition", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: sbatch refused the job: Batch job submission failed: Invalid partition name specified"]
    assert not list(root.rglob("*.*"))  # no manifest, no script, no log folder


def test_a_submission_writes_manifest_and_script_and_prints_the_job_id(tmp_path, capsys, monkeypatch):
    fake_command(tmp_path, "sbatch", 'cp "$2" "$(dirname "$2")/submitted.sbatch"\necho "4242;cluster"\n', monkeypatch)
    root = tmp_path / "runs"
    assert (
        main(["grid", str(TINY), "--backend", "slurm", "--root", str(root), "--cells-per-task", "2", "--stack", "1"])
        == 0
    )
    assert capsys.readouterr().out.strip() == "4242"
    (workdir,) = (root / "grids/tiny").iterdir()
    manifest = json.loads((workdir / "manifest.json").read_text())
    assert [c["id"] for c in manifest["cells"]] == [c.id for c in load(TINY).cells]
    assert manifest["cells_per_task"] == 2 and manifest["n_chunks"] == 2 and manifest["stack"] == 1
    assert manifest["chunks"] == [[[0], [1]], [[2], [3]]]  # --stack 1: every cell its own group
    assert (workdir / "submitted.sbatch").read_text() == (workdir / "job.sbatch").read_text()
    assert f"--output={workdir}/logs/%A_%a.out" in (workdir / "job.sbatch").read_text()
    assert (workdir / "job_id").read_text().strip() == "4242"


def test_cells_an_array_task_still_holds_are_queued_not_submitted_again(tmp_path, capsys, monkeypatch):
    # tune on Slurm is called again until its searches end: each call must submit only what no
    # queued array task will run, or every call would queue the pending cells once more
    fake_command(tmp_path, "sbatch", 'echo "4242"\n', monkeypatch)
    root = tmp_path / "runs"
    grid = ["grid", str(TINY), "--backend", "slurm", "--root", str(root), "--cells-per-task", "2", "--stack", "1"]
    assert main(grid) == 0
    (first,) = (root / "grids/tiny").iterdir()
    chunks = json.loads((first / "manifest.json").read_text())["chunks"]
    cells = load(TINY, root).cells
    capsys.readouterr()

    fake_command(tmp_path, "squeue", 'echo "4242_1"\n', monkeypatch)  # task 0 has ended, its cells unrun
    assert main(["status", str(TINY), "--root", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "4 cells: 0 done, 2 queued, 2 missing"
    assert sorted(line.split()[0] for line in out[:-1]) == ["missing", "missing", "queued", "queued"]
    assert {line.split()[1] for line in out if line.startswith("queued")} == {
        str(cells[i].run_dir) for group in chunks[1] for i in group
    }

    fake_command(tmp_path, "sbatch", 'echo "4243"\n', monkeypatch)
    assert main(grid) == 0
    assert "tiny: 4 cells, 0 done, 0 running, 2 queued, 2 to run; submitted array job 4243" in capsys.readouterr().err
    (second,) = set((root / "grids/tiny").iterdir()) - {first}
    again = json.loads((second / "manifest.json").read_text())["cells"]
    assert [c["id"] for c in again] == [cells[i].id for group in chunks[0] for i in group]

    fake_command(tmp_path, "squeue", 'echo "4242_1 4243_0 99_0"\n', monkeypatch)  # all held
    assert main(grid) == 0
    assert capsys.readouterr().err.strip() == "tiny: 4 cells, 0 done, 0 running, 4 queued, 0 to run"
    assert len(list((root / "grids/tiny").iterdir())) == 2  # nothing submitted

    fake_command(
        tmp_path, "squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n', monkeypatch
    )
    assert main(["status", str(TINY), "--root", str(root)]) == 0  # squeue's word for: none left
    assert capsys.readouterr().out.splitlines()[-1] == "4 cells: 0 done, 4 missing"

    fake_command(
        tmp_path,
        "squeue",
        'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2\nexit 1\n',
        monkeypatch,
    )
    assert main(grid) == 2  # not knowing what is queued, it submits nothing
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: cannot tell which submitted cells Slurm still holds: squeue: "
        "slurm_load_jobs error: Unable to contact slurm controller"
    ]
    assert len(list((root / "grids/tiny").iterdir())) == 2
    assert main(["status", str(TINY), "--root", str(root)]) == 0  # status says so, and shows the folders
    captured = capsys.readouterr()
    assert (
        captured.err.startswith("warning: cannot tell")
        and captured.out.splitlines()[-1] == "4 cells: 0 done, 4 missing"
    )

    fake_command(tmp_path, "squeue", 'echo "4243_0"\n', monkeypatch)
    (second / "manifest.json").write_text('{"chunks": [[[0]]]}')  # damaged: its cells unknown
    assert main(grid) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot read {second / 'manifest.json'}, whose array job Slurm still holds" in err[0]


# a tune of two rounds: on Slurm, round 1, then a call that draws round 2, one that submits the final
# runs, and one that measures the cost once they are done
FOLLOWED = (
    'name = "followed"\n'
    + PARITY_FIXED
    + "patience = 40\n"
    + textwrap.dedent("""
    [tuning]
    rounds = [{ search = "coarse", trials = 2 }, { search = "refine", trials = 1, width = 0.1 }]
    tuning_seeds = [100]
    final_seeds = [0, 1, 2, 3, 4]
    [tuning.shared]
    lr = { log = [0.003, 0.1] }
    [tuning.methods.adam]
    opt = "adam"
""")
)


def test_tune_follow_queues_itself_after_each_submission_until_the_tune_is_done(tmp_path, capsys, monkeypatch):
    # Slurm played by hand: sbatch hands out job ids and keeps the scripts; squeue holds what the
    # test says; each array job's chunks and each follow-up's command are run here, in turn
    (tmp_path / "g.toml").write_text(FOLLOWED)
    root, held, scripts = tmp_path / "runs", tmp_path / "held", tmp_path / "scripts"
    fake_command(
        tmp_path,
        "sbatch",
        f"n=$(cat {tmp_path}/last 2>/dev/null || echo 100); n=$((n + 1)); echo $n > {tmp_path}/last\n"
        f'echo "$n $2" >> {scripts}\necho $n\n',
        monkeypatch,
    )
    fake_command(tmp_path, "squeue", f"cat {held}\n", monkeypatch)

    def submitted() -> dict[str, Path]:
        return {job: Path(path) for job, path in (line.split() for line in scripts.read_text().splitlines())}

    def run_array_job(job: str) -> None:
        manifest = submitted()[job].with_name("manifest.json")
        for i in range(len(json.loads(manifest.read_text())["chunks"])):
            assert main(["chunk", str(manifest), str(i)]) == 0

    def follow_up(job: str) -> list[str]:
        script = submitted()[job].read_text()
        (command,) = [line for line in script.splitlines() if line.startswith("exec ")]
        assert f"cd {Path.cwd()}" in script.splitlines()
        return shlex.split(command)[4:]  # after "exec PYTHON -m suite"

    held.write_text("101_0\n")  # squeue, asked after the first submission: its array job is pending
    tune = ["tune", str(tmp_path / "g.toml"), "--backend", "slurm", "--root", str(root), "--follow=3"]
    assert main(tune) == 0
    assert list(submitted()) == ["101", "102"]  # round 1, and its follow-up
    script = submitted()["102"].read_text()
    assert "#SBATCH --dependency=afterany:101" in script.splitlines()
    assert follow_up("102") == tune[:-1] + ["--follow", "2"]
    err = capsys.readouterr().err
    assert f"queued follow-up job 102: python -m suite {shlex.join(tune[:-1])} --follow 2" in err
    assert "the follow-up job runs this command again then" in err

    held.write_text("101_0\n102\n")
    assert main(["status", str(tmp_path / "g.toml"), "--root", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "follow-up job 102 is queued: it runs the tune again once its array jobs have ended" in out
    assert out[-1] == "2 cells: 0 done, 2 queued"
    # called again by hand meanwhile: nothing new, and one follow-up is enough
    assert main(tune) == 0
    err = capsys.readouterr().err
    assert "2 queued, 0 to run" in err and "no follow-up job: follow-up job 102 is queued already" in err
    assert list(submitted()) == ["101", "102"]

    for array, follow, then, left in (("101", "102", "103", 1), ("103", "104", "105", 0)):
        run_array_job(array)  # then Slurm starts the follow-up, which submits the next array job and queues its own
        held.write_text(f"{follow}\n{then}_0\n")
        monkeypatch.setenv("SLURM_JOB_ID", follow)
        assert main(follow_up(follow)) == 0
        assert list(submitted())[-2:] == [then, str(int(then) + 1)]
        assert f"--follow {left}" in capsys.readouterr().err
    assert submitted()["105"].is_relative_to((root / "final").resolve())  # the final runs
    run_array_job("105")
    held.write_text("106\n")
    monkeypatch.setenv("SLURM_JOB_ID", "106")
    assert main(follow_up("106")) == 0  # the last: the final runs are done, the cost measured; nothing queued
    assert list(submitted())[-1] == "106" and (root / "final" / "cost.json").exists()
    held.write_text("")  # and once it has ended, status points at its log
    assert main(["status", str(tmp_path / "g.toml"), "--root", str(root)]) == 0
    log = submitted()["106"].parent / "logs" / "106.out"
    assert f"no follow-up job is queued; the last, 106, has ended: its log is {log}" in capsys.readouterr().out
    fake_command(tmp_path, "squeue", 'echo "Unable to contact slurm controller" >&2\nexit 1\n', monkeypatch)
    assert main(["status", str(tmp_path / "g.toml"), "--root", str(root)]) == 0  # not knowing, it says so only
    captured = capsys.readouterr()
    assert "follow-up" not in captured.out and captured.err.startswith("warning: cannot tell")

    # the same tune run here, every round at once: the same trials, choices and final runs
    monkeypatch.delenv("SLURM_JOB_ID")
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(tmp_path / "local")]) == 0

    def outcome(r: Path):
        chosen = json.loads((r / "final" / "tuning.json").read_text())["chosen"]
        finals = sorted(
            (p.parent.parent.name, json.loads(p.read_text())["grok_step"]) for p in (r / "final").rglob("result.json")
        )
        return [(c["settings"], [t["settings"] for t in c["tried"]]) for c in chosen], finals

    assert outcome(root) == outcome(tmp_path / "local")
    assert len(outcome(root)[1]) == 5


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--follow", "2"], "--follow is for --backend slurm: a local tune runs every round itself"),
        (["--backend", "slurm", "--follow", "-1"], "--follow must be at least 0, got -1"),
    ],
)
def test_bad_follow_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, flags, message):
    (tmp_path / "g.toml").write_text(FOLLOWED)
    assert main(["tune", str(tmp_path / "g.toml"), "--root", str(tmp_path / "runs"), *flags]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {message}"]
    assert not (tmp_path / "runs").exists()


def test_a_manifest_written_before_the_renames_still_runs(tmp_path, capsys, monkeypatch):
    # a manifest an older suite wrote says "ensemble" for "stack" and "n_tasks" for "n_chunks": an
    # array task still queued when the suite was updated runs its chunk as it would have
    from suite.launch.manifest import read_manifest

    fake_command(tmp_path, "sbatch", 'echo "4242"\n', monkeypatch)
    root = tmp_path / "runs"
    assert main(["grid", str(TINY), "--backend", "slurm", "--root", str(root), "--cells-per-task", "2"]) == 0
    (path,) = root.glob("grids/tiny/*/manifest.json")
    new = json.loads(path.read_text())
    old = {{"stack": "ensemble", "n_chunks": "n_tasks"}.get(k, k): v for k, v in new.items()}
    assert "stack" not in old and (old["ensemble"], old["n_tasks"]) == (8, 2)
    path.write_text(json.dumps(old))
    assert read_manifest(path) == new
    proc = run_cli("chunk", path, 1)
    assert proc.returncode == 0, proc.stderr
    ran = [RunDir(c["run_dir"]) for i in new["chunks"][1][0] for c in [new["cells"][i]]]
    assert ran and all(rd.finished for rd in ran)
    refused = run_cli("chunk", path, 2)
    assert refused.returncode == 2 and "has chunks 0..1, not 2" in refused.stderr


@pytest.mark.parametrize("edit", ["run folder", "root", "moved", "code"])
def test_a_manifest_edited_to_write_elsewhere_is_refused(tmp_path, monkeypatch, edit):
    # an array task runs whatever its manifest names: one edited by hand (or copied) to put a run
    # outside the root it belongs to, or to let a model run its folder's code, is refused in one
    # line, before any cell runs
    fake_command(tmp_path, "sbatch", 'echo "4242"\n', monkeypatch)
    root = tmp_path / "runs"
    assert main(["grid", str(TINY), "--backend", "slurm", "--root", str(root)]) == 0
    (path,) = root.glob("grids/tiny/*/manifest.json")
    manifest = json.loads(path.read_text())
    elsewhere = tmp_path / "elsewhere"
    if edit == "run folder":
        manifest["cells"][0]["run_dir"] = str(elsewhere / "run")
    elif edit == "root":  # every folder where the spec puts it under the new root
        manifest["root"] = str(elsewhere)
        for cell in manifest["cells"]:
            cell["run_dir"] = cell["run_dir"].replace(str(root.resolve()), str(elsewhere))
    elif edit == "code":  # the run folder its edited spec has
        cell = manifest["cells"][0]
        cell["spec"]["model"]["trust_remote_code"] = True
        cell["run_dir"] = str(default_run_dir(cell["spec"], manifest["root"]))
    else:
        path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    proc = run_cli("chunk", path, 0)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    said = {"run folder": "is not the run folder of its spec", "code": "would run the code of the model's folder"}
    assert said.get(edit, "is not in") in proc.stderr
    assert not elsewhere.exists() and not list(root.rglob("spec.json"))


def test_big_grids_get_more_cells_per_task():
    options = SlurmOptions()
    cells = [SimpleNamespace(spec={"seed": 0, "cell": i}) for i in range(2500)]  # no two differ only in seed
    fit_array(options, cells, stack=32)
    assert options.cells_per_task == 3


# --- a real cluster ---------------------------------------------------------------------------------


def cluster_up() -> bool:
    if shutil.which("sbatch") is None:
        return False
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    return ping.returncode == 0 and "UP" in ping.stdout


needs_cluster = pytest.mark.skipif(
    os.environ.get("SUITE_REQUIRE_SLURM") != "1" and not cluster_up(),
    reason="no Slurm cluster here (slurm/start-cluster.sh starts one; SUITE_REQUIRE_SLURM=1 makes this fail instead)",
)


def squeue(job: str | None = None, name: str | None = None) -> list[str]:
    args = ["squeue", "-h", "-o", "%i %t %r"] + (["-j", job] if job else []) + (["--name", name] if name else [])
    out = subprocess.run(args, capture_output=True, text=True)
    return out.stdout.split("\n")[:-1] if out.returncode == 0 else []


@needs_cluster
def test_a_partition_slurm_rejects_is_one_line_exit_2_and_nothing_submitted(tmp_path):
    name = f"reject{os.getpid()}"  # a job name nobody else uses: others may share the cluster
    grid = tmp_path / "grid.toml"
    grid.write_text(TINY.read_text().replace('name = "tiny"', f'name = "{name}"'))
    root = tmp_path / "runs"
    proc = run_cli("grid", grid, "--backend", "slurm", "--root", root, "--partition", "no-such-partition")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: sbatch refused the job:")
    assert "partition" in proc.stderr.lower()
    assert not squeue(name=f"suite-{name}") and not list(root.rglob("*.*"))


@needs_cluster
def test_a_held_array_job_keeps_its_cells_from_a_second_submission_until_it_is_gone(tmp_path):
    name = f"held{os.getpid()}"
    grid = tmp_path / "grid.toml"
    grid.write_text(TINY.read_text().replace('name = "tiny"', f'name = "{name}"'))
    root = tmp_path / "runs"
    submit = ("grid", grid, "--backend", "slurm", "--root", root, "--sbatch=--hold", "--cells-per-task", "2")
    jobs = []
    try:
        first = run_cli(*submit)  # held: every array task stays pending
        assert first.returncode == 0, first.stderr
        jobs.append(first.stdout.strip())
        again = run_cli(*submit)
        assert again.returncode == 0 and not again.stdout, again.stderr
        assert again.stderr.strip() == f"{name}: 4 cells, 0 done, 0 running, 4 queued, 0 to run"
        status = run_cli("status", grid, "--root", root)
        assert status.stdout.splitlines()[-1] == "4 cells: 0 done, 4 queued", status.stdout
        subprocess.run(["scancel", jobs[0]], check=True)
        wait_until(lambda: not squeue(jobs[0]), "the cancelled job gone from the queue")
        third = run_cli(*submit)  # nothing holds them now
        assert third.returncode == 0 and "0 running, 4 to run; submitted array job" in third.stderr, third.stderr
        jobs.append(third.stdout.strip())
    finally:
        for job in jobs:
            subprocess.run(["scancel", job], capture_output=True)


@pytest.mark.slow  # minutes: three array jobs and three follow-up jobs, one after another
@needs_cluster
def test_a_followed_tune_finishes_by_itself_on_a_real_cluster(tmp_path):
    name = f"followed{os.getpid()}"
    grid = tmp_path / "g.toml"
    grid.write_text(FOLLOWED.replace('name = "followed"', f'name = "{name}"'))
    root = tmp_path / "runs"
    jobs = [f"suite-{name}-tuning", f"suite-{name}-final", f"suite-{name}-follow"]
    try:
        first = run_cli("tune", grid, "--backend", "slurm", "--root", root, "--follow", "3")
        assert first.returncode == 0 and "queued follow-up job" in first.stderr, first.stderr
        wait_until(
            lambda: (root / "final" / "cost.json").exists() and not any(squeue(name=job) for job in jobs),
            "the tune's cost measured and every job of it gone",
            timeout=900,
        )
    finally:
        subprocess.run(["scancel", *(f"--name={job}" for job in jobs)], capture_output=True)
    logs = sorted((root / "follow").glob("*/logs/*.out"))
    assert len(logs) == 3, [p.read_text() for p in logs]  # round 2, the final runs, the cost: then none
    assert all("Traceback" not in p.read_text() for p in logs)
    record = json.loads((root / "final" / "tuning.json").read_text())
    assert [len(c["tried"]) for c in record["chosen"]] == [3]
    assert len(list((root / "final").rglob("result.json"))) == 5 and (root / "final" / "cost.json").exists()


GRID = """
name = "slurmtest"
[fixed]
p = 23
d = 32
hidden = 64
batch_size = 64
eval_every = 50
checkpoint_every = 100
patience = "none"
[axes]
"train.steps" = [6000, 5000]   # array task 0: both seeds of 6000 steps as one stack; 1: of 5000 (its window
                               # between a checkpoint and its end must outlast a busy machine's polling)
seed = [0, 1]
"""


@pytest.mark.slow  # minutes: two array tasks, each interrupted, requeued and resumed, then the grid run locally
@needs_cluster
def test_real_array_job_with_requeues_lands_every_result_equal_to_a_local_run(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    cells = load(grid).cells
    root = tmp_path / "slurm-runs"
    # submitted in process: a command's own process, exiting while both array tasks start on a
    # 2-core machine, took up to 9 s after sbatch, in which array task 1 could train to its end unseen
    assert main(["grid", str(grid), "--backend", "slurm", "--root", str(root), "--max-parallel", "2"]) == 0
    job = capsys.readouterr().out.strip().splitlines()[-1]
    assert job.isdigit()
    (workdir,) = (root / "grids/slurmtest").iterdir()
    dirs = [RunDir(c.under(root).run_dir) for c in cells]
    chunks = json.loads((workdir / "manifest.json").read_text())["chunks"]  # array task i: its groups' cells
    tasks = {i: [dirs[c] for group in chunk for c in group] for i, chunk in enumerate(chunks)}
    assert [len(pair) for pair in tasks.values()] == [2, 2]
    try:
        # Each array task (a stack of 2 seeds), once it runs past a checkpoint, is interrupted one way.
        # Array task 1: USR1 to its batch shell (what --signal=B:USR1 does before the time limit: the
        # script forwards it, the run checkpoints and the script requeues itself). Array task 0:
        # `scontrol requeue` (what an admin or a preemption does: SIGTERM to every process, then the
        # job goes back to pending). The array tasks need not run at the same time: a cluster may give
        # them one after the other.
        interrupted = set()

        def interrupt_each_then_finish():
            for task, pair in tasks.items():
                if task in interrupted or not all(
                    (d / "checkpoint.pt").exists() and d.status() == "running" for d in pair
                ):
                    continue
                if task == 1:
                    try:  # Slurm 22.05 delivers the signal to an array task yet answers "can not be altered
                        # now", and scancel keeps retrying every few seconds, which would hit the requeued
                        # task: stop it
                        subprocess.run(
                            ["scancel", "--signal=USR1", "--batch", f"{job}_1"], capture_output=True, timeout=2
                        )
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    requeue = subprocess.run(["scontrol", "requeue", f"{job}_0"], capture_output=True, text=True)
                    assert requeue.returncode == 0, requeue.stderr
                interrupted.add(task)
            # A requeued array task starts again after cred_expire (10 s in start-cluster.sh). Not sooner:
            # `scontrol update StartTime=now` within the requeue's second gets it killed as
            # "non-startable: Job credential revoked", and the job ends with its cells unfinished.
            return not squeue(job)

        wait_until(interrupt_each_then_finish, "every array task interrupted past a checkpoint, then the job gone")
        assert interrupted == {0, 1}
        assert all(d.finished for d in dirs), [d.status() for d in dirs]
    finally:
        subprocess.run(["scancel", job], capture_output=True)

    logs = [read(workdir / "logs" / f"{job}_{i}.out") for i in range(2)]  # %A_%a, appended across restarts
    # array task 0: Slurm's SIGTERM reaches Python and the shell, which forwards USR1: either comes first
    assert "DUE TO JOB REQUEUE" in logs[0] and re.search(r"stopped: SIG(TERM|USR1) at step", logs[0]), logs[0]
    assert "stopped: SIGUSR1 at step" in logs[1], logs[1]
    for i in (0, 1):
        assert "restart 1" in logs[i], logs[i]
        assert int(re.search(r"resuming .* from step (\d+)", logs[i]).group(1)) > 0, logs[i]
    assert "requeueing" in logs[1]  # array task 1 requeued itself
    assert all("running 2 cells as one group" in text for text in logs)

    # Every cell on its own, locally: the same numbers, bit for bit (one thread per process in both)
    local_root = tmp_path / "local-runs"
    local = run_cli("grid", grid, "--backend", "local", "--workers", "2", "--root", local_root, "--stack", "1")
    assert local.returncode == 0, local.stderr
    for cell, rd in zip(cells, dirs):
        here = RunDir(cell.under(local_root).run_dir)
        assert metrics_text(rd.path) == metrics_text(here.path)
        ours, theirs = (json.loads((d / "result.json").read_text()) for d in (rd, here))
        timing = {"wall_s", "steps_per_s", "git_commit", "stack_size", "created_utc"}  # not what
        assert {k: v for k, v in ours.items() if k not in timing} == {
            k: v for k, v in theirs.items() if k not in timing
        }


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def wait_until(condition, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_path_with_a_line_break_never_reaches_a_job_script(tmp_path, capsys):
    # after the break, the rest of the path would be a line of shell in job.sbatch
    grid = tmp_path / "x\ntouch PWNED" / "g.toml"
    grid.parent.mkdir()
    shutil.copy(TINY, grid)
    argv = ["grid", str(grid), "--backend", "slurm", "--dry-run", "--root", str(tmp_path / "runs")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "a path with a line break cannot go into a Slurm job script" in err[-1]
    assert not (tmp_path / "runs").exists()
