"""Shared test fixtures: tiny scenarios that run in well under a second on a CPU."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

# A stopping rule fast enough for unit tests: the numbers are not the point there.
QUICK_TIMING = """
[defaults.timing]
warmup_s = 0.0
min_samples = 3
budget_s = 0.02
"""


def quick_toml(name: str, sweeps: str, *, description: str = "", baseline: str | None = None,
               warmup_s: float = 0.0, min_samples: int = 3, budget_s: float = 0.02) -> str:
    """A CPU scenario with a quick stopping rule (QUICK_TIMING unless told): `sweeps` holds its
    [[sweep]] tables."""
    head = [f'name = "{name}"']
    if description:
        head.append(f"description = {json.dumps(description)}")  # a JSON string is a TOML basic string
    head += ["[defaults]", 'device = "cpu"'] + ([f'baseline = "{baseline}"'] if baseline else [])
    timing = QUICK_TIMING.replace("warmup_s = 0.0", f"warmup_s = {warmup_s}").replace(
        "min_samples = 3", f"min_samples = {min_samples}").replace("budget_s = 0.02", f"budget_s = {budget_s}")
    return "\n".join(head) + timing + textwrap.dedent(sweeps)


# A run small enough for unit tests: two sizes, four precisions (tf32 is skipped off CUDA).
TINY_SCENARIO = quick_toml("tiny", """
[[sweep]]
workload = "gemm"
precisions = ["fp32", "tf32", "bf16", "fp16"]
shapes = "square"
sizes = [32, 64]
""", description="unit-test scenario", baseline="fp32")


@pytest.fixture(scope="session", autouse=True)
def one_parser():
    """The command line's parser built once a session: `cli.main` builds it afresh each call (8 ms:
    fourteen commands and their arguments, the version's metadata), and test_adversarial's two
    random-value tests alone call it 103 times. It is built from the commands' static declarations
    alone, and argparse keeps no state between parses (append copies its default; each parse has
    its own namespace)."""
    from suite import cli

    built = cli.parser()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli, "parser", lambda: built)
        yield


@pytest.fixture
def quick_png(monkeypatch):
    """Figures drawn in full but neither laid out nor written out: a plot costs a tenth of a second
    to a second (under load) that way, and where a test asserts what a command decides, writes or
    refuses, pixels are not its subject (tests/test_report.py, test_answers.py and test_browser.py
    draw real ones): an empty SVG in their place. Only in this process: a command run in a
    subprocess draws its plots in full."""
    import matplotlib.pyplot as plt

    from suite.report import figures

    def save(fig, path):
        plt.close(fig)
        path.write_text('<svg xmlns="http://www.w3.org/2000/svg"></svg>')
        return path

    monkeypatch.setattr(figures, "save", save)


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
    from suite.scenario import spec

    return spec.load(write_scenario(TINY_SCENARIO, "tiny.toml"))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """One real run of the tiny scenario (2 sizes x 4 precisions; tf32 skipped on a CPU), once per
    test module: its parquet file."""
    from suite import pipeline
    from suite.scenario import spec

    folder = tmp_path_factory.mktemp("tiny")
    (folder / "tiny.toml").write_text(TINY_SCENARIO, encoding="utf-8")
    return pipeline.run(pipeline.RunRequest(spec.load(folder / "tiny.toml"), folder / "results", None, progress=False)).path


def run_cases(cases, run_meta: dict, progress=None, device: str = "cpu") -> list[dict]:
    """The records of `cases`, run the way a run on `device` with no options runs them
    (`suite.measure.executors.choose`: on a CPU, in this process on the case thread)."""
    import torch

    from suite.measure import executors
    from suite.measure.executors.base import units

    executor = executors.choose(executors.Options(), torch.device(device), device)
    if progress is not None:
        progress.plan(list(cases))
    try:
        return list(executor.run(units(cases), run_meta, progress))
    finally:
        executor.close()
