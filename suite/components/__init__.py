"""Optimizers, samplers and gradient filters: every module here registers itself on import."""
