"""What every evaluation records: losses, accuracies, and progress measures of the embeddings.

The training loss is `train.loss`: `ce` (softmax cross-entropy, the default) or `stablemax`
(`--set loss=stablemax`): cross-entropy through StableMax, s(x) = x + 1 (x >= 0), 1 / (1 - x)
(x < 0), in float64 as in its paper (stablemax_cross_entropy below).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from threadpoolctl import ThreadpoolController

from suite.specs.data import TaskData


def stablemax_cross_entropy(logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy through StableMax (Prieto et al., arXiv 2501.04697), in float64 as in its paper.

    p_i = s(x_i) / sum_j s(x_j), s(x) = x + 1 for x >= 0 and 1 / (1 - x) below: it grows
    linearly instead of exponentially, so a confident prediction does not round the loss of
    the right class to exactly 0 (softmax collapse). Each branch sees only its own half of
    the inputs, so the unused branch never produces inf (and no NaN in the gradient).
    """
    x = logits.double()
    s = torch.where(x >= 0, x.clamp(min=0) + 1, 1 / (1 - x.clamp(max=0)))
    nll = -(s.gather(-1, y[:, None]).squeeze(-1) / s.sum(-1)).log()
    if reduction == "mean":
        return nll.mean()
    if reduction == "sum":
        return nll.sum()
    if reduction == "none":
        return nll
    raise ValueError(f"unknown reduction {reduction!r}")


LOSSES = {
    "ce": F.cross_entropy,
    "stablemax": stablemax_cross_entropy,
}  # by train.loss (suite/specs/config.py's LOSS_NAMES)


