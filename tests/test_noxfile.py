"""The install helper's choice of torch build: the CPU build where there is no NVIDIA GPU, the CUDA
build where there is one, MPSUITE_TORCH over both, a pinned session's version over everything."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def noxfile(monkeypatch):
    spec = importlib.util.spec_from_file_location("mpsuite_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mpsuite_noxfile", module)
    spec.loader.exec_module(module)
    return module


def test_nox_says_nothing_of_uv_it_is_not_asked_to_use(noxfile, caplog):
    import nox.logger

    with caplog.at_level("INFO", logger="nox"):
        nox.logger.logger.info("uv binary not found.")
        nox.logger.logger.info("Creating virtual environment (virtualenv)")
    assert [r.getMessage() for r in caplog.records] == ["Creating virtual environment (virtualenv)"]


def test_no_gpu_means_the_cpu_build(noxfile, monkeypatch):
    monkeypatch.setattr(noxfile, "TORCH", "")
    monkeypatch.setattr(noxfile, "nvidia_gpu", lambda: None)
    requirement, cpu, why = noxfile.torch_choice()
    assert requirement == f"torch=={noxfile.DEFAULT_TORCH}+cpu" and cpu and "no NVIDIA GPU" in why


def test_a_gpu_means_the_cuda_build(noxfile, monkeypatch):
    monkeypatch.setattr(noxfile, "TORCH", "")
    monkeypatch.setattr(noxfile, "nvidia_gpu", lambda: "nvidia-smi lists GPU 0: NVIDIA H200")
    requirement, cpu, why = noxfile.torch_choice()
    assert requirement == f"torch=={noxfile.DEFAULT_TORCH}" and not cpu and "H200" in why


def test_the_user_and_a_pinned_session_choose_first(noxfile, monkeypatch):
    monkeypatch.setattr(noxfile, "TORCH", "torch==2.11.0")
    monkeypatch.setattr(noxfile, "nvidia_gpu", lambda: None)
    assert noxfile.torch_choice() == ("torch==2.11.0", False, "MPSUITE_TORCH")
    # a pinned session installs its own version, in the build this machine wants
    assert noxfile.torch_choice("2.14.1")[0] == "torch==2.14.1+cpu"


def test_the_driver_device_list_shows_a_gpu(noxfile, tmp_path, monkeypatch):
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    monkeypatch.setattr(noxfile.shutil, "which", lambda name: None)
    assert noxfile.nvidia_gpu(gpus) is None
    (gpus / "0000:17:00.0").mkdir()
    assert "1 GPU(s)" in noxfile.nvidia_gpu(gpus)


class FakeSession:
    """What install_torch calls on a nox session, recorded; `held` is the environment's pip list."""

    def __init__(self, held: dict[str, str], fail_first_install: bool = False):
        self.held, self.fail = held, fail_first_install
        self.calls: list[tuple] = []

    def log(self, text):
        self.calls.append(("log", text))

    def run(self, *args, **kwargs):
        self.calls.append(("run", *args))
        if args[3:5] == ("list", "--format=freeze"):
            return "\n".join(f"{k}=={v}" for k, v in self.held.items())
        return ""

    def install(self, *args):
        self.calls.append(("install", *args))
        if self.fail:
            self.fail = False
            import nox.command

            raise nox.command.CommandFailed("no matching distribution")


def test_a_reused_cuda_environment_is_cleaned_before_the_cpu_build(noxfile, monkeypatch):
    monkeypatch.setattr(noxfile, "TORCH", "")
    monkeypatch.setattr(noxfile, "TORCH_INDEX", "")
    monkeypatch.setattr(noxfile, "nvidia_gpu", lambda: None)
    session = FakeSession({"torch": "2.13.0", "triton": "3.8.0", "nvidia-cublas-cu12": "12.9", "numpy": "2.4"})
    noxfile.install_torch(session)
    uninstall = next(c for c in session.calls if c[0] == "run" and "uninstall" in c)
    assert {"torch", "triton", "nvidia-cublas-cu12"} <= set(uninstall) and "numpy" not in uninstall
    assert session.calls[-1] == ("install", f"torch=={noxfile.DEFAULT_TORCH}+cpu")
    assert "no NVIDIA GPU" in session.calls[0][1]  # the choice and why, first


def test_the_cpu_build_falls_back_to_pytorchs_cpu_index(noxfile, monkeypatch):
    monkeypatch.setattr(noxfile, "TORCH", "")
    monkeypatch.setattr(noxfile, "TORCH_INDEX", "")
    monkeypatch.setattr(noxfile, "nvidia_gpu", lambda: None)
    session = FakeSession({}, fail_first_install=True)  # e.g. public PyPI: no +cpu wheels there
    noxfile.install_torch(session)
    assert session.calls[-1] == ("install", f"torch=={noxfile.DEFAULT_TORCH}+cpu", "--index-url", noxfile.CPU_INDEX)


def test_gpu_dryrun_covers_every_gpu_scenario_on_its_gpu(noxfile):
    """Every scenario of scenarios/ written for a CUDA device is dry-run, on a GPU the dry run knows,
    with the torch it supports."""
    from suite.measure import dryrun
    from suite.scenario import spec

    scenarios = spec.load_dir(ROOT / "scenarios")
    cuda = {name for name, (_, s) in scenarios.items()
            if "cuda" in {s.defaults.device, *(getattr(w, "device", None) for w in s.sweep)}}
    assert cuda and set(noxfile.GPU_DRYRUN) == cuda
    assert all(dryrun.resolve_gpu(gpu) for gpu in noxfile.GPU_DRYRUN.values())
    assert noxfile.DRYRUN_TORCH == dryrun.TORCH_PIN and noxfile.DRYRUN_TORCH in noxfile.TORCH_MATRIX
    assert noxfile.GPU_DRYRUN["b200_mx"] == "b200" and noxfile.GPU_DRYRUN["a100"] == "a100"
