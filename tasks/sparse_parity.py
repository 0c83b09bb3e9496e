"""Sparse parity (Barak et al., arXiv 2207.08799): n random bits, the label is the parity of k
of them. The k relevant positions are a random subset fixed by the data seed; the model is told
nothing about which they are.

n_examples distinct bit strings are drawn at random (uniformly, from the data seed), and
train_frac of them are the training set, the rest the validation set. Tokens are the bits
themselves (ids 0 and 1), one position per bit. Barak et al. train online on fresh samples; a
fixed training set, as here, is what makes the task a grokking one (memorize, then generalize).

    python -m suite run --task sparse_parity --set n_bits=40 --set k=3
"""

from __future__ import annotations

from typing import Optional

import torch

from suite import SuiteError, TaskData, register_task


@register_task("sparse_parity", gives="tokens")
def sparse_parity(
    seed: int,
    *,
    n_bits: int = 40,
    k: int = 3,
    n_examples: int = 2000,
    train_frac: float = 0.5,
    data_seed: Optional[int] = None,
) -> TaskData:
    """Parity of k hidden bits of n_bits; n_examples distinct strings, train_frac trained on."""
    if not 1 <= k <= n_bits <= 1024:
        raise SuiteError(f"need 1 <= k <= n_bits <= 1024, got k={k}, n_bits={n_bits}")
    if not 0 < train_frac < 1:
        raise SuiteError(f"train_frac must be in (0, 1), got {train_frac}")
    if not 2 <= n_examples <= min(2**n_bits, 10_000_000):
        raise SuiteError(f"n_examples must be in [2, min(2^n_bits, 10^7)], got {n_examples}")
    if data_seed is not None and data_seed < 0:
        raise SuiteError(f"data_seed must be >= 0 (or None: the run's seed), got {data_seed}")
    g = torch.Generator().manual_seed(seed if data_seed is None else data_seed)
    relevant = torch.randperm(n_bits, generator=g)[:k].sort().values
    x = _distinct_strings(n_bits, n_examples, g)
    y = x[:, relevant].sum(1) % 2
    n_train = round(train_frac * n_examples)
    if not 0 < n_train < n_examples:
        raise SuiteError(f"train_frac {train_frac} of {n_examples} examples leaves one of the sets empty")
    train, val = torch.arange(n_train), torch.arange(n_train, n_examples)
    return TaskData(
        x_train=x[train],
        y_train=y[train],
        x_val=x[val],
        y_val=y[val],
        kind="tokens",
        n_classes=2,
        vocab_size=2,
        token_freq=torch.bincount(x[train].flatten(), minlength=2),
        info={"n_train": n_train, "n_val": n_examples - n_train, "relevant_bits": relevant.tolist()},
    )


def _distinct_strings(n_bits: int, n: int, g: torch.Generator) -> torch.Tensor:
    """n distinct random bit strings of length n_bits, [n, n_bits], in the order drawn."""
    if n_bits <= 20:  # few enough to draw from all of them
        codes = torch.randperm(2**n_bits, generator=g)[:n]
        return (codes[:, None] >> torch.arange(n_bits)) & 1
    seen, rows = set(), []
    while len(rows) < n:
        for row in torch.randint(0, 2, (n, n_bits), generator=g):
            key = row.numpy().tobytes()
            if key not in seen and len(rows) < n:
                seen.add(key)
                rows.append(row)
    return torch.stack(rows)
