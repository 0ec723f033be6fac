"""Short unique case names (suite/analysis/frame/labels.py): only what tells cases apart is named, and
nothing that groups by a name pools cases whose parameters differ."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from suite.analysis.frame import derived, labels
from suite.analysis.outcome import summary
from suite.results import store

REPO = Path(__file__).resolve().parent.parent


def _frame(rows: list[tuple[str, str, dict]]) -> pd.DataFrame:
    return pd.DataFrame([{"workload": w, "precision": p, "params": json.dumps(params, sort_keys=True),
                          "m": None, "k": None, "n": None} for w, p, params in rows])


def test_a_case_is_named_by_what_differs_within_the_frame():
    common = {"model": "gpt2", "size": "tiny", "steps": 300, "lr": 0.003}
    df = labels.with_labels(_frame([
        ("dist_train_step", "fp32", common),
        ("dist_train_step", "fp8_tensorwise", common),
        ("dist_train_step", "fp8_tensorwise", {**common, "fp8_all_gather": True}),
        ("train_step", "bf16", {**common, "vocab": 50257}),
        ("train_step", "bf16", {**common, "vocab": 50304}),
    ]))
    assert df["variant"].tolist() == ["fp32", "fp8_tensorwise", "fp8_tensorwise (fp8 all-gather)", "bf16", "bf16"]
    # the parameters every case of a workload shares are left out; the ones that differ are kept
    assert df["shape"].tolist() == ["dist_train_step"] * 3 + ["vocab=50257", "vocab=50304"]


def test_shaped_cases_keep_their_dimensions_and_precision_parameters_stay_with_the_precision():
    df = pd.DataFrame([
        {"workload": "gemm", "precision": "fp8_rowwise", "params": "{}", "m": 256, "k": 512, "n": 384},
        {"workload": "gemm", "precision": "fp8_rowwise", "params": '{"quantize": "inline"}', "m": 256, "k": 512, "n": 384},
        {"workload": "outlier", "precision": "bf16", "params": '{"outlier": 100.0}', "m": 128, "k": 512, "n": 128},
        {"workload": "outlier", "precision": "bf16", "params": '{"outlier": 1000.0}', "m": 128, "k": 512, "n": 128},
    ])
    named = labels.with_labels(df)
    assert named["variant"].tolist() == ["fp8_rowwise", "fp8_rowwise (quantize=inline)", "bf16", "bf16"]
    assert named["shape"].tolist() == ["256x512x384", "256x512x384", "128x512x128 outlier=100", "128x512x128 outlier=1000"]


def test_a_named_frame_keeps_its_names_in_its_subsets():
    df = labels.with_labels(_frame([("train_step", "bf16", {"vocab": 1}), ("train_step", "bf16", {"vocab": 2})]))
    # alone, the second case differs from nothing; as part of its frame it keeps "vocab=2"
    assert derived.shape_labels(df.iloc[1:]).tolist() == ["vocab=2"]


def test_the_summary_and_headline_of_cpu_update_never_pool_its_two_adamw8bit_cases():
    df = store.read([REPO / "results" / "reference" / "cpu_update"])
    df = df[df["run_id"] == df["run_id"].max()]
    rows = summary.summary_rows(df)
    names = [r["precision"] for r in rows]
    assert len(names) == len(set(names)) == len(df)  # one row per case here: none pooled
    assert {"bf16_adamw8bit", "bf16_adamw8bit (master=bf16_sr)"} <= set(names)
    lines = summary.headline(df)
    answer = next(line for line in lines if line.startswith("train_step:"))
    # each part: "<name> is 5.42x faster ..." or "<name> 1.67x slower (...)"
    named = re.findall(r"(?:: |; )([a-z0-9_]+(?: \([^)]*\))?) (?:is |[0-9])", answer)
    assert "bf16_adamw8bit (master=bf16_sr)" in named and "bf16_adamw8bit" in named
    assert len(named) == len(set(named))  # each case once, by a name of its own
