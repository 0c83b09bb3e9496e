"""The block Hessian measure: exact on a known quadratic and on a tiny network, and harmless to training."""

from __future__ import annotations

import json

import torch
from conftest import as_cells, metrics_text
from torch import nn

from suite import build
from suite.engine.hessian import hessian_measures
from suite.engine.measures import LOSSES
from suite.engine.train import train
from suite.specs.spec import resolve


class Quadratic(nn.Module):
    """Every example's 'loss' is 1/2 e'Ae + 1/2 w'Bw + c'e: the E-block Hessian is A, the W-block one B."""

    def __init__(self, A, B):
        super().__init__()
        self.A, self.B = A, B
        self.E = nn.Parameter(torch.randn(A.shape[0]))
        self.W = nn.Parameter(torch.randn(B.shape[0]))

    embedding_weight = property(lambda self: self.E)
    coupled_weight = property(lambda self: self.W)

    def forward(self, x):
        value = 0.5 * self.E @ self.A @ self.E + 0.5 * self.W @ self.B @ self.W + self.E.sum()
        return value.expand(len(x), 1)


def _sum_loss(out, y, reduction):
    return out.sum()


def _symmetric(eigenvalues, seed):
    q, _ = torch.linalg.qr(
        torch.randn(len(eigenvalues), len(eigenvalues), generator=torch.Generator().manual_seed(seed))
    )
    return q @ torch.diag(torch.tensor(eigenvalues)) @ q.T


def test_recovers_the_top_eigenvalue_of_a_known_quadratic():
    A = _symmetric([3.5, 1.0, 0.5, 0.1, -0.2], seed=0)
    B = _symmetric([2.0, 0.5, -3.0, 0.0], seed=1)  # the largest is not the largest in magnitude
    x = torch.zeros(10, 1)
    out = hessian_measures(Quadratic(A, B), x, torch.zeros(10, dtype=torch.long), _sum_loss, batch_size=3)
    assert abs(out["hessian_E"] - 3.5) < 1e-2
    assert abs(out["hessian_W"] - 2.0) < 1e-2


def test_matches_the_full_hessian_of_a_tiny_network():
    spec = resolve(settings={"p": 5, "batch_size": 8, "model.d": 2, "model.hidden": 3})
    b = build(spec)
    model, data = b.model, b.data
    W = model.coupled_weight

    def loss_of(w):
        h = model.embed(data.x_train).flatten(1)
        return LOSSES["ce"](model.out(torch.relu(h @ w.T + model.hidden.bias)), data.y_train)

    H = torch.autograd.functional.hessian(loss_of, W.detach()).reshape(W.numel(), W.numel())
    top = torch.linalg.eigvalsh(H.double()).max().item()
    out = hessian_measures(model, data.x_train, data.y_train, LOSSES["ce"], batch_size=7)
    assert abs(out["hessian_W"] - top) < 1e-3 * max(1.0, abs(top))


def test_every_k_evaluations_without_changing_the_run(tmp_path):
    settings = {"p": 11, "batch_size": 16, "train.steps": 40, "train.eval_every": 10, "model.d": 8, "model.hidden": 16}
    (plain,) = train(as_cells([resolve(settings=settings)], [tmp_path / "plain"]), torch.device("cpu"))
    (measured,) = train(
        as_cells([resolve(settings={**settings, "hessian_every": 2})], [tmp_path / "measured"]), torch.device("cpu")
    )
    records = [json.loads(line) for line in metrics_text(tmp_path / "measured").splitlines()]
    assert [r["step"] for r in records if "hessian_W" in r] == [0, 20, 40]
    assert all("hessian_E" in r for r in records if "hessian_W" in r)
    plain_records = [json.loads(line) for line in metrics_text(tmp_path / "plain").splitlines()]
    strip = lambda r: {k: v for k, v in r.items() if not k.startswith("hessian_")}  # noqa: E731
    assert [strip(r) for r in records] == plain_records  # measuring does not perturb training
    assert measured["final_val_loss"] == plain["final_val_loss"]
