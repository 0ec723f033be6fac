"""JSON from files the suite does not own (journals, record columns such as `params`, pytest-benchmark
files, a report's marker): bounded before it is parsed, and parsed so that no number can crash.

Python's `json` recurses once per level of nesting, so `[` 100,000 times raised RecursionError, which
no reader caught: one such value in one file crashed `report` of a whole folder. `loads` refuses,
before parsing, JSON of more than `MAX_BYTES` bytes or nested more than `MAX_DEPTH` levels
(`JSONLimit`, a ValueError, which every reader already turns into "this file is left out: ..."). The
depth is counted by a scan of the bytes (numpy, a chunk at a time: no recursion, memory independent
of the size), brackets inside strings not counted.

Numbers: an integer literal longer than 20 characters (beyond 64 bits: no column holds one) is read as
a float, so 1 followed by 400 zeros is inf, refused wherever a finite number is due, and 5,000 digits
never reach int()'s 4,300-digit limit (a ValueError no reader expected).

Memory: `loads(..., packed=True)` (an import) reads each flat array of numbers of 4 KiB or more straight
into a float64 array, 8 bytes a number, rather than a list of float objects (32 bytes a number: 4x
and more the text of a short one), so an import's rounds cost about their text's size.
"""

from __future__ import annotations

import json
import re
import secrets

import numpy as np

# The largest JSON text the suite parses: a pytest-benchmark file to import is the largest there is
# (10,000 benchmarks of 1,000 rounds make about 200 MB); a journal line or a `params` cell is KBs.
MAX_BYTES = 256 * 2**20
# Records, journal headers (a scenario spec) and pytest-benchmark files nest under 10 levels; json's
# recursion stays far from Python's limit (1,000 frames, with the caller's own on the stack) at 100.
MAX_DEPTH = 100
_CHUNK = 1 << 20  # bytes scanned at a time: the scan's memory is a few times this, whatever the size
_OPEN, _CLOSE = (ord("["), ord("{")), (ord("]"), ord("}"))
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_LONGEST_INT = 20  # characters: -9223372036854775808, the smallest int64
# `loads(..., packed=True)` reads a flat array of numbers of this many bytes or more (pytest-benchmark's
# rounds) straight into a float64 array: 8 bytes a number, where json's list costs 32 (a float object
# and a list slot) and more than a short number's text.
_PACKED_BYTES = 4096
_NUMBERS = re.compile(rb"\[[-+0-9.eE,\s]{%d,}\]" % _PACKED_BYTES)
_NUMBER = r"^\s*-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\s*$"  # one JSON number


class JSONLimit(ValueError):
    """JSON over the suite's size or nesting limit (the message says which), never parsed."""


def _integer(text: str):
    return int(text) if len(text) <= _LONGEST_INT else float(text)


def _escaped(chunk: np.ndarray, quotes: np.ndarray, carry: int) -> tuple[np.ndarray, int]:
    """Which `quotes` (positions in `chunk`) follow an odd run of backslashes (escaped: inside a
    string), and the length of the run the chunk ends with; `carry` is the run the chunk starts in."""
    slashes = np.flatnonzero(chunk == _BACKSLASH)
    if not len(slashes):
        return (quotes == 0) & bool(carry & 1), 0
    first = np.r_[True, np.diff(slashes) != 1]
    run_start = slashes[first][np.cumsum(first) - 1]  # where each backslash's run begins
    extra = np.where(run_start == 0, carry, 0)  # a run at the chunk's start continues the last chunk's
    last = np.searchsorted(slashes, quotes) - 1  # the backslash before each quote, if any
    touching = (last >= 0) & (slashes[np.maximum(last, 0)] == quotes - 1)
    run = np.where(touching, quotes - run_start[np.maximum(last, 0)] + extra[np.maximum(last, 0)], 0)
    run = np.where(quotes == 0, carry, run)
    tail = len(chunk) - run_start[-1] + extra[-1] if slashes[-1] == len(chunk) - 1 else 0
    return (run & 1).astype(bool), int(tail)


