"""Outlier robustness (`workload`): one large activation value, and what it does to every other
row's GEMM under each recipe's scaling."""

from pydantic import Field

from suite.scenario.declare import Plot, WorkloadRecord, columns
from suite.scenario.params import Params, PositiveFloat


class OutlierParams(Params):
    """`outlier`: one planted value in A's row 0."""

    outlier: PositiveFloat = Field(description="the planted value's magnitude (required)")


COLUMNS = columns(
    "outliers",
    ("outlier", "float", "", "the planted outlier's magnitude"),
    ("sqnr_db_clean", "float", "dB", "SQNR of the same GEMM without the outlier"),
    ("sqnr_drop_db", "float", "dB", "sqnr_db_clean - sqnr_db: what one outlier costs the other rows"),
)
# SQNR of the untouched rows against the planted magnitude, per recipe. Accuracy, so emulated rows
# (FP8 on a CPU) are drawn too.
SQNR_PLOT = Plot("outlier_sqnr", "suite.report.plots:sweep", {
    "x": "outlier", "y": "sqnr_db",
    "xlabel": "outlier magnitude (one value in a standard normal activation)",
    "ylabel": "SQNR of the untouched rows (dB)", "title": "how far one outlier's scale reaches",
})
WORKLOADS = {
    "outlier": WorkloadRecord(
        "suite.workloads.outlier.workload:OUTLIER", OutlierParams, shaped=True, roofline="matmul",
        description="a GEMM whose A holds one planted outlier; accuracy on the other rows", columns=COLUMNS,
        detail_columns=(("outlier", "outlier", ".0e"), ("sqnr_db", "SQNR dB", ".1f"),
                        ("sqnr_db_clean", "SQNR without outlier dB", ".1f"), ("sqnr_drop_db", "SQNR drop dB", ".2f")),
        plots=(SQNR_PLOT,)),
}
