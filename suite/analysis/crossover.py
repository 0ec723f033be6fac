"""From which size on does a recipe pay? The crossover of each recipe along each shape family.

A *family* is a line of shapes one sweep walks: M = K = N (square sweeps), or M alone (the tokens)
at a fixed K and N. Along it, a recipe's crossover is the smallest size at which it beats the
baseline: measured, from the sweep's speedups, interpolated on log axes between the two measured
sizes whose speedups straddle 1; predicted, from the roofline model (`suite.analysis.model`) on a
fine grid of sizes, refined by bisection. The report's answer line says both: "fp8_rowwise (gemm)
pays from M=K=N of about 2900 on this NVIDIA H100 80GB HBM3 (predicted 2600)".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd

from suite.analysis import derived, model

# The predicted crossover is searched between these sizes, on a grid of 16 steps per doubling.
SEARCH = (16, 65536)
STEPS_PER_DOUBLING = 16


@dataclass(frozen=True)
class Family:
    kind: str  # "square" (M = K = N) or "tokens" (M varies at fixed K, N)
    k: int | None = None
    n: int | None = None

    @property
    def label(self) -> str:
        return "M=K=N" if self.kind == "square" else f"M (tokens) at K={self.k}, N={self.n}"

    def shape(self, size: int) -> tuple[int, int, int]:
        return (size, size, size) if self.kind == "square" else (size, self.k, self.n)


def family_of(m: int, k: int, n: int) -> Family:
    return Family("square") if m == k == n else Family("tokens", k, n)


@dataclass(frozen=True)
class Crossing:
    # "crosses" (at `size`), "always" (from the smallest size, `size`), "never" (up to `size`), or
    # "not_largest" (measured: it beats the baseline at some size, but not at the largest, `size`)
    kind: str
    size: float

    def text(self, family: Family, measured: bool) -> str:
        where = "measured " if measured else ""
        if self.kind == "crosses":
            return f"pays from {family.label} of about {round_2(self.size)}"
        if self.kind == "always":  # the ends of the search or of the sweep: sizes as they are
            return f"pays at every {where}{family.label} (from {self.size:g})"
        if self.kind == "not_largest":
            return f"does not pay at the largest measured {family.label} ({self.size:g}), though at smaller ones"
        return f"does not pay up to {family.label} = {self.size:g}"


def round_2(x: float) -> str:
    """Two significant digits, as a plain number: 2874 -> '2900', 96.3 -> '96'."""
    return f"{float(f'{x:.2g}'):g}" if x >= 100 else f"{x:.0f}"


def beats(speedup: float) -> bool:
    """A recipe beats the baseline where it is faster, not merely as fast (a CPU without native
    bf16 has the same roofline for bf16 as for fp32: no crossover)."""
    return speedup > 1.0 + 1e-9


def measured_crossing(sizes, speedups) -> Crossing | None:
    """The size from which on the measured speedups stay above 1: the last rise through 1,
    interpolated linearly in log(size) against log(speedup) between the two measured sizes around
    it ("always" when it beats the baseline at every size; "never" when at none; "not_largest"
    when it beats it somewhere but not at the largest size)."""
    points = sorted((float(s), float(v)) for s, v in zip(sizes, speedups) if v > 0 and math.isfinite(v))
    if len({s for s, _ in points}) < 2:
        return None
    if all(beats(v) for _, v in points):
        return Crossing("always", points[0][0])
    if not beats(points[-1][1]):
        return Crossing("never" if not any(beats(v) for _, v in points) else "not_largest", points[-1][0])
    i = max(j for j in range(1, len(points)) if not beats(points[j - 1][1]))
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    t = -math.log(y0) / (math.log(y1) - math.log(y0))
    return Crossing("crosses", math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))))


def _grid() -> list[int]:
    lo, hi = SEARCH
    steps = int(round(math.log2(hi / lo) * STEPS_PER_DOUBLING))
    return sorted({int(round(lo * 2 ** (i / STEPS_PER_DOUBLING))) for i in range(steps + 1)})


def predicted_crossing(workload: str, precision: str, baseline: str, family: Family, params: dict,
                       device: model.Device) -> Crossing | None:
    """The smallest size at which the model predicts `precision` beats `baseline` along `family`."""
    def speedup(size: int) -> float | None:
        ours = model.predict_case(workload, precision, *family.shape(size), params, device)
        base = model.predict_case(workload, baseline, *family.shape(size), params, device)
        if isinstance(ours, str) or isinstance(base, str):
            return None
        return base.seconds / ours.seconds

    grid = _grid()
    first = speedup(grid[0])
    if first is None:
        return None
    if beats(first):
        return Crossing("always", grid[0])
    below = grid[0]
    for size in grid[1:]:
        if beats(speedup(size)):
            while size - below > 1:  # bisect between the last size below and this one
                mid = (size + below) // 2
                below, size = (below, mid) if beats(speedup(mid)) else (mid, size)
            return Crossing("crosses", size)
        below = size
    return Crossing("never", grid[-1])


def _params_text(workload: str, params: dict) -> str:
    parts = [workload] + [f"{k}={v}" for k, v in sorted(params.items())]
    return ", ".join(parts)


def measured_families(df: pd.DataFrame) -> list[dict]:
    """Per run, recipe (not the baseline), parameters and family with at least two measured sizes:
    the measured and the predicted crossover. Only timed (not emulated) cases count."""
    df = derived.with_speedups(df)
    ok = df[(df["status"] == "ok") & ~derived.is_emulated(df) & df["speedup"].notna() & df["m"].notna()
            & (df["precision"] != df["baseline"])]
    if ok.empty:
        return []
    ok = ok.assign(family=[family_of(int(m), int(k), int(n)) for m, k, n in zip(ok["m"], ok["k"], ok["n"])])
    rows = []
    for (run, workload, precision, params, family), g in ok.groupby(
            ["run_id", "workload", "precision", "params", "family"], sort=False):
        measured = measured_crossing(g["m"], g["speedup"])
        if measured is None:
            continue
        first = g.iloc[0].to_dict()
        device = model.device_for(first)
        parsed = json.loads(params) if isinstance(params, str) else {}
        predicted = predicted_crossing(workload, precision, first["baseline"], family, parsed, device) if device else None
        rows.append({"run_id": run, "workload": workload, "precision": precision, "params": parsed,
                     "family": family, "measured": measured, "predicted": predicted,
                     "device_name": first.get("device_name") or first.get("device")})
    return rows


def answer_lines(df: pd.DataFrame) -> list[str]:
    """The report's answer lines: where each recipe starts to pay, measured and predicted."""
    lines = []
    for row in measured_families(df):
        predicted = row["predicted"]
        if predicted is None:
            model_text = "no model for this device"
        elif predicted.kind == "crosses":
            model_text = f"predicted {round_2(predicted.size)}"
        elif predicted.kind == "always":
            model_text = "predicted: at every size"
        else:
            model_text = f"predicted: never, up to {predicted.size:g}"
        what = f"{row['precision']} ({_params_text(row['workload'], row['params'])})"
        lines.append(f"{what} {row['measured'].text(row['family'], measured=True)} on this "
                     f"{row['device_name']} ({model_text}).")
    return lines


def scenario_crossovers(cases, device: model.Device) -> list[dict]:
    """`predict`: per recipe, workload, parameters and family of a scenario's cases (families of
    two or more sizes), the predicted crossover against each case's baseline."""
    groups: dict[tuple, set[int]] = {}
    for case in cases:
        if case.m is None or case.baseline is None or case.precision == case.baseline:
            continue
        family = family_of(case.m, case.k, case.n)
        key = (case.workload, case.precision, case.baseline, json.dumps(case.params, sort_keys=True), family)
        groups.setdefault(key, set()).add(case.m)
    rows = []
    for (workload, precision, baseline, params, family), sizes in groups.items():
        if len(sizes) < 2:
            continue
        crossing = predicted_crossing(workload, precision, baseline, family, json.loads(params), device)
        if crossing is None:
            continue
        rows.append({"workload": workload, "precision": precision, "baseline": baseline,
                     "params": json.loads(params), "family": family.label, "kind": crossing.kind,
                     "size": crossing.size, "measured_sizes": sorted(sizes),
                     "text": f"{precision} ({_params_text(workload, json.loads(params))}) "
                             f"{crossing.text(family, measured=False)} on {device.label} (predicted)"})
    return rows
