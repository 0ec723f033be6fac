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

SUITE_DIR = Path(__file__).resolve().parent


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


def code_hash() -> str:
    """Hash of the suite's Python source: results whose measuring code differs can be told apart
    even without git (asv hashes each benchmark's code for the same reason)."""
    h = hashlib.sha256()
    for path in sorted(SUITE_DIR.rglob("*.py")):
        h.update(path.relative_to(SUITE_DIR).as_posix().encode())
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
        "torchao_version": _version("torchao"),
        "te_version": _version("transformer_engine") or _version("transformer-engine"),
        "triton_version": _version("triton") or _version("pytorch-triton"),
        "numpy_version": _version("numpy"),
        "python_version": platform.python_version(),
        "os": platform.platform(),
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "git_sha": _git("rev-parse", "HEAD"),
        "git_dirty": None if dirty is None else bool(dirty),
        "suite_version": _version("mpsuite"),
        "code_hash": code_hash(),
        "matmul_flags": ", ".join(f"{k}={v}" for k, v in flags.snapshot().items()),
        "env_threads": os.environ.get("OMP_NUM_THREADS"),
    }
