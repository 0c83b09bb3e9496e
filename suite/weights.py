"""A run's model weights kept at its milestones, and the model loaded back from a run dir.

With `--set keep_weights=true` a run writes run_dir/weights/memorization.safetensors (the
first evaluation with train accuracy >= train.memorization), grok.safetensors (the grok step:
where the streak began that held the target for train.hold steps) and final.safetensors (where
it stopped): the model's own state dict, in a separate run's layout also for a member of an
ensemble, with the step in the file's metadata.

    from suite.weights import load_model
    model = load_model("runs/.../seed0-...", "grok")   # the model as it was at its grok step

The model is rebuilt from the run's spec.json (the task's data tells it its sizes), so loading
needs the same suite and task code, not the training loop.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from suite.errors import SuiteError
from suite.rundir import read_json
from suite.spec import component_settings, task_data

MOMENTS = ("memorization", "grok", "final")


def path_of(run_dir: str | Path, moment: str) -> Path:
    return Path(run_dir) / "weights" / f"{moment}.safetensors"


def save(run_dir: str | Path, moment: str, state: dict[str, torch.Tensor], step: int) -> None:
    """Write one moment's weights atomically (a reader never sees half a file)."""
    path = path_of(run_dir, moment)
    path.parent.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, tmp, metadata={"step": str(step)})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def drop(run_dir: str | Path, moment: str) -> None:
    path_of(run_dir, moment).unlink(missing_ok=True)


def step_of(run_dir: str | Path, moment: str) -> int:
    with safe_open(str(path_of(run_dir, moment)), framework="pt") as f:
        return int(f.metadata()["step"])


def load_model(run_dir: str | Path, moment: str = "final", device: str | torch.device = "cpu") -> torch.nn.Module:
    """The model of a finished run as it was at `moment` (memorization, grok or final), in eval mode."""
    if moment not in MOMENTS:
        raise SuiteError(f"moment '{moment}' is not one of {', '.join(MOMENTS)}")
    path = path_of(run_dir, moment)
    if not path.is_file():
        reason = (
            "the run never reached it"
            if (Path(run_dir) / "weights").is_dir()
            else "the run kept no weights (train.keep_weights=false)"
        )
        raise SuiteError(f"{path}: no {moment} weights ({reason})")
    spec = read_json(Path(run_dir) / "spec.json")
    data, model_entry = task_data(spec)  # the task's data gives the model its sizes
    model = model_entry.build(data, **component_settings(spec, "model"))
    model.load_state_dict(load_file(str(path)))
    return model.to(device).eval()
