"""The CI workflow .github/workflows/benchmarks.yml: valid, and every command it runs exists."""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite import cli
from suite.analysis.regression import compare

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "benchmarks.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def nox_sessions() -> set[str]:
    """Session names defined in noxfile.py (function name, or `name=` of @nox.session), read with ast."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    names = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            target = call.func if call else dec
            if isinstance(target, ast.Attribute) and target.attr == "session":
                name = next((kw.value.value for kw in (call.keywords if call else []) if kw.arg == "name"), None)
                names.add(name or node.name)
    return names


def run_lines(job: dict) -> list[str]:
    """Every shell command line of a job's steps (continuations joined, comments dropped)."""
    lines = []
    for step in job["steps"]:
        script = step.get("run", "").replace("\\\n", " ")
        lines += [ln.strip() for ln in script.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return lines


def nox_calls(job: dict) -> list[tuple[str, list[str]]]:
    """(session, posargs) of each `nox -s SESSION [-- ARGS]` in a job."""
    calls = []
    for line in run_lines(job):
        words = shlex.split(line)
        if "nox" not in words or "-s" not in words:  # e.g. `pip install nox`
            continue
        session = words[words.index("-s") + 1]
        posargs = words[words.index("--") + 1:] if "--" in words else []
        calls.append((session, posargs))
    return calls


def test_triggers_and_jobs(workflow):
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    assert set(workflow["jobs"]) == {"cpu", "gpu"}
    assert workflow["jobs"]["cpu"]["runs-on"] == "ubuntu-latest"
    assert "self-hosted" in workflow["jobs"]["gpu"]["runs-on"]
    for job in workflow["jobs"].values():
        assert job["timeout-minutes"] > 0
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]  # pinned major


def test_every_nox_session_the_workflow_runs_exists(workflow):
    defined = nox_sessions()
    called = {s for job in workflow["jobs"].values() for s, _ in nox_calls(job)}
    assert called == {"cpu", "h100_fp8", "regress"}
    missing = called - defined
    assert not missing, f"noxfile.py has no session(s) {sorted(missing)}"


def test_the_arguments_passed_through_nox_are_valid_suite_commands(workflow):
    """`nox -s cpu -- ARGS` runs `python -m suite run cpu ARGS`, `regress -- ARGS` runs `compare ARGS`:
    both must parse with the suite's own argument parser."""
    wrapped = {"cpu": ["run", "cpu"], "h100_fp8": ["run", "h100_fp8"], "regress": ["compare"]}
    parser = cli.parser()
    for job in workflow["jobs"].values():
        for session, posargs in nox_calls(job):
            args = [re.sub(r"\$\{?(\w+)\}?", r"/tmp/\1", a) for a in posargs]  # shell variables
            parsed = parser.parse_args(wrapped[session] + args)
            if session == "regress":  # the default gate, on pooled runs
                assert compare.parse_fail_on(parsed.fail_on) == compare.DEFAULT_FAIL_ON and parsed.out
                assert all(",runs=3" in side for side in (parsed.baseline, parsed.candidate))


def test_cpu_job_pins_a_cpu_torch_and_publishes_reports(workflow):
    job = workflow["jobs"]["cpu"]
    torch = workflow["env"]["MPSUITE_TORCH"]
    assert re.fullmatch(r"torch==\d+\.\d+\.\d+", torch)
    assert job["env"]["MPSUITE_TORCH_INDEX"].endswith("/whl/cpu")
    assert "MPSUITE_TORCH_INDEX" in (ROOT / "noxfile.py").read_text()  # the install helper reads it
    uploads = {s["with"]["path"] for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")}
    assert uploads == {"reports/", "results/"}
    assert any("reports/cpu/report.md" in ln and "GITHUB_STEP_SUMMARY" in ln for ln in run_lines(job))


def test_gpu_job_fails_an_all_skipped_run_and_keeps_to_a_venv(workflow):
    job = workflow["jobs"]["gpu"]
    runs = [args for session, args in nox_calls(job) if session == "h100_fp8"]
    assert runs and all("--require-measured" in args for args in runs)
    lines = run_lines(job)
    assert not any("--user" in ln for ln in lines) and any("-m venv .venv" in ln for ln in lines)
    for step in job["steps"]:
        if step.get("uses", "").startswith("actions/upload-artifact"):
            assert step["if"] == "always()"  # the reports of a failing run are the ones wanted
    labels = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    assert set(job["runs-on"]) - {"self-hosted", "linux", "x64"} <= set(labels)


def test_gpu_job_gates_on_the_stored_baseline(workflow):
    job = workflow["jobs"]["gpu"]
    assert [s for s, _ in nox_calls(job)].count("h100_fp8") == 1 and any(
        "for i in 1 2 3" in ln for ln in run_lines(job))  # three runs per side
    regress = next(s for s in job["steps"] if "regress" in s.get("run", ""))
    assert "if" not in regress and "continue-on-error" not in regress  # its failure fails the job
    store_step = next(s for s in job["steps"] if "next baseline" in s.get("name", ""))
    assert "success()" in store_step["if"] and "refs/heads/main" in store_step["if"]


def check_schema(path: Path) -> None:
    """A workflow against the GitHub workflow JSON schema check-jsonschema ships (offline), when installed."""
    pytest.importorskip("check_jsonschema")
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def check_actionlint(path: Path) -> None:
    """A workflow through actionlint, when installed."""
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint is not installed (a Go binary; no PyPI wheel of the upstream tool)")
    done = subprocess.run([exe, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_schema_with_check_jsonschema():
    check_schema(WORKFLOW)


def test_actionlint_when_installed():
    check_actionlint(WORKFLOW)
