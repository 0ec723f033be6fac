"""Outlier robustness (`workload`): one large activation value, and what it does to every other
row's GEMM under each recipe's scaling."""

from pydantic import Field

from suite.scenario.declare import Plot, Trend, WorkloadRecord, columns
from suite.scenario.params import Params, PositiveFloat


class OutlierParams(Params):
    """`outlier`: one planted value in A's row 0."""

    outlier: PositiveFloat = Field(description="the planted value's magnitude (required)")


COLUMNS = columns(
    "outliers",
    ("outlier", "float", "", "the planted outlier's magnitude"),
    ("sqnr_db_clean", "float", "dB", "SQNR of the same GEMM without the outlier"),
    ("sqnr_drop_db", "float", "dB", "sqnr_db_clean - sqnr_db: what one outlier costs the other rows"),
    ("sqnr_elements_db", "float", "dB", "SQNR of A's quantization over every element but the outlier (its own "
                                        "row and block included)"),
    ("outlier_rel_err", "float", "", "the outlier's own relative error after A's quantization"),
    ("scale_block", "int", "", "values along K sharing one scale in A's quantization (null: one scale per "
                               "tensor or row, or none)"),
)
# SQNR of the untouched rows against the planted magnitude, per recipe. Accuracy, so emulated rows
# (FP8 on a CPU) are drawn too.
SQNR_PLOT = Plot("outlier_sqnr", "sweep", {
    "x": "outlier", "y": "sqnr_db", "vary": "outlier", "min_points": 3,
    "xlabel": "outlier magnitude (one value in a standard normal activation)",
    "ylabel": "SQNR of the untouched rows (dB)", "title": "how far one outlier's scale reaches",
})
# The same against the magnitude, for A's quantization itself (every element but the outlier), and
# against the block size at each magnitude (formats whose block is a parameter: MX).
ELEMENTS_PLOT = Plot("outlier_elements", "sweep", {
    "x": "outlier", "y": "sqnr_elements_db", "vary": "outlier", "min_points": 3,
    "xlabel": "outlier magnitude (one value in a standard normal activation)",
    "ylabel": "SQNR of A's other elements (dB)", "title": "what quantizing A keeps of the other elements",
})
BLOCK_PLOT = Plot("outlier_block_size", "sweep", {
    "x": "scale_block", "y": "sqnr_elements_db", "vary": "block_size",
    "xlabel": "values sharing one scale (block size)", "ylabel": "SQNR of A's other elements (dB)",
    "title": "what a larger block costs next to an outlier",
})
WORKLOADS = {
    "outlier": WorkloadRecord(
        "suite.workloads.outlier.workload:OUTLIER", OutlierParams, shaped=True, roofline="matmul",
        description="a GEMM whose A holds one planted outlier; accuracy on the other rows", columns=COLUMNS,
        detail_columns=(("outlier", "outlier", ".0e"), ("sqnr_db", "SQNR dB", ".1f"),
                        ("sqnr_db_clean", "SQNR without outlier dB", ".1f"), ("sqnr_drop_db", "SQNR drop dB", ".2f"),
                        ("sqnr_elements_db", "SQNR of A's other elements dB", ".1f"),
                        ("outlier_rel_err", "outlier's own rel. error", ".2g")),
        plots=(SQNR_PLOT, ELEMENTS_PLOT, BLOCK_PLOT),
        trend=Trend("outlier", "sqnr_elements_db", "outlier", "SQNR of A's other elements (dB)")),
}
