"""Precision recipes: one object per name in `suite.scenario.registry.PRECISIONS`."""
