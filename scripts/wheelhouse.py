"""Download, on a machine that reaches a package index, every wheel a bare GPU machine lacks to run
`scripts/gpu_check.sh`, resolved (dependencies included, one version each), for that machine's
Python and platform, into one folder (`.whl/` by default) that travels with the working tree.

    python scripts/wheelhouse.py                         # Python 3.12, manylinux x86-64, into .whl/
    python scripts/wheelhouse.py --python 3.11 --dest /tmp/whl
    nox -s wheelhouse -- --python 3.12

What the target image has already (torch, triton, pandas, pyarrow, matplotlib, numpy, pytest,
nvidia-ml-py) is not downloaded; what it lacks is: pydantic (with pydantic-core, annotated-types,
typing-extensions, typing-inspection), jinja2 (with MarkupSafe) and torchao. `gpu_check.sh` then
installs every wheel of the folder offline into a temporary folder on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

# What the bare GPU image lacks, as requirements (pip resolves their dependencies).
MISSING = ["pydantic>=2.5", "jinja2>=3.1"]
# torchao's release paired with the project's default torch (noxfile.TORCH_MATRIX); pass
# --torchao to pair it with the target's torch instead, or --torchao "" to leave it out.
DEFAULT_TORCHAO = "0.18.0"
# Platform tags a current x86-64 Linux accepts, newest first (pip takes any of them).
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def command(dest: Path, python: str = "3.12", torchao: str = DEFAULT_TORCHAO,
            platforms: list[str] = PLATFORMS) -> list[str]:
    """The pip command that fills `dest`: binary wheels only (the target has no compiler to build
    with), for `python` and `platforms`, dependencies resolved by pip."""
    requirements = MISSING + ([f"torchao=={torchao}"] if torchao else [])
    platform_args = [arg for p in platforms for arg in ("--platform", p)]
    return [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", python,
            "--implementation", "cp", *platform_args, "--dest", str(dest), *requirements]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default="3.12", help="the target's Python version (default: 3.12, the GPU image's)")
    p.add_argument("--torchao", default=DEFAULT_TORCHAO, help=f"torchao release (default {DEFAULT_TORCHAO}; '' for none)")
    p.add_argument("--dest", default=".whl", help="the folder (default: .whl, which gpu_check.sh reads)")
    args = p.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = command(dest, args.python, args.torchao)
    print("wheelhouse:", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc == 0:
        wheels = sorted(w.name for w in dest.glob("*.whl"))
        print(f"wheelhouse: {len(wheels)} wheels in {dest}/: {', '.join(wheels)}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
