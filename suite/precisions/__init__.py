"""Precision recipes: one object per name in `suite.registry.PRECISIONS`."""
