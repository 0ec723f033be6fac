"""Measured speedups of a model's GEMMs and layers from a run's records (`advise --from RESULTS`),
and the advised run's per-layer table the report shows.

A GEMM of the step (`suite.models.step.Gemm`) matches the records of its own shape: a dense GEMM the
one-GEMM workload's case of the same (m, k, n), an expert GEMM the grouped workload's case of M =
m x groups over `groups` balanced experts in one call (`suite.analysis.advise.scenario`). fprop,
dgrad and wgrad are different shapes, so each pass matches its own case (and passes of one shape
share it). A Linear fwd+bwd case at a layer's fprop shape covers the layer's three passes: a row of
pass `fwd+bwd`. A speedup is the record's over its in-run baseline (`derived.with_speedups`), and
only where it is speed: an emulated timing (FP8 on a CPU) or a case not measured is left to the model,
with why. Where several runs hold a case, the newest gives it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from suite.analysis.advise.estimate import Timed
from suite.analysis.advise.scenario import BASELINE, GROUPED_GEMM, LAYER_STEP, ONE_GEMM, workload_of
from suite.analysis.frame import derived
from suite.core import jsontext
from suite.core.errors import ScenarioError
from suite.models.step import Gemm
from suite.scenario import registry, spec

LAYER_PASS = "fwd+bwd"  # a Linear's training step: its fprop, dgrad and wgrad together
MEASURED_COLUMNS = ("layer", "pass", "m", "k", "n", "groups", "count", "recipe", "speedup", "gemm_only_speedup",
                    "source", "run_id", "scenario", "case_id")
UNMATCHED_COLUMNS = ("layer", "pass", "m", "k", "n", "groups", "recipe", "note", "why")
NOT_IN_RESULTS = "no case of this shape and recipe in the results"


@dataclass(frozen=True)
class Measured:
    """`rows`: a measured speedup per (GEMM or layer, recipe), MEASURED_COLUMNS, `source` "measured";
    `speedup` with the casts timed (quantize inline, as training runs it), `gemm_only_speedup` with
    operands quantized beforehand where the run has it. `unmatched`: what is left to the model and why."""

    rows: pd.DataFrame
    unmatched: pd.DataFrame


def _params(text) -> dict | None:
    """A case's parameters; None where they do not read as a JSON object (it then matches nothing)."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        params = jsontext.loads(text)
    except ValueError:
        return None
    return params if isinstance(params, dict) else None