@torch.no_grad()
def evaluate(model, x, y, loss_fn, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per member: the mean loss [K], and the correctness of every example [K, n], over a whole
    split, left on the device (the caller reads everything back at once).

    x is [K, n, ...] (member axis first), y [K, n]; the model maps x to logits [K, n, classes].
    Chunks of batch_size examples per member keep memory bounded.
    """
    total, correct = 0.0, []
    for i in range(0, x.shape[1], batch_size):
        logits, target = model(x[:, i : i + batch_size]).float(), y[:, i : i + batch_size]  # float32 loss
        total = total + loss_fn(logits.flatten(0, 1), target.flatten(), reduction="none").view(target.shape).sum(1)
        correct.append(logits.argmax(-1) == target)
    return total / x.shape[1], torch.cat(correct, dim=1)


def to_host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors on the CPU, with one synchronisation: on a GPU every copy is queued, then waited for once."""
    if not tensors or tensors[0].device.type != "cuda":
        return [t.cpu() for t in tensors]
    copies = [t.to("cpu", non_blocking=True) for t in tensors]
    torch.cuda.synchronize(tensors[0].device)
    return copies


BLAS = ThreadpoolController()  # numpy's BLAS, found once (finding it takes ~1 ms)


def sigma_max(w: torch.Tensor, tol: float = 1e-10, max_iter: int = 100) -> float:
    """The largest singular value of w (flattened to 2-D): the square root of the top eigenvalue
    of the smaller Gram matrix, in float64 on the CPU.

    Above 128 x 128 by Lanczos iteration with full reorthogonalization: 20-30 matrix-vector
    products for the MLP's 512 x 512 W (~5 ms) instead of an eigendecomposition (eigvalsh, ~15 ms
    of every evaluation on 2 cores), and closer: ~1e-12 relative where float32 eigvalsh was
    ~1e-7 off. The start vector is a fixed pseudo-random one, so the value depends on w alone
    (a resumed run measures what an uninterrupted one does). Smaller Gram matrices, and a top of
    the spectrum so clustered that max_iter steps do not settle it, go to eigvalsh. A non-finite w
    (a diverged run) gives nan.

    One BLAS thread: OpenBLAS's workers spin for a while after each call, and on 2 cores they
    took a core from the training steps after every evaluation (the next ~4 steps ran 2-3x
    slower, ~4 s of a 1,500-step run evaluated every 50 steps). It also gives a single run the
    values of a grid worker's, which runs on one thread anyway."""
    with BLAS.limit(limits=1, user_api="blas"):
        return _sigma_max(w.detach().flatten(1).double().cpu().numpy(), tol, max_iter)


def _sigma_max(a: np.ndarray, tol: float, max_iter: int) -> float:
    if not np.isfinite(a).all():
        return float("nan")
    if a.shape[0] > a.shape[1]:
        a = a.T  # the smaller dimension n: the Gram matrix a a^T is n x n
    n = a.shape[0]
    if n > 128:
        basis = np.zeros((max_iter + 1, n))
        basis[0] = np.random.default_rng(0).standard_normal(n)
        basis[0] /= np.linalg.norm(basis[0])
        diagonal, off, theta = [], [], 0.0
        for k in range(max_iter):
            u = a @ (a.T @ basis[k])
            diagonal.append(basis[k] @ u)
            for _ in range(2):  # twice is enough to keep the basis orthogonal in floating point
                u -= basis[: k + 1].T @ (basis[: k + 1] @ u)
            beta, previous = np.linalg.norm(u), theta
            theta = np.linalg.eigvalsh(np.diag(diagonal) + np.diag(off, 1) + np.diag(off, -1))[-1]
            if beta <= tol * theta or theta - previous <= tol * theta:  # an invariant subspace, or settled
                return float(np.sqrt(max(theta, 0.0)))
            off.append(beta)
            basis[k + 1] = u / beta
    return float(np.sqrt(max(np.linalg.eigvalsh(a @ a.T)[-1], 0.0)))


def frequency_quartiles(token_freq: torch.Tensor) -> dict[str, torch.Tensor]:
    """Ids of the tokens that occur in training inputs, ranked by training frequency (ties
    broken by id, so the split is deterministic): the rarest quarter, the middle half and
    the most frequent quarter."""
    seen = torch.nonzero(token_freq > 0).flatten()
    order = seen[torch.argsort(token_freq[seen], stable=True)]
    quarter = max(1, len(order) // 4)
    return {"rare": order[:quarter], "middle": order[quarter:-quarter], "frequent": order[-quarter:]}


@torch.no_grad()
def progress_columns(E: torch.Tensor, datas: list[TaskData]) -> dict[str, torch.Tensor]:
    """The progress measures of K members' embeddings E [K, vocab, d] that the device computes,
    as [K] tensors: embedding norms by token frequency (the frequency_quartiles of each member's
    training tokens) and MED, the mean L2 distance between the embeddings of consecutive numbers
    (Grokking-Insight). sigma_ratio needs E and W on the host (sigma_max)."""
    out: dict[str, list] = {}
    norms = E.norm(dim=-1)
    for i, data in enumerate(datas):
        for bucket, ids in frequency_quartiles(data.token_freq).items():
            value = norms[i, ids].mean() if len(ids) else torch.tensor(float("nan"), device=E.device)
            out.setdefault(f"emb_norm_{bucket}", []).append(value)
    for i, data in enumerate(datas):
        if data.number_tokens is not None and len(data.number_tokens) > 1:
            numbers = E[i, data.number_tokens]
            out.setdefault("med", []).append((numbers[1:] - numbers[:-1]).norm(dim=1).mean())
    return {name: torch.stack(values) for name, values in out.items() if len(values) == len(datas)}


def sigma_ratio(E: torch.Tensor, W: torch.Tensor) -> float:
    """sigma_max(E) / sigma_max(W) of one member (host tensors); nan when W decayed to exactly 0."""
    sigma_w = sigma_max(W)
    return sigma_max(E) / sigma_w if sigma_w else float("nan")


def progress_measures(model, data: TaskData) -> dict[str, float]:
    """One model's progress measures (progress_columns and sigma_ratio), for code outside the loop."""
    E, W = getattr(model, "embedding_weight", None), getattr(model, "coupled_weight", None)
    if E is None or data.token_freq is None:
        return {}
    columns = {k: v.item() for k, v in progress_columns(E.detach()[None], [data]).items()}
    out = {k: columns[k] for k in ("emb_norm_rare", "emb_norm_middle", "emb_norm_frequent")}
    if W is not None:
        out["sigma_ratio"] = sigma_ratio(E.detach().cpu(), W.detach().cpu())
    if "med" in columns:
        out["med"] = columns["med"]
    return out
