"""Nox sessions: thin wrappers over `python -m suite`, sharing one install helper.

Which torch build: on a machine with no NVIDIA GPU the sessions install torch's CPU build
(`torch==DEFAULT_TORCH+cpu`: from a local wheel folder or mirror pip already reaches, else from
PyTorch's CPU index), on a GPU machine the CUDA build; the choice and its reason are printed first.
An unpinned `torch` on Linux x86-64 is the multi-GB CUDA build, which a CPU-only machine does not
want. MPSUITE_TORCH overrides the choice:
    MPSUITE_TORCH="torch==2.11.0" nox -s h100_fp8   # a GPU user's pick
MPSUITE_TORCHAO likewise ("" leaves torchao out). Arguments after `--` go to the command run.
MPSUITE_TE names a Transformer Engine to install for `h100_fp8` (e.g. "transformer_engine[pytorch]",
built against the installed torch); unset, TE cases are recorded as skipped with the import error.
MPSUITE_TORCH_INDEX, when set, is the index torch alone is installed from (CPU wheels:
https://download.pytorch.org/whl/cpu, as the GitHub workflow does).

Across torch versions (TORCH_MATRIX below, each in its own environment):
    nox -s "pinned(torch='2.14.1')" -- cpu     # one scenario under one listed version
    nox -s matrix -- cpu                       # every listed version, then consecutive ones compared
    nox -s regress -- torch=2.13.0,runs=3 torch=2.14.1,runs=3   # the default gate (compare's --fail-on)
A regression verdict needs run-to-run noise, which one run per side cannot show: record 3 runs per
side (`matrix` three times, or `pinned` per version alternately); compare_versions pools the 3 newest.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.sessions = ["cpu"]
nox.options.reuse_existing_virtualenvs = True


class _NoUvProbeNote(logging.Filter):
    """Nox probes for uv whenever it makes an environment, whatever the backend, and logs "uv binary
    not found." when it has none. The sessions use virtualenv and pip on purpose (pip finds the local
    CPU wheel of torch; uv looks only at indexes), so the line is noise on every session."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "uv binary not found."


logging.getLogger("nox").addFilter(_NoUvProbeNote())

# The torch release sessions install unless MPSUITE_TORCH says otherwise (its CPU build on a
# machine without an NVIDIA GPU).
DEFAULT_TORCH = "2.13.0"
TORCH = os.environ.get("MPSUITE_TORCH", "")
TORCHAO = os.environ.get("MPSUITE_TORCHAO", "torchao")
# Where torch's CPU wheels live when no index pip already uses has them (PyPI has only CUDA builds
# of torch for Linux x86-64).
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_INDEX = os.environ.get("MPSUITE_TORCH_INDEX", "")
TE = os.environ.get("MPSUITE_TE", "")

# The torch releases cross-version sessions run, oldest first, each with the torchao release paired
# with it ("" leaves torchao out). The one table `pinned`, `matrix` and `compare_versions` read.
TORCH_MATRIX = {
    "2.13.0": "torchao==0.18.0",
    "2.14.1": "torchao==0.18.0",
}
# Runs per version compare_versions pools: a regression verdict needs at least 2 per side, 3 are
# recommended (docs/calibration.md).
COMPARE_RUNS = 3

def nvidia_gpu(gpus: Path = Path("/proc/driver/nvidia/gpus")) -> str | None:
    """What shows an NVIDIA GPU on this machine (the driver's device list, or nvidia-smi), or None."""
    if gpus.is_dir() and any(gpus.iterdir()):
        return f"{len(list(gpus.iterdir()))} GPU(s) in {gpus}"
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        listed = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
        if out.returncode == 0 and listed:
            return f"nvidia-smi lists {listed[0]}"
    return None


def torch_choice(version: str | None = None) -> tuple[str, bool, str]:
    """(requirement, is the CPU build, why) for a torch release (a pinned session's), else for
    MPSUITE_TORCH if set, else for DEFAULT_TORCH: the build this machine wants."""
    if version is None and TORCH:
        return TORCH, TORCH.endswith("+cpu"), "MPSUITE_TORCH"
    version = version or DEFAULT_TORCH
    gpu = nvidia_gpu()
    if gpu:
        return f"torch=={version}", False, f"NVIDIA GPU found ({gpu}): the CUDA build"
    return f"torch=={version}+cpu", True, "no NVIDIA GPU found (no /proc/driver/nvidia/gpus, no nvidia-smi): the CPU build"


def _installed(session: nox.Session) -> dict[str, str]:
    """name -> version of what the session's environment holds (empty for a new one)."""
    out = session.run("python", "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check",
                      silent=True, log=False) or ""
    return dict(line.lower().split("==", 1) for line in out.splitlines() if "==" in line)


