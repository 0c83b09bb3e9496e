"""Composition in the symmetric group S5 (Power et al., arXiv 2201.02177: x o y in S5, one of
their hardest tasks): predict a o b, (a o b)(i) = a(b(i)), from the tokens [a, o, b, =].

The 120 permutations of 5 elements are the numbers 0..119 in lexicographic order (0 is the
identity), the operator is 120 and '=' 121. All 14,400 pairs (a, b) are the examples; a random
train_frac of them is the training set and the rest the validation set, as in Power et al. The
group is not abelian, so a o b and b o a differ.

    python -m suite run --task permutation --set train_frac=0.5
"""

from __future__ import annotations

import itertools

import torch

from suite import SuiteError, TaskData, register_task

N = 5


def permutations() -> torch.Tensor:
    """The 120 permutations of 0..4 in lexicographic order, [120, 5]: row a maps i to perm[a, i]."""
    return torch.tensor(list(itertools.permutations(range(N))))


def compose_table(perms: torch.Tensor) -> torch.Tensor:
    """table[a, b] = the index of a o b (apply b, then a)."""
    index = {tuple(p.tolist()): i for i, p in enumerate(perms)}
    composed = perms[:, None, :].expand(-1, len(perms), -1).gather(2, perms[None, :, :].expand(len(perms), -1, -1))
    return torch.tensor([[index[tuple(row.tolist())] for row in rows] for rows in composed])


@register_task("permutation", gives="tokens")
def permutation(seed: int, *, train_frac: float = 0.5) -> TaskData:
    """Composition a o b in S5 (120 elements); train_frac of the 14,400 pairs trained on."""
    if not 0 < train_frac < 1:
        raise SuiteError(f"train_frac must be in (0, 1), got {train_frac}")
    perms = permutations()
    n = len(perms)
    a, b = torch.cartesian_prod(torch.arange(n), torch.arange(n)).T
    y = compose_table(perms)[a, b]
    x = torch.stack([a, torch.full_like(a, n), b, torch.full_like(a, n + 1)], dim=1)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_train = round(train_frac * len(x))
    train, val = order[:n_train].sort().values, order[n_train:].sort().values
    return TaskData(
        x_train=x[train],
        y_train=y[train],
        x_val=x[val],
        y_val=y[val],
        kind="tokens",
        n_classes=n,
        vocab_size=n + 2,
        token_freq=torch.bincount(x[train].flatten(), minlength=n + 2),
        info={"n_train": len(train), "n_val": len(val), "n_pairs": len(x)},
    )
