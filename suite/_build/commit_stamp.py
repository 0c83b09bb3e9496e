"""setuptools' build backend, plus the checkout's commit written to suite/COMMIT before a wheel or an
sdist is built, so that an installed suite records which code made its results
(suite.results.result.git_commit). Built from an sdist (no git), the stamp the sdist carries stays."""

import subprocess
from pathlib import Path

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 (every hook this module does not wrap)

STAMP = Path(__file__).resolve().parents[1] / "COMMIT"


def _stamp() -> None:
    if not (STAMP.parents[1] / ".git").exists():  # an unpacked sdist, wherever it lies: keep its stamp
        return
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=STAMP.parent, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return
    if out.returncode == 0 and out.stdout.strip():
        STAMP.write_text(out.stdout.strip() + "\n")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _stamp()
    return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    _stamp()
    return build_meta.build_sdist(sdist_directory, config_settings)
