"""A MoE layer's expert GEMMs (`workload`): M routed rows, sorted by expert, each multiplied by its
expert's (K, N) weight, as one grouped GEMM (`torch._grouped_mm`, `torch._scaled_grouped_mm`,
torchao's MXFP8 grouped GEMM) or as a loop of one GEMM per expert. How the rows fall on the
experts is the `load` (`routing`)."""

from typing import Literal

from pydantic import Field

from suite.scenario.declare import Plot, Versus, WorkloadRecord, columns
from suite.scenario.params import Params, PositiveFloat, PositiveInt
from suite.workloads.grouped_gemm.routing import LOADS


class GroupedGemmParams(Params):
    """`grouped_gemm`: M routed rows (tokens x top-k), K the model's hidden size, N the expert's
    FFN size (the up projection; the down projection is K = FFN, N = hidden)."""

    experts: PositiveInt = Field(8, description="experts (groups) the rows are routed to")
    load: Literal[LOADS] = Field(
        "balanced", description="how the rows fall on the experts: balanced (M / E each), zipf (expert i in "
                                "proportion to i^-zipf_exponent), one_hot (one expert takes all but one group per "
                                "other expert), half_empty (half the experts get no rows)")
    zipf_exponent: PositiveFloat = Field(1.0, description="the skew of the zipf load")
    align: PositiveInt = Field(
        1, description="every expert's row count is a multiple of this (torchtitan pads groups to 16 rows for "
                       "FP8, 32 for MXFP8); M must be one too")
    impl: Literal["grouped", "loop"] = Field(
        "grouped", description="grouped: one grouped-GEMM call for all experts; loop: one GEMM per expert with "
                               "rows, the outputs concatenated (what a grouped kernel must beat)")


COLUMNS = columns(
    "grouped GEMMs (grouped_gemm)",
    ("imbalance", "float", "", "the busiest expert's rows over the mean rows per expert (1 = balanced)"),
    ("empty_experts", "int", "", "experts that got no rows"),
    ("expert_tokens", "string", "", "rows per expert, in expert order, as a JSON list"),
)
# Speed against the load: the baseline precision's speedup and the loop's time over the grouped
# call's, one line per precision and shape; measured speed only (emulated cases are numerics).
SPEEDUP_PLOT = Plot("speedup_by_imbalance", "sweep", {
    "x": "imbalance", "y": "speedup", "vary": "load", "speed": True, "baseline": False,
    "xlabel": "expert load imbalance (busiest expert's rows / mean)", "ylabel": "speedup over the baseline (x)",
    "title": "speedup against expert load imbalance",
})
LOOP_PLOT = Plot("grouped_vs_loop", "sweep", {
    "x": "imbalance", "y": "versus_speedup", "vary": "load", "speed": True,
    "xlabel": "expert load imbalance (busiest expert's rows / mean)",
    "ylabel": "loop time / grouped time (x)", "title": "one grouped call against a per-expert loop",
})
WORKLOADS = {
    "grouped_gemm": WorkloadRecord(
        "suite.workloads.grouped_gemm.workload:GROUPED_GEMM", GroupedGemmParams, shaped=True,
        description="a MoE layer's expert GEMMs: M routed rows over E experts of (K, N) each, checked against "
                    "float64", columns=COLUMNS, roofline="grouped_matmul",
        groups="suite.workloads.grouped_gemm.roofline:groups", versus=Versus("impl", "loop", "imbalance"),
        detail_columns=(("imbalance", "imbalance", ".3g"), ("empty_experts", "empty experts", ".0f")),
        plots=(SPEEDUP_PLOT, LOOP_PLOT)),
}
