"""Schedule-Free AdamW through the optimizer contract's modes: evaluation reads the weights the method
means (its averaged x, not the training iterate y), a checkpoint resumes it exactly (its mode with it),
and a stack of its seeds is their separate runs."""

import json

import pytest
import torch
from conftest import TINY, PreemptAt, as_cells, metrics_text, stack_of

from suite.engine.measures import LOSSES, evaluate
from suite.engine.train import Preempted, train, train_step
from suite.engine.updates import evaluated
from suite.specs.spec import resolve

pytest.importorskip("schedulefree")
pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")
CELL = {**TINY, "batch_size": 16, "eval_every": 20}


def _spec(seed=0, **settings):
    return resolve({"opt": "schedulefree_adamw"}, {**CELL, "train.steps": 60, "patience": "none", **settings}, seed)


def _val_loss(stack) -> float:
    loss, _ = evaluate(stack.model, stack.x_val, stack.y_val, LOSSES["ce"], stack.cfg.eval_batch)
    return loss.item()


def test_evaluation_reads_the_averaged_weights_not_the_training_iterate(tmp_path):
    spec = _spec()
    train(as_cells([spec], [tmp_path / "run"]), CPU)
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 60
    # the same run by hand, to its last step: the loop's steps and its evaluations' mode swaps
    stack = stack_of([spec])
    for step in range(60):
        if step % 20 == 0:
            with evaluated(stack.update):
                pass
        train_step(stack, step, stack.model)
    optimizer = stack.update.optimizer
    (beta1, _) = optimizer.param_groups[0]["betas"]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    y = [p.detach().clone() for p in params]
    at_y = _val_loss(stack)
    with torch.no_grad():  # x, the average Schedule-Free evaluates, from y and z: y + (z - y)(1 - 1/beta1)
        for p in params:
            p.lerp_(optimizer.state[p]["z"], 1 - 1 / beta1)
    at_x = _val_loss(stack)
    assert last["val_loss"] == pytest.approx(at_x, rel=1e-5) and abs(at_x - at_y) > 1e-3 * abs(at_x)
    with torch.no_grad():
        for p, saved in zip(params, y):
            p.copy_(saved)
    with evaluated(stack.update):
        assert _val_loss(stack) == pytest.approx(at_x, rel=1e-5)
    assert all(torch.allclose(p, saved, atol=1e-6) for p, saved in zip(params, y))  # y back for training
    assert optimizer.param_groups[0]["train_mode"]


def test_a_run_kept_in_its_weights_is_the_averaged_one(tmp_path):
    from suite.results.weights import load_model

    spec = _spec(**{"keep_weights": "true"})
    (result,) = train(as_cells([spec], [tmp_path / "run"]), CPU)
    model = load_model(tmp_path / "run", "final")
    stack = stack_of([spec])
    x_val, y_val = stack.x_val[0], stack.y_val[0]
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(x_val), y_val).item()
    assert loss == pytest.approx(result["final_val_loss"], rel=1e-5)


def test_a_run_resumed_from_its_checkpoint_equals_the_uninterrupted_one(tmp_path):
    spec = _spec(**{"checkpoint_every": 10})
    whole = train(as_cells([spec], [tmp_path / "whole"]), CPU)
    with pytest.raises(Preempted):
        train(as_cells([spec], [tmp_path / "cut"], [PreemptAt(20)]), CPU)
    assert (tmp_path / "cut" / "checkpoint.pt").exists()
    state = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert all(group["train_mode"] for group in state["optimizer"]["param_groups"])  # its mode, with its state
    resumed = train(as_cells([spec], [tmp_path / "cut"]), CPU)
    assert metrics_text(tmp_path / "cut") == metrics_text(tmp_path / "whole")
    assert resumed[0]["final_val_loss"] == whole[0]["final_val_loss"]


@pytest.mark.parametrize("lrs", [(2.5e-3, 2.5e-3, 2.5e-3), (1e-3, 3e-3)], ids=["one setting", "two settings"])
def test_a_stack_of_its_members_is_their_separate_runs(tmp_path, lrs):
    specs = [_spec(seed, **{"opt.lr": lr}) for seed, lr in enumerate(lrs)]
    together = [tmp_path / "together" / str(i) for i in range(len(specs))]
    train(as_cells(specs, together), CPU)
    for i, spec in enumerate(specs):
        train(as_cells([spec], [tmp_path / "alone" / str(i)]), CPU)
        assert metrics_text(together[i]) == metrics_text(tmp_path / "alone" / str(i))


def test_its_step_cost_is_measured_and_its_decay_is_decoupled():
    from suite.bench.cost import measure

    cost = measure(_spec(**{"weight_decay": 0.1}), steps=3, warmup=1)
    (group,) = cost["groups"]
    assert cost["ms_per_step"] > 0 and not group["coupled"] and group["decay_per_step"] == pytest.approx(2.5e-4)
