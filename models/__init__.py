"""Models: one module per model family; each registers itself with @register_model."""
