"""The scheduler templates under scripts/fleet/ and the CI matrix example: checked by the tools
their ecosystems use (shellcheck, a Kubernetes schema validator, GitHub's workflow schema) when
installed, and their mpsuite command lines parsed by the suite's own parser."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite import cli
from suite.fleet import shard

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
SBATCH = ROOT / "scripts" / "fleet" / "slurm.sbatch"
JOB = ROOT / "scripts" / "fleet" / "k8s-indexed-job.yaml"
MATRIX = ROOT / ".github" / "workflows" / "fleet-example.yml"


def suite_args(command: list[str]) -> list[str]:
    """The arguments after `python -m suite` (or the script's "$python" -m suite)."""
    at = command.index("suite")
    assert command[at - 1] == "-m"
    return command[at + 1:]


def test_sbatch_script_passes_shellcheck():
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.skip("shellcheck is not installed (Debian: apt-get install shellcheck)")
    result = subprocess.run([exe, "--severity=style", str(SBATCH)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_sbatch_script_asks_one_gpu_exclusively_and_runs_its_array_task():
    text = SBATCH.read_text()
    directives = re.findall(r"^#SBATCH (\S+)", text, re.M)
    assert "--gres=gpu:1" in directives and "--exclusive" in directives and "--requeue" in directives
    [line] = [line for line in text.splitlines() if line.startswith("exec ")]
    args = cli.parser().parse_args(suite_args(shlex.split(line.replace('"$scenario"', "h100_fp8")
                                                          .replace('"$results"', "results"))))
    assert args.shard == "auto" and args.require_measured
    environ = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "8",
               "SLURM_ARRAY_JOB_ID": "4242"}
    assert str(shard.parse(args.shard, environ)) == "3/8"
    assert shard.group_name(args.group, environ) == "slurm-4242"


def test_indexed_job_validates_against_the_kubernetes_schema():
    validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for document in yaml.safe_load_all(JOB.read_text()):
        validate.validate(document, "1.33.0", strict=True)  # raises on any schema error


def test_indexed_job_gives_each_index_a_gpu_and_node_of_its_own_and_one_group():
    job = yaml.safe_load(JOB.read_text())
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed"
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    args = cli.parser().parse_args(suite_args(container["command"]))
    assert shard.parse(args.shard, {"JOB_COMPLETION_INDEX": "0"}).count == spec["completions"]
    [group] = [e for e in container["env"] if e["name"] == "MPSUITE_RUN_GROUP"]
    assert "controller-uid" in group["valueFrom"]["fieldRef"]["fieldPath"]


def test_matrix_example_validates_against_githubs_workflow_schema():
    pytest.importorskip("check_jsonschema")
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(MATRIX)],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_matrix_legs_are_the_shards_and_the_last_job_reports_them_together():
    flow = yaml.safe_load(MATRIX.read_text())
    legs = flow["jobs"]["shard"]["strategy"]["matrix"]["shard"]
    [run] = [s["run"] for s in flow["jobs"]["shard"]["steps"] if "suite run" in s.get("run", "")]
    args = cli.parser().parse_args(suite_args(shlex.split(run.replace("${{ matrix.shard }}", "0"))))
    assert shard.parse(args.shard).count == len(legs) and legs == list(range(len(legs)))
    report = flow["jobs"]["report"]
    assert report["needs"] == "shard" and report["if"] == "always()"  # a failed leg still gets its report


def test_matrix_example_passes_actionlint_when_installed():
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint is not installed (a Go binary; no PyPI wheel of the upstream tool)")
    result = subprocess.run([exe, str(MATRIX)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout
