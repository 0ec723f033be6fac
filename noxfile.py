"""Nox sessions: thin wrappers over `python -m suite`, sharing one install helper.

The torch build is the user's choice (an unpinned `torch` on Linux x86-64 is the multi-GB CUDA
build, which a CPU-only machine does not want):
    MPSUITE_TORCH="torch==2.13.0" nox -s tests     # what .ci/run does
    MPSUITE_TORCH="torch==2.11.0" nox -s h100_fp8   # a GPU user's pick
MPSUITE_TORCHAO likewise ("" leaves torchao out). Arguments after `--` go to the command run.
MPSUITE_TE names a Transformer Engine to install for `h100_fp8` (e.g. "transformer_engine[pytorch]",
built against the installed torch); unset, TE cases are recorded as skipped with the import error.
MPSUITE_TORCH_INDEX, when set, is the index torch alone is installed from (CPU wheels:
https://download.pytorch.org/whl/cpu, as the GitHub workflow does).

Across torch versions (TORCH_MATRIX below, each in its own environment):
    nox -s "pinned(torch='2.14.1')" -- cpu     # one scenario under one listed version
    nox -s matrix -- cpu                       # every listed version, then consecutive ones compared
    nox -s regress -- torch=2.13.0 torch=2.14.1 --fail-on regressed,new-failure
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["cpu"]
nox.options.reuse_existing_virtualenvs = True

TORCH = os.environ.get("MPSUITE_TORCH", "torch")
TORCHAO = os.environ.get("MPSUITE_TORCHAO", "torchao")
TORCH_INDEX = os.environ.get("MPSUITE_TORCH_INDEX", "")
TE = os.environ.get("MPSUITE_TE", "")

# The torch releases cross-version sessions run, oldest first, each with the torchao release paired
# with it ("" leaves torchao out). The one table `pinned`, `matrix` and `compare_versions` read.
TORCH_MATRIX = {
    "2.13.0": "torchao==0.18.0",
    "2.14.1": "torchao==0.18.0",
}

def install(session: nox.Session, extras: str = "", torch: str = TORCH, torchao: str = TORCHAO) -> None:
    """torch first (the chosen build), then torchao, then the suite; print what got installed."""
    session.install(torch, *(["--index-url", TORCH_INDEX] if TORCH_INDEX else []))
    if torchao:
        session.install(torchao)
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
def cpu_fp8(session: nox.Session) -> None:
    """FP8 numerics on any machine (emulated timings): scenarios/cpu_fp8.toml."""
    run_scenario(session, "cpu_fp8")


@nox.session
def h100_fp8(session: nox.Session) -> None:
    """FP8 recipes (torchao, Transformer Engine) against bf16 on a Hopper GPU: scenarios/h100_fp8.toml.
    Without a GPU every case is recorded as skipped ("no CUDA device") and the report says so."""
    if TE:
        install(session)  # torch first: TE's PyTorch extension builds against it
        session.install("--no-build-isolation", TE)
    run_scenario(session, "h100_fp8")


@nox.session
def cpu_models(session: nox.Session) -> None:
    """Tiny GPT-2 training steps on any machine (fp32/bf16, vocab 50257 vs 50304, fp16 with and
    without a GradScaler): scenarios/cpu_models.toml."""
    run_scenario(session, "cpu_models")


@nox.session
def vocab(session: nox.Session) -> None:
    """GPT-2 124M's vocabulary 50257 vs 50304 on a GPU: lm_head GEMMs and the training step per
    precision (scenarios/vocab.toml). Without a GPU every case is recorded as skipped."""
    run_scenario(session, "vocab")


@nox.session
def h100(session: nox.Session) -> None:
    """TF32 and bf16 against fp32 on an H100/H200: GEMM sweep, GPT-2 124M and Llama-3-8B-block
    training steps, FP8 steps (scenarios/h100.toml). Without a GPU every case is recorded as skipped."""
    run_scenario(session, "h100")


@nox.session
def a100(session: nox.Session) -> None:
    """The h100 scenario's cases on an A100, against A100 peaks; FP8 cases are skipped there by
    capability (scenarios/a100.toml). Without a GPU every case is recorded as skipped."""
    run_scenario(session, "a100")


@nox.session
def fidelity(session: nox.Session) -> None:
    """The suite's timer against peer harnesses on the same GEMMs: scenarios/fidelity.toml."""
    run_scenario(session, "fidelity")


@nox.session(venv_backend="none")
def gpu_check(session: nox.Session) -> None:
    """The prepared GPU check (scripts/gpu_check.sh) in the current Python: for a bare GPU machine
    with torch and no network. `nox -s gpu_check -- [--pack] OUT_DIR`."""
    session.run("bash", "scripts/gpu_check.sh", *session.posargs, external=True)


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


@nox.session
@nox.parametrize("torch", list(TORCH_MATRIX))
def pinned(session: nox.Session, torch: str) -> None:
    """A scenario under one torch of TORCH_MATRIX, in its own environment.

    `nox -s "pinned(torch='2.14.1')" -- cpu [run options]`. Records carry the installed versions, so
    `python -m suite compare torch=2.13.0 torch=2.14.1` selects them."""
    if not session.posargs:
        session.error("name the scenario after --, e.g. nox -s \"pinned(torch='2.14.1')\" -- cpu")
    install(session, torch=f"torch=={torch}", torchao=TORCH_MATRIX[torch])
    session.run("python", "-m", "suite", "run", *session.posargs)


@nox.session
def matrix(session: nox.Session) -> None:
    """A scenario under every torch of TORCH_MATRIX, then each version compared with the next.

    `nox -s matrix -- cpu`: queues the sessions `pinned(torch=...)` and `compare_versions`."""
    if not session.posargs:
        session.error("name the scenario after --, e.g. nox -s matrix -- cpu")
    for torch in TORCH_MATRIX:
        session.notify(f"pinned(torch='{torch}')", posargs=session.posargs)
    # compare where the runs were written: the scenario name, and --results/--reports if given
    folders = [arg for flag in ("--results", "--reports") if flag in session.posargs
               for arg in (flag, session.posargs[session.posargs.index(flag) + 1])]
    session.notify("compare_versions", posargs=[session.posargs[0], *folders])


@nox.session
def compare_versions(session: nox.Session) -> None:
    """Each TORCH_MATRIX version's newest run of a scenario compared with the next version's.

    `nox -s compare_versions -- cpu [compare options]`. Every pair is reported even when one regresses."""
    if not session.posargs:
        session.error("name the scenario after --, e.g. nox -s compare_versions -- cpu")
    scenario = session.posargs[0]
    install(session)
    versions = list(TORCH_MATRIX)
    for old, new in zip(versions, versions[1:]):
        session.run("python", "-m", "suite", "compare", f"scenario={scenario},torch={old}",
                    f"scenario={scenario},torch={new}", *session.posargs[1:], success_codes=[0, 1])


@nox.session
def regress(session: nox.Session) -> None:
    """Regression gate: `python -m suite compare`, exit status 1 when a case matches --fail-on.

    `nox -s regress -- BASELINE CANDIDATE [compare options]` (default --fail-on regressed)."""
    if len(session.posargs) < 2:
        session.error("usage: nox -s regress -- BASELINE CANDIDATE [--fail-on regressed,new-failure ...]")
    install(session)
    session.run("python", "-m", "suite", "compare", *session.posargs)
