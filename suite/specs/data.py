"""What a task hands to the engine: tensors plus the facts the measures need."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch


@dataclass
class TaskData:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    kind: Literal["tokens", "image"]
    n_classes: int
    vocab_size: int | None = None  # token tasks: ids are 0..vocab_size-1
    token_freq: torch.Tensor | None = None  # token tasks: occurrences of each id in the training inputs
    number_tokens: torch.Tensor | None = None  # ids of the numbers 0, 1, 2, ... in order (for MED)
    val_groups: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> bool mask over val
    info: dict = field(default_factory=dict)  # facts for result.json (sizes, ...)

    def to(self, device) -> TaskData:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return TaskData(
            move(self.x_train),
            move(self.y_train),
            move(self.x_val),
            move(self.y_val),
            self.kind,
            self.n_classes,
            self.vocab_size,
            move(self.token_freq),
            move(self.number_tokens),
            {k: move(v) for k, v in self.val_groups.items()},
            self.info,
        )
