"""Which linears to convert under a recipe, and which to keep in bf16 and why.

A linear (a layer pattern in torchtitan's fully qualified names, "layers.*.attention.wq") is judged
on its three passes together, casts included (`suite.analysis.advise.estimate`). Kept, in this order
of reasons: its shape cannot run the recipe (K or N not a multiple of what its kernels need); it is
the output projection or the MoE router (what torchao's and torchtitan's own defaults keep); the
recipe is over the accuracy budget; it is predicted slower; its gain is too small to trust (under
`MIN_GAIN`, within the model's error against published layer speedups, docs/model.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.analysis.advise.estimate import BASELINE
from suite.analysis.outcome import answers
from suite.models.step import Gemm, StepWork
from suite.scenario import registry

# A predicted gain under this is within the model's error on a layer's speedup (torchao's float8
# README examples: -4% and +12%, docs/model.md): too small to convert on the model's word.
MIN_GAIN = 0.05
# torch._scaled_mm needs K and N multiples of 16 (FP8); a block-scaled recipe's blocks run along K,
# so K and N a multiple of its declared block size where that is larger (torchao's MX: 32).
ALIGN = 16
# Modules kept whatever their speed, and why (torchtitan's float8 converter skips "output" by
# default; its MoE conversion leaves the router's gate in high precision).
KEEP_MODULES = {"output": "output projection: its logits feed the loss (torchao and torchtitan keep it in bf16)",
                "router": "MoE router: routing decisions are sensitive to precision (torchtitan keeps it)"}


@dataclass(frozen=True)
class Decision:
    layer: str
    module: str
    speedup: float  # the linear's three passes with their casts, over bf16
    gemm_only_speedup: float  # its GEMMs alone
    reason: str | None  # why it stays in bf16; None: convert it
    able: bool  # its shape can run the recipe


def layers(step: StepWork) -> dict[str, list[Gemm]]:
    """Each linear's GEMMs (its passes), by layer pattern, in the step's order."""
    out: dict[str, list[Gemm]] = {}
    for gemm in step.gemms:
        out.setdefault(gemm.layer, []).append(gemm)
    return out


def misaligned(gemms: list[Gemm], recipe: str) -> str | None:
    """Why the linear's shape cannot run the recipe: its fprop's K (in features) or N (out) not a
    multiple of the recipe's alignment (a scaled recipe's: fp16 or fp32 GEMMs take any shape)."""
    if registry.PRECISIONS[recipe].scaling is None:
        return None
    block = registry.PRECISIONS[recipe].params.model_fields.get("block_size")
    align = max(ALIGN, block.default if block is not None else ALIGN)
    fprop = next((g for g in gemms if g.pass_ == "fprop"), gemms[0])
    if fprop.k % align or fprop.n % align:
        return f"K or N not a multiple of {align} (K {fprop.k}, N {fprop.n})"
    return None


def keep_reason(gemms: list[Gemm], recipe: str, speedup: float, accurate: bool, source: str = "predicted") -> str | None:
    """Why the linear stays in bf16 under the recipe (module docstring), or None; `source`: whether
    its speedup was predicted or measured."""
    module = gemms[0].module
    reason = misaligned(gemms, recipe) or KEEP_MODULES.get(module)
    if reason:
        return reason
    if not accurate:
        return "the recipe is over the accuracy budget"
    if speedup < 1:
        return f"{source} slower: {speedup:.2f}x with its casts"
    if speedup < 1 + MIN_GAIN:
        return f"too small: {source} {speedup:.2f}x, under the {MIN_GAIN:.0%} the model can tell"
    return None


def decide(step: StepWork, recipe: str, timed: dict, accurate: bool = True) -> list[Decision]:
    """Every linear's decision under the recipe, from the step's timed GEMMs
    (`estimate.time_all`: (gemm, recipe) -> Timed, bf16's included)."""
    out = []
    for layer, gemms in layers(step).items():
        base = [timed[(g, BASELINE)] for g in gemms]
        mine = [timed[(g, recipe)] for g in gemms]
        speedup = sum(t.seconds for t in base) / sum(t.seconds for t in mine)
        gemm_only = sum(t.gemm_seconds for t in base) / sum(t.gemm_seconds for t in mine)
        source = "measured" if any(t.source == "measured" for t in mine) else "predicted"
        reason = keep_reason(gemms, recipe, speedup, accurate, source)
        out.append(Decision(layer, gemms[0].module, speedup, gemm_only, reason, misaligned(gemms, recipe) is None))
    return out


def filter_fqns(kept: list[str]) -> list[str]:
    """torchtitan's `filter_fqns` (a linear is skipped when any entry is a substring of its name) for
    kept layer patterns: each pattern's part after its last wildcard ("layers.*.attention.wo" ->
    "attention.wo")."""
    return sorted({layer.rpartition("*.")[2] for layer in kept})


def accuracy(recipe: str, errors: dict[str, float] | None, budget: float | None) -> tuple[bool, str]:
    """(within the budget, what the evidence says): `errors` maps a recipe to its measured loss gap
    to bf16 (nats, the suite's training steps: `loss_gaps`), None where no results were given."""
    if errors is None or recipe not in errors:
        where = "no results given (--from)" if errors is None else f"no measured loss gap for {recipe} in the results"
        return True, f"no accuracy evidence: {where}; speed alone decides"
    gap = errors[recipe]
    if budget is None:
        return True, f"measured loss gap {gap:.3g} nats; no --loss-budget given"
    verdict = "within" if gap <= budget else "over"
    return gap <= budget, f"{verdict} the loss budget: measured loss gap {gap:.3g} nats, budget {budget:g}"


def loss_metrics() -> list:
    """The declared budget metrics a training outcome is judged by: those with a margin beyond which
    the case did not work (`suite.core.budgets.Metric.margin`: a training step's loss gap, in nats)."""
    return [m for m in registry.budget_metrics() if m.margin is not None]


def loss_gaps(df) -> dict[str, float]:
    """Each precision's largest measured |loss gap| to its reference (nats) in a results frame (as
    `store.read` gives it: the folders' derived columns are added here, `answers.with_settings`)."""
    names = [m.column for m in loss_metrics()]
    if df.empty or not names:
        return {}
    df = answers.with_settings(df)
    gaps = {}
    for name in (n for n in names if n in df.columns):
        for precision, values in df.dropna(subset=[name]).groupby("precision")[name]:
            gaps[str(precision)] = max(gaps.get(str(precision), 0.0), float(values.abs().max()))
    return gaps
