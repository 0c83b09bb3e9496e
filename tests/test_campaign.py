"""The GPU campaign's CPU path (suite/campaign.py --device cpu --quick): every part runs its steps,
packs what they made into a few small files (a report, its table, one archive of the runs), and a part
whose time runs out still writes its report."""

import json
import subprocess
import sys
import tarfile

import pytest
from conftest import REPO

LIMIT = 16 * 2**20


def _campaign(part, out, work, *extra):
    args = [sys.executable, "-m", "suite.campaign", part, "--device", "cpu", "--quick", "--out", out, "--work", work]
    return subprocess.run([*map(str, args), *extra], cwd=REPO, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("part", ["check", "grids", "long"])
def test_each_part_runs_on_the_cpu_and_packs_its_results_for_out(tmp_path, part):
    proc = _campaign(part, tmp_path / "out", tmp_path / "work")
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


def test_a_part_whose_time_runs_out_skips_what_is_left_and_still_reports(tmp_path):
    proc = _campaign("grids", tmp_path / "out", tmp_path / "work", "--budget-s", "1")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out" / "grids.json").read_text())
    assert report["steps"] and all("time ran out" in step["note"] for step in report["steps"])
