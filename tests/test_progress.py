"""The progress measures of a stack, computed for every member at once: sigma_max by Lanczos on the
device, embedding norms and MED from masks built once, and an evaluation whose ops do not grow with K."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TINY, stack_of

from suite.engine import measures
from suite.engine.measures import lanczos, sigma_max, top_eigenvalues
from suite.specs.spec import resolve


def _sigma(a: torch.Tensor) -> torch.Tensor:
    return top_eigenvalues(lanczos(a)).sqrt()


@pytest.mark.parametrize("shape", [(512, 512), (99, 128), (128, 99), (300, 200), (7, 3), (1, 5)])
def test_lanczos_gives_the_spectral_norm_of_each_member(shape):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, *shape, generator=g)
    a[1] *= 1e-3  # any scale
    a[2] = a[2] + 5 * torch.outer(torch.randn(shape[0], generator=g), torch.randn(shape[1], generator=g))  # a top
    exact = torch.linalg.matrix_norm(a.double(), ord=2)
    torch.testing.assert_close(_sigma(a), exact, rtol=1e-9, atol=0)  # a GPU's batched path
    assert [sigma_max(m) for m in a] == pytest.approx(exact.tolist(), rel=1e-9)  # a CPU's, and the optimizer's


def test_a_zero_matrix_has_norm_0_and_a_non_finite_one_nan():
    a = torch.zeros(2, 300, 200)
    a[1, 0, 0] = float("inf")
    norms = _sigma(a).tolist()
    assert norms[0] == 0.0 and math.isnan(norms[1])


def _evaluation_ops(K: int, monkeypatch) -> dict[str, int]:
    """The aten ops of one evaluation of a stack of K, with the GPU's path forced on the CPU: the
    stack's forward batched and Lanczos over every member at once."""
    from torch.profiler import ProfilerActivity, profile

    from suite.engine.stacked import Stacked

    monkeypatch.setattr(Stacked, "forward", Stacked.batched)
    stack = stack_of([resolve({}, TINY, seed) for seed in range(K)])
    stack.progress.batched = True
    stack.evaluate(0)  # warm: first calls build caches
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        records = stack.evaluate(0)
    assert len(records) == K and all("sigma_ratio" in r and "med" in r and "emb_norm_rare" in r for r in records)
    return {e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")}


def test_an_evaluation_runs_the_same_ops_for_a_stack_of_2_as_of_8(monkeypatch):
    two, eight = _evaluation_ops(2, monkeypatch), _evaluation_ops(8, monkeypatch)
    assert two == eight  # nothing on the device or the host runs once per member
    assert "aten::nonzero" not in eight  # the frequency buckets' ids, once a member an evaluation, synced a GPU


def test_the_records_progress_columns_are_each_members_own(tmp_path):
    from conftest import as_cells

    from suite.engine.train import train

    specs = [resolve({}, TINY, seed) for seed in range(3)]
    train(as_cells(specs, [tmp_path / str(i) for i in range(3)]), torch.device("cpu"))
    stack = stack_of(specs)
    records = stack.evaluate(0)
    for i, member in enumerate(stack.live):
        alone = measures.progress_measures(member.model, member.data)  # one model, outside the loop
        assert {k: records[i][k] for k in alone} == pytest.approx(alone, rel=1e-6)