def install_torch(session: nox.Session, version: str | None = None) -> None:
    """Install the chosen torch build, saying which and why; a CPU build replaces a CUDA build the
    reused environment held before, CUDA libraries included (3 GB that a CPU build never loads)."""
    requirement, cpu_build, why = torch_choice(version)
    session.log(f"torch: {requirement} ({why})")
    installed = _installed(session)
    held = installed.get("torch")
    if cpu_build and held and not held.endswith("+cpu"):
        cuda_parts = sorted(name for name in installed if name.startswith("nvidia-") or name in ("torch", "triton"))
        session.log(f"torch: this environment holds the CUDA build torch {held}; removing it and its CUDA "
                    f"libraries ({len(cuda_parts)} packages) before installing the CPU build")
        session.run("python", "-m", "pip", "uninstall", "-y", "-q", *cuda_parts)
    elif not cpu_build and held and held.endswith("+cpu"):
        # `torch==X` is satisfied by X+cpu (PEP 440 ignores the local label), so pip would keep it
        session.log(f"torch: this environment holds the CPU build torch {held}; removing it first")
        session.run("python", "-m", "pip", "uninstall", "-y", "-q", "torch")
    if TORCH_INDEX:
        session.install(requirement, "--index-url", TORCH_INDEX)
        return
    try:
        session.install(requirement)
    except nox.command.CommandFailed:
        if not cpu_build or why == "MPSUITE_TORCH":
            raise
        session.log(f"torch: {requirement} is not on the indexes pip uses here; trying {CPU_INDEX}")
        session.install(requirement, "--index-url", CPU_INDEX)


def install(session: nox.Session, extras: str = "", torch: str | None = None, torchao: str = TORCHAO) -> None:
    """torch first (the chosen build), then torchao, then the suite; print what got installed."""
    install_torch(session, torch)
    if torchao:
        session.install(torchao)
    session.install("-e", f".{extras}")
    compile_suite(session)
    session.run("python", "-m", "suite", "env")


def compile_suite(session: nox.Session) -> None:
    """Byte-compile the suite's own modules, as pip does the packages it installs (an editable install
    is not). Where PYTHONDONTWRITEBYTECODE is set, as on our CI machines, Python never writes what it
    compiles on import, so every process the tests start compiled numpy, pandas, pydantic, the suite
    again: 58 s more CPU in a 518 s test run, measured with pip's --no-compile on this 2-core machine."""
    session.run("python", "-m", "compileall", "-q", "-j", "0", "suite", silent=True)


def run_scenario(session: nox.Session, scenario: str, extras: str = "") -> None:
    install(session, extras)
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
def cpu_mx(session: nox.Session) -> None:
    """Block-scaled formats' numerics on any machine (torchao MXFP8, MXFP4, NVFP4 against FP8 and
    bf16; the outlier sweep per format and block size; emulated timings): scenarios/cpu_mx.toml."""
    run_scenario(session, "cpu_mx")


@nox.session
def cpu_moe(session: nox.Session) -> None:
    """MoE grouped GEMMs on any machine: torch._grouped_mm against a per-expert loop under balanced
    and skewed expert loads, FP8/MX numerics emulated: scenarios/cpu_moe.toml."""
    run_scenario(session, "cpu_moe")


@nox.session
def b200_mx(session: nox.Session) -> None:
    """Block-scaled formats and MoE grouped GEMMs against FP8 and bf16 on a Blackwell GPU
    (scenarios/b200_mx.toml); elsewhere every block-format case is recorded as skipped with the reason."""
    if TE:
        install(session)
        session.install("--no-build-isolation", TE)
    run_scenario(session, "b200_mx")


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
def cpu_dist(session: nox.Session) -> None:
    """2-rank FSDP2 training steps on any machine (torchrun, gloo): fp32, bf16, emulated FP8 with and
    without float8 all-gather; loss deltas and collective bytes (scenarios/cpu_dist.toml)."""
    run_scenario(session, "cpu_dist")


@nox.session
def h100x8_fp8(session: nox.Session) -> None:
    """FP8 FSDP2 training of a Llama-3-8B on 8 GPUs against bf16 and torchao's published numbers
    (scenarios/h100x8_fp8.toml). With no CUDA, or fewer than 8 GPUs, every case is recorded as skipped."""
    if TE:
        install(session)
        session.install("--no-build-isolation", TE)
    run_scenario(session, "h100x8_fp8")


@nox.session
def cpu_update(session: nox.Session) -> None:
    """Where weights and optimizer state live, on any machine: pure bf16, stochastic rounding, Kahan
    summation and low-bit AdamW state against fp32 master weights (scenarios/cpu_update.toml)."""
    run_scenario(session, "cpu_update", "[update]")


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


