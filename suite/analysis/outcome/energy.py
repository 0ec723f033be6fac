"""Energy per unit of work: each FP8 (or FP4) recipe's joules per TFLOP against its baseline's,
where that baseline's GEMMs run in bf16.

From the records' `joules_per_tflop` (NVML's energy counter around a warm back-to-back window of
the case's calls after its samples, `suite.measure.telemetry`). Only cases where it was measured appear; a baseline without it leaves
its cells empty. Nothing is estimated here: a missing number stays missing.
"""

from __future__ import annotations

import pandas as pd

from suite.analysis.frame import derived
from suite.scenario import registry

# The formats (vendor-peak columns a recipe declares) of the recipes set against a baseline in BASE.
LOW_PRECISION = ("fp8", "fp4")
BASE = "bf16"
COLUMNS = ("case", "precision", "j_per_tflop", "bf16_j_per_tflop", "vs_bf16")


def _format(name: str) -> str | None:
    record = registry.PRECISIONS.get(name)
    return record.peak if record is not None else None


def vs_bf16(df: pd.DataFrame) -> pd.DataFrame:
    """One row per measured FP8/FP4 case with energy: its case label, recipe, J/TFLOP, its bf16
    baseline case's J/TFLOP (NaN where not measured) and their ratio (recipe / bf16)."""
    if "joules_per_tflop" not in df or df.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    energy = pd.to_numeric(df["joules_per_tflop"], errors="coerce")
    measured = df[(df["status"] == "ok") & energy.notna()].assign(j_per_tflop=energy)
    # the newest record of each case (a report may hold several runs)
    by_case = measured.drop_duplicates("case_id", keep="last").set_index("case_id")["j_per_tflop"]
    recipe_format, base_format = measured["precision"].map(_format), measured["baseline"].map(_format)
    low = measured[recipe_format.isin(LOW_PRECISION) & (base_format == BASE)]
    if low.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    base = low["baseline_case_id"].map(by_case).astype(float)
    return pd.DataFrame({
        "case": derived.shape_labels(low).to_numpy(), "precision": low["precision"].to_numpy(),
        "j_per_tflop": low["j_per_tflop"].to_numpy(float), "bf16_j_per_tflop": base.to_numpy(),
        "vs_bf16": (low["j_per_tflop"] / base).to_numpy(float),
    })
