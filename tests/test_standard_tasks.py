"""The standard grokking tasks beside modular arithmetic: Power et al.'s harder operations, S5
composition, sparse parity."""

import pytest
import torch
from suite.tasks.modular import modular
from suite.tasks.permutation import compose_table, permutation, permutations
from suite.tasks.sparse_parity import sparse_parity

from suite import SuiteError


@pytest.mark.parametrize("op, f", [("x2xyy2", lambda a, b: a * a + a * b + b * b),
                                   ("x3xy2y", lambda a, b: a**3 + a * b * b + b)])  # fmt: skip
def test_power_et_al_operations(op, f):
    data = modular(0, p=97, op=op)
    for x, y in zip(data.x_train[:50].tolist(), data.y_train[:50].tolist()):
        assert y == f(x[0], x[2]) % 97


def test_s5_composition_is_the_group_law_and_not_commutative():
    perms, table = permutations(), compose_table(permutations())
    assert len(perms) == 120 and perms[0].tolist() == [0, 1, 2, 3, 4]
    for a, b in [(5, 77), (119, 3), (42, 42)]:
        c = perms[table[a, b]]
        assert c.tolist() == [perms[a][perms[b][i]].item() for i in range(5)]  # (a o b)(i) = a(b(i))
    assert (table[0] == torch.arange(120)).all() and (table[:, 0] == torch.arange(120)).all()  # identity
    assert (table != table.T).any()  # S5 is not abelian
    data = permutation(3, train_frac=0.4)
    assert len(data.y_train) == round(0.4 * 14_400) and len(data.y_train) + len(data.y_val) == 14_400
    pairs = {tuple(r) for r in data.x_train[:, [0, 2]].tolist()}
    assert not pairs & {tuple(r) for r in data.x_val[:, [0, 2]].tolist()}
    assert torch.equal(data.x_train, permutation(3, train_frac=0.4).x_train)
    assert not torch.equal(data.x_train, permutation(4, train_frac=0.4).x_train)


def test_sparse_parity_labels_are_the_parity_of_the_hidden_bits():
    data = sparse_parity(1, n_bits=30, k=3, n_examples=500)
    relevant = data.info["relevant_bits"]
    assert len(relevant) == 3 and data.x_train.shape == (250, 30)
    for x, y in ((data.x_train, data.y_train), (data.x_val, data.y_val)):
        assert torch.equal(y, x[:, relevant].sum(1) % 2)
    rows = {tuple(r) for r in torch.cat([data.x_train, data.x_val]).tolist()}
    assert len(rows) == 500  # distinct strings: no validation example was trained on
    assert 0.35 < data.y_train.float().mean() < 0.65
    small = sparse_parity(0, n_bits=10, k=2, n_examples=1024)  # every string once
    assert len({tuple(r) for r in torch.cat([small.x_train, small.x_val]).tolist()}) == 1024
    assert sparse_parity(1, n_bits=30, k=3, n_examples=500, data_seed=7).info["relevant_bits"] == \
        sparse_parity(2, n_bits=30, k=3, n_examples=500, data_seed=7).info["relevant_bits"]  # fmt: skip


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 0}, "need 1 <= k <= n_bits"), ({"k": 50, "n_bits": 40}, "need 1 <= k <= n_bits"),
    ({"n_examples": 2000, "n_bits": 10}, "n_examples must be in"), ({"train_frac": 1.0}, "train_frac"),
    ({"n_examples": 3, "train_frac": 0.1}, "leaves one of the sets empty"),
])  # fmt: skip
def test_bad_sparse_parity_settings(kwargs, message):
    with pytest.raises(SuiteError, match=message):
        sparse_parity(0, **kwargs)
