"""From which size on does a recipe pay? The crossover of each recipe along each shape family.

A *family* is a line of shapes one sweep walks: M = K = N (square sweeps), or M alone (the tokens)
at a fixed K and N. Along it, a recipe's crossover is the smallest size at which it beats the
baseline: measured, from the sweep's speedups, interpolated on log axes between the two measured
sizes whose speedups straddle 1; predicted, from the roofline model (`suite.analysis.roofline.model`) on a
fine grid of sizes, refined by bisection. The report's answer line says both: "fp8_rowwise (gemm)
pays from M=K=N of about 2900 on this NVIDIA H100 80GB HBM3 (predicted 2600)".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.analysis.frame import derived
from suite.analysis.roofline import model

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
            return f"pays at some measured {family.label} but not at the largest ({self.size:g})"
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
    when it beats it somewhere but not at the largest size). Columnar: a family of a million
    records' sweep holds hundreds of points."""
    size, speedup = np.asarray(sizes, dtype=float), np.asarray(speedups, dtype=float)
    kept = (speedup > 0) & np.isfinite(speedup)
    size, speedup = size[kept], speedup[kept]
    if len(np.unique(size)) < 2:
        return None
    order = np.lexsort((speedup, size))  # by size, then speedup
    size, speedup = size[order], speedup[order]
    wins = speedup > 1.0 + 1e-9  # `beats`, elementwise
    if wins.all():
        return Crossing("always", float(size[0]))
    if not wins[-1]:
        return Crossing("never" if not wins.any() else "not_largest", float(size[-1]))
    i = int(np.flatnonzero(~wins[:-1])[-1]) + 1
    (x0, y0), (x1, y1) = (float(size[i - 1]), float(speedup[i - 1])), (float(size[i]), float(speedup[i]))
    t = -math.log(y0) / (math.log(y1) - math.log(y0))
    return Crossing("crosses", math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))))


def _grid() -> list[int]:
    lo, hi = SEARCH
    steps = int(round(math.log2(hi / lo) * STEPS_PER_DOUBLING))
    return sorted({int(round(lo * 2 ** (i / STEPS_PER_DOUBLING))) for i in range(steps + 1)})


_PREDICTED: dict[tuple, Crossing | None] = {}


def predicted_crossing(workload: str, precision: str, baseline: str, family: Family, params: dict,
                       device: model.Device) -> Crossing | None:
    """The smallest size at which the model predicts `precision` beats `baseline` along `family`
    (remembered: a report asks for the same one for each run and each line)."""
    key = (workload, precision, baseline, family, json.dumps(params, sort_keys=True), repr(device))
    if key not in _PREDICTED:
        _PREDICTED[key] = _search(workload, precision, baseline, family, params, device)
    return _PREDICTED[key]


def _search(workload: str, precision: str, baseline: str, family: Family, params: dict,
            device: model.Device) -> Crossing | None:
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
    """Per recipe (not the baseline), parameters and family with at least two measured sizes in the
    newest run of each scenario: the measured and the predicted crossover. Only timed (not
    emulated) cases count."""
    df = derived.with_speedups(derived.latest_runs(df))
    timed = (df["status"] == "ok") & ~derived.is_emulated(df) & df["speedup"].notna() & df["m"].notna() \
        & (df["precision"] != df["baseline"])
    at = np.flatnonzero(timed.to_numpy(bool))  # the rows counted, taken of the few columns a crossing needs
    if not len(at):
        return []
    ok = df[["run_id", "workload", "precision", "params", "m", "k", "n", "speedup"]].iloc[at]
    m, k, n = (ok[d].astype("int64") for d in ("m", "k", "n"))
    square = (m == k) & (k == n)  # family key columns: (-1, -1) for M = K = N, else the fixed K and N
    narrow = ok.assign(family_k=k.where(~square, -1), family_n=n.where(~square, -1))
    keys = ["run_id", "workload", "precision", "params", "family_k", "family_n"]
    sizes, speedups = narrow["m"].to_numpy(float), narrow["speedup"].to_numpy(float)
    crossed = [(key, measured, at[rows[0]]) for key, rows in _groups(narrow, keys)
               if (measured := measured_crossing(sizes[rows], speedups[rows])) is not None]
    firsts = df.iloc[[row for _, _, row in crossed]].to_dict("records")  # each family's first record, at once
    out = []
    for ((run, workload, precision, params, fk, fn), measured, _), first in zip(crossed, firsts):
        family = Family("square") if fk < 0 else Family("tokens", int(fk), int(fn))
        device = model.device_for(first)
        parsed = json.loads(params) if isinstance(params, str) else {}
        predicted = predicted_crossing(workload, precision, first["baseline"], family, parsed, device) if device else None
        out.append({"run_id": run, "workload": workload, "precision": precision, "params": parsed,
                    "family": family, "measured": measured, "predicted": predicted,
                    "device_name": first.get("device_name") or first.get("device")})
    return out


def _groups(df: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, np.ndarray]]:
    """`df.groupby(keys, sort=False)` as (key values, row positions) pairs: groups in the order they
    first appear, each group's rows in frame order, rows with a null key left out; without a frame
    per group (a million records' sweep holds a thousand families: a frame each cost seconds)."""
    group, valid = np.zeros(len(df), dtype=np.int64), np.ones(len(df), dtype=bool)
    for key in keys:
        codes, uniques = pd.factorize(df[key])  # -1: null, as groupby leaves out
        valid &= codes >= 0
        group = pd.factorize(group * (len(uniques) + 1) + codes)[0].astype(np.int64)
    at = np.flatnonzero(valid)
    ids = pd.factorize(group[at])[0]
    members = np.split(at[np.argsort(ids, kind="stable")], np.cumsum(np.bincount(ids))[:-1])
    columns = [df[k] for k in keys]
    return [(tuple(c.iat[rows[0]] for c in columns), rows) for rows in members]


def _model_text(predicted: Crossing | None) -> str:
    if predicted is None:
        return "no model for this device"
    if predicted.kind == "crosses":
        return f"predicted {round_2(predicted.size)}"
    if predicted.kind == "always":
        return "predicted: at every size"
    return f"predicted: never, up to {predicted.size:g}"


# More answer lines than this go to the report's crossover table only.
MAX_LINES = 6


def answer_lines(df: pd.DataFrame, families: list[dict] | None = None) -> list[str]:
    """The report's answer lines: where each recipe starts to pay, measured and predicted."""
    families = measured_families(df) if families is None else families
    lines = [f"{row['precision']} ({_params_text(row['workload'], row['params'])}) "
             f"{row['measured'].text(row['family'], measured=True)} on this {row['device_name']} "
             f"({_model_text(row['predicted'])})." for row in families[:MAX_LINES]]
    if len(families) > MAX_LINES:
        lines.append(f"{len(families) - MAX_LINES} more recipe and shape families are in the report's "
                     "crossover table.")
    return lines


TABLE_COLUMNS = [("precision", "recipe"), ("case", "workload, parameters"), ("family", "shapes"),
                 ("measured", "measured crossover"), ("predicted", "predicted crossover"), ("device", "device")]


def table_rows(families: list[dict]) -> list[dict]:
    """The crossover table of a report, one row per recipe, parameters and family (as text)."""
    return [{"precision": row["precision"], "case": _params_text(row["workload"], row["params"]),
             "family": row["family"].label, "measured": row["measured"].text(row["family"], measured=True),
             "predicted": _model_text(row["predicted"]), "device": str(row["device_name"])} for row in families]


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
