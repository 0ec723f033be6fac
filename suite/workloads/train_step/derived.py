"""What a training step's records come to beyond their columns, torch-free: each case's loss gap to
its reference (this folder's `derived` hook, `HOOKS` in its `__init__.py`) and the effect of
padding the vocabulary (the `vocab_padding` plot's numbers, `plots`). Imports no later stage than
`suite.scenario`: what it needs of the analysis is handed to it."""

from __future__ import annotations

import math

import pandas as pd

from suite.scenario import registry
from suite.scenario.params import params_without


def with_loss_gaps(df: pd.DataFrame) -> pd.DataFrame:
    """`loss_gap_nats`: a training step's final loss minus its reference's, and `loss_reference`,
    the reference. The reference is the recipe the setting's update-side recipes declare (fp32
    master weights: `suite/precisions/update/`), where it was measured in the setting, so the update
    answer (suite/precisions/update/answers.py) and "which precision" judge a recipe alike; else the
    fp32 twin each case trains on the same batches (`loss_delta_vs_fp32`). Needs `setting_key`
    (`suite.analysis.outcome.answers.with_settings` runs it: this folder's `derived` hook)."""
    if "loss_gap_nats" in df:
        return df
    twin = pd.to_numeric(df["loss_delta_vs_fp32"], errors="coerce") if "loss_delta_vs_fp32" in df \
        else pd.Series(float("nan"), index=df.index)
    gap, reference = twin.copy(), pd.Series(None, index=df.index, dtype=object).where(twin.isna(), "the fp32 twin")
    steps = df[pd.to_numeric(df["final_loss"], errors="coerce").notna()] if "final_loss" in df else df.iloc[:0]
    declared = steps["precision"].map(lambda p: getattr(registry.PRECISIONS.get(p), "reference", None)).dropna()
    if len(declared):
        named = declared.groupby(steps.loc[declared.index, "setting_key"]).min()  # setting -> its reference
        ok = steps[steps["status"] == "ok"]
        ref = ok[ok["precision"] == ok["setting_key"].map(named)].drop_duplicates("setting_key")
        ref_loss = steps["setting_key"].map(ref.set_index("setting_key")["final_loss"]).astype(float)
        at = ref_loss.dropna().index
        gap[at] = steps.loc[at, "final_loss"].astype(float) - ref_loss[at]
        reference[at] = steps.loc[at, "setting_key"].map(named)
    return df.assign(loss_gap_nats=gap, loss_reference=reference)


# -- vocabulary padding (scenarios vocab and cpu_models) ---------------------------------------

LM_HEAD_PASSES = ("forward", "input grad", "weight grad")


def lm_head_gemms(tokens: int, d_model: int, vocab: int) -> dict[str, tuple[int, int, int]]:
    """The lm_head's three GEMMs in a training step as (M, K, N) of C[M, N] = A[M, K] @ B[K, N]:
    forward logits = h W^T (T, d, V); input gradient dh = dlogits W (T, V, d); weight gradient
    dW = dlogits^T h (V, T, d). T = tokens per step, d = d_model, V = vocabulary."""
    return {
        "forward": (tokens, d_model, vocab),
        "input grad": (tokens, vocab, d_model),
        "weight grad": (vocab, tokens, d_model),
    }


