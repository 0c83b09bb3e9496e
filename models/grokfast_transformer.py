"""The transformer decoder of Grokfast's public code (ironjr/grokfast, main.py), kept as it is.

    tokens -> token embedding + learned position embedding
           -> num_layers x Block -> LayerNorm -> Linear(d, vocab, bias=False) -> logits at the last position

with Block(x):  x = LN1(x);  x = x + CausalSelfAttention(x);  x = x + MLP(LN2(x)),
MLP = Linear(d, 4d) -> GELU -> Linear(4d, d). Two details of that code differ from a
textbook pre-LN block and are kept on purpose: the first LayerNorm's output *replaces* the
residual stream (it is not added back), and the head scores every token of the vocabulary
(99 for p = 97, operator and '=' included), not only the p answers. The position table has
one row more than the input (their table also covers the answer token, never fed in), so
the parameters are created in their order and shapes. Attention is torch's
nn.MultiheadAttention on a sequence-first layout, with a causal mask, as in their code.
"""

from __future__ import annotations

import torch
from torch import nn

from suite import SuiteError, register_model
from suite.specs.data import TaskData


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.ln_2 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x)  # replaces the residual stream, as in Grokfast's code
        x = x + self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


@register_model("grokfast_transformer", inputs=("tokens",))
class GrokfastTransformer(nn.Module):
    """Grokfast's decoder: LN-replaces-residual blocks, GELU MLP, bias-free head over the whole vocabulary."""

    def __init__(self, data: TaskData, *, d: int = 128, layers: int = 2, heads: int = 4):
        super().__init__()
        if d < 1 or layers < 1 or heads < 1:
            raise SuiteError(f"d, layers and heads must be positive, got d={d}, layers={layers}, heads={heads}")
        if d % heads:
            raise SuiteError(f"d={d} must be divisible by heads={heads}")
        seq_len = data.x_train.shape[1]
        self.token_embeddings = nn.Embedding(data.vocab_size, d)
        self.position_embeddings = nn.Embedding(seq_len + 1, d)
        self.layers = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, data.vocab_size, bias=False)
        self.register_buffer(
            "causal_mask", torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1), persistent=False
        )

    @property
    def embedding_weight(self):
        """E, vocab x d: the token embeddings."""
        return self.token_embeddings.weight

    @property
    def coupled_weight(self):
        """W: the first layer's attention input projection (Q, K, V stacked, 3d x d), the first matrix that reads E."""
        return self.layers[0].attn.in_proj_weight

    @property
    def hidden_weights(self) -> list:
        """The layers' matrices (Muon's): attention in and out, MLP in and out; not the embeddings or head."""
        return [
            w
            for layer in self.layers
            for w in (layer.attn.in_proj_weight, layer.attn.out_proj.weight, layer.mlp[0].weight, layer.mlp[2].weight)
        ]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.T  # sequence first, as nn.MultiheadAttention expects by default
        h = self.token_embeddings(x) + self.position_embeddings.weight[: x.shape[0], None]
        for layer in self.layers:
            h = layer(h, self.causal_mask)
        return self.head(self.ln_f(h[-1]))
