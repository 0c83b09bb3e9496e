"""The batches of a stack: every live member's next batch indices, drawn by its own sampler on the CPU.

On a GPU the host draws while the device computes: the next step's batches are drawn in a
background thread as soon as this step's are handed out (`ahead`), so the K samplers' draws (a
`randperm` each, ~5 ms a step at K = 256) leave the step's critical path. Each member's batches
are unchanged: its generator draws the same numbers in the same order, ahead or not. What reads
a sampler's state (a checkpoint) or changes who draws (members leaving) first `rewind`s: the draw
made ahead is dropped, and every generator and sampler put back where it stood after the batch
its member last trained on, which the next step draws again.

A sampler's draws depend on nothing but its generator and the state its `state_dict()` holds (the
sampler contract: what a resume rests on too), except for one that adapts to training: it reads
the embedding gradient of the step before (`reads_embedding_grad`) and draws when the step asks.
On the CPU the draws stay in the step: the thread would take a core from the step's own threads.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor

import torch


def ahead(device: torch.device) -> bool:
    """Draw the next step's batches while the step runs: on a GPU (see the module)."""
    return device.type == "cuda"


class Draws:
    def __init__(self, members: list, device: torch.device):
        self.members = list(members)  # each with .sampler and .generator
        self.ahead = ahead(device) and not any(m.sampler.reads_embedding_grad for m in self.members)
        self.pinned = device.type == "cuda"  # pinned: the copy need not wait for the steps queued before it
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="draws") if self.ahead else None
        self.pending: Future | None = None  # the next step's batch and, to rewind it, where its draw began

    def next(self) -> torch.Tensor:
        """The live members' next batches, [K, batch] indices on the CPU."""
        if self.pending is not None:
            batch, _ = self.pending.result()
            self.pending = None
        else:
            batch = self._draw(self.members)
        if self.ahead:
            self.pending = self.pool.submit(self._draw_ahead, list(self.members))
        return batch

    def _draw(self, members: list) -> torch.Tensor:
        batch = torch.stack([m.sampler.next() for m in members])
        return batch.pin_memory() if self.pinned else batch

    def _draw_ahead(self, members: list) -> tuple[torch.Tensor, list]:
        # a copy: a state_dict may hold the very tensors next() updates in place
        before = [(m.generator.get_state(), copy.deepcopy(m.sampler.state_dict())) for m in members]
        return self._draw(members), before

    def rewind(self) -> None:
        """Drop the draw made ahead: every sampler and generator where its member's last batch left it."""
        if self.pending is None:
            return
        _, before = self.pending.result()  # a draw that failed raises here, as it would have in the step
        self.pending = None
        for m, (generator, sampler) in zip(self.members, before):
            m.generator.set_state(generator)
            m.sampler.load_state_dict(sampler)

    def keep(self, members: list) -> None:
        """Only these members draw from now on."""
        self.rewind()
        self.members = list(members)

    def close(self) -> None:
        """Wait for the draw ahead, and rewind it unless it failed (the stack's own error is the news)."""
        if self.pool is None:
            return
        self.pool.shutdown()
        if self.pending is not None and self.pending.exception() is None:
            self.rewind()
        self.pending = None