def candidates(df: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """The records that may stand for an advised GEMM or layer: those of the three workloads against
    `baseline`, with speedups, their `quantize` (pre where unset) and `experts` (1 for a dense GEMM;
    0 for a grouped case whose experts are not balanced in one call: it stands for none)."""
    kinds = {workload_of(kind): kind for kind in (ONE_GEMM, GROUPED_GEMM, LAYER_STEP)}
    shaped = np.isfinite(df[["m", "k", "n"]].apply(pd.to_numeric, errors="coerce").to_numpy(float)).all(axis=1)
    df = df[df["workload"].isin(list(kinds)) & (df["baseline"] == baseline) & shaped]
    if df.empty:
        return df.assign(kind=pd.Series(dtype=object), quantize=pd.Series(dtype=object), experts=pd.Series(dtype=int))
    df = derived.with_speedups(df).copy()
    params = [_params(text) for text in df["params"]]
    df["kind"] = df["workload"].astype(str).map(kinds)
    df["quantize"] = [(p or {}).get("quantize", "pre") for p in params]
    df["experts"] = [_experts(kind, int(m), p) for kind, m, p in zip(df["kind"], df["m"], params)]
    return df


def _experts(kind: str, m: int, params: dict | None) -> int:
    """How many balanced experts a case multiplies in one call: 1 for a dense GEMM or a layer, 0
    where its parameters go beyond what the advised scenario sets (it matches no GEMM)."""
    if params is None:
        return 0
    own = set(params) - {"quantize"}
    if kind != GROUPED_GEMM:
        return 0 if own else 1
    experts = params.get("experts")
    if own - {"experts"} or not (experts is None or type(experts) is int and 0 < experts <= m):
        return 0  # another setting, or more experts than rows (from a file: no list of a billion groups)
    try:
        counts, one_call = registry.load(registry.WORKLOADS[workload_of(GROUPED_GEMM)].groups)(m, params)
    except ValueError:  # parameters the workload refuses
        return 0
    balanced = one_call and len(set(counts)) == 1 and sum(counts) == m
    return len(counts) if balanced else 0


def pick(table: pd.DataFrame, kind: str, m: int, k: int, n: int, experts: int,
         recipe: str) -> tuple[dict, tuple[str, str] | None]:
    """The newest run's case of this shape and recipe: ({quantize: record}, None), or ({}, (a word,
    why)) where none gives a measured speedup."""
    rows = table[(table["kind"] == kind) & (table["precision"] == recipe) & (table["m"] == m * experts)
                 & (table["k"] == k) & (table["n"] == n) & (table["experts"] == experts)]
    if rows.empty:
        return {}, ("absent", NOT_IN_RESULTS)
    rows = rows[rows["run_id"] == rows["run_id"].max()]
    measured = rows[(rows["status"] == "ok") & ~derived.is_emulated(rows) & np.isfinite(rows["speedup"].astype(float))]
    if measured.empty:
        return {}, _why_not(rows.iloc[0], recipe)
    return {q: r for q, r in zip(measured["quantize"], measured.to_dict("records"))}, None


def _why_not(record, recipe: str) -> tuple[str, str]:
    """(a word for a table cell, the sentence) of a case that gives no measured speedup."""
    if record["status"] != "ok":
        return str(record["status"]), f"{record['status']}: {record.get('reason') or 'no reason recorded'}"
    if bool(record.get("emulated")):
        return "emulated", f"{recipe} was emulated there (numerics only, no speed)"
    return "no baseline", "its baseline was not measured in the same run"


def matched_row(gemm: Gemm, pass_: str, recipe: str, found: dict) -> dict:
    """One measured row: the inline case's speedup (the one case where the recipe quantizes no other
    way), and the pre case's as the GEMM alone."""
    timed = found.get("inline") or found.get("pre")
    alone = found.get("pre") if "inline" in found else None
    return {"layer": gemm.layer, "pass": pass_, "m": gemm.m, "k": gemm.k, "n": gemm.n, "groups": gemm.groups,
            "count": gemm.count, "recipe": recipe, "speedup": float(timed["speedup"]),
            "gemm_only_speedup": float(alone["speedup"]) if alone else np.nan, "source": "measured",
            "run_id": timed["run_id"], "scenario": timed["scenario"], "case_id": timed["case_id"]}


def layer_gemms(gemms: Sequence[Gemm]) -> list[Gemm]:
    """Each dense layer's fprop GEMM, once per (layer, shape): what a Linear fwd+bwd case stands for."""
    seen = {}
    for g in gemms:
        if g.groups == 1 and g.pass_ == "fprop":
            seen.setdefault((g.layer, g.m, g.k, g.n), g)
    return list(seen.values())


def measured_speedups(df: pd.DataFrame, gemms: Sequence[Gemm], recipes: Sequence[str],
                      baseline: str = BASELINE) -> Measured:
    """The measured speedup of every GEMM in `gemms` and every dense layer (pass `fwd+bwd`) for
    each recipe, from the records `df` (`suite.results.store.read`); the rest in `unmatched`."""
    table = candidates(df, baseline)
    rows, unmatched = [], []
    wanted = [(g, g.pass_, GROUPED_GEMM if g.groups > 1 else ONE_GEMM, g.groups) for g in gemms]
    wanted += [(g, LAYER_PASS, LAYER_STEP, 1) for g in layer_gemms(gemms)]
    for gemm, pass_, kind, experts in wanted:
        for recipe in recipes:
            found, why = pick(table, kind, gemm.m, gemm.k, gemm.n, experts, recipe)
            if why is None:
                rows.append(matched_row(gemm, pass_, recipe, found))
            else:
                unmatched.append({"layer": gemm.layer, "pass": pass_, "m": gemm.m, "k": gemm.k, "n": gemm.n,
                                  "groups": gemm.groups, "recipe": recipe, "note": why[0], "why": why[1]})
    return Measured(pd.DataFrame(rows, columns=list(MEASURED_COLUMNS)),
                    pd.DataFrame(unmatched, columns=list(UNMATCHED_COLUMNS)))


@dataclass(frozen=True)
class AdvisedRun:
    """The records of one scenario `advise --scenario` wrote: what it was advised for (its
    `advised` table), its baseline and recipes, its runs, and the measured speedups of its GEMMs."""

    advised: spec.Advised
    baseline: str
    recipes: list[str]
    runs: list[str]
    measured: Measured


def advised_gemms(advised: spec.Advised) -> list[Gemm]:
    """The GEMMs an advised scenario was written for, as `suite.models.step` has them."""
    return [Gemm(g.layer, g.module, g.pass_, g.m, g.k, g.n, g.count, g.groups) for g in advised.gemms]


def advised_scenario(text) -> spec.Scenario | None:
    """The scenario a record's `scenario_spec` holds, where `advise` wrote it (else None; a spec
    that no longer validates, from another version, counts as not advised)."""
    if not isinstance(text, str) or '"advised"' not in text:
        return None
    try:
        scenario = spec.parse_run_spec(jsontext.loads(text), "scenario_spec").scenario
    except (ScenarioError, ValueError):
        return None
    return scenario if scenario.advised is not None else None


def advised_runs(df: pd.DataFrame) -> list[AdvisedRun]:
    """Each advised scenario among the records (`df`: a run or several), with its measured speedups;
    none where no record came from an advised scenario."""
    if "scenario_spec" not in df or df.empty:
        return []
    out = []
    for text, records in df.groupby("scenario_spec", sort=True):
        scenario = advised_scenario(text)
        if scenario is None:
            continue
        baseline = scenario.defaults.baseline or BASELINE
        recipes = [p for p in dict.fromkeys(p for s in scenario.sweep for p in s.precisions) if p != baseline]
        measured = measured_speedups(records, advised_gemms(scenario.advised), recipes, baseline)
        out.append(AdvisedRun(scenario.advised, baseline, recipes, sorted(records["run_id"].unique()), measured))
    return out


def lookup(measured: Measured) -> dict[tuple, dict]:
    """The measured rows by (layer, pass, m, k, n, groups, recipe): where `advise` looks up a GEMM
    (`pass` its own, or LAYER_PASS for its layer's fwd+bwd) before it predicts one."""
    return {(r["layer"], r["pass"], r["m"], r["k"], r["n"], r["groups"], r["recipe"]): r
            for r in measured.rows.to_dict("records")}


def as_timed(measured: Measured, gemms: Sequence[Gemm], predicted: dict) -> dict:
    """(gemm, recipe) -> `estimate.Timed` marked measured, for `advise.answer.advise(measured=)`: the
    measured speedup of the GEMM's own pass applied to its predicted bf16 time (so the step's weights
    stay the model's and each GEMM's speedup is the run's). The GEMM alone is the pre-quantized case's
    where the run has one, else the prediction's. `predicted`: `estimate.time_all` over bf16 and the
    recipes."""
    rows = lookup(measured)
    out = {}
    for g in gemms:
        base = predicted[(g, BASELINE)]
        for (layer, pass_, m, k, n, groups, recipe), row in rows.items():
            if (layer, pass_, m, k, n, groups) != (g.layer, g.pass_, g.m, g.k, g.n, g.groups):
                continue
            alone = row["gemm_only_speedup"]
            gemm_s = base.gemm_seconds / alone if np.isfinite(alone) else predicted[(g, recipe)].gemm_seconds
            out[(g, recipe)] = Timed(base.seconds / row["speedup"], gemm_s, source="measured")
    return out
