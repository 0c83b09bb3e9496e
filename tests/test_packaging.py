"""The built wheel works outside the repository: shipped grids, the sbatch template, and
tasks/models under the suite namespace (a user's own models/ folder cannot shadow them)."""

import site
import subprocess
import sys
import sysconfig
import tomllib
import zipfile

import pytest
from conftest import REPO


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The suite's wheel, built from this checkout and installed into a fresh venv whose other
    packages (torch, ...) come from the test environment."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp / "dist", REPO],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp / "dist").glob("grokking_suite-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel],
        check=True,
        capture_output=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the test environment's packages, as a plain path: its editable install of this checkout stays out
    deps = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    (tmp / "venv" / purelib.split(str(venv) + "/", 1)[1] / "deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    work = tmp / "elsewhere"
    (work / "models").mkdir(parents=True)  # a user's folders of the same names
    (work / "tasks").mkdir()
    (work / "models" / "__init__.py").write_text("raise ImportError('the user folder was imported')\n")
    return python, work


def _suite(installed, *args):
    python, work = installed
    return subprocess.run(
        [python, "-m", "suite", *args],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )


def test_the_wheel_is_the_whole_suite_not_the_checkout(installed):
    python, work = installed
    where = subprocess.run(
        [
            python,
            "-c",
            "import suite, suite.tasks, suite.models; "
            "print(suite.__file__, suite.tasks.__file__, suite.models.__file__)",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all("/venv/" in path and str(REPO) not in path for path in where), where
    # every module of the checkout's suite/, tasks/ and models/ is in the wheel and imports
    prefix = {"suite": (), "tasks": ("suite",), "models": ("suite",)}  # where each folder installs
    modules = sorted(
        ".".join((*prefix[top], *path.relative_to(REPO).with_suffix("").parts)).removesuffix(".__init__")
        for top in prefix
        for path in (REPO / top).rglob("*.py")
        if path.name != "__main__.py" and "_build" not in path.parts  # the build backend is not shipped
    )
    imported = subprocess.run(
        [python, "-c", f"import importlib; [importlib.import_module(m) for m in {modules!r}]"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 0, imported.stderr


def test_models_and_tasks_are_listed_beside_a_users_folders_of_those_names(installed):
    proc = _suite(installed, "list", "model")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    assert "  mlp " in proc.stdout and "  transformer " in proc.stdout
    assert "  modular " in _suite(installed, "list", "task").stdout


def test_a_shipped_grid_runs_by_name_locally_and_for_slurm(installed):
    local = _suite(installed, "grid", "quick", "--dry-run")
    assert local.returncode == 0, local.stderr
    assert "quick: 20 cells" in local.stderr and len(local.stdout.splitlines()) == 20
    slurm = _suite(installed, "grid", "quick", "--backend", "slurm", "--dry-run")
    assert slurm.returncode == 0, slurm.stderr
    assert "#SBATCH --array=0-3" in slurm.stdout and "-m suite chunk" in slurm.stdout  # 4 groups: 8 + 2 a side


def test_the_wheel_records_its_version_and_the_commit_it_was_built_from(installed):
    """Results made by an installed suite name their code: pyproject's version, and the checkout's
    HEAD when the wheel was built (suite/_build/commit_stamp.py), not the commit of whatever
    repository the venv happens to sit in."""
    python, work = installed
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    code = "import suite, suite.results.result as r; print(suite.__version__, r.git_commit(), r.git_dirty())"
    out = subprocess.run([python, "-c", code], cwd=work, capture_output=True, text=True, check=True).stdout.split()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert out == [version, head.stdout.strip(), "None"]


def test_a_wheel_built_from_the_sdist_keeps_the_commit_the_sdist_was_made_from(tmp_path):
    """The sdist carries the build backend and the stamp; unpacked anywhere (even inside another
    git repository) it builds a wheel that names the checkout's commit, not that repository's."""
    hooks = (
        "import sys; sys.path.insert(0, 'suite/_build'); import commit_stamp; "
        "print(commit_stamp.build_sdist(sys.argv[1]))"
    )
    name = subprocess.run(
        [sys.executable, "-c", hooks, tmp_path], cwd=REPO, capture_output=True, text=True, check=True, timeout=300
    ).stdout.split()[-1]
    other = tmp_path / "other-repo"
    subprocess.run(["git", "init", "-q", other], check=True)
    commit = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "theirs"]
    subprocess.run(commit, cwd=other, check=True)
    subprocess.run(["tar", "xzf", tmp_path / name, "-C", other], check=True)
    (unpacked,) = other.glob("grokking_suite-*")
    assert (unpacked / "suite" / "_build" / "commit_stamp.py").exists()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path, unpacked],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("grokking_suite-*.whl")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    with zipfile.ZipFile(wheel) as built:
        assert built.read("suite/COMMIT").decode().strip() == head.stdout.strip()
