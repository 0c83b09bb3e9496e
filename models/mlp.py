"""The embedding-grokking paper's MLP (arXiv 2505.15624).

    tokens [a, op, b, =] -> embed each (d) -> concatenate (4d) -> Linear 4d->hidden -> ReLU -> Linear -> logits

With embed=False the same MLP reads one-hot tokens instead (the paper's no-embedding
baseline): the first Linear then sees 4 * vocab inputs.

Images (uint8 pixels) are scaled to [0, 1] and flattened into the same MLP, for the
MLP / ResNet comparison; `embed` does not apply to them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from suite import SuiteError, register_model
from suite.data import TaskData


@register_model("mlp", inputs=("tokens", "image"))
class MLP(nn.Module):
    """Two-layer MLP over concatenated token embeddings (embed=True), one-hot tokens, or flattened images."""

    def __init__(self, data: TaskData, *, embed: bool = True, d: int = 128, hidden: int = 512):
        super().__init__()
        if d < 1 or hidden < 1:
            raise SuiteError(f"d and hidden must be positive, got d={d}, hidden={hidden}")
        self.vocab, seq_len = data.vocab_size, data.x_train.shape[1]
        self.image = data.kind == "image"
        self.embed = nn.Embedding(self.vocab, d) if embed and not self.image else None
        n_inputs = data.x_train[0].numel() if self.image else seq_len * (d if embed else self.vocab)
        self.hidden = nn.Linear(n_inputs, hidden)
        self.out = nn.Linear(hidden, data.n_classes)

    @property
    def embedding_weight(self):
        """E, vocab x d: the token embeddings (Adam-LR's embedding group, the progress measures)."""
        return self.embed.weight if self.embed is not None else None

    @property
    def coupled_weight(self):
        """W, the first weight that reads the embeddings (the bilinear partner of E)."""
        return self.hidden.weight if self.embed is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.image:
            h = x.float() / 255 if x.dtype == torch.uint8 else x.float()
        else:
            h = self.embed(x) if self.embed is not None else F.one_hot(x, self.vocab).float()
        return self.out(F.relu(self.hidden(h.flatten(1))))
