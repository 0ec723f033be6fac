"""`python -m suite repro RUN` (`suite.analysis.regression.repro`, `suite.cli.repro`): the pinned install lines
and the command of a stored run, from its records; with --run, the run again and the comparison."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from suite import cli, pipeline
from suite.analysis.regression import repro
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
    assert ["pip", "install", "torch==2.13.0+cpu", "--index-url", "https://download.pytorch.org/whl/cpu"] in install
    assert ["pip", "install", "torchao==0.18.0"] in install and ["pip", "install", "numpy==2.4.6"] in install
    assert ["git", "checkout", "0599a8144b9b3f55914244e3829f1c90ca42624b"] in install
    assert doc["code_hash"] == "634d465d1153990e"  # the run's, for the install step that prints it here
    assert doc["command"] == ["env", "ATEN_CPU_CAPABILITY=avx2", "ONEDNN_MAX_CPU_ISA=AVX2",
                              "python", "-m", "suite", "run", "cpu", "--device", "cpu"]
    assert any(u.startswith("the machine itself: Intel") for u in doc["unknown"])
    assert not doc["scenario_stored"] and doc["rejected"] == []  # recorded before runs kept their scenario
    assert cli.main(["repro", str(SLOW_PATH)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# run 20261201T091554Z-cbddc1 of scenario cpu: 24 cases on ")
    assert "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python -m suite run cpu --device cpu" in lines
    assert "pip install 'torch==2.13.0+cpu' --index-url https://download.pytorch.org/whl/cpu" in lines
    assert any("prints 634d465d1153990e" in line for line in lines)


def older(tiny_run: Path, tmp_path: Path) -> Path:
    """A copy of the tiny run as a run stored before scenario_spec existed."""
    df = store.read_file(tiny_run).drop(columns=["scenario_spec", "scenario_hash"])
    path = tmp_path / "results" / "tiny" / tiny_run.name
    store.write_run(store.records_of(df), path)
    return path


def test_an_older_run_takes_its_scenario_from_its_commit_only_where_the_cases_match(tiny_run, tmp_path):
    records = store.read_file(older(tiny_run, tmp_path)).assign(git_sha="a" * 40)
    found = repro.recipe(records, ["python", "-m", "suite", "repro", "X", "--run"], lambda sha, path: TINY_SCENARIO)
    assert found.asked.spec is not None and not found.asked.stored and found.rerun.line().endswith("repro X --run")
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


# --- a results file from elsewhere: nothing it carries runs on the reader's machine -----------------

def stored_as(tiny_run: Path, tmp_path: Path, drop: tuple[str, ...] = (), **fields) -> Path:
    """A copy of the tiny run with `fields` set on every record (and `drop`'s columns gone), as a
    file someone sent."""
    df = store.read_file(tiny_run).drop(columns=list(drop)).assign(**fields)
    path = tmp_path / "sent" / "tiny" / tiny_run.name
    store.write_run(store.records_of(df), path)
    return path


PAYLOAD = "$(touch pwned)`touch pwned`;touch pwned"
HOSTILE = {"torch_version": f"2.13.0+cpu {PAYLOAD}", "numpy_version": f"2.4.6';{PAYLOAD};'",
           "te_version": "2.9.0\ntouch pwned", "python_version": f"3.11; {PAYLOAD}",
           "git_sha": f"abc1234 {PAYLOAD}", "torch_git_version": "\ntouch pwned",
           "device_name": "Intel Xeon\ntouch pwned", "cpu_isa_env": f"ATEN_CPU_CAPABILITY=avx2;{PAYLOAD}",
           "env_threads": f"2 {PAYLOAD}", "code_hash": f"634d465d\n{PAYLOAD}", "device": f"cpu;{PAYLOAD}",
           "driver_version": f"570\n{PAYLOAD}", "scenario_hash": f"\n{PAYLOAD}", "threads_setting": 1_000_000}


def test_hostile_fields_are_named_and_left_out_of_every_line(tiny_run, tmp_path, monkeypatch, capsys):
    """Every field that would reach a printed line carries shell syntax or a newline: each is named on
    stderr and in the JSON, none reaches a line, and every line splits (shlex) into the argv --json holds."""
    monkeypatch.chdir(tmp_path)
    path = stored_as(tiny_run, tmp_path, **HOSTILE)
    assert cli.main(["repro", str(path), "--json"]) == 0
    doc = validated(json.loads(capsys.readouterr().out), "repro")
    assert {r["field"] for r in doc["rejected"]} == set(HOSTILE)
    assert "pwned" not in json.dumps({k: v for k, v in doc.items() if k != "rejected"})
    assert cli.main(["repro", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "pwned" not in out and "pwned" not in err
    assert sorted(line.split(": ")[2].split(" is not ")[0] for line in err.splitlines()) == sorted(HOSTILE)
    commands = [line for line in out.splitlines() if not line.startswith("# ")]
    venv, *install = doc["install"]
    assert shlex.split(commands[0], comments=True) == [*venv, "&&", ".", f"{doc['venv']}/bin/activate"]
    assert [shlex.split(line, comments=True) for line in commands[1:len(doc["install"])]] == install
    assert [argv_of(line) for line in commands[len(doc["install"]):]] == [doc["command"], doc["rerun"]]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "sent" / "tiny" / "pwned").exists()


def argv_of(line: str) -> list[str]:
    """A printed command line as the argv it runs: VAR=value words in front through env(1)."""
    words = shlex.split(line, comments=True)
    return ["env", *words] if "=" in words[0] else words


def test_a_filter_from_a_stored_spec_stays_one_word(tiny_run, tmp_path, capsys):
    asked = json.loads(store.read_file(tiny_run)["scenario_spec"].iloc[0])
    path = stored_as(tiny_run, tmp_path, scenario_spec=json.dumps({**asked, "only": [f"shape=32x* {PAYLOAD}"]}),
                     cpu_isa_env="ATEN_CPU_CAPABILITY=avx2", env_threads="2", threads_setting=2)
    assert cli.main(["repro", str(path), "--json"]) == 0
    doc = validated(json.loads(capsys.readouterr().out), "repro")
    assert doc["command"] == ["env", "ATEN_CPU_CAPABILITY=avx2", "OMP_NUM_THREADS=2", "python", "-m", "suite", "run",
                              "tiny", "--device", "cpu", "--threads", "2", "--only", f"shape=32x* {PAYLOAD}"]
    assert cli.main(["repro", str(path)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if " -m suite run " in line)
    assert line.startswith("ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=2 python -m suite run tiny")
    assert argv_of(line) == doc["command"]


def test_a_commit_from_a_results_file_never_reaches_git_as_an_option(tiny_run, tmp_path, capsys):
    """An older (or imported) run has no scenario_spec: its commit's scenario file is read with git,
    and a git_sha of `--output=PATH` made `git show` write PATH:scenarios/tiny.toml."""
    (tmp_path / "out:scenarios").mkdir()
    path = stored_as(tiny_run, tmp_path, drop=("scenario_spec", "scenario_hash"), git_sha=f"--output={tmp_path}/out")
    assert cli.main(["repro", str(path)]) == 0
    out, err = capsys.readouterr()
    assert not list((tmp_path / "out:scenarios").iterdir())
    assert "git_sha is not a commit" in err and "--output" not in out
    assert repro_command.file_at_commit(f"--output={tmp_path}/out", "scenarios/tiny.toml") is None
    assert not list((tmp_path / "out:scenarios").iterdir())


@pytest.mark.parametrize("spoil, field", [
    ({"only": 5}, "scenario_spec: scenario: required field is missing"),
    ({}, "scenario_spec: scenario: required field is missing"),
    ("keep:only=5", "scenario_spec: only: Input should be a valid list"),
    ("keep:only=newline", "scenario_spec: only[0]: must be printable text on one line"),
    ("keep:device=meta", "scenario_spec: device: Input should be 'auto', 'cpu' or 'cuda'"),
    ("keep:threads=0", "scenario_spec: scenario.defaults.threads: Input should be greater than or equal to 1"),
    ("threads_setting=-3", "column threads_setting holds -3"),  # refused on read: a negative count
    ("threads_setting=1000000", "its threads_setting is not a whole number of threads from 1 to 4096"),
    ("cpu_isa_env", "its cpu_isa_env is not NAME=value overrides"),
])
def test_repro_run_refuses_a_bad_stored_spec_in_one_line(tiny_run, tmp_path, capsys, spoil, field):
    asked = json.loads(store.read_file(tiny_run)["scenario_spec"].iloc[0])
    fields = {}
    if isinstance(spoil, dict):
        fields["scenario_spec"] = json.dumps(spoil)
    elif spoil.startswith("keep:"):
        key, value = spoil[5:].split("=")
        changed = {"only": {"only": 5 if value == "5" else ["precision=fp32\ntouch pwned"]},
                   "device": {"device": value},
                   "threads": {"scenario": {**asked["scenario"], "defaults": {**asked["scenario"]["defaults"],
                                                                             "threads": 0}}}}[key]
        fields["scenario_spec"] = json.dumps({**asked, **changed})
    elif spoil.startswith("threads_setting="):
        fields["threads_setting"] = int(spoil.partition("=")[2])
    else:
        fields["cpu_isa_env"] = "ATEN_CPU_CAPABILITY=$(touch pwned)"
    path = stored_as(tiny_run, tmp_path, **fields)
    assert cli.main(["repro", str(path), "--run", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and field in err
    assert len(list(path.parent.glob("*.parquet"))) == 1  # nothing was run
