"""Nox sessions: thin wrappers over `python -m suite`, sharing one install helper.

The torch build is the user's choice (an unpinned `torch` on Linux x86-64 is the multi-GB CUDA
build, which a CPU-only machine does not want):
    MPSUITE_TORCH="torch==2.13.0" nox -s tests     # what .ci/run does
    MPSUITE_TORCH="torch==2.11.0" nox -s h100_fp8   # a GPU user's pick
MPSUITE_TORCHAO likewise ("" leaves torchao out). Arguments after `--` go to the command run.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["cpu"]
nox.options.reuse_existing_virtualenvs = True

TORCH = os.environ.get("MPSUITE_TORCH", "torch")
TORCHAO = os.environ.get("MPSUITE_TORCHAO", "torchao")

def install(session: nox.Session, extras: str = "") -> None:
    """torch first (the chosen build), then torchao, then the suite; print what got installed."""
    session.install(TORCH)
    if TORCHAO:
        session.install(TORCHAO)
    session.install("-e", f".{extras}")
    session.run("python", "-m", "suite", "env")


def run_scenario(session: nox.Session, scenario: str) -> None:
    install(session)
    session.run("python", "-m", "suite", "run", scenario, *session.posargs)


@nox.session
def cpu(session: nox.Session) -> None:
    """The main job on any machine: scenarios/cpu.toml -> results/cpu/ -> reports/cpu/."""
    run_scenario(session, "cpu")


@nox.session
def bench(session: nox.Session) -> None:
    """What the harness itself costs (planning, parquet, reports), timed by pytest-benchmark."""
    install(session, "[test]")
    session.run("pytest", "benchmarks", "--benchmark-enable", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, on the CPU. Posargs go to pytest (e.g. `nox -s tests -- -k spec`)."""
    install(session, "[test]")
    session.run("pytest", *(session.posargs or ["-q"]))
