"""Modular arithmetic, the grokking testbed: predict (a op b) mod p from the tokens [a, op, b, =].

Token ids: the numbers 0..p-1 are themselves, the operator is p, '=' is p+1.
b runs over 0..p-1, or 1..p-1 for div and with nonzero_b (Grokfast's code: 97 x 96 = 9,312 pairs).
Split protocol of the embedding-grokking paper (arXiv 2505.15624, Sec. 4.2 and 5.1): test_frac
of all pairs is the test set, and the training set (train_frac of all pairs) is drawn from the
rest. `split` says how both are drawn:
- random:  both uniformly at random;
- uniform: "all combinations of a and b evenly across training and test sets": the test set,
           then the training set from the rest, each a degree-balanced pick (every value of a,
           and of b, appears equally often in it, +-1, as far as the pool allows);
- skewed:  "a bias in the combinations of a" in the training *and* the test set, alike (the paper's
           Fig. 8 shows both sets skewed the same way): test and training pairs are drawn together,
           without replacement, with probability proportional to (a + 1) ** -skew, then dealt at
           random into the two sets. A rare a is rare in both and, where the draw holds it at all,
           present in both. The paper gives no formula; the default strength, 1, is Zipf's law
           (word frequencies fall as 1 / rank), fixed before any run of this construction;
- skewed_holdout: an out-of-distribution hold-out (the suite's `skewed` before it drew both
           sets alike): the test set drawn first with the skew, which uses up the small a, then
           the training set with the skew from the rest, so the most frequent test operands are
           rare or absent in training;
- skewed_train: a random test set, the training set alone weighted by (a + 1) ** -skew.
Grokking-Insight's structured splits keep a block out of training and test on everything
else, as in its code (test_frac does not apply):
- rec: no pair with a <= k and b <= k is trained on;
- str: no pair with a <= k is trained on.

Defaults: test_frac 0.2 (20% of all pairs are the test set), train_frac 0.3 (30% of all pairs,
drawn for training from the rest), skew 1. The leaderboard draws each split's operand
probabilities in train and test (the paper's Fig. 8) beside its sampling figure.

    python -m suite run --set split=skewed --set skew=3 --set lr=1e-3 --set batch_size=64
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import torch

from suite import SuiteError, register_task
from suite.specs.data import TaskData

P_MAX = 8191  # p^2 pairs: 67 million at 8191, about 2 GB of tokens

OPS = {
    "add": lambda a, b, p: (a + b) % p,
    "sub": lambda a, b, p: (a - b) % p,
    "mul": lambda a, b, p: (a * b) % p,
    "div": lambda a, b, p: (a * _inverse(b, p)) % p,
    "sqsum": lambda a, b, p: (a * a + b * b) % p,
    # Power et al.'s harder binary operations (arXiv 2201.02177, their Fig. 1's list)
    "x2xyy2": lambda a, b, p: (a * a + a * b + b * b) % p,
    "x3xy2y": lambda a, b, p: (a * a * a + a * b * b + b) % p,
}


def _inverse(b: torch.Tensor, p: int) -> torch.Tensor:
    """b^(p-2) mod p (Fermat), elementwise, by square-and-multiply in int64."""
    result, base, e = torch.ones_like(b), b % p, p - 2
    while e:
        if e & 1:
            result = result * base % p
        base, e = base * base % p, e >> 1
    return result


def _rest(candidates: torch.Tensor, taken: torch.Tensor, total: int) -> torch.Tensor:
    """The candidates not taken, in their order."""
    out = torch.ones(total, dtype=torch.bool)
    out[taken] = False
    return candidates[out[candidates]]


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def _uniform_pick(a: torch.Tensor, b: torch.Tensor, n: int, p: int, g: torch.Generator) -> torch.Tensor:
    """Pick n of the candidate pairs so that every value of a, and of b, is used floor(n/p) or
    ceil(n/p) times (when the candidates allow it): a degree-balanced selection.

    Greedy rounds give each a in turn its least-used free b under a cap on both operands;
    where that gets stuck, augmenting paths (as in bipartite matching) move pairs between
    operands until every a reaches the cap. The caps start at floor(n / #values) and rise
    by one until all n are placed.
    """
    by_a = [[] for _ in range(p)]  # a -> candidate b values, in random order
    for i in torch.randperm(len(a), generator=g).tolist():
        by_a[int(a[i])].append(int(b[i]))
    taken, owner = set(), {}  # chosen (a, b) pairs; b -> set of a paired with it
    load_a, load_b = [0] * p, [0] * p

    def flip(path):  # path a0, b0, a1, b1, ...: take (a0,b0), drop (a1,b0), take (a1,b1), ...
        for k in range(0, len(path) - 1, 2):
            taken.add((path[k], path[k + 1]))
            owner.setdefault(path[k + 1], set()).add(path[k])
            if k + 2 < len(path):
                taken.discard((path[k + 2], path[k + 1]))
                owner[path[k + 1]].discard(path[k + 2])
        load_a[path[0]] += 1
        load_b[path[-1]] += 1

    def augment(start, cap_b):  # breadth-first search for paths to b's below their cap
        parent, frontier, ends = {start: None}, [start], []
        while frontier:
            nxt = []
            for x in frontier:
                for y in by_a[x]:
                    if (x, y) in taken or ("b", y) in parent:
                        continue
                    parent[("b", y)] = x
                    if load_b[y] < cap_b:
                        ends.append(y)
                    for z in owner.get(y, ()):
                        if z not in parent:
                            parent[z] = ("b", y)
                            nxt.append(z)
            frontier = nxt
        if not ends:
            return False
        y = min(ends, key=lambda v: load_b[v])  # keep the b side balanced too
        path, node = [y], parent[("b", y)]
        while node is not None:
            path.append(node)
            if parent[node] is None:
                break
            path.append(parent[node][1])
            node = parent[parent[node]]
        flip(path[::-1])
        return True

    remaining, extra = n, 0
    n_a, n_b = len(set(a.tolist())), len(set(b.tolist()))
    while remaining:
        cap_a, cap_b = n // n_a + extra, n // n_b + extra
        progress = True
        while remaining and progress:  # greedy rounds: each a takes its least-used free b
            progress = False
            for x in sorted(range(p), key=lambda v: load_a[v]):
                free = [y for y in by_a[x] if load_b[y] < cap_b and (x, y) not in taken]
                if remaining and load_a[x] < cap_a and free:
                    flip([x, min(free, key=lambda v: load_b[v])])
                    remaining -= 1
                    progress = True
        for x in sorted(range(p), key=lambda v: load_a[v]):  # repair pass
            while remaining and load_a[x] < cap_a and augment(x, cap_b):
                remaining -= 1
        extra += 1
    index = {(int(u), int(v)): i for i, (u, v) in enumerate(zip(a.tolist(), b.tolist()))}
    return torch.tensor(sorted(index[pair] for pair in taken))


@register_task("modular", gives="tokens")
def modular(
    seed: int,
    *,
    p: int = 97,
    op: Literal["add", "sub", "mul", "div", "sqsum", "x2xyy2", "x3xy2y"] = "add",
    split: Literal["random", "uniform", "skewed", "skewed_holdout", "skewed_train", "rec", "str"] = "random",
    test_frac: float = 0.2,
    train_frac: float = 0.3,
    skew: float = 1.0,
    k: int = 30,
    data_seed: Optional[int] = None,
    nonzero_b: bool = False,
) -> TaskData:
    """(a op b) mod p with the paper's split protocol; data_seed None = the run's seed."""
    if not 3 <= p <= P_MAX or not _is_prime(p):
        raise SuiteError(f"p must be a prime in [3, {P_MAX}], got {p}")
    for name, frac in (("test_frac", test_frac), ("train_frac", train_frac)):
        if not 0 < frac < 1:
            raise SuiteError(f"{name} must be in (0, 1), got {frac}")
    if split not in ("rec", "str") and test_frac + train_frac > 1:
        raise SuiteError(f"test_frac + train_frac must be <= 1, got {test_frac} + {train_frac}")
    if split in ("rec", "str") and not 0 <= k < p - 1:
        raise SuiteError(f"k must be in [0, {p - 2}] for split '{split}', got {k}")
    if split.startswith("skewed") and not (0 <= skew < math.inf):
        raise SuiteError(f"skew must be a finite number >= 0 (large a rarer), got {skew}")
    if data_seed is not None and data_seed < 0:
        raise SuiteError(f"data_seed must be >= 0 (or None: the run's seed), got {data_seed}")

    g = torch.Generator().manual_seed(seed if data_seed is None else data_seed)
    a, b = torch.cartesian_prod(torch.arange(p), torch.arange(1 if op == "div" or nonzero_b else 0, p)).T
    total = len(a)
    n_train = round(train_frac * total)

    if split in ("rec", "str"):
        held = (a <= k) & (b <= k) if split == "rec" else (a <= k)
        pool = torch.nonzero(~held).flatten()
        if n_train > len(pool):
            raise SuiteError(
                f"split '{split}' with k={k} leaves {len(pool)} pairs, fewer than train_frac asks ({n_train})"
            )
        train = pool[torch.randperm(len(pool), generator=g)[:n_train]]
        val = _rest(torch.arange(total), train, total)  # everything not trained on
    else:
        n_test = round(test_frac * total)
        everything = torch.randperm(total, generator=g)
        if split == "random":
            val, train = everything[:n_test], everything[n_test : n_test + n_train]
        elif split == "uniform":
            val = everything[_uniform_pick(a[everything], b[everything], n_test, p, g)]
            pool = _rest(everything, val, total)
            train = pool[_uniform_pick(a[pool], b[pool], n_train, p, g)]
        else:
            weight = (a + 1).double().pow(-skew)
            if (weight > 0).sum() < n_test + n_train:  # underflow: the draw would take pairs of weight 0
                raise SuiteError(
                    f"skew {skew} is too strong for p = {p}: only {int((weight > 0).sum())} pairs keep a "
                    f"weight above 0 in float64, and the split draws {n_test + n_train}"
                )
            if split == "skewed":  # one skewed draw for both sets, dealt at random
                drawn = everything[
                    torch.multinomial(weight[everything], n_test + n_train, replacement=False, generator=g)
                ]
                drawn = drawn[torch.randperm(len(drawn), generator=g)]
                val, train = drawn[:n_test], drawn[n_test:]
            else:
                val = (
                    everything[torch.multinomial(weight[everything], n_test, replacement=False, generator=g)]
                    if split == "skewed_holdout"
                    else everything[:n_test]
                )
                pool = _rest(everything, val, total)
                train = pool[torch.multinomial(weight[pool], n_train, replacement=False, generator=g)]
        val = val.sort().values

    x = torch.stack([a, torch.full_like(a, p), b, torch.full_like(a, p + 1)], dim=1)
    y = OPS[op](a, b, p)
    train = train.sort().values  # order carries no information; keep it canonical
    freq = torch.bincount(x[train].flatten(), minlength=p + 2)
    return TaskData(
        x_train=x[train],
        y_train=y[train],
        x_val=x[val],
        y_val=y[val],
        kind="tokens",
        n_classes=p,
        vocab_size=p + 2,
        token_freq=freq,
        number_tokens=torch.arange(p),
        info={"n_train": len(train), "n_val": len(val), "n_pairs": total},
    )
