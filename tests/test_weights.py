"""Weights kept at memorization, grok step and end, and the model loaded back from a run folder."""

import json

import pytest
import torch
from conftest import REPO, as_cells
from safetensors.torch import load_file, save_file

from suite import SuiteError
from suite.engine.train import train
from suite.results.rundir import UnreadableFile
from suite.results.weights import load_model, path_of, step_of
from suite.specs.spec import resolve, task_data

# memorizes by step ~175 and holds val acc 0.9 from step ~250 (for the 50 steps of `hold`) (Adam-LR,
# p = 23): a second or two
CELL = {
    "p": 23,
    "train_frac": 0.7,
    "test_frac": 0.3,
    "batch_size": 64,
    "target": 0.9,
    "train.steps": 600,
    "eval_every": 25,
    "hold": 50,
    "patience": 50,
    "keep_weights": True,
}
CHOICES = {"opt": "adamlr"}


pytestmark = pytest.mark.usefixtures("one_thread")  # members equal their separate runs bit for bit


def test_a_run_keeps_its_weights_at_each_milestone_and_the_loaded_model_is_the_run(tmp_path):
    (result,) = train(as_cells([resolve(CHOICES, CELL)], [tmp_path]), torch.device("cpu"))
    assert result["grok_step"] is not None, result
    assert step_of(tmp_path, "memorization") == result["memorization_step"]
    assert step_of(tmp_path, "grok") == result["grok_step"]
    assert step_of(tmp_path, "final") == result["steps"]
    model = load_model(tmp_path, "final")
    data, _ = task_data(json.loads((tmp_path / "spec.json").read_text()))
    with torch.no_grad():
        val_acc = (model(data.x_val).argmax(-1) == data.y_val).float().mean().item()
    assert val_acc == result["final_val_acc"]
    assert not (tmp_path / "checkpoint.pt").exists()  # checkpoints go, weights stay


def test_a_stack_member_keeps_the_weights_of_its_separate_run(tmp_path):
    specs = [resolve(CHOICES, CELL, seed) for seed in (0, 1)]
    together = train(as_cells(specs, [tmp_path / "e0", tmp_path / "e1"]), torch.device("cpu"))
    alone = train(as_cells([specs[1]], [tmp_path / "alone"]), torch.device("cpu"))[0]
    assert together[1]["grok_step"] == alone["grok_step"]
    for moment in ("memorization", "grok", "final"):
        a, b = load_file(str(path_of(tmp_path / "e1", moment))), load_file(str(path_of(tmp_path / "alone", moment)))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_loading_what_was_not_kept_is_one_line(tmp_path):
    train(
        as_cells([resolve(CHOICES, {**CELL, "keep_weights": False, "train.steps": 50})], [tmp_path]),
        torch.device("cpu"),
    )
    with pytest.raises(SuiteError, match="no final weights \\(the run kept no weights"):
        load_model(tmp_path)
    with pytest.raises(SuiteError, match="moment 'best' is not one of"):
        load_model(tmp_path, "best")


def test_readme_analysis_runs_on_a_kept_run(tmp_path, monkeypatch, capsys):
    train(as_cells([resolve(CHOICES, CELL)], [tmp_path / "runs/w"]), torch.device("cpu"))
    code = (REPO / "README.md").read_text().split("<!-- example weights -->")[1].split("```python")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)  # the reader's script, run as a script in this process from the folder it reads
    capsys.readouterr()  # what training said
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert out.startswith("key frequencies: [") and "of the power" in out


def _edit(tmp_path, what):
    """Damage a kept run the way a full disk, a careless edit or another run's file would."""
    final, spec = path_of(tmp_path, "final"), tmp_path / "spec.json"
    if what == "truncated weights":
        final.write_bytes(final.read_bytes()[:100])
    elif what == "empty weights":
        final.write_bytes(b"")
    elif what == "an edited spec":  # the same shapes, another model: only the recorded run id tells
        spec.write_text(spec.read_text().replace('"embed_init": 1.0', '"embed_init": 0.5'))
    elif what == "a spec of another width":
        spec.write_text(spec.read_text().replace('"hidden": 512', '"hidden": 64'))
    elif what == "a spec that is no spec":
        spec.write_text('{"task": 3}')
    elif what == "weights of another model, written before run ids were kept":
        state = {k: torch.zeros(2) for k in load_file(str(final))}
        save_file(state, str(final), metadata={"step": "1"})
    return final, spec


DAMAGE = {  # what -> the file the line names
    "truncated weights": "final",
    "empty weights": "final",
    "an edited spec": "spec",
    "a spec of another width": "spec",
    "a spec that is no spec": "spec",
    "weights of another model, written before run ids were kept": "final",
}


def test_a_damaged_weights_file_or_a_changed_spec_is_one_line_naming_the_file(tmp_path):
    train(
        as_cells([resolve(CHOICES, {**CELL, "train.steps": 50, "eval_every": 25})], [tmp_path / "run"]),
        torch.device("cpu"),
    )
    kept = {p: p.read_bytes() for p in [tmp_path / "run" / "spec.json", path_of(tmp_path / "run", "final")]}
    for what, named in DAMAGE.items():
        for path, data in kept.items():  # the run as it was
            path.write_bytes(data)
        files = dict(zip(("final", "spec"), _edit(tmp_path / "run", what)))
        with pytest.raises(UnreadableFile) as err:
            load_model(tmp_path / "run")
        assert str(files[named]) in str(err.value) and "\n" not in str(err.value), what


def test_weights_reach_the_disk_before_they_take_their_name(tmp_path, monkeypatch):
    # as every result file: written to a temporary, fsync'd, then renamed (a crash leaves no empty file)
    import os

    from safetensors import safe_open

    from suite.results import weights

    synced = []
    real = os.fsync
    monkeypatch.setattr(
        "suite.results.rundir.os.fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real(fd)
    )
    weights.save(tmp_path, "grok", {"w": torch.ones(2)}, 500, "abc")
    path = weights.path_of(tmp_path, "grok")
    # the temporary's bytes, then the folder that holds the new name
    assert len(synced) == 2 and ".grok.safetensors." in synced[0] and synced[0].endswith(".tmp")
    assert synced[1] == str(path.parent)
    with safe_open(path, "pt") as f:
        assert f.metadata() == {"step": "500", "run_id": "abc"} and f.get_tensor("w").tolist() == [1.0, 1.0]
    assert [p.name for p in path.parent.iterdir()] == ["grok.safetensors"]