@nox.session(venv_backend="none")
def wheelhouse(session: nox.Session) -> None:
    """Every wheel a bare GPU machine lacks for `gpu_check` (pydantic, jinja2, rich, torchao, torch-optimi;
    scripts/wheelhouse.py), for its Python and platform, into .whl/: `nox -s wheelhouse -- [--python 3.12]`."""
    session.run("python3", "scripts/wheelhouse.py", *session.posargs, external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """What the harness itself costs (planning, parquet, reports), timed by pytest-benchmark."""
    install(session, "[test]")
    session.run("pytest", "benchmarks", "--benchmark-enable", *session.posargs)


# The GPU dry run (`run SCENARIO --dry-run GPU`, suite/measure/dryrun): each GPU scenario of
# scenarios/ and the GPU it is written for. The torch it needs is its own pin (a test compares).
GPU_DRYRUN = {
    "h100_fp8": "h100", "h100": "h100", "vocab": "h100", "h100x8_fp8": "h100", "gpu_check_h100": "h100",
    "gpu_check_h100_fp8": "h100", "gpu_check_compiled": "h100", "gpu_check_tf32_compiled": "h100",
    "gpu_check_update": "h100", "gpu_check_fidelity": "h100", "a100": "a100", "b200_mx": "b200",
}
DRYRUN_TORCH = "2.14.1"


@nox.session
def gpu_dryrun(session: nox.Session) -> None:
    """Every GPU scenario on fake CUDA tensors as on its GPU (GPU_DRYRUN), on any machine, then the
    mutation tests that show what it catches (tests/gpu_dryrun/). Installs torch's CUDA build (about
    3 GB) whatever the machine has. Posargs: the scenarios to dry-run (default: all of GPU_DRYRUN)."""
    session.log(f"torch: torch=={DRYRUN_TORCH}, the CUDA build (the GPU dry run needs it on any machine)")
    held = _installed(session).get("torch", "")
    if held.endswith("+cpu"):
        session.run("python", "-m", "pip", "uninstall", "-y", "-q", "torch")
    session.install(f"torch=={DRYRUN_TORCH}", TORCH_MATRIX[DRYRUN_TORCH] or "torchao")
    session.install("-e", ".[update]", "pytest", "jsonschema")
    compile_suite(session)
    session.run("python", "-m", "suite", "env")
    failed = []
    for scenario in session.posargs or GPU_DRYRUN:
        try:
            session.run("python", "-m", "suite", "run", scenario, "--dry-run", GPU_DRYRUN.get(scenario, "h100"))
        except nox.command.CommandFailed:
            failed.append(scenario)
    if not session.posargs:
        session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra",
                    "tests/gpu_dryrun/")
    if failed:
        session.error(f"the dry run failed cases of {', '.join(failed)}")


# Most tests wait on a process of their own (a run, torchrun, Ray, a pty), so one worker per CPU
# (pytest-xdist) halves the suite's time on 2 cores; a file's tests stay on one worker, sharing its
# fixtures. More than 4 workers would each import torch and record the shared runs for little gain.
PYTEST_WORKERS = ("-n", "logical", "--maxprocesses", "4", "--dist", "loadfile")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, on the CPU, a worker per CPU. Posargs go to pytest (e.g. `nox -s tests -- -k
    spec`; `-n 0` runs it in one process)."""
    install(session, "[test]")
    session.run("pytest", *PYTEST_WORKERS, *(session.posargs or ["-q"]))


@nox.session
@nox.parametrize("torch", list(TORCH_MATRIX))
def pinned(session: nox.Session, torch: str) -> None:
    """A scenario under one torch of TORCH_MATRIX, in its own environment.

    `nox -s "pinned(torch='2.14.1')" -- cpu [run options]`. Records carry the installed versions, so
    `python -m suite compare torch=2.13.0 torch=2.14.1` selects them."""
    if not session.posargs:
        session.error("name the scenario after --, e.g. nox -s \"pinned(torch='2.14.1')\" -- cpu")
    install(session, torch=torch, torchao=TORCH_MATRIX[torch])
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
    """Each TORCH_MATRIX version's newest runs of a scenario (up to COMPARE_RUNS) compared with the
    next version's.

    `nox -s compare_versions -- cpu [compare options]`. Every pair is reported even when one regresses."""
    if not session.posargs:
        session.error("name the scenario after --, e.g. nox -s compare_versions -- cpu")
    scenario = session.posargs[0]
    install(session)
    versions = list(TORCH_MATRIX)
    for old, new in zip(versions, versions[1:]):
        session.run("python", "-m", "suite", "compare", f"scenario={scenario},torch={old},runs={COMPARE_RUNS}",
                    f"scenario={scenario},torch={new},runs={COMPARE_RUNS}", *session.posargs[1:], success_codes=[0, 1])


@nox.session
def regress(session: nox.Session) -> None:
    """Regression gate: `python -m suite compare`, exit status 1 when a case fails its gate.

    `nox -s regress -- BASELINE CANDIDATE [compare options]`, e.g. `results/cpu,skip=3,runs=3
    results/cpu,runs=3`. The gate is compare's default --fail-on (regressed,time:regressed,new-failure,
    new-skip: a slower speedup, a slower time on the same device, a new failure or skip)."""
    if len(session.posargs) < 2:
        session.error("usage: nox -s regress -- BASELINE CANDIDATE [--fail-on ... --min-runs N ...]")
    install(session)
    session.run("python", "-m", "suite", "compare", *session.posargs)


@nox.session
def calibrate(session: nox.Session) -> None:
    """How often compare raises a false alarm and finds a real slowdown, on synthetic runs of known
    noise (benchmarks/calibrate.py): `nox -s calibrate -- --out docs/calibration.md` rewrites the table."""
    install(session)
    session.run("python", "-m", "benchmarks.calibrate", *session.posargs)
