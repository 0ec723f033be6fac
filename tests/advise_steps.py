"""Training steps built by hand for advise's tests (`suite.models.step.StepWork`): a dense
transformer's linears, each with its three passes, and the work beside them as given."""

from __future__ import annotations

from suite.models.step import Gemm, StepWork
from suite.precisions.te import anchors as te


def passes(layer: str, module: str, tokens: int, fan_in: int, fan_out: int, count: int, groups: int = 1) -> list[Gemm]:
    """A linear's fprop (tokens x in) @ (in x out), dgrad (tokens x out) @ (out x in), wgrad (out x tokens) @ (tokens x in)."""
    return [Gemm(layer, module, "fprop", tokens, fan_in, fan_out, count, groups),
            Gemm(layer, module, "dgrad", tokens, fan_out, fan_in, count, groups),
            Gemm(layer, module, "wgrad", fan_out, tokens, fan_in, count, groups)]


def step(linears, tokens: int, count: int, attention_flops=0.0, elementwise_bytes=0.0, params=0) -> StepWork:
    """`linears`: (layer, module, in, out); every one `count` times per step (the output projection once)."""
    gemms = [g for layer, module, fan_in, fan_out in linears
             for g in passes(layer, module, tokens, fan_in, fan_out, 1 if module == "output" else count)]
    return StepWork(tuple(gemms), attention_flops, elementwise_bytes, params, params, 0.0, 0.0)


def te_5b_layer() -> StepWork:
    """One layer of the TE GEMM profiling guide's 5B model: its four linears at M = 31 x 512, nothing else."""
    return step([(f"layers.*.{name}", "mlp", fan_in, fan_out) for name, fan_in, fan_out in te.LINEARS], te.TOKENS, 1)
