"""`train.precision`: the arithmetic a run's forward and backward use.

- `fp32` (the default): float32 everywhere, as every run before this setting existed.
- `tf32` (CUDA only): float32 tensors, but matmuls and convolutions on the tensor cores in TF32
  (10-bit mantissa products, float32 sums). Refused on any other device: a CPU has no TF32.
- `bf16`: torch.autocast to bfloat16 around the model's forward (and so its backward) in training
  and evaluation. The parameters (the master weights), the gradients the optimizer reads, the
  optimizer's and the filter's state stay float32, and the logits are cast to float32 before the
  loss and its reduction (`stablemax` goes on to float64, as always). Autocast runs its
  lower-precision ops in bfloat16 (matmul, linear, bmm / baddbmm, convolution), and what follows
  one on its bfloat16 output stays bfloat16 until a float32 tensor joins it. On a CPU (a dispatch
  log of one step per model): the MLP's embedding lookup is float32, its two products (bias
  inside) and ReLU bfloat16; the transformer's residual stream and embeddings float32, its QKV
  and output projections, attention scores, softmax and pattern x V bfloat16, its MLP products
  bfloat16 with the bias added in float32 (so its ReLU is float32), the unembedding bfloat16;
  ResNet-18's convolutions, batch norms (their running statistics float32), ReLUs and head
  bfloat16. On CUDA, autocast keeps softmax in float32. The Hessian measures (hessian_every)
  differentiate twice in float32, whatever the precision.

Stacks stay exact in bf16 as in fp32: on a CPU thread a member of a bf16 stack writes the
metrics of its separate bf16 run bit for bit (tests/test_precision.py), since autocast casts each
member's slice as the separate run casts its tensor and the bf16 products slice alike.

A CPU runs bfloat16 products natively where it has AVX-512 BF16 or AMX (`cpu_bf16_units`);
elsewhere torch emulates them, correct but slower. Precision is part of the spec, so runs of
different precision never share a run folder or a stack; at fp32 it is left out of the spec's
id, so every id from before the setting is unchanged (suite/specs/spec.py).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from suite.errors import SuiteError


def check(precision: str, device: torch.device) -> None:
    """Refuse a precision this device cannot run, in one line."""
    if precision == "tf32" and device.type != "cuda":
        raise SuiteError(f"precision tf32 runs on CUDA only (TF32 is an NVIDIA tensor-core format); device is {device}")


def autocast(precision: str, device: torch.device):
    """The context the forward runs in: bfloat16 autocast for bf16, nothing otherwise."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def matmul_mode(precision: str, device: torch.device):
    """TF32 products for the duration (tf32 on CUDA), restored after: torch's flags are global."""
    if precision != "tf32" or device.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def cpu_bf16_units(cpuinfo: str | None = None) -> list[str]:
    """The CPU's native bfloat16 units, from /proc/cpuinfo's flags: amx_bf16 and avx512_bf16 (x86).
    Empty where it has none (torch then emulates bfloat16 products) or the flags cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return [unit for unit in ("amx_bf16", "avx512_bf16") if unit in flags]


def supported(device: torch.device) -> dict[str, str]:
    """Each precision this device runs, with how: on CUDA fp32, tf32 and bf16 (where the GPU has
    bfloat16); on a CPU fp32 and bf16, native or emulated."""
    if device.type == "cuda":
        found = {"fp32": "float32", "tf32": "TF32 tensor cores"}
        if torch.cuda.is_bf16_supported():
            found["bf16"] = "bfloat16 autocast"
        return found
    units = " + ".join(cpu_bf16_units()) or "emulated: no native unit"
    return {"fp32": "float32", "bf16": f"bfloat16 autocast ({units})"}


@contextlib.contextmanager
def denormals_flushed():
    """Subnormal floats flushed to zero while the loop runs, and torch's setting as it was afterwards
    (a notebook that calls train() keeps its own). Weight decay drives unused weights into
    subnormals, which made CPU steps up to 15x slower after grokking; flushing is deterministic."""
    before = flushing_denormals()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


def flushing_denormals() -> bool:
    """torch can set flushing but not say whether it is on: a product below float32's smallest
    normal number (1.2e-38) comes out 0 only when it is."""
    return torch.tensor([1e-30]).mul(1e-10).item() == 0.0
