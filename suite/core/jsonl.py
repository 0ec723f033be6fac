"""One record (or request) as one JSON line: the run journal's lines (`suite.results.journal`) and
what a case's process sends back (`suite.measure.executors`) are written and read the same way, and
read within the limits of every JSON the suite parses (`suite.core.jsontext`)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from suite.core import jsontext


def _plain(value):
    """JSON-safe form of a record value: numpy/torch scalars and arrays become Python values, a
    read-only mapping (a record, `suite.measure.record.Record`) its dict, in its order."""
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)  # anything else is recorded as text rather than lost


def encode(obj: Mapping) -> bytes:
    """One line. NaN and +-inf are kept (Python's JSON reads them back as floats); ASCII
    escapes keep any text, even an error message with undecodable bytes, encodable."""
    obj = obj if isinstance(obj, dict) else dict(obj)
    return json.dumps(obj, default=_plain, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict:
    """One line back; over the suite's JSON limits (`suite.core.jsontext`) it is a ValueError too."""
    obj = jsontext.loads(line)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj
