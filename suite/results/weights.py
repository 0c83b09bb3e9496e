"""A run's model weights kept at its milestones, and the model loaded back from a run folder.

With `--set keep_weights=true` a run writes run_dir/weights/memorization.safetensors (the
first evaluation with train accuracy >= train.memorization), grok.safetensors (the grok step:
where the streak began that held the target for train.hold steps) and final.safetensors (where
it stopped): the model's own state dict, in a separate run's layout also for a member of a
stack, with the step in the file's metadata.

    from suite.results.weights import load_model
    model = load_model("runs/.../seed0-...", "grok")   # the model as it was at its grok step

The model is rebuilt from the run's spec.json (the task's data tells it its sizes), so loading
needs the same suite and task code, not the training loop.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as save_tensors

from suite.errors import SuiteError
from suite.results.rundir import UnreadableFile, read_json, write_atomic
from suite.specs.spec import component_settings, spec_id, task_data

MOMENTS = ("memorization", "grok", "final")


def path_of(run_dir: str | Path, moment: str) -> Path:
    return Path(run_dir) / "weights" / f"{moment}.safetensors"


def save(run_dir: str | Path, moment: str, state: dict[str, torch.Tensor], step: int, run_id: str) -> None:
    """Write one moment's weights atomically and durably as every result file is (a reader never sees
    half a file, a crash never leaves an empty one beside a result.json that survived), with the step
    and the id of the spec they were trained under (load_model checks spec.json against it)."""
    path = path_of(run_dir, moment)
    path.parent.mkdir(exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    write_atomic(path, save_tensors(tensors, metadata={"step": str(step), "run_id": run_id}))


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
    try:
        with safe_open(str(path), framework="pt") as f:
            trained_under = f.metadata().get("run_id")  # files written before it was recorded: None
        state = load_file(str(path))
    except Exception as err:  # noqa: BLE001 - safetensors' own error types: truncated, emptied, not a weights file
        raise UnreadableFile(f"{path} cannot be read ({_first_line(err)}): it is damaged") from None
    spec_path = Path(run_dir) / "spec.json"
    spec = read_json(spec_path)
    try:
        data, model_entry = task_data(spec)  # the task's data gives the model its sizes
        model = model_entry.build(data, **component_settings(spec, "model"))
        edited = trained_under is not None and spec_id(spec) != trained_under
    except (SuiteError, KeyError, TypeError, AttributeError) as err:  # valid JSON, but no spec of this suite
        raise UnreadableFile(f"{spec_path} does not describe a model ({_first_line(err)})") from None
    if edited:
        raise UnreadableFile(f"{spec_path} is not the spec {path} was trained under (run {trained_under}); edited?")
    try:
        model.load_state_dict(state)
    except RuntimeError as err:  # weights of another model (a spec.json from before run ids were kept)
        raise UnreadableFile(f"{path} does not fit the model {spec_path} describes ({_first_line(err)})") from None
    return model.to(device).eval()


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
