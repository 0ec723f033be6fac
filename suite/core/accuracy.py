"""Error of a result against a float64 reference computed from the same inputs."""

from __future__ import annotations

import math

import torch

from suite.core.errors import NonFiniteOutput


def error_metrics(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """Relative Frobenius error, max absolute error, and SQNR in dB (= -20 log10 rel_err).

    Raises NonFiniteOutput when `out` has NaN or inf: that is a failed case, not a large error.
    """
    out = out.detach().to(torch.float64)
    ref = ref.detach().to(device=out.device, dtype=torch.float64)
    bad = int((~torch.isfinite(out)).sum())
    if bad:
        raise NonFiniteOutput(f"output has {bad} non-finite values out of {out.numel()}")
    diff = out - ref
    ref_norm = float(torch.linalg.vector_norm(ref))
    err_norm = float(torch.linalg.vector_norm(diff))
    rel = err_norm / ref_norm if ref_norm > 0 else math.inf
    return {
        "rel_err": rel,
        "max_abs_err": float(diff.abs().max()) if diff.numel() else 0.0,
        "sqnr_db": sqnr_db(ref_norm, err_norm),
    }


def sqnr_db(signal_norm: float, noise_norm: float) -> float:
    if noise_norm == 0:
        return math.inf
    if signal_norm == 0:
        return -math.inf
    return 20.0 * math.log10(signal_norm / noise_norm)


