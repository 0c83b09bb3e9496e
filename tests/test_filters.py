"""Gradient filters: each update matches its formula, state survives a checkpoint, resume is exact."""

from __future__ import annotations

import io

import pytest
import torch
from conftest import TINY, PreemptAt, as_cells, metrics_text

from suite import SuiteError
from suite.engine.train import Preempted, train
from suite.specs.registry import ALL
from suite.specs.spec import resolve


def _filter(name, params, **settings):
    return ALL["filter"].get(name).build(params, **settings)


def _step(f, p, grad):
    p.grad = grad.clone()
    f.apply()
    return p.grad.clone()


def test_grokfast_ema_matches_formula():
    p = torch.nn.Parameter(torch.zeros(3))
    f = _filter("grokfast_ema", [p], alpha=0.9, lamb=2.0)
    g1, g2, g3 = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.0, 4.0, 1.0]), torch.tensor([3.0, 1.0, -1.0])
    # The EMA starts at the first gradient and is updated before it is added.
    assert torch.allclose(_step(f, p, g1), g1 + 2.0 * g1)
    ema = 0.9 * g1 + 0.1 * g2
    assert torch.allclose(_step(f, p, g2), g2 + 2.0 * ema)
    ema = 0.9 * ema + 0.1 * g3
    assert torch.allclose(_step(f, p, g3), g3 + 2.0 * ema)


def test_grokfast_ma_waits_for_a_full_window_then_adds_the_mean():
    p = torch.nn.Parameter(torch.zeros(2))
    f = _filter("grokfast_ma", [p], window=3, lamb=5.0)
    gs = [torch.tensor([float(i), -2.0 * i]) for i in range(1, 6)]
    assert torch.equal(_step(f, p, gs[0]), gs[0])  # window not full: unchanged
    assert torch.equal(_step(f, p, gs[1]), gs[1])
    for t in range(2, 5):  # the mean of the last 3 raw gradients, this one included
        window_mean = torch.stack(gs[t - 2 : t + 1]).mean(0)
        assert torch.allclose(_step(f, p, gs[t]), gs[t] + 5.0 * window_mean)


def test_orthograd_is_orthogonal_to_the_weight_with_the_original_norm():
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.randn(4, 5, generator=g))
    grad = torch.randn(4, 5, generator=g) + 0.7 * p.detach()  # a clear component along w
    out = _step(_filter("orthograd", [p]), p, grad)
    assert abs(torch.dot(out.flatten(), p.detach().flatten()).item()) < 1e-5
    assert torch.allclose(out.norm(), grad.norm())
    w, gf = p.detach().flatten(), grad.flatten()
    perp = gf - torch.dot(w, gf) / torch.dot(w, w) * w
    assert torch.allclose(out.flatten(), perp * gf.norm() / perp.norm(), atol=1e-6)


