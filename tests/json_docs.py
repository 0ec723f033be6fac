"""The `--json` documents of the CLI, checked against the JSON Schemas published in docs/schemas/
(docs/cli.md): every test that reads a command's `--json` reads it through `cli_json`."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import jsonschema

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schemas"
# A number written as text ("0.0962x", "1.5e-03", "42"): what a typed document never holds.
NUMBER_TEXT = re.compile(r"-?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?x?", re.IGNORECASE)
# Names, hashes, versions and texts that may look like one (env-diff's `base`/`cand` are an
# environment column's values as text: "13.0" is CUDA's version, not a number; repro's argument
# vectors are words, "--threads", "2").
TEXT_KEYS = re.compile(r".*(_id|_sha|_hash|_version|selector|label|setting|shape|name|text|sentence|reason|description)$"
                       r"|base|cand|install|command|rerun")


@cache
def schema(command: str) -> dict:
    return json.loads((SCHEMAS / f"{command}.schema.json").read_text(encoding="utf-8"))


def validated(doc, command: str):
    """`doc` after checking it against `command`'s schema, and that no number hides in a string."""
    jsonschema.Draft202012Validator(schema(command)).validate(doc)
    assert not numbers_as_text(doc), numbers_as_text(doc)
    return doc


def numbers_as_text(doc, key: str = "") -> list[str]:
    if isinstance(doc, dict):
        return [bad for k, v in doc.items() for bad in numbers_as_text(v, str(k))]
    if isinstance(doc, list):
        return [bad for v in doc for bad in numbers_as_text(v, key)]
    if isinstance(doc, str) and NUMBER_TEXT.fullmatch(doc) and not TEXT_KEYS.fullmatch(key):
        return [f"{key}: {doc!r}"]
    return []


def cli_json(capsys, argv: list[str], status: int = 0):
    """`python -m suite ARGV` (with --json) in this process: its document, validated."""
    from suite import cli

    assert cli.main(argv) == status
    return validated(json.loads(capsys.readouterr().out), argv[0])
