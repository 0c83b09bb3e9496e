"""The two entry points, `python -m suite` and the grok-suite console script, behave alike."""

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
from conftest import REPO, cli

import suite
from suite.cli import CORE_MODULES, PINNED, busy_cores, cpu_flags, kernel_defaults, main, thread_defaults

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Records the environment (the variables in KEYS) at the moment torch is first imported, printed at exit.
THREADS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "THP_MEM_ALLOC_ENABLE")
WATCH_TORCH = """
import atexit, importlib.abc, json, os, sys
seen = {}
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" and not seen:
            seen.update({k: os.environ.get(k) for k in KEYS})
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
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"grokking-suite {suite.__version__}"
    assert PYPROJECT["project"]["version"] == suite.__version__


def run_entry(code: str, keys=THREADS, **user) -> tuple[subprocess.CompletedProcess, list[str], dict]:
    """Run an entry point with the thread, huge-page and CPU kernel settings unset unless the user sets
    them: the process, its stdout lines and the settings among `keys` torch was imported under. A fresh
    interpreter each: what is set before torch's import is the point, and this one imported torch long ago."""
    ours = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "THP_MEM_ALLOC_ENABLE", *PINNED)
    env = {k: v for k, v in os.environ.items() if k not in ours} | user
    watch = f"KEYS = {tuple(keys)!r}\n" + WATCH_TORCH
    proc = subprocess.run([sys.executable, "-c", watch + code], env=env, capture_output=True, text=True, timeout=300)
    *out, last = proc.stdout.strip().splitlines()
    assert last.startswith("ENV-AT-TORCH-IMPORT "), proc.stderr
    return proc, out, json.loads(last.split(" ", 1)[1])


def test_console_script_sets_the_environment_before_torch_as_python_m_suite_does():
    # the user's thread count: what the entry points set by the load (next test) is out of the picture
    module = run_entry(MODULE, OMP_NUM_THREADS="1")
    script = run_entry(SCRIPT.format(target=PYPROJECT["project"]["scripts"]["grok-suite"]), OMP_NUM_THREADS="1")
    for proc, out, env in (module, script):
        assert proc.returncode == 0, proc.stderr
        # huge pages on; the user's threads wait as OpenMP's own default has them
        assert env == {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": None, "THP_MEM_ALLOC_ENABLE": "1"}
        assert any(line.startswith("  adamlr ") for line in out)
    assert script[1] == module[1]
    _, _, kept = run_entry(MODULE, THP_MEM_ALLOC_ENABLE="0", OMP_WAIT_POLICY="PASSIVE")
    assert kept == {"OMP_NUM_THREADS": None, "OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "0"}  # the user's


def test_beside_work_on_every_core_torch_gets_one_thread_that_sleeps_while_it_waits():
    # one spinning process per core: spinning OpenMP threads beside them made a run 4-18x slower
    cores = len(os.sched_getaffinity(0))
    spinners = [
        subprocess.Popen(
            [sys.executable, "-c", "print('spinning', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE
        )
        for _ in range(cores)
    ]
    try:
        assert all(s.stdout.readline() == b"spinning\n" for s in spinners)
        proc, _, env = run_entry(MODULE)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    assert proc.returncode == 0, proc.stderr
    assert env == {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1"}


@pytest.mark.parametrize(
    "environ, busy, chosen",
    [
        ({}, 0, {}),  # idle: torch's own defaults, the fastest for a run alone and the plain loop's
        ({}, None, {}),  # no /proc to tell: the same
        ({}, 1, {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OMP_WAIT_POLICY": "PASSIVE"}),
        ({}, 9, {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}),
        ({"OMP_NUM_THREADS": "4"}, 9, {}),  # the user's choice stands
        ({"OMP_WAIT_POLICY": "ACTIVE"}, 9, {}),
    ],
)
def test_threads_follow_the_cores_other_processes_leave_free(environ, busy, chosen):
    assert thread_defaults(environ, 4, busy) == chosen


def test_the_cpu_kernels_are_pinned_to_avx2_before_torch_is_imported_where_the_cpu_has_it():
    # torch's and MKL's code paths round differently by instruction set: pinned, a spec and seed run
    # the same code on machines of one vendor with or without AVX-512
    flags = cpu_flags()
    pinned = {"avx2", "fma"} <= (flags or set())
    _, _, env = run_entry(MODULE, keys=tuple(PINNED))
    assert env == (PINNED if pinned else dict.fromkeys(PINNED))
    _, _, kept = run_entry(MODULE, keys=tuple(PINNED), ATEN_CPU_CAPABILITY="default")
    assert kept == {**env, "ATEN_CPU_CAPABILITY": "default"}  # the user's choice stands, the rest as before


@pytest.mark.parametrize(
    "environ, flags, chosen",
    [
        ({}, {"sse2", "avx", "avx2", "fma", "avx512f"}, PINNED),  # AVX-512 runs AVX2's code, as an AVX2 machine does
        ({}, {"sse2", "avx", "avx2", "fma"}, PINNED),
        ({}, {"sse2", "avx"}, {}),  # no AVX2: ATen would stop at an illegal instruction
        ({}, {"avx2"}, {}),  # ATen's AVX2 kernels need FMA too
        ({}, None, {}),  # cannot tell (not Linux)
        ({"MKL_CBWR": "AUTO"}, {"avx2", "fma"}, {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}),
    ],
)
def test_the_kernels_pinned_follow_the_cpu_s_flags_and_the_user_s_choice(environ, flags, chosen):
    assert kernel_defaults(environ, flags) == chosen


def test_cpu_flags_are_read_from_the_first_flags_line(monkeypatch):
    text = "processor\t: 0\nmodel name\t: X\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    monkeypatch.setattr("builtins.open", lambda path: io.StringIO(text))
    assert cpu_flags() == {"fpu", "sse2", "avx2", "fma"}
    monkeypatch.setattr("builtins.open", lambda path: io.StringIO("Features\t: fp asimd\n"))  # an ARM machine
    assert cpu_flags() is None


def test_busy_cores_leaves_out_the_process_that_counts(monkeypatch):
    readings = iter(["0.50 0.40 0.30 3/120 999\n", "0.50 0.40 0.30 1/120 999\n", "0.50 0.40 0.30 2/120 999\n"])
    monkeypatch.setattr("builtins.open", lambda path: io.StringIO(next(readings)))
    assert busy_cores(samples=3, apart_s=0) == 0  # a moment's other work is not a shared machine


def test_a_python_without_the_suite_s_requirements_is_one_line_and_exit_code_2(monkeypatch, capsys):
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "torch" else found(name))
    assert main(["list"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "has no torch" in err[0] and ".venv/bin/python -m suite" in err[0]


def test_the_core_modules_checked_are_pyproject_s_dependencies():
    names = {re.split(r"[<>=\[ ]", dep)[0].lower() for dep in PYPROJECT["project"]["dependencies"]}
    imports = {"pillow": "PIL"}
    assert sorted(imports.get(n, n) for n in names) == sorted(CORE_MODULES)
