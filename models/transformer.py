"""A small decoder-only Transformer in the style of Nanda et al.'s grokking model
(progress-measures paper, mechanistic-interpretability-grokking/progress-measures-paper).

    tokens -> token embedding + learned positions -> n_layers x [causal attention, ReLU MLP]
           -> the residual stream at the last position -> unembed -> logits

As in their code: no biases in attention or unembedding, zero-initialised MLP biases,
every weight drawn from N(0, 1/d_model) (the unembedding N(0, 1/d_vocab)), no LayerNorm
(layer_norm=True adds pre-LN blocks and a final LN), no dropout. Their unembedding covers
the whole vocabulary; here it covers the task's classes, which is the same function on the
classes a task can answer.

Parameter groups: `embedding_weight` is the token embedding E (vocab x d_model). The
first weight that reads it is the first layer's query/key/value projection, kept as one
stacked matrix W_QKV (3 d_model x d_model): that is `coupled_weight`, so sigma_ratio =
sigma_max(E) / sigma_max(W_QKV) and Adam-LR's adaptive c use it. (Adam and AdamW act
elementwise, so one stacked matrix trains exactly like three separate ones.)

Adam-LR's c scales E alone, not the learned positions: the paper's argument (arXiv 2505.15624,
Sec. 4.3) is that token i's row gets a gradient only in the steps whose batch holds token i,
and so lags the dense weights; every example updates every position, as it updates W.

Defaults: n_layers 1 (2 also used), n_heads 4, d_mlp 512, d_model 128. The optimizer defaults are
Nanda et al.'s, declared here (opt_defaults, NANDA below): lr 1e-3, decoupled weight decay 1.0, betas
0.9 / 0.98, 10 warmup steps, for adamw and adamwlr, and for adam, adamlr and adamlr_adaptive, which run
with AdamW's decoupled decay. At the embedding paper's recipe (Adam, lr 1e-2, coupled decay 1e-3) Adam-LR
on this model collapsed to chance in 12 of 20 runs (leaderboards/adamlr_transformer); at this one it
grokked late and held on every seed, ~3x sooner than AdamW (leaderboards/adamlr_transformer_adamw).
--set overrides any of it, and the spec records what ran. Nanda et al. train on the full batch
(`--sampler full`, ~0.5 s a step on a CPU core); the default batches of 512 are the CPU's substitute.

    python -m suite run --model transformer --opt adamlr        # a+b mod 97: held grok at 2,300-3,550 (seeds 0-4)
    python -m suite run --model transformer --opt adamw --sampler full   # Nanda et al.'s full batch: hours on a CPU

The first: 3,300-4,550 steps, 2.4-3.3 min of one CPU core (leaderboards/README.md, "Measurements").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from suite import SuiteError, register_model
from suite.specs.data import TaskData


def _normal(*shape: int, fan: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape) / math.sqrt(fan))


class Block(nn.Module):
    """Residual block: x + attn(x), then x + mlp(x) (each input LayerNorm'd when layer_norm)."""

    def __init__(self, d_model: int, n_heads: int, d_mlp: int, layer_norm: bool):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = _normal(3 * d_model, d_model, fan=d_model)  # rows: queries, keys, values
        self.out = _normal(d_model, d_model, fan=d_model)
        self.mlp_in = _normal(d_mlp, d_model, fan=d_model)
        self.mlp_in_bias = nn.Parameter(torch.zeros(d_mlp))
        self.mlp_out = _normal(d_model, d_mlp, fan=d_model)
        self.mlp_out_bias = nn.Parameter(torch.zeros(d_model))
        self.ln_attn = nn.LayerNorm(d_model) if layer_norm else nn.Identity()
        self.ln_mlp = nn.LayerNorm(d_model) if layer_norm else nn.Identity()

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = rearrange(F.linear(x, self.qkv), "b p (three h d) -> three b h p d", three=3, h=self.n_heads)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        n = x.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        pattern = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        z = rearrange(torch.einsum("bhqk,bhkd->bhqd", pattern, v), "b h p d -> b p (h d)")
        return F.linear(z, self.out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_attn(x))
        hidden = F.relu(F.linear(self.ln_mlp(x), self.mlp_in, self.mlp_in_bias))
        return x + F.linear(hidden, self.mlp_out, self.mlp_out_bias)


# Nanda et al.'s optimizer (progress-measures paper): AdamW, lr 1e-3, weight decay 1.0, betas 0.9 / 0.98,
# a linear warmup over 10 steps. Adam and Adam-LR (fixed or adaptive c) get it with AdamW's decoupled decay.
NANDA = {"opt.lr": 1e-3, "opt.weight_decay": 1.0, "opt.betas": (0.9, 0.98), "train.warmup_steps": 10}
DECOUPLED = {"opt.decoupled_weight_decay": True} | NANDA


@register_model(
    "transformer",
    inputs=("tokens",),
    opt_defaults={
        "adam": DECOUPLED,
        "adamlr": DECOUPLED,
        "adamlr_adaptive": DECOUPLED,
        "adamw": NANDA,
        "adamwlr": NANDA,
    },
)
class Transformer(nn.Module):
    """Nanda-style decoder: causal attention + ReLU MLP, no LayerNorm, readout at the last position."""

    def __init__(
        self,
        data: TaskData,
        *,
        n_layers: int = 1,
        d_model: int = 128,
        n_heads: int = 4,
        d_mlp: int = 512,
        layer_norm: bool = False,
    ):
        super().__init__()
        if n_layers < 1 or d_model < 1 or n_heads < 1 or d_mlp < 1:
            raise SuiteError("n_layers, d_model, n_heads and d_mlp must be positive")
        if d_model % n_heads:
            raise SuiteError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        seq_len = data.x_train.shape[1]
        self.embed = _normal(data.vocab_size, d_model, fan=d_model)
        self.positions = _normal(seq_len, d_model, fan=d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_mlp, layer_norm) for _ in range(n_layers))
        self.ln_final = nn.LayerNorm(d_model) if layer_norm else nn.Identity()
        self.unembed = _normal(data.n_classes, d_model, fan=data.vocab_size)

    @property
    def embedding_weight(self):
        """E, vocab x d_model: the token embeddings."""
        return self.embed

    @property
    def coupled_weight(self):
        """W_QKV of the first layer (3 d_model x d_model): the first weight that reads E."""
        return self.blocks[0].qkv

    @property
    def hidden_weights(self) -> list:
        """The blocks' matrices (Muon's): attention QKV and output, MLP in and out; not the embeddings
        or the unembedding."""
        return [w for block in self.blocks for w in (block.qkv, block.out, block.mlp_in, block.mlp_out)]

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        """The residual stream after the last block, batch x positions x d_model."""
        h = self.embed[x] + self.positions
        for block in self.blocks:
            h = block(h)
        return self.ln_final(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.residual(x)[:, -1], self.unembed)
