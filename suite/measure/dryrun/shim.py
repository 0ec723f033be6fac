"""The dry run's driver shim, built from source (`shim/*.c`) by the suite itself.

`cudart.c` becomes `libcudart_shim.so` (LD_PRELOAD: device count, properties, stream-capture
queries for the pretended GPU); `libcuda.c` becomes `libcuda.so.1` (a driver library that has no
device; found through LD_LIBRARY_PATH). Both are compiled with the system's C compiler ($CC, else
cc or gcc) against the CUDA runtime headers the CUDA wheels or triton ship, into a cache folder keyed
by the sources' hash (`~/.cache/mpsuite/dryrun-shim/`, or $XDG_CACHE_HOME), once per machine."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

from suite.core.errors import UserError

SOURCES = Path(__file__).resolve().parent / "shim"
HEADER = "cuda_runtime_api.h"
NEEDS = (HEADER, "crt/host_defines.h")  # the runtime API header and what it includes (some wheels lack crt/)
# Where triton and the CUDA wheels (nvidia-cuda-runtime, CUDA 12 and 13 layouts) put the runtime headers.
INCLUDE_DIRS = ("triton/backends/nvidia/include", "nvidia/cuda_runtime/include", "nvidia/cu13/include",
                "nvidia/cu12/include")


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpsuite" / "dryrun-shim"


def cuda_include(site_dirs: list[Path] | None = None) -> Path:
    """The folder holding the CUDA runtime headers, or a one-line UserError naming where it looked."""
    roots = site_dirs or [Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])]
    for root in roots:
        for rel in INCLUDE_DIRS:
            if all((root / rel / name).is_file() for name in NEEDS):
                return root / rel
    raise UserError(f"the GPU dry run builds a small shim against the CUDA runtime headers ({HEADER}) and found none "
                    f"under {', '.join(str(r) for r in dict.fromkeys(roots))} ({', '.join(INCLUDE_DIRS)}): install "
                    "torch's CUDA build with its nvidia wheels (nox -s gpu_dryrun sets one up)")


def compiler() -> str:
    """The system's C compiler, or a one-line UserError."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise UserError("the GPU dry run builds a small shim from C source and found no C compiler ($CC, cc, gcc, "
                    "clang): install one (e.g. apt-get install gcc)")


def build(cache: Path | None = None) -> Path:
    """The folder holding libcudart_shim.so and libcuda.so.1, built now unless cached."""
    sources = sorted(SOURCES.glob("*.c"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    folder = (cache or cache_root()) / digest
    outputs = {"cudart.c": "libcudart_shim.so", "libcuda.c": "libcuda.so.1"}
    if all((folder / out).is_file() for out in outputs.values()):
        return folder
    cc, include = compiler(), cuda_include()
    folder.mkdir(parents=True, exist_ok=True)
    for source, out in outputs.items():
        partial = folder / f".{out}.{os.getpid()}"
        cmd = [cc, "-shared", "-fPIC", "-O2", f"-I{include}", str(SOURCES / source), "-o", str(partial)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            lines = done.stderr.strip().splitlines() or ["(no message)"]
            first = next((line for line in lines if "error" in line), lines[0])
            raise UserError(f"the GPU dry run's shim did not build ({' '.join(cmd)}): {first}")
        partial.replace(folder / out)  # atomic: a parallel build finds whole files or none
    return folder
