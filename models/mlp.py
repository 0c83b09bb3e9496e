"""The embedding-grokking paper's MLP (arXiv 2505.15624), with the paper's three ways in.

    inputs="embed":  tokens [a, op, b, =] -> embed each (d) -> concatenate (4d) -> Linear -> ReLU -> Linear -> logits
    inputs="onehot": the four tokens one-hot (4 x vocab) into the same MLP: the first Linear
                     then acts as an embedding of its own, so this is not the paper's baseline;
    inputs="scalar": the paper's MLP without embeddings (Sec. 3.3, eq. 1): the four token
                     values written as four real numbers, x = (a, P, b, P+1) / (P+1);
    inputs="scalar_raw": the same four numbers unscaled, x = (a, P, b, P+1).

The paper writes the tokens "directly" into x and does not say whether it scales them, so both
are here. Dividing by P+1 (the largest token id) puts them in [0, 1], like every other input
mode. It gives the same function class (ReLU(W x / s) = ReLU((W / s) x)) but not the same
training: Adam moves each weight by about lr whatever its gradient's scale, so with raw ids up
to 98 the first layer's pre-activations move ~100 times as far per step, and they start ~50
times larger under PyTorch's default initialisation.

embed_init scales the initial embeddings, N(0, embed_init^2) (torch's default is N(0, 1)): the
paper's Sec. 4.3 says smaller initial embeddings converge sooner, without an experiment.

Images (uint8 pixels) are scaled to [0, 1] and flattened into the same MLP, for the
MLP / ResNet comparison; `inputs` does not apply to them.

Defaults: d = 128 (each token a learned 128-d embedding; the four concatenated are the paper's
model), hidden = 512. The spec records the input mode. How far apart the scaled and the raw
numbers train (a+b, Adam lr 1e-3, 5,000 steps, seed 0): leaderboards/README.md, "Measurements
outside the boards".

    python -m suite run --set inputs=scalar_raw --set op=mul      # the paper's MLP without embeddings
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from suite import SuiteError, register_model
from suite.specs.data import TaskData

# The embedding paper's optimizer (Adam and Adam-LR, lr 1e-2, coupled weight decay 1e-3): the optimizers'
# own defaults, declared here too so that `suite list` shows the recipe and it stays if those move.
PAPER = {"opt.lr": 1e-2, "opt.weight_decay": 1e-3}


@register_model(
    "mlp", inputs=("tokens", "image"), opt_defaults={"adam": PAPER, "adamlr": PAPER, "adamlr_adaptive": PAPER}
)
class MLP(nn.Module):
    """Two-layer MLP over token embeddings, one-hot tokens, the tokens' values as numbers, or flattened images."""

    def __init__(
        self,
        data: TaskData,
        *,
        inputs: Literal["embed", "onehot", "scalar", "scalar_raw"] = "embed",
        d: int = 128,
        hidden: int = 512,
        embed_init: float = 1.0,
    ):
        super().__init__()
        if d < 1 or hidden < 1:
            raise SuiteError(f"d and hidden must be positive, got d={d}, hidden={hidden}")
        self.image = data.kind == "image"
        self.inputs = "pixels" if self.image else inputs
        if not embed_init > 0 or (embed_init != 1.0 and self.inputs != "embed"):
            raise SuiteError(
                f"embed_init scales the initial token embeddings: positive, and only with inputs=embed; "
                f"got {embed_init} with {self.inputs} inputs"
            )
        self.vocab, seq_len = data.vocab_size, data.x_train.shape[1]
        self.embed = nn.Embedding(self.vocab, d) if self.inputs == "embed" else None
        if self.embed is not None:  # N(0, embed_init^2): the same draw, scaled, so 1.0 is torch's default exactly
            self.embed.weight.data.mul_(embed_init)
        width = {
            "pixels": data.x_train[0].numel(),
            "embed": seq_len * d,
            "onehot": seq_len * (self.vocab or 0),
            "scalar": seq_len,
            "scalar_raw": seq_len,
        }[self.inputs]
        self.hidden = nn.Linear(width, hidden)
        self.out = nn.Linear(hidden, data.n_classes)

    @property
    def embedding_weight(self):
        """E, vocab x d: the token embeddings (Adam-LR's embedding group, the progress measures)."""
        return self.embed.weight if self.embed is not None else None

    @property
    def hidden_weights(self) -> list:
        """The matrices between the inputs and the head (Muon's): here the hidden layer's weight."""
        return [self.hidden.weight]

    @property
    def coupled_weight(self):
        """W, the first weight that reads the embeddings (the bilinear partner of E)."""
        return self.hidden.weight if self.embed is not None else None

    def numbers(self, x: torch.Tensor) -> torch.Tensor:
        """The input as real numbers, for every mode but embed."""
        if self.inputs == "pixels":
            return x.float() / 255 if x.dtype == torch.uint8 else x.float()
        if self.inputs == "onehot":
            return F.one_hot(x, self.vocab).float()
        return x.float() / (self.vocab - 1) if self.inputs == "scalar" else x.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) if self.inputs == "embed" else self.numbers(x)
        return self.out(F.relu(self.hidden(h.flatten(1))))

    def forward_stacked(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """K members at once on a GPU (suite/engine/stacked.py; on CPU each member runs `forward` on its
        slice, the calls its separate run makes): params stacked on a leading member axis, x [K,
        batch, ...]. Each member's logits and gradients are what the model alone computes to float32
        rounding: baddbmm adds the bias inside the product as nn.Linear's addmm does (a product then a
        sum rounds differently, and cost ~0.5 ms of a 9 ms step)."""
        if self.inputs == "embed":  # one lookup in the K tables laid end to end (faster than advanced indexing)
            E = params["embed.weight"]
            k, vocab = E.shape[:2]
            h = F.embedding(
                x + vocab * torch.arange(k, device=x.device).view(-1, *[1] * (x.dim() - 1)), E.flatten(0, 1)
            )
        else:
            h = self.numbers(x)
        h = F.relu(torch.baddbmm(params["hidden.bias"][:, None], h.flatten(2), params["hidden.weight"].transpose(1, 2)))
        return torch.baddbmm(params["out.bias"][:, None], h, params["out.weight"].transpose(1, 2))