def _scan(raw: bytes, probes: list[int] = ()) -> tuple[int, list[bool]]:
    """How deep the JSON text nests ([[1]] is 2), counting brackets outside strings, and whether
    each of `probes` (sorted byte positions) lies inside a string."""
    whole, probes = np.frombuffer(raw, np.uint8), np.asarray(probes, np.int64)
    in_string, slashes, level, deepest, inside = 0, 0, 0, 0, []
    for start in range(0, len(whole), _CHUNK):
        chunk = whole[start:start + _CHUNK]
        quotes = np.flatnonzero(chunk == _QUOTE)
        escaped, slashes = _escaped(chunk, quotes, slashes)
        toggles = quotes[~escaped]
        asked = probes[(probes >= start) & (probes < start + len(chunk))] - start
        inside += (((in_string + np.searchsorted(toggles, asked)) & 1) == 1).tolist()
        opens = (chunk == _OPEN[0]) | (chunk == _OPEN[1])
        marks = np.flatnonzero(opens | (chunk == _CLOSE[0]) | (chunk == _CLOSE[1]))
        outside = ((in_string + np.searchsorted(toggles, marks)) & 1) == 0
        steps = np.where(opens[marks[outside]], 1, -1)
        if len(steps):
            levels = level + np.cumsum(steps)
            deepest, level = max(deepest, int(levels.max())), int(levels[-1])
        in_string ^= len(toggles) & 1
    return deepest, inside


def depth(data: bytes | str) -> int:
    """How deep the JSON text nests ([[1]] is 2), by a scan that counts brackets outside strings."""
    return _scan(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)[0]


def check(data: bytes | str) -> None:
    """Raise JSONLimit if `data` is over `MAX_BYTES` or nests deeper than `MAX_DEPTH`."""
    size = len(data)  # characters of a str: at most its bytes, so a str passing here may be 4x this
    if size > MAX_BYTES:
        raise JSONLimit(f"{size:,} bytes of JSON, over the {MAX_BYTES:,} the suite reads")
    opened = data.count("[" if isinstance(data, str) else b"[") + data.count("{" if isinstance(data, str) else b"{")
    levels = depth(data) if opened > MAX_DEPTH else opened  # no more openings than the limit: no scan
    if levels > MAX_DEPTH:
        raise JSONLimit(f"JSON nested too deeply ({levels:,} levels; the suite reads {MAX_DEPTH})")


def _numbers(inside: bytes) -> np.ndarray | None:
    """The numbers of a flat JSON array (`inside`: what its brackets hold) as float64, parsed a
    chunk at a time (the memory it takes is that of its result); None where one is no JSON number
    (json then says what is wrong). Integers beyond a float's range are inf, as `_integer` reads them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out, filled, start = np.empty(inside.count(b",") + 1), 0, 0
    while start < len(inside):
        end = inside.find(b",", start + _CHUNK) if start + _CHUNK < len(inside) else -1
        end = len(inside) if end < 0 else end
        text = pc.split_pattern(pa.array([inside[start:end]], pa.binary()), ",").flatten().cast(pa.string())
        if not pc.all(pc.match_substring_regex(text, _NUMBER)).as_py():
            return None
        out[filled:filled + len(text)] = pc.cast(pc.utf8_trim_whitespace(text), pa.float64()).to_numpy()
        filled, start = filled + len(text), end + 1
    return out if filled == len(out) else None  # a trailing comma: no number after it


def _packed(raw: bytes) -> tuple[bytes, dict]:
    """`raw` with each long flat array of numbers outside strings replaced by a placeholder object
    (a key no file can guess), and the arrays by placeholder key."""
    spans = [m.span() for m in _NUMBERS.finditer(raw)]
    if not spans:
        return raw, {}
    inside = _scan(raw, [start for start, _ in spans])[1]
    pieces, arrays, done = [], {}, 0
    for (start, end), in_string in zip(spans, inside):
        values = None if in_string else _numbers(raw[start + 1:end - 1])
        if values is None:
            continue
        key = f"\0{secrets.token_hex(8)}"
        arrays[key] = values
        pieces += [raw[done:start], json.dumps({key: 0}).encode()]
        done = end
    return b"".join(pieces + [raw[done:]]), arrays


def loads(data: bytes | str, object_hook=None, packed: bool = False):
    """`json.loads` of JSON from a file: within the limits (`check`, before parsing), integers
    beyond 64 bits read as floats. Bad JSON raises ValueError (JSONLimit, json.JSONDecodeError,
    UnicodeDecodeError) and nothing else. `packed`: flat arrays of numbers of 4 KiB and more
    become float64 numpy arrays (`_PACKED_BYTES`), not lists."""
    check(data)
    if not packed:
        return json.loads(data, parse_int=_integer, object_hook=object_hook)
    text, arrays = _packed(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)

    def unpacked(obj: dict):
        if len(obj) == 1 and next(iter(obj)) in arrays:
            return arrays[next(iter(obj))]
        return obj if object_hook is None else object_hook(obj)

    return json.loads(text, parse_int=_integer, object_hook=unpacked)
