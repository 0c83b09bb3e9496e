"""A benchmark suite for grokking: tasks x models x optimizers, one training loop, plain results."""

import os as _os

# tasks/ and models/ are top-level folders of the repository (its fixed layout) that import as
# suite.tasks and suite.models, so that a user's own tasks/ or models/ folder cannot shadow them.
# A built wheel puts them inside suite/; a source checkout finds them beside it.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(__path__[0], "tasks")) and _os.path.isfile(
    _os.path.join(_checkout, "tasks", "__init__.py")
):
    __path__.append(_checkout)

from importlib.metadata import PackageNotFoundError  # noqa: E402
from importlib.metadata import version as _version  # noqa: E402

from suite.contracts import GradFilter, Sampler  # noqa: E402 (after __path__ is complete)
from suite.errors import SuiteError  # noqa: E402
from suite.registry import (  # noqa: E402
    register_filter,
    register_model,
    register_optimizer,
    register_runner,
    register_sampler,
    register_task,
)

try:  # one source, pyproject.toml's version, as the installed package's metadata records it
    __version__ = _version("grokking-suite")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "GradFilter",
    "Sampler",
    "SuiteError",
    "TaskData",
    "register_filter",
    "register_model",
    "register_optimizer",
    "register_runner",
    "register_sampler",
    "register_task",
]


def __getattr__(name):  # TaskData pulls in torch: import it only when asked for
    if name == "TaskData":
        from suite.data import TaskData

        return TaskData
    raise AttributeError(name)
