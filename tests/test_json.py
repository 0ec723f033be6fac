"""`--json` is typed data with a published shape: every command that prints results takes it, each
shape is a JSON Schema in docs/schemas/ that docs/cli.md points to, and every document validates
against it (numbers as numbers, lists as lists, objects as objects, `headline` always a list)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from suite.cli import commands
from tests.json_docs import SCHEMAS, cli_json, numbers_as_text, validated

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference"
# Commands whose output is files (a report, pytest-benchmark JSON, an imported run), not results on stdout.
FILES_ONLY = {"report", "export", "import"}


def with_json() -> set[str]:
    return {c.name for c in commands.COMMANDS if any("--json" in a.flags for a in c.arguments)}


def test_every_command_that_prints_results_takes_json_and_has_a_schema():
    names = {c.name for c in commands.COMMANDS}
    assert with_json() == names - FILES_ONLY
    assert {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")} == with_json()
    for path in SCHEMAS.glob("*.schema.json"):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_the_cli_docs_point_to_each_schema():
    text = (ROOT / "docs" / "cli.md").read_text()
    linked = set(re.findall(r"\]\(schemas/([a-z-]+)\.schema\.json\)", text))
    assert linked == with_json()


def test_a_number_in_a_string_is_caught():
    assert numbers_as_text({"geomean_speedup": "0.0962x", "run_id": "20261129", "x": ["1e-3"]}) == [
        "geomean_speedup: '0.0962x'", "x: '1e-3'"]
    with pytest.raises(jsonschema.ValidationError):
        validated({"budget": {}, "picks": [{"not_timed": "fp8_rowwise"}]}, "recommend")


def test_list_plan_predict_and_env(capsys):
    listed = cli_json(capsys, ["list", "--json"])
    assert "cpu" in {s["name"] for s in listed["scenarios"]}
    planned = cli_json(capsys, ["plan", "cpu_update", "--json"])
    assert any(c["params"].get("master") == "bf16_sr" for c in planned["cases"])  # an object, not text
    cli_json(capsys, ["plan", "cpu", "--shards", "2", "--json"])
    predicted = cli_json(capsys, ["predict", "cpu_fp8", "--device", "h100", "--json"])
    assert all(isinstance(c["params"], dict) for c in predicted["cases"])
    env = cli_json(capsys, ["env", "--json"])
    assert env["device"] == "cpu" and isinstance(env["cuda_available"], bool) and env["cpu_threads"] >= 1


def test_recommend_lists_are_lists_and_numbers_are_numbers(capsys):
    doc = cli_json(capsys, ["recommend", str(REFERENCE / "cpu_fp8"), "--json"])
    assert doc["budget"] == {"max_rel_err": 0.01, "max_loss_delta": 0.01}  # the report's, when none is given
    rejected = [r for p in doc["picks"] for r in p["rejected"]]
    assert rejected and all(set(r) == {"precision", "reason"} for r in rejected)
    models = cli_json(capsys, ["recommend", str(REFERENCE / "cpu_models"), "--max-rel-err", "1e-2", "--json"])
    picked = [p for p in models["picks"] if p["pick"]]
    assert picked and all(isinstance(p["speedup"], float) and isinstance(p["rel_err"], float) for p in picked)
