"""The GPU campaign's CPU path (tests/gpu_campaign.py --device cpu --quick): every part runs its steps,
packs what they made into a few small files (a report, its table, one archive of the runs), and a part
whose time runs out still writes its report."""

import json
import subprocess
import sys
import tarfile

import pytest
from conftest import REPO

LIMIT = 16 * 2**20


def _campaign(part, out, work, *extra, cwd=REPO):
    args = [
        sys.executable,
        REPO / "tests" / "gpu_campaign.py",
        part,
        "--device",
        "cpu",
        "--quick",
        "--out",
        out,
        "--work",
        work,
    ]
    return subprocess.run([*map(str, args), *extra], cwd=cwd, capture_output=True, text=True, timeout=900)


def _campaign_here(part, out, work, *extra, capsys) -> tuple[int, str]:
    """The part's main() in this process (its steps are processes of their own either way): exit code, stderr."""
    from gpu_campaign import main

    capsys.readouterr()
    code = main([part, "--device", "cpu", "--quick", "--out", str(out), "--work", str(work), *extra])
    return code, capsys.readouterr().err


@pytest.mark.slow  # every step of each part: minutes of grids, the bench and a nested pytest
@pytest.mark.parametrize("part", ["check", "grids", "long"])
def test_each_part_runs_on_the_cpu_and_packs_its_results_for_out(tmp_path, part):
    proc = _campaign(part, tmp_path / "out", tmp_path / "work", cwd=tmp_path)  # from any folder, not the checkout
    assert proc.returncode == 0, proc.stderr
    files = sorted(p for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert len(files) <= 8 and all(p.stat().st_size <= LIMIT for p in files)
    report = json.loads((tmp_path / "out" / f"{part}.json").read_text())
    assert report["steps"] and all(step["exit"] == 0 for step in report["steps"]), report["steps"]
    assert f"# campaign {part} on cpu" in proc.stdout  # the table, printed last
    with tarfile.open(tmp_path / "out" / f"{part}-runs.tar.gz") as tar:
        names = tar.getnames()
    assert any(n.endswith("result.json") for n in names)
    assert not any(n.endswith((".pt", ".safetensors")) for n in names)  # results, not weights
    if part == "check":
        compared = next(s for s in report["steps"] if s["step"] == "cpu vs device")
        assert compared["max_relative_loss_difference"] == 0.0  # the CPU against itself
        assert "precision" in json.loads((tmp_path / "out" / "bench.json").read_text())
    else:
        assert any(n.endswith("leaderboard/index.md") for n in names)


def test_a_part_whose_time_runs_out_skips_what_is_left_and_still_reports(tmp_path, capsys):
    code, err = _campaign_here("grids", tmp_path / "out", tmp_path / "work", "--budget-s", "1", capsys=capsys)
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "grids.json").read_text())
    assert report["steps"] and all("time ran out" in step["note"] for step in report["steps"])


def test_a_part_with_a_failed_step_exits_1_with_one_line_and_still_reports(tmp_path, capsys):
    (tmp_path / "work").mkdir()
    for grid in ("paper", "nanda"):  # each grid's root: both steps fail (fast: nothing trains)
        (tmp_path / "work" / grid).write_text("in the way")
    code, err = _campaign_here("grids", tmp_path / "out", tmp_path / "work", capsys=capsys)
    report = json.loads((tmp_path / "out" / "grids.json").read_text())
    assert code == 1 and {s["step"]: s["exit"] for s in report["steps"]} == {"paper": 2, "nanda": 2}
    assert err.strip().splitlines()[-1] == "error: 2 of 2 steps failed (paper, nanda): " + str(
        tmp_path / "out" / "grids.md"
    )
    assert (tmp_path / "out" / "grids-runs.tar.gz").is_file()  # still packed


BAD = {  # flags -> what the one line says
    ("--budget-s", "nan"): "--budget-s must be a positive number of seconds, got nan",
    ("--budget-s", "-5"): "--budget-s must be a positive number of seconds",
    ("--work", "file"): "cannot write to file",
    ("--out", "file/out"): "cannot write to file/out",
    ("--device", "cdua"): "device 'cdua' is not one",
    ("--device", "cuda:7"): "cuda",
    ("--budget-s", "soon"): "argument --budget-s: invalid float value: 'soon'",
}


@pytest.mark.parametrize("flags", BAD, ids=" ".join)
def test_bad_input_stops_a_part_before_it_runs_in_one_line(tmp_path, monkeypatch, capsys, flags):
    from gpu_campaign import main  # in this process: what is refused is refused before any step starts one

    (tmp_path / "file").write_text("in the way")
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["check", "--device", "cpu", "--quick", *flags])
    except SystemExit as exit:  # argparse's refusal
        code = exit.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and BAD[flags] in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no runs/, nothing measured or packed
