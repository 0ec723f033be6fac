"""The GPU dry run's CPU side (suite/measure/dryrun): the pretended GPUs, each case's outcome, the
JSON document against its schema, the command's table and exit status on a stub set of outcomes,
the one line a machine without torch's CUDA build gets, and the capability table it shares with
the docs. The dry run itself needs torch's CUDA build: `nox -s gpu_dryrun` runs it, with the
mutation tests (tests/gpu_dryrun/) that show what it catches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite import cli
from suite.core import peaks
from suite.core.errors import UserError
from suite.measure import dryrun
from suite.measure.dryrun import Outcome, child, launch, shim
from suite.precisions import gates
from tests.json_docs import validated

ROOT = Path(__file__).resolve().parent.parent


def test_every_gpu_of_the_peak_table_can_be_pretended():
    assert set(dryrun.PROPS) == {gpu.label for gpu in peaks.PEAKS}
    for short, label, cc in (("h100", "H100 SXM", (9, 0)), ("h200", "H200", (9, 0)), ("a100", "A100 SXM", (8, 0)),
                             ("b200", "B200", (10, 0)), ("l40s", "L40S", (8, 9))):
        gpu = dryrun.resolve_gpu(short)
        assert (gpu.label, gpu.capability) == (label, cc)
        assert dryrun.FakeGpu.parse(gpu.env()) == gpu  # what the shim and the child read back
    assert dryrun.resolve_gpu("mi300x") is None


@pytest.mark.parametrize(("reason", "status"), [
    ("needs compute capability 10.0; this GPU is 9.0", "skipped"),
    ("Transformer Engine is not importable: ModuleNotFoundError: No module named 'transformer_engine'", "beyond"),
])
def test_a_skip_is_the_suites_reason_unless_this_environment_lacks_a_library(reason, status):
    got, text = dryrun.skip_outcome(reason)
    assert got == status and reason in text


def test_an_error_is_beyond_a_fake_run_only_where_fake_tensors_cannot_go():
    status, reason = dryrun.error_outcome("DataDependentOutputException", "aten._local_scalar_dense.default")
    assert status == "beyond" and "data-dependent" in reason and "_local_scalar_dense" in reason
    status, reason = dryrun.error_outcome("TorchRuntimeError", "Dynamo failed", ("DataDependentOutputException",))
    assert status == "beyond"  # raised from a data-dependent read inside a trace
    message = "mat2 must be col_major\nwhile executing %_scaled_mm"
    assert dryrun.error_outcome("RuntimeError", message) == ("failed", f"RuntimeError: {message}")  # whole
    with pytest.raises(ValueError, match="none of"):
        Outcome("id", "gemm", "bf16", {}, "limit", "")


def test_without_mslk_an_nvfp4_cast_kernel_is_asked_for_and_heard_of(monkeypatch):
    """The NVFP4 recipe skips its inline fast cast where mslk is missing; the dry run lets it ask
    anyway (torchao's fake of mslk's op answers) and hears of it, so the case is said beyond."""
    from suite.precisions.mx import recipes

    monkeypatch.setattr(recipes.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(recipes, "mslk_importable", recipes.mslk_importable)  # put back after the test
    heard = []
    child._stand_in_mslk(heard.append)
    assert heard == [] and recipes.mslk_importable() and heard == ["mslk"]


def test_a_recipe_that_disagrees_with_the_capability_table_fails_the_case():
    assert child.gate_disagreement("mxfp8", "needs compute capability 10.0; this GPU is 9.0", (9, 0)) is None
    assert child.gate_disagreement("mxfp8", None, (10, 0)) is None
    assert "accepts a GPU of 9.0" in child.gate_disagreement("nvfp4", None, (9, 0))
    assert "the recipe skips a GPU of 9.0" in child.gate_disagreement("tf32", "needs compute capability 10.0", (9, 0))


STUB = [  # what a child reports, as the command's table and document must show it
    Outcome("a1", "gemm", "fp8_rowwise", {"quantize": "pre"}, "ok", "torch.bfloat16 (4096, 4096)", 0.2, "4096x4096x4096"),
    Outcome("a2", "gemm", "mxfp8", {}, "skipped", "needs compute capability 10.0; this GPU is 9.0", 0.0, "64x64x64"),
    Outcome("a3", "train_step", "bf16", {"compile": True}, "beyond", child.COMPILED, 3.0, None),
    Outcome("a4", "gemm", "fp8_tensorwise", {}, "failed", "RuntimeError: mat2 must be col_major", 0.1, "64x64x64"),
]


@pytest.fixture
def stub_run(monkeypatch):
    def outcomes(scenario, folder, gpu, only, case_timeout=300):
        yield from (STUB if not only else STUB[:3])

    monkeypatch.setattr(launch, "outcomes", outcomes)
    monkeypatch.setattr(launch, "torch_build", lambda: ("2.14.1+cu130", "13.0"))


def test_the_document_holds_every_case_and_the_counts(stub_run, capsys):
    assert cli.main(["run", "gpu_check_h100_fp8", "--dry-run", "h100", "--json"]) == 1  # a case failed
    doc = validated(json.loads(capsys.readouterr().out), "run")
    assert doc["gpu"]["label"] == "H100 SXM" and doc["gpu"]["capability"] == [9, 0] and doc["dry_run"] is True
    assert doc["counts"] == {"ok": 1, "skipped": 1, "beyond": 1, "failed": 1}
    assert [c["status"] for c in doc["cases"]] == ["ok", "skipped", "beyond", "failed"]
    assert doc["cases"][3]["reason"] == "RuntimeError: mat2 must be col_major"
    assert set(doc["cases"][0]) >= {"case_id", "workload", "precision", "params", "status", "reason"}


def test_the_table_shows_progress_and_what_did_not_pass(stub_run, capsys):
    assert cli.main(["run", "gpu_check_h100_fp8", "--dry-run", "b200", "--only", "workload=gemm"]) == 0
    out, err = capsys.readouterr()
    assert "[1/" in err and "fake B200 (compute capability 10.0)" in err
    assert "inductor's code generation" in out and "Skipped, by reason" in out and "fp8_rowwise" not in out
    assert out.strip().splitlines()[-1].startswith("gpu_check_h100_fp8 on a fake B200: 1 ok, 1 skipped, 1 beyond, 0 failed")


def test_an_unknown_gpu_is_one_line(capsys):
    assert cli.main(["run", "gpu_check_h100_fp8", "--dry-run", "mi300x"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "h100-sxm" in err


def test_without_the_cuda_build_one_line_says_how_to_get_it(monkeypatch, capsys):
    monkeypatch.setattr(launch, "torch_build", lambda: ("2.13.0+cpu", None))
    assert cli.main(["run", "gpu_check_h100_fp8", "--dry-run", "h100"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nox -s gpu_dryrun" in err and "pip install torch==2.14.1" in err
    with pytest.raises(UserError, match="supports torch 2.14.1"):
        launch.check_torch("2.13.0+cu128", "12.8")
    launch.check_torch("2.14.1+cu130", "13.0")


def test_this_torch_is_read_without_importing_it():
    import torch

    version, cuda = launch.torch_build()
    assert version == torch.__version__ and cuda == torch.version.cuda


def test_a_missing_compiler_or_headers_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "no-such-cc")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="no C compiler") as err:
        shim.compiler()
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="CUDA runtime headers") as err:
        shim.cuda_include([tmp_path])
    assert "\n" not in str(err.value)
    (tmp_path / "triton/backends/nvidia/include/crt").mkdir(parents=True)
    for name in shim.NEEDS:
        (tmp_path / "triton/backends/nvidia/include" / name).write_text("")
    assert shim.cuda_include([tmp_path]) == tmp_path / "triton/backends/nvidia/include"


def test_the_child_is_set_up_by_the_suite(tmp_path):
    env = launch.child_env(dryrun.resolve_gpu("b200"), tmp_path)
    assert env["LD_PRELOAD"].split()[0] == str(tmp_path / "libcudart_shim.so")
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path)
    assert env["MPSUITE_DRYRUN_GPU"].startswith("NVIDIA B200;10;0;")


def test_the_capability_table_is_the_docs_and_the_models():
    from suite.analysis.roofline import model

    assert gates.min_cc("nvfp4") == gates.min_cc("mxfp8") == 10.0 and gates.min_cc("fp8_rowwise") == 8.9
    assert gates.min_cc("fp32") == 0.0 and gates.below("tf32", (7, 5)) and not gates.below("nvfp4", (10, 0))
    assert model.MIN_CC is gates.FORMAT_MIN_CC
    assert gates.markdown() in (ROOT / "docs" / "precisions.md").read_text()
