"""Top Hessian eigenvalue of the training loss restricted to one parameter block.

For a block B (the embedding E, or the first weight W that reads it) the restricted Hessian
is H_BB = d^2 L / dB^2, the other parameters held fixed. Its top eigenvalue comes from power
iteration, v <- H_BB v / |H_BB v|, where each product H_BB v is a Hessian-vector product by
double backward (torch.autograd.grad of (dL/dB . v) with respect to B): the Hessian itself
is never formed. Power iteration finds the eigenvalue of largest magnitude (the Rayleigh
quotient v . H_BB v at the last iterate); when that one is negative, a second run on
H_BB - lambda I finds the largest (most positive) one, which is what is reported: the
block's sharpness. Power iteration converges at the rate of the ratio of the two largest
eigenvalues; it stops when the estimate moves by less than 1e-3 relatively, or after 50
iterations (an estimate that hit the cap can be slightly low).

L is the mean training loss over the *whole* training set (the run's loss function, the
model in eval mode), summed over chunks of eval_batch examples, so the measure is
deterministic and does not touch the run's random generator. Each iteration costs about
three passes (forward, backward with graph, backward of the product) over the training set.

In a run, `--set hessian_every=K` measures it every K evaluations, into metrics.jsonl as
`hessian_E` (the embedding E) and `hessian_W` (the first weight that reads it). It costs about
3 x 50 passes over the training set at worst (seconds for the MLP, about a minute for a
transformer on CPU), so choose K large. A run that measures it trains alone, never in a stack
(suite/engine/plan.py). What it measured on the default cell: leaderboards/README.md.

    python -m suite run --opt adam --set hessian_every=10     # + hessian_E / hessian_W in metrics.jsonl
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

ITERATIONS = 50  # power-iteration cap (PyHessian uses 100 with the same tolerance)
TOLERANCE = 1e-3  # stop once every block's estimate moved by less than this, relatively


def power_iteration(
    hvp: Callable[[list[torch.Tensor]], list[torch.Tensor]],
    like: list[torch.Tensor],
    iterations: int = ITERATIONS,
    tolerance: float = TOLERANCE,
) -> list[float]:
    """Top eigenvalue of several symmetric operators at once, one per tensor in `like`.

    `hvp(vs)` returns [H_i v_i] for all blocks i together (one pass over the data serves all).
    The start vectors are drawn from a fixed seed, so the result is reproducible.
    """
    g = torch.Generator().manual_seed(0)
    vs = [torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.device, t.dtype) for t in like]
    vs = [v / v.norm() for v in vs]
    values = [float("nan")] * len(vs)
    for _ in range(iterations):
        hvs = hvp(vs)
        new = [torch.dot(v.flatten(), hv.flatten()).item() for v, hv in zip(vs, hvs)]
        done = all(abs(n - o) <= tolerance * abs(n) for n, o in zip(new, values))
        values = new
        if done:
            break
        vs = [hv / hv.norm() if hv.norm() > 0 else v for v, hv in zip(vs, hvs)]
    return values


def block_hvp(
    chunk_losses: Callable[[], Iterable[torch.Tensor]], blocks: list[torch.Tensor], vs: list[torch.Tensor]
) -> list[torch.Tensor]:
    """[H_BB v_B for each block B] of the loss sum(chunk_losses()), chunk by chunk."""
    out = [torch.zeros_like(b) for b in blocks]
    for loss in chunk_losses():
        grads = torch.autograd.grad(loss, blocks, create_graph=True)
        for i, (block, grad, v) in enumerate(zip(blocks, grads, vs)):
            out[i] += torch.autograd.grad((grad * v).sum(), block, retain_graph=i < len(blocks) - 1)[0]
    return out


def top_eigenvalues(make_hvp: Callable[[list[torch.Tensor]], Callable], blocks: list[torch.Tensor]) -> list[float]:
    """Largest (most positive) eigenvalue of each block's Hessian: power iteration, shifted where needed.

    `make_hvp(some_blocks)` gives the function vs -> [H_BB v_B] for those blocks.
    """
    values = power_iteration(make_hvp(blocks), blocks)
    negative = [i for i, v in enumerate(values) if v < 0]
    if negative:  # H - shift I has eigenvalues >= 0 and its largest is lambda_max - shift
        shifts, hvp = [values[i] for i in negative], make_hvp([blocks[i] for i in negative])
        shifted = lambda vs: [hv - c * v for hv, c, v in zip(hvp(vs), shifts, vs)]  # noqa: E731
        for i, c, value in zip(negative, shifts, power_iteration(shifted, [blocks[i] for i in negative])):
            values[i] = value + c
    return values


def hessian_measures(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn, batch_size: int
) -> dict[str, float]:
    """{"hessian_E": ..., "hessian_W": ...} for the blocks the model names (none: {})."""
    named = {"E": getattr(model, "embedding_weight", None), "W": getattr(model, "coupled_weight", None)}
    named = {k: b for k, b in named.items() if b is not None}
    if not named:
        return {}

    def chunk_losses():
        for i in range(0, len(x), batch_size):
            yield loss_fn(model(x[i : i + batch_size]), y[i : i + batch_size], reduction="sum") / len(x)

    was_training = model.training
    model.eval()  # BatchNorm must neither use batch statistics nor update its running ones
    try:
        # The fused CPU/GPU attention kernels are not twice differentiable; the math one is.
        with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH):
            values = top_eigenvalues(
                lambda blocks: lambda vs: block_hvp(chunk_losses, blocks, vs), list(named.values())
            )
    finally:
        model.train(was_training)
    return {f"hessian_{k}": v for k, v in zip(named, values)}
