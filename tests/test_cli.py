"""End to end through the command line: run -> results parquet -> report, and errors as one line."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from suite import cli
from suite.results import store
from tests.conftest import TINY_SCENARIO

REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"


@pytest.fixture
def workdir(tmp_path, write_scenario):
    write_scenario(TINY_SCENARIO, "tiny.toml")
    return tmp_path


def main(workdir, *args):
    return cli.main([*args])


def test_run_writes_results_and_report(workdir, capsys):
    rc = cli.main([
        "run", "tiny", "--scenarios", str(workdir / "scenarios"), "--results", str(workdir / "results"),
        "--reports", str(workdir / "reports"), "--quiet",
    ])
    assert rc == 0
    files = list((workdir / "results" / "tiny").glob("*.parquet"))
    assert len(files) == 1
    df = store.read_file(files[0])
    assert len(df) == 8 and set(df["status"]) == {"ok", "skipped"}
    assert df["run_id"].nunique() == 1 and files[0].stem == df["run_id"].iloc[0]
    ok = df[df["status"] == "ok"]
    if Path("/proc/stat").is_file():  # other work on the machine meanwhile (suite/measure/contention.py)
        assert (ok["others_cpus"] >= 0).all() and (ok["machine_cpus"] >= 1).all()
    for name in ("index.html", "report.md", "throughput_gemm.svg"):
        assert (workdir / "reports" / "tiny" / name).is_file()
    out = capsys.readouterr().out
    assert "bf16" in out and "geomean speedup" in out

    # The report can be re-rendered from the results alone, elsewhere.
    assert cli.main(["report", str(workdir / "results" / "tiny"), "--out", str(workdir / "again")]) == 0
    assert (workdir / "again" / "report.md").read_text().startswith("# mpsuite report: tiny")


def test_list_and_plan(workdir, capsys):
    assert cli.main(["list", "--scenarios", str(workdir / "scenarios")]) == 0
    assert "tiny" in capsys.readouterr().out
    assert cli.main(["plan", "tiny", "--scenarios", str(workdir / "scenarios")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 8


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "nope"], "unknown scenario 'nope'"),
        (["report", "/nonexistent/results"], "no such results file or folder"),
        # CI's "$FAIL_ON" left unset: refused before anything is read, never a gate that passes all
        (["compare", "/nonexistent/a", "/nonexistent/b", "--fail-on", ""], "--fail-on '' names no verdict"),
        (["compare", "/nonexistent/a", "/nonexistent/b", "--fail-on", ",,"], "--fail-on ',,' names no verdict"),
        (["history", "cpu", "--results", "/nonexistent", "--fail-on", ""], "--fail-on '' names no verdict"),
        (["history", "cpu", "--results", "/nonexistent", "--fail-on", " , "], "--fail-on ' , ' names no verdict"),
    ],
)
def test_user_errors_are_one_line_exit_2(workdir, capsys, args, expected):
    args = args + (["--scenarios", str(workdir / "scenarios")] if args[0] == "run" else [])
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mpsuite: error:") and expected in err and "\n" not in err


def test_bad_scenario_file_from_a_real_process(write_scenario, tmp_path):
    path = write_scenario('name = "x"\n[[sweep]]\nworkload = "gemm"\nprecisions = ["fp64"]\nmkn = [[1, 1, 1]]\n')
    proc = subprocess.run([sys.executable, "-m", "suite", "plan", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert f"{path}: sweep[0].precisions[0]: unknown precision 'fp64'" in proc.stderr


def test_threads_is_a_setting_recorded_on_every_record_and_restored(workdir):
    import torch

    before = torch.get_num_threads()
    scenario = (workdir / "scenarios" / "tiny.toml").read_text().replace('device = "cpu"', 'device = "cpu"\nthreads = 1')
    (workdir / "scenarios" / "tiny.toml").write_text(scenario)
    args = ["run", "tiny", "--scenarios", str(workdir / "scenarios"), "--results", str(workdir / "results"),
            "--no-report", "--quiet"]
    assert cli.main(args) == 0
    (first,) = (workdir / "results" / "tiny").glob("*.parquet")
    df = store.read_file(first)
    assert set(df["cpu_threads"]) == {1} and set(df["threads_setting"]) == {1}
    assert torch.get_num_threads() == before
    assert cli.main([*args, "--threads", "2"]) == 0  # the command line wins over the scenario
    second = next(p for p in (workdir / "results" / "tiny").glob("*.parquet") if p != first)
    assert set(store.read_file(second)["cpu_threads"]) == {2}
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1e3"])
def test_bad_thread_counts_are_one_line_errors(workdir, bad, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "tiny", "--threads", bad])
    assert stop.value.code == 2 and "expected a whole number of threads" in capsys.readouterr().err


def test_report_of_results_without_rows_says_so_and_exits_2(tmp_path, capsys):
    src = next((REFERENCE / "cpu_mx").glob("*.parquet"))
    empty = tmp_path / "cpu_mx" / src.name
    empty.parent.mkdir()
    pq.write_table(pq.read_table(src).slice(0, 0), empty)  # a results file of zero rows
    for given in (empty, empty.parent):
        for argv in (["report", str(given), "--out", str(tmp_path / "r")], ["recommend", str(given)]):
            assert cli.main(argv) == 2  # recommend raised a ValueError from numpy
            err = capsys.readouterr().err.strip()
            assert err == f"mpsuite: error: {given}: no records to report (the results hold zero rows)"
    assert not (tmp_path / "r").exists()


def test_a_report_of_several_scenarios_never_goes_into_the_current_folder(tmp_path, monkeypatch, capsys):
    results, here = tmp_path / "results", tmp_path / "here"
    for name in ("cpu_mx", "cpu_dist"):
        (results / name).mkdir(parents=True)
        for f in (REFERENCE / name).glob("*.parquet"):
            (results / name / f.name).write_bytes(f.read_bytes())
    here.mkdir()
    monkeypatch.chdir(here)
    for out in (".", "", str(here)):
        assert cli.main(["report", str(results), "--out", out]) == 2
        err = capsys.readouterr().err.strip()
        assert "is the current folder, and a report of 2 scenarios" in err and "--out reports" in err and "\n" not in err
    assert list(here.iterdir()) == []  # refused before anything is written


RUN_ID = "20261129T143751Z-04f860"
EVERY_RUN_FLAG = ["run", "a b.toml", "--scenarios", "d", "--max-cases", "9", "--only", "a=1", "--only", "b=*",
                  "--shard", "0/2", "--group", "g", "--quiet", "--json", "--results", "s3://x/y", "--reports", "r",
                  "--device", "cpu", "--no-report", "--require-measured", "--resume", "20261129T143751Z-000000",
                  "--isolate", "--case-timeout", "30", "--threads", "4", "--executor", "ray", "--address", "h:1",
                  "--dry-run", "h100"]


def test_the_resume_command_repeats_every_resumed_run_argument_as_given():
    """The printed resume command is built from run's declarations: parsed back, it asks for the
    same run (--resume now the run to finish); shard and group come from the journal, --json and
    --dry-run stay behind."""
    from suite.cli import run

    given, unsaid = cli.parser().parse_args(EVERY_RUN_FLAG), cli.parser().parse_args(EVERY_RUN_FLAG[:2])
    named = {word.lstrip("-").replace("-", "_") for word in EVERY_RUN_FLAG}
    assert {a.dest for a in run.ARGUMENTS} <= named | {"scenario"}  # every run argument is given here
    words = shlex.split(run.resume_command(given, RUN_ID))
    assert words[:7] == ["python", "-m", "suite", "run", "a b.toml", "--resume", RUN_ID]
    again = cli.parser().parse_args(words[3:])
    for argument in run.ARGUMENTS:
        expected = getattr(given if argument.resumed else unsaid, argument.dest)
        assert getattr(again, argument.dest) == (RUN_ID if argument.dest == "resume" else expected), argument.flag
    assert run.resume_command(unsaid, RUN_ID) == f"python -m suite run 'a b.toml' --resume {RUN_ID}"  # defaults unsaid


def test_every_command_declares_its_arguments_once_in_its_own_module():
    """The parser is assembled from each command module's `COMMAND`; a flag is one declaration."""
    from suite.cli import commands

    for command in commands.COMMANDS:
        assert sys.modules[command.main.__module__].COMMAND is command
        flags = [flag for argument in command.arguments for flag in argument.flags]
        assert len(flags) == len(set(flags)), command.name
