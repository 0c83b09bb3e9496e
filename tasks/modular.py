"""Modular arithmetic, the grokking testbed: predict (a op b) mod p from the tokens [a, op, b, =].

Token ids: the numbers 0..p-1 are themselves, the operator is p, '=' is p+1.
Split protocol of the embedding-grokking paper (arXiv 2505.15624): test_frac of all pairs
is held out at random; the training set (train_frac of all pairs) is drawn from the rest by
`split`:
- random:  uniformly at random;
- uniform: every value of a, and of b, appears as equally often as the pool allows;
- skewed:  with probability proportional to 1 / (a + 1) ** zipf_s, so large a are rare.
Grokking-Insight's structured splits keep a block out of training and test on everything
else, as in its code (test_frac does not apply):
- rec: no pair with a <= k and b <= k is trained on;
- str: no pair with a <= k is trained on.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch

from suite import SuiteError, register_task
from suite.data import TaskData

OPS = {
    "add": lambda a, b, p: (a + b) % p,
    "sub": lambda a, b, p: (a - b) % p,
    "mul": lambda a, b, p: (a * b) % p,
    "div": lambda a, b, p: (a * _inverse(b, p)) % p,
    "sqsum": lambda a, b, p: (a * a + b * b) % p,
}


def _inverse(b: torch.Tensor, p: int) -> torch.Tensor:
    """b^(p-2) mod p (Fermat), elementwise, by square-and-multiply in int64."""
    result, base, e = torch.ones_like(b), b % p, p - 2
    while e:
        if e & 1:
            result = result * base % p
        base, e = base * base % p, e >> 1
    return result


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def _uniform_pick(a: torch.Tensor, b: torch.Tensor, n: int, p: int, g: torch.Generator) -> torch.Tensor:
    """Pick n of the candidate pairs so that each value of a and of b is covered equally.

    Candidates are visited in random order and taken while neither operand has reached its
    quota ceil(n / p); any shortfall is filled with the pairs whose operands are least used.
    """
    quota = -(-n // p)
    a, b = a.tolist(), b.tolist()
    count_a, count_b = [0] * p, [0] * p
    chosen, rest = [], []
    for i in torch.randperm(len(a), generator=g).tolist():
        if len(chosen) < n and count_a[a[i]] < quota and count_b[b[i]] < quota:
            chosen.append(i)
            count_a[a[i]] += 1
            count_b[b[i]] += 1
        else:
            rest.append(i)
    while len(chosen) < n:
        i = min(rest, key=lambda j: count_a[a[j]] + count_b[b[j]])
        rest.remove(i)
        chosen.append(i)
        count_a[a[i]] += 1
        count_b[b[i]] += 1
    return torch.tensor(sorted(chosen))


@register_task("modular")
def modular(
    seed: int,
    *,
    p: int = 97,
    op: Literal["add", "sub", "mul", "div", "sqsum"] = "add",
    split: Literal["random", "uniform", "skewed", "rec", "str"] = "random",
    test_frac: float = 0.2,
    train_frac: float = 0.3,
    zipf_s: float = 1.0,
    k: int = 30,
    data_seed: Optional[int] = None,
) -> TaskData:
    """(a op b) mod p with the paper's split protocol; data_seed None = the run's seed."""
    if not _is_prime(p) or p < 3:
        raise SuiteError(f"p must be a prime >= 3, got {p}")
    for name, frac in (("test_frac", test_frac), ("train_frac", train_frac)):
        if not 0 < frac < 1:
            raise SuiteError(f"{name} must be in (0, 1), got {frac}")
    if split not in ("rec", "str") and test_frac + train_frac > 1:
        raise SuiteError(f"test_frac + train_frac must be <= 1, got {test_frac} + {train_frac}")
    if split in ("rec", "str") and not 0 <= k < p - 1:
        raise SuiteError(f"k must be in [0, {p - 2}] for split '{split}', got {k}")

    g = torch.Generator().manual_seed(seed if data_seed is None else data_seed)
    a, b = torch.cartesian_prod(torch.arange(p), torch.arange(1 if op == "div" else 0, p)).T
    total = len(a)
    n_train = round(train_frac * total)

    if split in ("rec", "str"):
        held = (a <= k) & (b <= k) if split == "rec" else (a <= k)
        pool = torch.nonzero(~held).flatten()
        if n_train > len(pool):
            raise SuiteError(f"split '{split}' with k={k} leaves {len(pool)} pairs, fewer than train_frac asks ({n_train})")
        train = pool[torch.randperm(len(pool), generator=g)[:n_train]]
    else:
        perm = torch.randperm(total, generator=g)
        pool = perm[round(test_frac * total):]  # what is not held out as test
        if split == "random":
            train = pool[:n_train]
        elif split == "uniform":
            train = pool[_uniform_pick(a[pool], b[pool], n_train, p, g)]
        else:
            weights = (a[pool] + 1).double().pow(-zipf_s)
            train = pool[torch.multinomial(weights, n_train, replacement=False, generator=g)]
    in_train = torch.zeros(total, dtype=torch.bool)
    in_train[train] = True
    if split in ("rec", "str"):
        val = torch.nonzero(~in_train).flatten()
    else:
        val = perm[: round(test_frac * total)]

    x = torch.stack([a, torch.full_like(a, p), b, torch.full_like(a, p + 1)], dim=1)
    y = OPS[op](a, b, p)
    train = train.sort().values  # order carries no information; keep it canonical
    freq = torch.bincount(x[train].flatten(), minlength=p + 2)
    return TaskData(
        x_train=x[train], y_train=y[train], x_val=x[val], y_val=y[val], kind="tokens",
        n_classes=p, vocab_size=p + 2, token_freq=freq, number_tokens=torch.arange(p),
        info={"n_train": len(train), "n_val": len(val), "n_pairs": total},
    )
