"""The two entry points, `python -m suite` and the grok-suite console script, behave alike."""

import json
import os
import subprocess
import sys
import tomllib

from conftest import REPO, run_cli

import suite

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Records the environment at the moment torch is first imported, printed at exit.
WATCH_TORCH = """
import atexit, importlib.abc, json, os, sys
seen = {}
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" and not seen:
            seen.update({k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "THP_MEM_ALLOC_ENABLE")})
sys.meta_path.insert(0, Watch())
atexit.register(lambda: print("ENV-AT-TORCH-IMPORT " + json.dumps(seen)))
"""
MODULE = (
    "import runpy, sys; sys.argv = ['suite', 'list', 'opt']; "
    "runpy.run_module('suite', run_name='__main__', alter_sys=True)"
)
# What pip's generated grok-suite wrapper does with the [project.scripts] entry.
SCRIPT = (
    "import importlib, sys; module, _, attr = {target!r}.partition(':'); sys.argv = ['grok-suite', 'list', 'opt']; "
    "sys.exit(getattr(importlib.import_module(module), attr)())"
)


def test_version_is_the_packages():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"grokking-suite {suite.__version__}"
    assert PYPROJECT["project"]["version"] == suite.__version__


def run_entry(code: str, **user) -> tuple[subprocess.CompletedProcess, list[str], dict]:
    """Run an entry point with OMP_WAIT_POLICY and THP_MEM_ALLOC_ENABLE unset unless the user
    sets them: the process, its stdout lines and the environment torch was imported under."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "THP_MEM_ALLOC_ENABLE")} | user
    proc = subprocess.run(
        [sys.executable, "-c", WATCH_TORCH + code], env=env, capture_output=True, text=True, timeout=300
    )
    *out, last = proc.stdout.strip().splitlines()
    assert last.startswith("ENV-AT-TORCH-IMPORT "), proc.stderr
    return proc, out, json.loads(last.split(" ", 1)[1])


def test_console_script_sets_the_environment_before_torch_as_python_m_suite_does():
    module = run_entry(MODULE)
    script = run_entry(SCRIPT.format(target=PYPROJECT["project"]["scripts"]["grok-suite"]))
    for proc, out, env in (module, script):
        assert proc.returncode == 0, proc.stderr
        # huge pages on; OpenMP's own waiting for a run alone (workers, Slurm and tests ask for passive)
        assert env == {"OMP_WAIT_POLICY": None, "THP_MEM_ALLOC_ENABLE": "1"}
        assert any(line.startswith("  adamlr ") for line in out)
    assert script[1] == module[1]
    _, _, kept = run_entry(MODULE, THP_MEM_ALLOC_ENABLE="0", OMP_WAIT_POLICY="PASSIVE")
    assert kept == {"OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "0"}  # what the user set is kept
