"""`suite.analysis.frame.rows.records` is `DataFrame.to_dict("records")`, value for value and type for
type, whatever the columns' types (what compare and envdiff read their records as)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from suite.analysis.frame import rows


def _same(a, b) -> bool:
    if isinstance(a, (list, np.ndarray)) or isinstance(b, (list, np.ndarray)):
        return type(a) is type(b) and repr(a) == repr(b)
    return type(a) is type(b) and (a is b or a == b or (a != a and b != b))


def test_rows_are_to_dicts_whatever_the_column_types():
    frame = pd.DataFrame({
        "text": ["a", None, "c"], "string": pd.array(["a", None, "c"], dtype="string"),
        "int": [1, 2, 3], "float": [1.5, np.nan, 700.0], "bool": [True, False, True],
        "nullable": pd.array([1, None, 3], dtype="Int64"), "object": np.array([np.float64(1.5), None, "x"], dtype=object),
        "time": [pd.Timestamp("2026-01-01"), pd.NaT, pd.Timestamp("2026-01-02")],
        "span": pd.to_timedelta([1, None, 2], unit="s"), "category": pd.Categorical(["x", None, "x"]),
        "list": pd.array([[1], None, [2, 3]], dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
    })
    want, got = frame.to_dict("records"), rows.records(frame)
    assert len(got) == len(want) and [list(r) for r in got] == [list(r) for r in want]
    assert [(k, w[k], g[k]) for w, g in zip(want, got) for k in frame.columns if not _same(w[k], g[k])] == []
