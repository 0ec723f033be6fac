""".github/workflows/nightly.yml: valid, runs a small scenario on torch nightly, keeps the history in
an artifact chained across nights, and fails only through history's gate."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from suite import cli
from suite.analysis.regression import history_gate
from suite.scenario import plan, spec
from tests.test_workflow import check_actionlint, check_schema, run_lines

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/cpu"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def job(workflow) -> dict:
    (job,) = workflow["jobs"].values()
    return job


def suite_commands(job: dict) -> list[list[str]]:
    """The words after `python -m suite` of each line that runs the suite ($VARS as /tmp/VAR)."""
    out = []
    for line in run_lines(job):
        line = re.sub(r"\|\|.*$", "", line)  # `cmd || status=$?`
        words = shlex.split(re.sub(r"\$\{?(\w+)\}?", r"/tmp/\1", line))
        if words[:3] == ["python", "-m", "suite"] and len(words) > 3:
            out.append(words[3:])
    return out


def test_it_runs_every_night_on_a_hosted_runner(workflow, job):
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"schedule", "workflow_dispatch"}
    assert re.fullmatch(r"[\d*/,-]+( [\d*/,-]+){4}", triggers["schedule"][0]["cron"])
    assert job["runs-on"] == "ubuntu-latest" and job["timeout-minutes"] > 0
    assert workflow["permissions"]["actions"] == "read"  # to download an earlier night's artifact
    for step in job["steps"]:
        assert ("uses" in step) != ("run" in step), step
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]  # pinned major


def test_torch_and_torchao_come_from_the_nightly_index(job):
    installs = [ln for ln in run_lines(job) if "pip install" in ln and "torch" in ln]
    assert installs == [f"python -m pip install --pre torch torchao --index-url {NIGHTLY_INDEX}"]


def test_its_suite_commands_parse_and_its_scenario_is_small(workflow, job):
    parser = cli.parser()
    commands = suite_commands(job)
    assert [c[0] for c in commands] == ["env", "run", "history"]
    for words in commands:
        parser.parse_args(words)
    name = workflow["env"]["SCENARIO"]
    cases = plan.expand(spec.resolve(name))
    assert len(cases) <= 12 and {c.precision for c in cases} == {"fp32", "bf16", "fp16"}


def test_it_fails_only_through_the_history_gate(workflow, job):
    history = next(s for s in job["steps"] if "suite history" in s.get("run", ""))
    assert "if" not in history and "continue-on-error" not in history  # its exit status is the job's
    (words,) = [w for w in suite_commands(job) if w[0] == "history"]
    parsed = cli.parser().parse_args(words)
    assert history_gate.parse_fail_on(parsed.fail_on) == history_gate.NIGHTLY
    assert tuple(cli.history.DEFAULT_NIGHTLY_FAIL_ON) == history_gate.NIGHTLY
    run = next(s for s in job["steps"] if "suite run" in s.get("run", ""))
    assert "|| status=$?" in run["run"] and 'if [ "$status" -gt 1 ]' in run["run"]  # a failed case: the gate's


def test_the_history_is_chained_from_night_to_night(job):
    restore = next(s for s in job["steps"] if "gh run download" in s.get("run", ""))
    assert restore["env"]["GH_TOKEN"] == "${{ github.token }}"
    downloaded = re.search(r"--name ([\w-]+) --dir ([\w/-]+)", restore["run"]).groups()
    uploads = {s["with"]["name"]: s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")}
    kept = uploads[downloaded[0]]
    assert kept["if"] == "always()" and kept["with"]["path"].rstrip("/") == downloaded[1]  # a failing night passes it on
    assert all(s["if"] == "always()" for s in uploads.values())
    (run,) = [w for w in suite_commands(job) if w[0] == "run"]
    (hist,) = [w for w in suite_commands(job) if w[0] == "history"]
    folder = downloaded[1] + "/results"
    assert run[run.index("--results") + 1] == hist[hist.index("--results") + 1] == folder


def test_schema_with_check_jsonschema():
    check_schema(WORKFLOW)


def test_actionlint_when_installed():
    check_actionlint(WORKFLOW)
