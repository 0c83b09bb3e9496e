"""Gradient filters: applied to the gradients after backward, before the optimizer step.

A filter is built from the list of trainable parameters; `apply()` rewrites their .grad in
place; `state_dict()` / `load_state_dict()` carry its state through checkpoints (tensors
and numbers only). 'none' builds nothing.
"""

from __future__ import annotations

from suite.registry import register_filter


@register_filter("none")
def no_filter(params):
    """No filter: the optimizer sees the raw gradients."""
    return None
