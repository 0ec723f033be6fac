"""What a result was measured on: versions, device, flags, and the suite's own code."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path

import torch

from suite.precisions import flags
from suite.scenario import registry

SUITE_DIR = Path(__file__).resolve().parent
# The stages whose code decides what a case measures, and so `code_hash` (docs/development.md has
# the stage order): everything up to `measure` itself: the ground floor (errors, accuracy metrics),
# the scenario schema and its expansion into cases and timing rules, the precisions' recipes and
# flags, the models and workloads (inputs, callables, FLOPs, checks), the fleet's settings (which
# cases run together) and the runner. Storing, analysing and reporting records change no number.
MEASURING = ("core", "scenario", "precisions", "models", "workloads", "fleet", "measure")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=SUITE_DIR, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def code_hash(package: Path = SUITE_DIR.parent) -> str:
    """Hash of the Python source of the stages that measure (`MEASURING`, under the suite's package
    folder): results whose measuring code differs can be told apart even without git (asv hashes
    each benchmark's code for the same reason), and a change to a report or a command leaves it."""
    h = hashlib.sha256()
    for stage in MEASURING:
        for path in sorted((package / stage).rglob("*.py")):
            h.update(path.relative_to(package).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# CPU flags that decide mixed-precision GEMM speed (Linux /proc/cpuinfo names). Without
# avx512_bf16 or amx_bf16, oneDNN has no native bf16 kernel and torch's bf16/fp16 matmul takes a
# slow path: 60-115x slower than fp32 at 256^3 and about 300x at 2048^3 on an AVX2-only EPYC.
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
FP16_FLAGS = ("avx512_fp16", "amx_fp16")
# Environment variables that lower the ISA torch, oneDNN and MKL dispatch to, whatever the CPU has.
# MKL ignores the first three (its fp32 SGEMM stays on AVX-512 under ONEDNN_MAX_CPU_ISA=AVX2):
# MKL_ENABLE_INSTRUCTIONS=AVX2 lowers it.
ISA_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str] | None:
    """Which of CPU_FLAGS this CPU has, from /proc/cpuinfo (None where it cannot be read: the
    platform has no such file)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [f for f in CPU_FLAGS if f in have]
    return None


def cpu_clock_mhz(sysfs: Path = Path("/sys/devices/system/cpu"), cpuinfo: Path = Path("/proc/cpuinfo")) -> float | None:
    """The CPU's clock for its FMA peak (suite/analysis/roofline/model.py): the highest maximum clock cpufreq
    reports (cpuinfo_max_freq, kHz), else the highest `cpu MHz` in /proc/cpuinfo (a VM shows its
    nominal clock there), else None."""
    try:
        khz = [int(p.read_text()) for p in sysfs.glob("cpu[0-9]*/cpufreq/cpuinfo_max_freq")]
    except (OSError, ValueError):
        khz = []
    if khz:
        return max(khz) / 1e3
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return None
    mhz = [float(line.split(":", 1)[1]) for line in lines if line.startswith("cpu MHz")]
    return max(mhz) if mhz else None


def cpu_isa() -> str | None:
    """The instruction set torch's CPU kernels dispatch to ("AVX2", "AVX512", "DEFAULT", ...)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # torch without the query
        return None


def cpu_info() -> dict:
    """The CPU facts that explain its mixed-precision speed, recorded on every record."""
    flags_found = cpu_flags()
    env = {name: os.environ[name] for name in ISA_ENV if os.environ.get(name)}
    return {
        "cpu_isa": cpu_isa(),
        "cpu_flags": None if flags_found is None else " ".join(flags_found),
        "cpu_isa_env": " ".join(f"{k}={v}" for k, v in env.items()) or None,
        "cpu_clock_mhz": cpu_clock_mhz(),
    }


def resolve_device(requested: str) -> torch.device:
    """'auto' means the GPU when there is one."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def device_info(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"device": "cpu", "device_name": cpu_model(), "compute_capability": None,
                "sm_count": None, "gpu_memory_gb": None, "l2_bytes": None}
    props = torch.cuda.get_device_properties(device)
    return {
        "device": "cuda",
        "device_name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "gpu_memory_gb": round(props.total_memory / 2**30, 2),
        "l2_bytes": getattr(props, "L2_cache_size", None),
    }


def driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:  # no NVML library, no driver, or no GPU: all mean "unknown"
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        return out.stdout.strip().splitlines()[0] or None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def capture(device: torch.device) -> dict:
    """Run-level metadata, repeated on every record of the run."""
    cuda = torch.version.cuda
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        **device_info(device),
        "torch_version": torch.__version__,
        "torch_git_version": getattr(torch.version, "git_version", None),
        "cuda_version": cuda,
        "cudnn_version": str(cudnn) if cudnn else None,
        "driver_version": driver_version() if device.type == "cuda" else None,
        **{library.column: library.version() for library in registry.libraries()},  # as the folders declare them
        "triton_version": _version("triton") or _version("pytorch-triton"),
        "numpy_version": _version("numpy"),
        "python_version": platform.python_version(),
        "os": platform.platform(),
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        **cpu_info(),
        "cpu_threads": torch.get_num_threads(),
        "git_sha": _git("rev-parse", "HEAD"),
        "git_dirty": None if dirty is None else bool(dirty),
        "suite_version": _version("mpsuite"),
        "code_hash": code_hash(),
        "matmul_flags": ", ".join(f"{k}={v}" for k, v in flags.snapshot().items()),
        "env_threads": os.environ.get("OMP_NUM_THREADS"),
    }


def device_unavailable(device: torch.device) -> str | None:
    """Why no case can run on `device` at all (every case is then recorded as skipped), or None."""
    if device.type == "cuda" and not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False"
    return None


def run_meta(device: torch.device) -> dict:
    """Run-level metadata of this machine. Without the requested GPU the device columns say so (no
    name, no capability) while versions, host and code are still recorded."""
    if device_unavailable(device) is None:
        return capture(device)
    cpu = torch.device("cpu")
    meta = capture(cpu)
    meta.update({key: None for key in device_info(cpu)}, device=device.type)
    return meta
