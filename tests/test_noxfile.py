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
