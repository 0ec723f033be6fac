"""Download, on a machine that reaches a package index, every wheel a bare GPU machine lacks to run
`scripts/gpu_check.sh`, for that machine's Python and platform, into one folder (`.whl/` by
default) that travels with the working tree. `gpu_check.sh` installs every wheel of the folder
offline into a temporary folder on PYTHONPATH.

    python scripts/wheelhouse.py                         # Python 3.12, manylinux x86-64, into .whl/
    python scripts/wheelhouse.py --python 3.11 --dest /tmp/whl
    nox -s wheelhouse -- --python 3.12

`IMAGE` below is the one list of what the GPU image has; the wheelhouse carries the rest
(`RESOLVED` with their dependencies, `WITHOUT_DEPS` alone, and torchao). tests/test_gpu_check.py
runs the check with every import traced and fails when it imports a module neither provides.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

# The bare GPU image, as issue #23 gives it (the machine a session may be lent for about 15
# minutes): "Python 3.12, torch 2.11 (CUDA 13), triton, pandas, pyarrow, matplotlib, pytest,
# pytest-benchmark, nvidia-ml-py; no torchao, TE, nox, pydantic, jinja2, rich; no network". The
# image holds these and what they require, except the packages it is said to lack.
IMAGE_PYTHON = "3.12"
IMAGE = ("torch", "triton", "pandas", "pyarrow", "matplotlib", "pytest", "pytest-benchmark", "nvidia-ml-py")
NOT_ON_IMAGE = ("torchao", "transformer-engine", "nox", "pydantic", "jinja2", "rich")

# What the check needs beyond the image, as requirements pip resolves (dependencies included):
# the scenario schema (pydantic), the report's templates (jinja2), the run's tables (rich).
RESOLVED = ["pydantic>=2.5", "jinja2>=3.1", "rich>=13"]
# Wheels taken without their dependencies: their only requirement is torch, which the image has
# (resolving it would download a torch build). torch-optimi: bf16_pure_kahan's Kahan AdamW.
WITHOUT_DEPS = ["torch-optimi>=0.2"]
# torchao's release paired with the project's default torch (noxfile.TORCH_MATRIX); pass
# --torchao to pair it with the target's torch instead, or --torchao "" to leave it out.
DEFAULT_TORCHAO = "0.18.0"
# Platform tags a current x86-64 Linux accepts, newest first (pip takes any of them).
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def requirements(torchao: str = DEFAULT_TORCHAO) -> list[str]:
    """What the resolved download asks for."""
    return RESOLVED + ([f"torchao=={torchao}"] if torchao else [])


def commands(dest: Path, python: str = IMAGE_PYTHON, torchao: str = DEFAULT_TORCHAO,
             platforms: list[str] = PLATFORMS) -> list[list[str]]:
    """The pip commands that fill `dest`: binary wheels only (the target has no compiler to build
    with), for `python` and `platforms`; the first resolved by pip, the second without dependencies."""
    platform_args = [arg for p in platforms for arg in ("--platform", p)]
    base = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", python,
            "--implementation", "cp", *platform_args, "--dest", str(dest)]
    return [[*base, *requirements(torchao)], [*base, "--no-deps", *WITHOUT_DEPS]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=IMAGE_PYTHON,
                   help=f"the target's Python version (default: {IMAGE_PYTHON}, the GPU image's)")
    p.add_argument("--torchao", default=DEFAULT_TORCHAO, help=f"torchao release (default {DEFAULT_TORCHAO}; '' for none)")
    p.add_argument("--dest", default=".whl", help="the folder (default: .whl, which gpu_check.sh reads)")
    args = p.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    for cmd in commands(dest, args.python, args.torchao):
        print("wheelhouse:", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            return rc
    wheels = sorted(w.name for w in dest.glob("*.whl"))
    print(f"wheelhouse: {len(wheels)} wheels in {dest}/: {', '.join(wheels)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
