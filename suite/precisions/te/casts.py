"""The roofline model's cast kernels for Transformer Engine's scaling kinds (this folder's
`scalings` hook, `suite.scenario.declare.Casts`), torch-free and handed the model
(`suite.analysis.roofline.model`). TE casts with its own kernels, eager or compiled: no eager terms."""

from __future__ import annotations

from suite.scenario.declare import Casts


def _current_fused(model, role: str, e: float, s: int, first: int, width: float) -> list:
    """An amax pass, the scale, then one cast to both layouts."""
    amax = [] if first == 0 else [model.Kernel("cast", f"{role} amax", s * e)]
    return amax + model.tiny(f"{role} scale") + [model.Kernel("cast", f"{role} cast (both layouts)", (s + 2) * e)]


def _one_pass(model, role: str, e: float, s: int, first: int, width: float) -> list:
    """The scale known (an amax history) or local (a block's): one pass."""
    return [model.Kernel("cast", f"{role} cast and transpose", (first + 2) * e)]


CURRENT = Casts(_current_fused)
DELAYED = Casts(_one_pass)
BLOCK = Casts(_one_pass)