def test_egd_moves_every_singular_direction_of_a_matrix_gradient_at_the_same_speed():
    g = torch.Generator().manual_seed(2)
    matrix, kernel, bias = (torch.nn.Parameter(torch.zeros(shape)) for shape in ((6, 9), (4, 2, 3), (6,)))
    f = _filter("egd", [matrix, kernel, bias])
    grads = [torch.randn(6, 9, generator=g), torch.randn(4, 2, 3, generator=g), torch.randn(6, generator=g)]
    for p, grad in zip((matrix, kernel, bias), grads):
        p.grad = grad.clone()
    f.apply()
    for p, grad in zip((matrix, kernel), grads):
        u, _, vh = torch.linalg.svd(grad.reshape(len(grad), -1), full_matrices=False)
        assert torch.allclose(p.grad, (u @ vh).view_as(grad), atol=1e-5)  # (G G^T)^(-1/2) G = U V^T
        assert torch.allclose(torch.linalg.svdvals(p.grad.reshape(len(grad), -1)), torch.ones(len(grad)), atol=1e-5)
    assert torch.equal(bias.grad, grads[2])  # a vector keeps its gradient
    # a rank-one gradient moves along its one direction only: its other singular values are rounding
    low = torch.outer(torch.randn(6, generator=g), torch.randn(9, generator=g))
    assert torch.allclose(_step(f, matrix, low), low / torch.linalg.matrix_norm(low, ord=2), atol=1e-6)
    # a direction under the floor (but above rounding) moves by s / 1e-6, as in the paper's code
    u, _, vh = torch.linalg.svd(torch.randn(6, 9, generator=g, dtype=torch.float64), full_matrices=False)
    wide = torch.nn.Parameter(torch.zeros(6, 9, dtype=torch.float64))
    s = torch.tensor([2.0, 1.0, 1e-3, 5e-7, 0.0, 0.0], dtype=torch.float64)
    expected = (u * torch.tensor([1.0, 1.0, 1.0, 0.5, 0.0, 0.0], dtype=torch.float64)) @ vh
    assert torch.allclose(_step(_filter("egd", [wide]), wide, (u * s) @ vh), expected, atol=1e-9)
    # a diverged gradient is left to the loop's evaluation (SVD would raise)
    bad = torch.full((6, 9), float("nan"))
    assert _step(f, matrix, bad).isnan().all()


@pytest.mark.parametrize("name", ["grokfast_ema", "grokfast_ma", "orthograd", "egd"])
def test_parameters_without_gradient_are_left_alone(name):
    used, unused = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    f = _filter(name, [used, unused])
    used.grad = torch.tensor([1.0, 0.0])
    f.apply()
    assert unused.grad is None


@pytest.mark.parametrize("name,settings", [("grokfast_ema", {}), ("grokfast_ma", {"window": 2})])
def test_state_round_trips_through_a_weights_only_checkpoint(name, settings):
    p = torch.nn.Parameter(torch.zeros(3))
    f = _filter(name, [p], **settings)
    for i in range(3):
        _step(f, p, torch.full((3,), float(i)))
    buf = io.BytesIO()
    torch.save(f.state_dict(), buf)
    buf.seek(0)
    g = _filter(name, [torch.nn.Parameter(torch.zeros(3))], **settings)
    g.load_state_dict(torch.load(buf, weights_only=True))
    assert torch.equal(_step(f, p, torch.ones(3)), _step(g, g.params[0], torch.ones(3)))


def test_bad_filter_settings_are_one_line_errors():
    with pytest.raises(SuiteError, match="window"):
        _filter("grokfast_ma", [], window=0)
    with pytest.raises(SuiteError, match="alpha"):
        _filter("grokfast_ema", [], alpha=1.0)


def _metrics(run_dir):
    return metrics_text(run_dir)


@pytest.mark.parametrize(
    "choices,settings",
    [
        ({"filter": "grokfast_ema"}, {}),
        ({"filter": "grokfast_ma"}, {"filter.window": 7}),
        ({"filter": "orthograd"}, {}),
        ({"filter": "egd", "opt": "sgd"}, {}),
        ({"filter": "grokfast_ema", "opt": "adamlr", "sampler": "epoch"}, {"sampler.batch_size": 10}),
        ({"sampler": "grad_softmax"}, {"sampler.batch_size": 10}),  # its running gradient norms
    ],
)
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, choices, settings):
    spec = resolve(
        choices,
        {**TINY, "batch_size": 16, "train.steps": 60, "patience": None, **settings},
    )
    whole = train(as_cells([spec], [tmp_path / "whole"]), torch.device("cpu"))[0]
    with pytest.raises(Preempted):  # stops (with a checkpoint) right after the update of step 30
        train(as_cells([spec], [tmp_path / "cut"], [PreemptAt(30)]), torch.device("cpu"))
    resumed = train(as_cells([spec], [tmp_path / "cut"]), torch.device("cpu"))[0]
    assert _metrics(tmp_path / "cut") == _metrics(tmp_path / "whole")
    for key in ("final_train_loss", "final_val_loss", "memorization_step", "grok_step"):
        assert resumed[key] == whole[key]
