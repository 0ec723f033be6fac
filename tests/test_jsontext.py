"""suite/core/jsontext.py: the limits every JSON read from a file is held to, checked before parsing,
and long arrays of numbers read packed (issue #35)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.core import jsontext


def reference_depth(text: str) -> int:
    """Depth by walking the text: a quote after an odd run of backslashes is inside a string."""
    level = deepest = run = 0
    inside = False
    for ch in text:
        if ch == '"' and run % 2 == 0:
            inside = not inside
        elif not inside and ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif not inside and ch in "]}":
            level -= 1
        run = run + 1 if ch == "\\" else 0
    return deepest


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='[]{}"\\a', max_size=40), chunk=st.integers(1, 8))
def test_the_depth_scan_counts_brackets_outside_strings_across_chunks(text, chunk):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsontext, "_CHUNK", chunk)  # escapes and strings cut at every chunk boundary
        assert jsontext.depth(text) == reference_depth(text)


def test_json_over_the_limits_is_refused_before_parsing():
    assert jsontext.loads("[" * 100 + "]" * 100) == json.loads("[" * 100 + "]" * 100)
    with pytest.raises(jsontext.JSONLimit, match=r"nested too deeply \(101 levels"):
        jsontext.loads("[" * 101 + "]" * 101)
    with pytest.raises(jsontext.JSONLimit, match="nested too deeply"):
        jsontext.loads("[" * 100_000 + "]" * 100_000)
    assert jsontext.loads('["' + "[" * 1000 + '"]') == ["[" * 1000]  # inside a string: text
    with pytest.raises(jsontext.JSONLimit, match="bytes of JSON"):
        jsontext.check(b" " * (jsontext.MAX_BYTES + 1))


def test_integers_beyond_64_bits_are_floats():
    assert jsontext.loads("[" + "1" * 5000 + ", 1" + "0" * 400 + ", -9223372036854775808]") == [
        float("inf"), float("inf"), -9223372036854775808]


def test_long_arrays_of_numbers_are_read_packed_and_nothing_else():
    numbers = [i / 7 for i in range(2000)] + [1e300, -0.0, 12]
    long = json.dumps(numbers)
    doc = json.dumps({"data": numbers, "text": long, "short": [1, 2], "mixed": numbers + ["x"]})
    packed = jsontext.loads(doc.encode(), packed=True)
    assert isinstance(packed["data"], np.ndarray) and packed["data"].tolist() == numbers
    assert packed["text"] == long and packed["short"] == [1, 2] and packed["mixed"] == numbers + ["x"]
    with pytest.raises(json.JSONDecodeError):  # no JSON number: json says so, as unpacked
        jsontext.loads(long.replace("12]", "012]").encode(), packed=True)
