"""A benchmark suite for grokking: tasks x models x optimizers, one training loop, plain results."""

from suite.contracts import GradFilter, Sampler
from suite.registry import (
    SuiteError,
    register_filter,
    register_model,
    register_optimizer,
    register_runner,
    register_sampler,
    register_task,
)

__version__ = "0.1.0"

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
