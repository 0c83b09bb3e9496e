"""A core install (no extras) trains, boards and exports; a command that needs an extra not installed
says which in one line, exit 2, with nothing written. An extra's modules are hidden the way a missing
package is (None in sys.modules: `import` fails, importlib.util.find_spec finds nothing)."""

import subprocess
import sys
import tomllib

import pytest
from conftest import ONE_POINT, REPO, TINY, TINY_FIXED, as_args

from suite.errors import EXTRAS

HIDE = sorted(EXTRAS)
ARGS = as_args(TINY)


def _core(*args):
    """`python -m suite ARGS` with every extra's modules missing, in a process of its own: a core install is
    a Python that never imported an extra, and this one has (other tests use them)."""
    code = f"import sys\nfor m in {HIDE!r}: sys.modules[m] = None\nfrom suite.cli import main\nsys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=600
    )


def test_the_core_trains_boards_and_exports_without_any_extra(tmp_path):
    proc = _core("run", *ARGS, "--out", tmp_path / "runs" / "one")
    assert proc.returncode == 0, proc.stderr
    assert _core("list").returncode == 0
    proc = _core("leaderboard", tmp_path / "runs", "--out", tmp_path / "board")
    assert proc.returncode == 0 and (tmp_path / "board" / "index.md").exists(), proc.stderr
    assert _core("export", tmp_path / "runs", "--out", tmp_path / "export").returncode == 0


@pytest.mark.parametrize(
    "extra, args",
    [
        ("probe", ["run", "--task", "number_probe"]),
        (
            "text",
            ["run", "--task", "zipf_text", "--model", "transformer", "--set=train.steps=20", "--set=eval_every=10"],
        ),
        ("wandb", ["run", *ARGS, "--wandb", "offline"]),
        ("schedulefree", ["run", "--opt", "schedulefree_adamw", *ARGS]),
    ],
)
def test_a_command_that_needs_a_missing_extra_names_it_in_one_line_and_writes_nothing(tmp_path, extra, args):
    proc = _core(*args, "--out", tmp_path / "run")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"[{extra}] extra" in proc.stderr and f"grokking-suite[{extra}]" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["grid", "tune"])
def test_a_grid_tracked_without_the_wandb_extra_is_one_line_not_an_error_per_cell(tmp_path, command):
    grid = TINY_FIXED + ("" if command == "grid" else ONE_POINT)
    (tmp_path / "g.toml").write_text(grid)
    proc = _core(command, tmp_path / "g.toml", "--root", tmp_path / "runs", "--wandb", "offline")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "[wandb] extra" in proc.stderr and not (tmp_path / "runs").exists()


def test_the_core_requirements_leave_the_extras_out_and_all_holds_every_extra():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {req.split("[")[0].split(">")[0].split("=")[0].split("<")[0] for req in project["dependencies"]}
    assert not names & {"wandb", "datasets", "transformers", "gguf", "scikit-learn", "accelerate"}
    extras = project["optional-dependencies"]
    assert extras["all"] == ["grokking-suite[probe,text,wandb,schedulefree]"]
    assert extras["schedulefree"] == ["schedulefree"] and "schedulefree" not in names
    assert {"wandb"} <= set(extras["wandb"]) and {"datasets"} <= set(extras["text"])
    assert {"transformers", "scikit-learn"} <= set(extras["probe"])
