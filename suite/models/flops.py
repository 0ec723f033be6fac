"""Model FLOPs of a training step, and model FLOPs utilisation (MFU).

Training FLOPs per token, from PaLM (Chowdhery et al. 2022, appendix B), the formula nanoGPT's
`estimate_mfu` uses:

    6 N + 12 L H Q T

- N: parameters that take part in matrix multiplies. Each does one multiply-add (2 FLOPs) per token
  in the forward pass and two in the backward pass (input gradient and weight gradient): 6 N.
  Lookup-only tables (GPT-2's position embedding, Llama's untied token embedding) do no
  multiply-adds and are left out; GPT-2's token embedding is also its lm_head, so it stays in.
  Biases and norm weights are counted like the rest, as nanoGPT does (a rounding error at scale).
- 12 L H Q T: attention's two sequence-by-sequence products (Q K^T and the weighted sum of V), each
  2 FLOPs per multiply-add, times 3 for forward and backward, over T keys per query, for L layers of
  H heads of dimension Q. T is the full sequence: PaLM counts causal attention as if it were full,
  so MFU figures stay comparable across papers (a causal kernel skips about half of this work).

MFU = (model FLOPs per token x tokens per second) / vendor peak FLOP/s for the precision. Model
FLOPs do not count recomputation, so MFU is comparable across implementations (hardware FLOPs
utilisation would count it). A padded vocabulary (50304 for 50257) counts its padding rows: they
are computed, though never used; tokens per second is the fair metric between the two.
"""

from __future__ import annotations

from torch import nn


def training_flops_per_token(n_params: int, n_layer: int, n_head: int, head_dim: int, seq_len: int) -> int:
    """6 N + 12 L H Q T (PaLM appendix B)."""
    return 6 * n_params + 12 * n_layer * n_head * head_dim * seq_len


def unique_parameters(model: nn.Module) -> int:
    """Elements of all parameters, each shared (tied) tensor counted once."""
    return sum(p.numel() for p in model.parameters())  # parameters() already skips repeats


def matmul_parameters(model: nn.Module) -> int:
    """N of the formula: unique parameters minus the model's lookup-only tables."""
    lookup = {id(p): p.numel() for p in model.lookup_parameters()}
    return unique_parameters(model) - sum(lookup.values())


def model_flops_per_token(model: nn.Module) -> int:
    """6 N + 12 L H Q T for a suite model (GPT2 or Llama: they carry a `cfg` with the dims)."""
    cfg = model.cfg
    return training_flops_per_token(matmul_parameters(model), cfg.n_layer, cfg.n_head, cfg.head_dim, cfg.seq_len)


def mfu(flops_per_token: float, tokens_per_s: float, peak_tflops: float | None) -> float | None:
    """Achieved model FLOP/s over the vendor peak (a fraction, 0..1); None where no peak is known
    (CPUs, GPUs missing from `suite.core.peaks`)."""
    if not peak_tflops:
        return None
    return flops_per_token * tokens_per_s / (peak_tflops * 1e12)
