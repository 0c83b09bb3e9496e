"""StableMax cross-entropy: hand-computed values, float64, finite gradients where softmax fails."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, as_cells

from suite import SuiteError
from suite.engine.measures import LOSSES
from suite.engine.train import train
from suite.specs.spec import resolve

stablemax = LOSSES["stablemax"]


def test_matches_a_hand_computed_value():
    # s(2) = 3, s(0) = 1, s(-1) = 1/2: sum 4.5
    logits = torch.tensor([[2.0, 0.0, -1.0], [2.0, 0.0, -1.0]])
    y = torch.tensor([0, 2])
    expected = torch.tensor([-math.log(3 / 4.5), -math.log(0.5 / 4.5)], dtype=torch.float64)
    assert torch.allclose(stablemax(logits, y, reduction="none"), expected)
    assert torch.allclose(stablemax(logits, y, reduction="sum"), expected.sum())
    assert torch.allclose(stablemax(logits, y), expected.mean())
    assert stablemax(logits, y).dtype == torch.float64  # computed in float64, as in its paper


def test_gradient_is_finite_where_softmax_underflows():
    # softmax of the right class underflows to 0 in float32 (e^-200), and the right class of
    # the second row wins so clearly that float32 softmax rounds to exactly 1
    logits = torch.tensor([[0.0, 200.0, -5.0], [200.0, 0.0, -5.0]], requires_grad=True)
    y = torch.tensor([0, 0])
    assert torch.softmax(logits.detach(), -1)[0, 0] == 0
    loss = stablemax(logits, y)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert (logits.grad[1] != 0).any()  # still learns where softmax CE's gradient is exactly 0
    (softmax_grad,) = torch.autograd.grad(F.cross_entropy(logits[1:], y[1:]), logits)
    assert (softmax_grad[1] == 0).all()


def test_gradient_at_the_branch_points_is_finite():
    logits = torch.tensor([[1.0, 0.0, -1.0, 1e6, -1e6]], requires_grad=True)
    stablemax(logits, torch.tensor([2])).backward()
    assert torch.isfinite(logits.grad).all()


def test_is_a_train_loss_setting():
    assert resolve(settings={"train.loss": "stablemax"})["train"]["loss"] == "stablemax"
    with pytest.raises(SuiteError, match="stablemax"):
        resolve(settings={"train.loss": "stablemx"})


def test_a_short_run_trains_with_it(tmp_path):
    spec = resolve(settings={**TINY, "eval_every": 20, "loss": "stablemax"})
    result = train(as_cells([spec], [tmp_path / "run"]), torch.device("cpu"))[0]
    assert math.isfinite(result["final_train_loss"]) and result["final_train_loss"] < math.log(11)
