"""A run records the code of each component it was made by, and a finished (or checkpointed) run
made by other code of a component is never reused silently: the command names the component and
stops, or with --rerun-changed runs the cell again. Runs made before the record existed are reused."""

import json

from conftest import TINY_FIXED, plugin_package, run_cli

# A user's optimizer in a package of their own, registered through the suite.optimizers entry point.
PLUGIN = '''
import torch
from suite import register_optimizer


@register_optimizer("myadam", elementwise=True)
def myadam(groups, *, lr: float = 0.01):
    """Adam without weight decay: a method under development."""
    return torch.optim.Adam(groups.all, lr=lr)
'''
RUN = ["run", "--opt", "myadam", "--set", "p=23", "--set", "batch_size=64", "--steps", "40", "--set", "eval_every=20"]


def _edit(tmp_path, change: str) -> None:
    module = tmp_path / "outside_pkg/__init__.py"
    module.write_text(module.read_text() + change)


def test_a_run_records_its_components_code_and_is_not_reused_once_the_plugin_s_source_changes(tmp_path):
    env = plugin_package(tmp_path, PLUGIN, ep_name="myadam", group="suite.optimizers")
    out = tmp_path / "run"
    first = run_cli(*RUN, "--out", out, env=env)
    assert first.returncode == 0, first.stderr
    result = json.loads((out / "result.json").read_text())
    code = result["code"]["opt"]
    assert code["module"] == "outside_pkg" and code["package"] == "outside-pkg" and code["version"] == "0.1"
    assert result["code"]["model"]["package"] == "grokking-suite" and len(code["source_sha256"]) == 64
    assert json.loads((out / "code.json").read_text()) == result["code"]

    again = run_cli(*RUN, "--out", out, env=env)  # the same code: the finished run is the answer
    assert again.returncode == 0 and "already finished" in again.stderr

    _edit(tmp_path, "\n# the researcher changed the update\n")
    before = (out / "result.json").read_bytes()
    stale = run_cli(*RUN, "--out", out, env=env)
    lines = stale.stderr.strip().splitlines()
    assert stale.returncode == 2 and len(lines) == 1, stale.stderr
    assert "made by other code of opt 'myadam' (outside_pkg" in lines[0] and "--rerun-changed" in lines[0]
    assert (out / "result.json").read_bytes() == before  # nothing touched

    rerun = run_cli(*RUN, "--out", out, "--rerun-changed", env=env)
    assert rerun.returncode == 0 and "already finished" not in rerun.stderr, rerun.stderr
    now = json.loads((out / "result.json").read_text())["code"]["opt"]["source_sha256"]
    assert now != code["source_sha256"]


def test_a_grid_stops_on_run_folders_made_by_other_code_and_reruns_them_when_asked(tmp_path):
    env = plugin_package(tmp_path, PLUGIN, ep_name="myadam", group="suite.optimizers")
    grid = tmp_path / "g.toml"
    grid.write_text('name = "g"\n' + TINY_FIXED + 'opt = "myadam"\n[axes]\nseed = [0, 1]\n')
    root = tmp_path / "runs"
    assert run_cli("grid", grid, "--root", root, env=env).returncode == 0
    _edit(tmp_path, "\n# changed\n")
    stale = run_cli("grid", grid, "--root", root, env=env)
    assert stale.returncode == 2 and stale.stderr.startswith("error: 2 of g's run folders were made by other code")
    dry = run_cli("grid", grid, "--root", root, "--rerun-changed", "--dry-run", env=env)
    assert dry.returncode == 0 and len(dry.stdout.splitlines()) == 2  # listed to run, nothing removed
    assert len(list(root.rglob("result.json"))) == 2
    rerun = run_cli("grid", grid, "--root", root, "--rerun-changed", env=env)
    assert rerun.returncode == 0, rerun.stderr
    codes = {json.loads(f.read_text())["code"]["opt"]["source_sha256"] for f in root.rglob("result.json")}
    assert len(codes) == 1 and len(list(root.rglob("result.json"))) == 2


def test_a_run_made_before_code_was_recorded_is_reused(tmp_path):
    out = tmp_path / "run"
    args = ["run", "--set", "p=23", "--set", "batch_size=64", "--steps", "20", "--set", "eval_every=10", "--out", out]
    assert run_cli(*args).returncode == 0
    (out / "code.json").unlink()  # as every run committed before the record existed
    result = json.loads((out / "result.json").read_text())
    del result["code"]
    (out / "result.json").write_text(json.dumps(result))
    again = run_cli(*args)
    assert again.returncode == 0 and "already finished" in again.stderr
