"""Tasks: one module per task family; each registers itself with @register_task."""