def vocab_padding(df: pd.DataFrame, step_workload: str, gemm_workload: str, emulated: pd.Series) -> pd.DataFrame:
    """The effect of the vocabulary size, measured, at two levels (only ok rows whose timing is not
    `emulated`, a mask of `df`'s rows), from the cases of a training-step workload and of a GEMM
    workload (the step workload's declaration names the GEMM one: `VOCAB_PLOT` in this folder).

    - level `step_workload`: its cases of one run and precision that differ only in `vocab` (a
      configuration measured at one vocabulary only is left out); `speedup` = step time at the
      smallest vocabulary of the group (the unpadded 50257) / step time at this one. `lm_head_share`
      = the lm_head's three GEMMs (measured by `gemm_workload` cases of the same run and precision
      at the step's (tokens, d_model, vocab)) / the step time: the GEMMs are timed in isolation, so
      the share leaves out the softmax/cross-entropy and any overlap, and it is missing where a
      GEMM was not measured.
    - levels "<gemm_workload> forward" / "... input grad" / "... weight grad" / "... total": the
      GEMM cases shaped like a step's lm_head (see `lm_head_gemms`) at every vocabulary-sized N
      measured (within 10% of a step's vocabulary: the 50260 and 50432 controls count); `speedup`
      as above, over the smallest N; "... total" sums the three passes where all three were measured.
    """
    columns = ["run_id", "precision", "level", "config", "tokens", "d_model", "vocab", "time_ms",
               "speedup", "lm_head_ms", "lm_head_share"]
    ok = df[(df["status"] == "ok") & ~emulated]
    steps = ok[ok["workload"] == step_workload]
    if steps.empty or not {"tokens_per_step", "d_model", "vocab"} <= set(steps.columns):
        return pd.DataFrame(columns=columns)
    gemm_ms = {
        (r.run_id, r.precision, int(r.m), int(r.k), int(r.n)): float(r.time_ms_median)
        for r in ok[ok["workload"] == gemm_workload].itertuples() if pd.notna(r.m)
    }
    steps = steps.assign(config=[params_without(p, "vocab") for p in steps["params"]])
    # Only configurations measured at two or more vocabularies say anything about padding.
    steps = steps[steps.groupby(["run_id", "precision", "config"])["vocab"].transform("nunique") > 1]
    rows = _step_level(steps, gemm_ms, step_workload)
    for (run, precision, t, d), g in steps.groupby(["run_id", "precision", "tokens_per_step", "d_model"], sort=False):
        rows += _gemm_levels(gemm_ms, run, precision, int(t), int(d), g["vocab"], gemm_workload)
    return pd.DataFrame(rows, columns=columns)


def _step_level(steps: pd.DataFrame, gemm_ms: dict, level: str) -> list[dict]:
    """`vocab_padding`'s rows for the steps themselves, with the lm_head GEMMs' share of each."""
    rows = []
    for (run, precision, config), g in steps.groupby(["run_id", "precision", "config"], sort=False):
        base_ms = float(g.loc[g["vocab"].idxmin(), "time_ms_median"])
        for r in g.itertuples():
            t, d, v = int(r.tokens_per_step), int(r.d_model), int(r.vocab)
            times = [gemm_ms.get((run, precision, *s)) for s in lm_head_gemms(t, d, v).values()]
            head = sum(times) if all(x is not None for x in times) else math.nan
            rows.append({"run_id": run, "precision": precision, "level": level, "config": config,
                         "tokens": t, "d_model": d, "vocab": v, "time_ms": float(r.time_ms_median),
                         "speedup": base_ms / float(r.time_ms_median), "lm_head_ms": head,
                         "lm_head_share": head / float(r.time_ms_median)})
    return rows


def _gemm_levels(gemm_ms: dict, run: str, precision: str, t: int, d: int, step_vocabs: pd.Series,
                 gemm_workload: str) -> list[dict]:
    """`vocab_padding`'s rows for the GEMM cases shaped like the lm_head of steps of `t` tokens and
    width `d`, at every vocabulary within 10% of the steps' (each pass, and their total)."""
    lo, hi = 0.9 * step_vocabs.min(), 1.1 * step_vocabs.max()
    vocabs = set()
    for rn, pr, m, k, n in gemm_ms:
        if rn == run and pr == precision:
            # the vocabulary dimension of whichever of the three passes this shape would be
            vocabs |= {v for v, shape in ((n, (t, d, n)), (k, (t, k, d)), (m, (m, t, d)))
                       if (m, k, n) == shape and lo <= v <= hi}
    per_pass = {name: {} for name in LM_HEAD_PASSES}
    for v in sorted(vocabs):
        for name, shape in lm_head_gemms(t, d, v).items():
            if (run, precision, *shape) in gemm_ms:
                per_pass[name][v] = gemm_ms[(run, precision, *shape)]
    total = {v: sum(per_pass[n][v] for n in LM_HEAD_PASSES) for v in vocabs
             if all(v in per_pass[n] for n in LM_HEAD_PASSES)}
    rows = []
    for level, times in [*((f"{gemm_workload} {n}", per_pass[n]) for n in LM_HEAD_PASSES),
                         (f"{gemm_workload} total", total)]:
        base_ms = times[min(times)] if times else None
        for v, ms in sorted(times.items()):
            rows.append({"run_id": run, "precision": precision, "level": level, "config": "",
                         "tokens": t, "d_model": d, "vocab": v, "time_ms": ms, "speedup": base_ms / ms,
                         "lm_head_ms": math.nan, "lm_head_share": math.nan})
    return rows
