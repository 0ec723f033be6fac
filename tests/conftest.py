"""Shared test fixtures: tiny scenarios that run in well under a second on a CPU."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

# A run small enough for unit tests: three sizes, fast stopping rule.
TINY_SCENARIO = """
name = "tiny"
description = "unit-test scenario"

[defaults]
device = "cpu"
baseline = "fp32"

[defaults.timing]
warmup_s = 0.0
min_samples = 3
budget_s = 0.02

[[sweep]]
workload = "gemm"
precisions = ["fp32", "tf32", "bf16", "fp16"]
shapes = "square"
sizes = [32, 64]
"""


@pytest.fixture
def write_scenario(tmp_path):
    """write_scenario(text, name="s.toml") -> Path of a scenario file in a fresh folder."""

    def write(text: str, name: str = "s.toml") -> Path:
        folder = tmp_path / "scenarios"
        folder.mkdir(exist_ok=True)
        path = folder / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def tiny_scenario(write_scenario):
    from suite import spec

    return spec.load(write_scenario(TINY_SCENARIO, "tiny.toml"))
