"""The update-side answer, a headline hook of this folder (`HOOKS` in its `__init__.py`): which
recipes for the weights and optimizer state trained to within a margin of the fp32-master loss, and
at what memory per parameter.

A setting (the training-step cases of one run that share a baseline case) answers when its recipes
store the update differently (their textbook bytes per parameter differ): fp32 against bf16
autocast stores the same 16 bytes and is a compute question, which `suite.analysis.outcome.answers` covers.
Torch-free; what it needs of the analysis is handed to it (`suite.analysis.outcome.answers.Kit`).
"""

from __future__ import annotations

import math

import pandas as pd


def _name(r) -> str:
    """The recipe as the report names it: with its own parameters where cases differ in them
    (`bf16_adamw8bit (master=bf16_sr)`, `suite.analysis.frame.labels`)."""
    return str(r["variant"])


def _setting(r) -> str:
    """The training setting in words: model, blocks x width, vocabulary, steps."""
    return (f"{r['model']} {int(r['n_layer'])} x {int(r['d_model'])}, vocab {int(r['vocab'])}, "
            f"{int(r['train_steps'])} steps")


def _bpp(r) -> str:
    return f"{float(r['bytes_per_param']):.3g} B/param" if pd.notna(r.get("bytes_per_param")) else "B/param not measured"


def _stuck(r) -> str:
    value = r.get("stuck_update_frac")
    return f", {float(value):.0%} of updates stuck" if pd.notna(value) and float(value) >= 0.005 else ""


def update_answers(df: pd.DataFrame, kit) -> list[str]:
    """One sentence per answering setting of the newest run: the reference's final loss (the
    recipe the update-side recipes declare as theirs, else the fp32 twin's) and bytes per parameter;
    the recipes within the margin of it (`kit.margins`' of the loss gap: the one "which precision" holds
    training steps to, against the same reference, so a recipe listed outside it is never the
    report's fastest), fewest bytes first; those above it with their loss gap and stuck share;
    those not measured."""
    if "textbook_bytes_per_param" not in df or df["textbook_bytes_per_param"].isna().all():
        return []
    margin, short = kit.margins["loss_gap_nats"], kit.short  # train_step's margin (its `LOSS_GAP` metric)
    counted = df.loc[df["textbook_bytes_per_param"].notna(), "workload"].unique()  # the workloads that count bytes
    newest = kit.with_settings(df[(df["run_id"] == df["run_id"].max()) & df["workload"].isin(counted)])
    lines = []
    for _, g in newest.groupby("setting_key", sort=False):
        if g["textbook_bytes_per_param"].dropna().nunique() < 2:
            continue
        ok = g[(g["status"] == "ok") & g["final_loss"].notna() & g["loss_gap_nats"].notna()]
        if ok.empty:
            continue
        reference = str(ok["loss_reference"].iloc[0])  # the declared recipe, else the fp32 twin
        ref_rows = ok[ok["precision"] == reference]
        if len(ref_rows):
            ref = ref_rows.iloc[0]
            ref_loss, ref_name = float(ref["final_loss"]), f"{reference} (fp32 master weights, {_bpp(ref)})"
        else:
            ref_loss, ref_name = float(ok["fp32_final_loss"].iloc[0]), reference
        others = ok[ok["precision"] != reference]
        floor = float(ok["entropy_floor"].iloc[0]) if "entropy_floor" in ok else math.nan
        gap = others["loss_gap_nats"].astype(float)
        within = others[gap.abs() <= margin].sort_values("bytes_per_param")
        above = others[gap.abs() > margin]
        parts = [f"reference {ref_name}: final loss {ref_loss:.4f} nats, {ref_loss - floor:.4f} above the corpus's floor"]
        parts.append("within: " + (", ".join(f"{_name(r)} {r['final_loss'] - ref_loss:+.4f} ({_bpp(r)})"
                                             for _, r in within.iterrows()) or "none"))
        if len(above):
            parts.append("not within: " + ", ".join(f"{_name(r)} {r['final_loss'] - ref_loss:+.4f} nats "
                                                   f"({_bpp(r)}{_stuck(r)})" for _, r in above.iterrows()))
        bad = g[g["status"] != "ok"]
        if len(bad):
            parts.append("not measured: " + ", ".join(f"{_name(r)} {r['status']} ({short(r.get('reason'), 60)})"
                                                     for _, r in bad.iterrows()))
        lines.append(f"Update precision ({_setting(ok.iloc[0])}), margin {margin:g} nats ({math.exp(margin) - 1:.1%} "
                     "perplexity) of the fp32-master loss: " + "; ".join(parts) + ".")
    return lines
