import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # tests share 2 cores with each other
REPO = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=None, env=None, timeout=600):
    """`python -m suite ...` in a subprocess: the same path a user takes."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "suite", *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


# A grid's [fixed] table for modular cells that train in a second or two.
TINY_FIXED = """
[fixed]
p = 11
train_frac = 0.5
test_frac = 0.3
batch_size = 32
d = 16
hidden = 32
"train.steps" = 40
eval_every = 10
"""

class PreemptAt:
    """A tracker that sends this process SIGUSR1 at one evaluation, as Slurm does before a time limit."""

    def __init__(self, step):
        self.step = step

    def log(self, record, step):
        if step == self.step:
            os.kill(os.getpid(), signal.SIGUSR1)

    def finish(self, result):
        pass


def build_one(spec):
    """The plain pieces of a single run of spec (the model unstacked), built as suite.train.build does."""
    from types import SimpleNamespace

    import torch

    from suite.components.optimizers import ParamGroups
    from suite.registry import ALL
    from suite.spec import component_settings
    from suite.train import task_data

    data, model_entry = task_data(spec)
    torch.manual_seed(spec["seed"])
    model = model_entry.build(data, **component_settings(spec, "model"))
    optimizer = ALL["opt"].get(spec["opt"]["name"]).build(ParamGroups.of(model), **component_settings(spec, "opt"))
    sampler = ALL["sampler"].get(spec["sampler"]["name"]).build(data, torch.Generator().manual_seed(spec["seed"]),
                                                                **component_settings(spec, "sampler"))
    return SimpleNamespace(model=model, optimizer=optimizer, data=data, sampler=sampler)


@pytest.fixture
def tiny():
    """Settings for a modular run that takes a second or two."""
    return {"p": 11, "train_frac": 0.5, "test_frac": 0.3, "batch_size": 32, "train.steps": 60, "eval_every": 10,
            "d": 16, "hidden": 32}
