"""The default cell as a plain PyTorch loop: what `suite bench` measures a single run against.

    python -m suite.bench.plain SPEC_JSON     # a resolved spec of the default cell; prints its last evaluation (JSON)

The same data split (tasks.modular), MLP class and initialisation (models.mlp), torch.optim.Adam
with the spec's settings, batch_size examples per step drawn by randperm from a generator seeded
alike, and every eval_every steps (and after the last) loss and accuracy on the whole train and
val sets, read back to the host. Nothing else: no registry, progress measures, files or stacking,
and it imports only what such a script would.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.nn.functional as F

from suite.models.mlp import MLP
from suite.tasks.modular import modular


def settings(spec: dict, kind: str) -> dict:
    return {k: v for k, v in spec[kind].items() if k != "name"}


def run(spec: dict) -> tuple[dict, MLP]:
    """Train spec's steps; the last evaluation with the seconds of the loop (evaluations included, the
    build not: what the suite records as a run's wall_s), and the trained model."""
    torch.set_flush_denormal(True)  # as the suite's loop does
    data = modular(spec["seed"], **settings(spec, "task"))
    torch.manual_seed(spec["seed"])
    model = MLP(data, **settings(spec, "model"))
    optimizer = torch.optim.Adam(
        model.parameters(), **{k: tuple(v) if isinstance(v, list) else v for k, v in settings(spec, "opt").items()}
    )
    generator = torch.Generator().manual_seed(spec["seed"])
    steps, every, batch = spec["train"]["steps"], spec["train"]["eval_every"], spec["sampler"]["batch_size"]
    last, t0 = {}, time.monotonic()
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            model.eval()
            with torch.no_grad():
                for split, x, y in (("train", data.x_train, data.y_train), ("val", data.x_val, data.y_val)):
                    logits = model(x)
                    last[f"{split}_loss"] = F.cross_entropy(logits, y).item()
                    last[f"{split}_acc"] = (logits.argmax(-1) == y).float().mean().item()
            model.train()
        if step == steps:
            break
        index = torch.randperm(len(data.y_train), generator=generator)[:batch]
        loss = F.cross_entropy(model(data.x_train[index]), data.y_train[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return {"loop_s": time.monotonic() - t0, **last}, model


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))[0]))
