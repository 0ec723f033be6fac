"""Starting a dry run: check torch's build (without importing it), build the driver shim, start the
child process with everything it needs set by the suite, and read its outcomes as they come."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from suite.core.errors import UserError
from suite.measure.dryrun import INSTALL, TORCH_PIN, FakeGpu, Outcome, shim

ADVICE = f"`nox -s gpu_dryrun` sets one up, or: {INSTALL} (the CUDA build; on Linux the default index serves it)"


def torch_build() -> tuple[str, str | None]:
    """(torch's version, its CUDA version or None for a CPU build), read from torch/version.py
    without importing torch; a UserError when torch is not installed."""
    found = importlib.util.find_spec("torch")
    if found is None or not found.submodule_search_locations:
        raise UserError(f"the GPU dry run needs torch's CUDA build {TORCH_PIN} and torch is not installed: {ADVICE}")
    text = (Path(list(found.submodule_search_locations)[0]) / "version.py").read_text()
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    cuda = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)", text, re.M)
    return (version.group(1) if version else "unknown"), (cuda.group(1) if cuda else None)


def check_torch(version: str, cuda: str | None) -> None:
    """One line, a UserError, unless this is torch's CUDA build of the pinned version."""
    if cuda is None:
        raise UserError(f"the GPU dry run needs torch's CUDA build {TORCH_PIN}; this is torch {version}, a CPU "
                        f"build: {ADVICE}")
    if version.split("+")[0] != TORCH_PIN:
        raise UserError(f"the GPU dry run supports torch {TORCH_PIN} (CUDA build) only: fake tensors and meta "
                        f"functions change between versions; this is torch {version}: {ADVICE}")


def child_env(gpu: FakeGpu, shim_dir: Path) -> dict[str, str]:
    """The child's environment: the shim preloaded, the stand-in driver first on the library path,
    the pretended GPU, and compile caches of its own (nothing of the user's is reused)."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(p for p in (str(shim_dir / "libcudart_shim.so"), env.get("LD_PRELOAD")) if p)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(shim_dir), env.get("LD_LIBRARY_PATH")) if p)
    env["MPSUITE_DRYRUN_GPU"] = gpu.env()
    env["TORCHINDUCTOR_CACHE_DIR"] = str(shim_dir / "inductor-cache")
    env["TRITON_CACHE_DIR"] = str(shim_dir / "triton-cache")
    env["CUDA_MODULE_LOADING"] = "LAZY"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    root = str(Path(__file__).resolve().parents[3])  # the checkout or site-packages holding suite/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


CHILD = "suite.measure.dryrun.child"


def outcomes(scenario: str, folder: str | None, gpu: FakeGpu, only: list[str] | None,
             case_timeout: int = 300, child_module: str = CHILD) -> Iterator[Outcome]:
    """Each case's outcome as a child finishes it. A case that kills its child (a crash in native
    code) is failed with the exit status and the log's last lines, and a new child goes on after it.
    `child_module`: the module the child runs (the mutation tests' runs the child with a mutant)."""
    check_torch(*torch_build())
    shim_dir, after = shim.build(), None
    while True:
        started, status, last = None, 0, []
        for line in _child(child_module, [scenario, *(["--scenarios", folder] if folder else []),
                                          *(f"--only={terms}" for terms in only or []),
                                          *([f"--after={after}"] if after else [])],
                           gpu, case_timeout, shim_dir):
            if isinstance(line, dict):
                started = line
            elif isinstance(line, Outcome):
                started = None
                yield line
            else:
                status, last = line
        if not status:
            return
        if started is None:
            raise UserError(f"the dry run's child process ended with status {status}: {' | '.join(last)}")
        yield Outcome(started["start"], started["workload"], started["precision"], started["params"], "failed",
                      f"the process died (status {status}) in this case, in native code: {' | '.join(last)}",
                      0.0, started["shape"])
        after = started["start"]


def _child(module: str, argv: list[str], gpu: FakeGpu, case_timeout: int, shim_dir: Path):
    """Run one child: yield each case's start (a dict) and outcome, then (exit status, last log lines)."""
    read_fd, write_fd = os.pipe()
    cmd = [sys.executable, "-m", module, *argv, "--case-timeout", str(case_timeout), "--out-fd", str(write_fd)]
    with tempfile.TemporaryFile("w+") as log:
        with subprocess.Popen(cmd, env=child_env(gpu, shim_dir), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                              pass_fds=(write_fd,)) as child:
            os.close(write_fd)
            with os.fdopen(read_fd) as lines:
                for line in lines:
                    row = json.loads(line)
                    yield row if "start" in row else Outcome(**row)
            status = child.wait()
        log.seek(0)
        yield status, [line.strip() for line in log.read().splitlines() if line.strip()][-3:]
