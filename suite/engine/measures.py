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


class Progress:
    """The progress measures of a stack's embeddings E [K, vocab, d] (and coupled weights W), for
    every member at once on the device, with no work per member on the host: embedding norms by
    token frequency (frequency_quartiles of each member's training tokens, as masks built once),
    MED, the mean L2 distance between the embeddings of consecutive numbers (Grokking-Insight),
    and what sigma_ratio needs: on a GPU (batched) Lanczos tridiagonals of E's and W's Gram matrices,
    read back with the evaluation's one copy and finished on the host in one batched call; on a CPU
    E and W themselves, each member's ratio computed as sigma_max computes it (the same work there,
    and faster than batched ops on small matrices)."""

    def __init__(self, datas: list[TaskData], device: torch.device):
        self.batched = device.type != "cpu"
        self.buckets = None  # bucket -> [K, vocab] mask of each member's tokens in it
        if all(d.token_freq is not None for d in datas):
            masks: dict[str, list] = {}
            for data in datas:
                freq = data.token_freq.cpu()
                for bucket, ids in frequency_quartiles(freq).items():
                    masks.setdefault(bucket, []).append(
                        torch.zeros(len(freq), dtype=torch.bool).index_fill_(0, ids, True)
                    )
            self.buckets = {bucket: torch.stack(m).to(device) for bucket, m in masks.items()}
        numbers = [d.number_tokens for d in datas]
        has_numbers = all(n is not None and len(n) > 1 for n in numbers) and len({len(n) for n in numbers}) == 1
        self.numbers = torch.stack([n.to(device) for n in numbers]) if has_numbers else None  # [K, count]

    def keep(self, keep: list[int]) -> None:
        """The members at `keep` go on (suite.engine.stack.Stack.leave)."""
        if self.buckets is not None:
            self.buckets = {bucket: mask[keep] for bucket, mask in self.buckets.items()}
        if self.numbers is not None:
            self.numbers = self.numbers[keep]

    @torch.no_grad()
    def columns(self, E: torch.Tensor, W: torch.Tensor | None) -> tuple[dict, dict]:
        """[K] columns computed on the device, and the tensors `ratios` reads on the host."""
        if self.buckets is None:
            return {}, {}
        norms = E.norm(dim=-1)
        columns = {
            f"emb_norm_{bucket}": (norms * mask).sum(1) / mask.sum(1)  # 0 / 0: nan for an empty bucket
            for bucket, mask in self.buckets.items()
        }
        if self.numbers is not None:
            numbers = torch.gather(E, 1, self.numbers[..., None].expand(-1, -1, E.shape[-1]))
            columns["med"] = (numbers[:, 1:] - numbers[:, :-1]).norm(dim=-1).mean(1)
        if W is None:
            return columns, {}
        return columns, ({"E": lanczos(E), "W": lanczos(W)} if self.batched else {"E": E, "W": W})

    def ratios(self, host: dict[str, torch.Tensor]) -> list[float]:
        """sigma_max(E) / sigma_max(W) per member, from columns()'s extra on the host; nan where W is 0."""
        if not self.batched:
            return [sigma_ratio(e, w) for e, w in zip(host["E"], host["W"])]
        sigma_e, sigma_w = (top_eigenvalues(host[k]).sqrt() for k in ("E", "W"))
        return torch.where(sigma_w > 0, sigma_e / sigma_w, float("nan")).tolist()


LANCZOS_STEPS = 48  # the top eigenvalue of a 512 x 512 Gram matrix settles to ~1e-12 in 20-30


@torch.no_grad()
def lanczos(a: torch.Tensor, steps: int = LANCZOS_STEPS) -> torch.Tensor:
    """The Lanczos tridiagonals [K, m, m] of the Gram matrices of K matrices a [K, rows, ...] (over
    the smaller dimension), in float64 on a's device, `steps` iterations (all of them where the Gram
    matrix is smaller) with full reorthogonalization, and no synchronization: their top eigenvalue
    (top_eigenvalues) is sigma_max squared. A matrix with a non-finite entry gives nan."""
    a = a.flatten(2).double()
    if a.shape[1] > a.shape[2]:
        a = a.mT  # the smaller dimension n: the Gram matrix a a^T is n x n
    K, n, _ = a.shape
    finite = torch.isfinite(a).flatten(1).all(1)
    a = torch.where(finite[:, None, None], a, 0.0)
    m = min(steps, n)
    start = torch.from_numpy(np.random.default_rng(0).standard_normal(n)).to(a.device)
    basis = torch.zeros(K, m + 1, n, dtype=torch.float64, device=a.device)
    basis[:, 0] = start / start.norm()
    diagonal, off = [], []
    for k in range(m):
        u = (a @ (a.mT @ basis[:, k, :, None]))[..., 0]
        diagonal.append((basis[:, k] * u).sum(-1))
        for _ in range(2):  # twice is enough to keep the basis orthogonal in floating point
            u = u - (basis[:, : k + 1].mT @ (basis[:, : k + 1] @ u[..., None]))[..., 0]
        beta = u.norm(dim=-1)
        off.append(beta)
        basis[:, k + 1] = u / beta.clamp_min(torch.finfo(torch.float64).tiny)[:, None]  # 0 past an invariant subspace
    T = torch.diag_embed(torch.stack(diagonal, 1))
    if m > 1:
        beside = torch.stack(off[:-1], 1)
        T = T + torch.diag_embed(beside, 1) + torch.diag_embed(beside, -1)
    return torch.where(finite[:, None, None], T, float("nan"))


def top_eigenvalues(T: torch.Tensor) -> torch.Tensor:
    """The largest eigenvalue of each tridiagonal [K, m, m] (host tensors), nan where T is."""
    ok = torch.isfinite(T).flatten(1).all(1)
    top = torch.linalg.eigvalsh(torch.where(ok[:, None, None], T, 0.0))[:, -1].clamp_min(0.0)
    return torch.where(ok, top, float("nan"))


def sigma_ratio(E: torch.Tensor, W: torch.Tensor) -> float:
    """sigma_max(E) / sigma_max(W) of one member (host tensors); nan when W decayed to exactly 0."""
    sigma_w = sigma_max(W)
    return sigma_max(E) / sigma_w if sigma_w else float("nan")


def progress_measures(model, data: TaskData) -> dict[str, float]:
    """One model's progress measures (Progress's columns and sigma_ratio), for code outside the loop."""
    E, W = getattr(model, "embedding_weight", None), getattr(model, "coupled_weight", None)
    if E is None or data.token_freq is None:
        return {}
    progress = Progress([data], E.device)
    columns, extra = progress.columns(E.detach()[None], None if W is None else W.detach()[None])
    out = {k: v.item() for k, v in columns.items()}
    if extra:
        (out["sigma_ratio"],) = progress.ratios({k: v.cpu() for k, v in extra.items()})
    return out
