"""`python -m suite repro RUN` (`suite.analysis.repro`, `suite.cli.repro`): the pinned install lines
and the command of a stored run, from its records; with --run, the run again and the comparison."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from suite import cli, pipeline
from suite.analysis import repro
from suite.cli import repro as repro_command
from suite.core.errors import UserError
from suite.results import store
from suite.scenario import plan, spec
from tests.conftest import TINY_SCENARIO
from tests.json_docs import validated

ROOT = Path(__file__).resolve().parent.parent
SLOW_PATH = ROOT / "results" / "reference" / "cpu_slow_path"

def test_the_torch_build_comes_from_the_recorded_version_label():
    assert repro.pip_line("torch", "2.13.0+cpu") == (
        "pip install 'torch==2.13.0+cpu' --index-url https://download.pytorch.org/whl/cpu")
    assert repro.pip_line("torch", "2.14.1+cu130").endswith("--index-url https://download.pytorch.org/whl/cu130")
    assert repro.pip_line("torch", "2.14.0.dev20261201+cpu") == (
        "pip install --pre 'torch==2.14.0.dev20261201+cpu' --index-url https://download.pytorch.org/whl/nightly/cpu")
    assert repro.pip_line("torch", "2.6.0") == "pip install 'torch==2.6.0'"  # PyPI's build
    assert repro.pip_line("transformer_engine[pytorch]", "2.9.0", "--no-build-isolation ") == (
        "pip install --no-build-isolation 'transformer_engine[pytorch]==2.9.0'")


def test_the_recipe_of_a_committed_reference_run(capsys):
    """The slow-path reference (torch 2.13.0+cpu under the AVX2 emulation): every version pinned,
    the commit, and the ISA overrides ahead of the command."""
    assert cli.main(["repro", str(SLOW_PATH), "--json"]) == 0
    doc = validated(json.loads(capsys.readouterr().out), "repro")
    assert doc["run_id"] == "20261201T091554Z-cbddc1" and doc["scenario"] == "cpu"
    install = doc["install"]
    assert "pip install 'torch==2.13.0+cpu' --index-url https://download.pytorch.org/whl/cpu" in install
    assert {"pip install 'torchao==0.18.0'", "pip install 'numpy==2.4.6'"} <= set(install)
    assert any(line.startswith("git checkout 0599a8144b9b3f55914244e3829f1c90ca42624b") for line in install)
    assert any("prints 634d465d1153990e" in line for line in install)  # the run's code_hash, to check against
    assert doc["command"] == "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python -m suite run cpu --device cpu"
    assert any(u.startswith("the machine itself: Intel") for u in doc["unknown"])
    assert not doc["scenario_stored"]  # recorded before runs kept their scenario
    assert cli.main(["repro", str(SLOW_PATH)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# run 20261201T091554Z-cbddc1 of scenario cpu: 24 cases on ") and doc["command"] in lines


def older(tiny_run: Path, tmp_path: Path) -> Path:
    """A copy of the tiny run as a run stored before scenario_spec existed."""
    df = store.read_file(tiny_run).drop(columns=["scenario_spec", "scenario_hash"])
    path = tmp_path / "results" / "tiny" / tiny_run.name
    store.write_run(store.records_of(df), path)
    return path


def test_an_older_run_takes_its_scenario_from_its_commit_only_where_the_cases_match(tiny_run, tmp_path):
    records = store.read_file(older(tiny_run, tmp_path)).assign(git_sha="a" * 40)
    found = repro.recipe(records, ["python", "-m", "suite", "repro", "X", "--run"], lambda sha, path: TINY_SCENARIO)
    assert found.asked.spec is not None and not found.asked.stored and found.rerun.endswith("repro X --run")
    assert "scenarios/tiny.toml at commit aaaaaaaaaaaa: its cases are the run's 8" in found.asked.source
    assert any(u.startswith("the scenario as run: recovered") for u in found.unknown)
    other = TINY_SCENARIO.replace("sizes = [32, 64]", "sizes = [32, 48, 64]")
    missed = repro.recipe(records, [], lambda sha, path: other).asked
    assert missed.spec is None and "expands to 12 cases, 8 of the run's 8" in missed.source
    assert "neither stored nor found" in repro.recipe(records, [], lambda sha, path: None).asked.source


def test_a_stored_run_keeps_the_scenario_it_was_asked(tiny_run):
    df = store.read_file(tiny_run)
    asked = json.loads(df["scenario_spec"].iloc[0])
    scenario = spec.parse(asked["scenario"])
    assert {c.case_id for c in plan.expand(scenario)} == set(df["case_id"])
    assert pipeline.scenario_spec(scenario, asked["device"])["spec_hash"] == df["scenario_hash"].iloc[0]
    assert df["scenario_hash"].nunique() == 1


def test_repro_run_reruns_into_a_new_run_and_renders_the_comparison(tiny_run, tmp_path, capsys):
    results = tmp_path / "results"
    (results / "tiny").mkdir(parents=True)
    shutil.copy2(tiny_run, results / "tiny" / tiny_run.name)
    run_id = tiny_run.stem
    code = cli.main(["repro", run_id, "--results", str(results), "--reports", str(tmp_path / "reports"), "--run",
                     "--quiet", "--json", "--noise", "0.05"])
    assert code == 0
    doc = validated(json.loads(capsys.readouterr().out), "repro")
    validated(doc["comparison"], "compare")
    assert doc["rerun_id"] != run_id and doc["scenario_stored"]
    assert sorted(p.stem for p in (results / "tiny").glob("*.parquet")) == sorted([run_id, doc["rerun_id"]])
    report = Path(doc["comparison"]["report"])
    assert (report / "index.html").is_file() and (report / "report.md").is_file()
    assert doc["comparison"]["baseline"]["runs"] == [run_id] and doc["comparison"]["candidate"]["runs"] == [doc["rerun_id"]]
    assert len(doc["comparison"]["cases"]) == 8


def test_a_rerun_starts_under_the_runs_own_environment(monkeypatch):
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                 "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    facts = {"run_id": "r1", "cpu_isa_env": "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2"}
    with pytest.raises(UserError, match="overrides ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2, this process "
                                        "has none; .*start it under the run's: CMD"):
        repro_command.check_environment(facts, "CMD")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    repro_command.check_environment(facts, "CMD")  # the same: no error


def test_a_run_whose_scenario_is_lost_cannot_be_rerun(tiny_run, tmp_path, capsys, monkeypatch):
    path = older(tiny_run, tmp_path)
    monkeypatch.setattr(repro_command, "file_at_commit", lambda sha, p: None)
    assert cli.main(["repro", str(path), "--run", "--quiet"]) == 2
    assert "cannot re-run" in capsys.readouterr().err
    assert len(list(path.parent.glob("*.parquet"))) == 1  # nothing was run
