"""ResNet-18 (torchvision) for image tasks, as in Grokking-Insight's ResNet grokking runs.

Images arrive as uint8 (N, C, H, W); the model scales them to [0, 1], repeats a single
gray channel to RGB and normalises with ImageNet's mean and std (the paper's transform,
and what pretrained weights expect). For small images (<= 64 px) the ImageNet stem
(7x7 stride-2 conv + max-pool, 4x downsampling) would leave almost nothing to see, so
stem='auto' swaps it for a 3x3 stride-1 conv and no max-pool (the usual CIFAR variant).
That stem costs ~16x the compute of the ImageNet one at the same size: on a CPU,
stem='imagenet' is the cheap choice.

weights: a local file holding a state dict (e.g. torchvision's ImageNet resnet18), never
downloaded. Tensors whose shapes do not fit (the classifier for another number of classes,
the conv1 of the other stem) keep their fresh initialisation, and a line on stderr says
which. The paper's runs started from ImageNet weights; the suite cannot fetch them.

Classes come from the task, and training starts from scratch unless `weights` names a file.
stem='imagenet' keeps the ImageNet stem: at 32 px a step is ~10x cheaper (timings in
leaderboards/README.md), at the price of 8x8 feature maps. `n_outputs=52` is Grokking-Insight's
classifier: 52 outputs for the polygons' 49 labels; the extra three are never a target, they only
take softmax mass.

    python -m suite run --task polygons --model resnet18 --set resolution=32
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal, Optional

import torch
from torch import nn

from suite import SuiteError, register_model
from suite.specs.data import TaskData

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SMALL_IMAGE = 64  # px: at or below this, stem='auto' picks the small stem
EVAL_PIXELS = 2**22  # images x pixels per forward pass without gradients (~1 GB per activation)


def load_local_weights(model: nn.Module, path: str) -> None:
    """Copy every tensor of the state dict at `path` whose name and shape fit the model."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise SuiteError(f"weights file {path} not found (weights are only read from local files)")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:
        raise SuiteError(f"weights file {path} is not a readable state dict ({type(err).__name__})") from None
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    if not isinstance(state, dict):
        raise SuiteError(f"weights file {path} does not hold a state dict")
    own = model.state_dict()
    fitting = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    if not fitting:
        raise SuiteError(f"no tensor in {path} fits resnet18 (wrong file?)")
    model.load_state_dict(fitting, strict=False)
    fresh = sorted(k for k in own if k not in fitting and not k.endswith("num_batches_tracked"))
    print(
        f"resnet18: loaded {len(fitting)} tensors from {path}" + (f"; fresh: {', '.join(fresh)}" if fresh else ""),
        file=sys.stderr,
    )


# Grokking-Insight's optimizer for it: Adam (coupled L2), lr 1e-3, weight decay 1e-4.
@register_model("resnet18", inputs=("image",), opt_defaults={"adam": {"opt.lr": 1e-3, "opt.weight_decay": 1e-4}})
class ResNet18(nn.Module):
    """torchvision ResNet-18, classes from the task; small images get a 3x3 stride-1 stem, no max-pool."""

    def __init__(
        self,
        data: TaskData,
        *,
        stem: Literal["auto", "small", "imagenet"] = "auto",
        weights: Optional[str] = None,
        n_outputs: Optional[int] = None,
    ):
        super().__init__()
        channels, height, width = data.x_train.shape[1:]
        if channels not in (1, 3):
            raise SuiteError(f"resnet18 takes 1 (gray) or 3 (RGB) channel images, got {channels}")
        # n_outputs: the classifier's width, the task's classes by default. Grokking-Insight's fc
        # has 52 outputs for the polygons' 49 labels (0..48): the extra ones are never a target,
        # so training only pushes their logits down; they take softmax mass and could win an argmax.
        if n_outputs is not None and n_outputs < data.n_classes:
            raise SuiteError(f"n_outputs must be at least the task's {data.n_classes} classes, got {n_outputs}")
        import torchvision  # here, not at the top: it imports torch._dynamo, ~1.6 s of every run's start-up

        self.net = torchvision.models.resnet18(weights=None, num_classes=n_outputs or data.n_classes)
        if stem == "small" or (stem == "auto" and max(height, width) <= SMALL_IMAGE):
            self.net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
            nn.init.kaiming_normal_(self.net.conv1.weight, mode="fan_out", nonlinearity="relu")  # as torchvision
            self.net.maxpool = nn.Identity()
        if weights:
            load_local_weights(self.net, weights)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    embedding_weight = None  # no token embedding: Adam-LR and the embedding measures do not apply
    coupled_weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Evaluation sends whole splits (train.eval_batch, default 8192 images): at 224 px one
        # activation of that many would take ~26 GB, so without gradients go in chunks of at
        # most EVAL_PIXELS pixels (BatchNorm is in eval mode then: the result is the same).
        chunk = max(1, EVAL_PIXELS // (x.shape[-2] * x.shape[-1]))
        if torch.is_grad_enabled() or len(x) <= chunk:
            return self._logits(x)
        return torch.cat([self._logits(part) for part in x.split(chunk)])

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float() / 255 if x.dtype == torch.uint8 else x.float()
        x = x.expand(-1, 3, -1, -1)  # gray -> RGB (a no-op for RGB)
        return self.net((x - self.mean) / self.std)
