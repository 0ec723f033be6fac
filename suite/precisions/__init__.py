"""Precision recipes, one folder per family (`floating`, `fp8`, `te`, `update`): each folder's
torch-free `__init__.py` declares its recipes (`suite.scenario.declare.PrecisionRecord`) and the
registry finds it; the recipes' code sits beside it. `base` is what every recipe provides, `flags`
the global matmul flags they set and restore, `compiler` whether torch.compile can run here."""
