"""The one record type (`suite.measure.record.Record`): immutable, its contract checked when it is
made, a new record derived for each change; it travels as the same JSON line and pickle a dict did,
and its range check and the file check (`suite.results.validate`) agree on every value."""

from __future__ import annotations

import math
import pickle

import pyarrow as pa
import pytest

from suite.core import jsonl
from suite.core.errors import Unsupported
from suite.measure import record as records
from suite.measure.record import Record, RecordInvalid
from suite.results import validate
from suite.scenario.plan import Case
from suite.scenario.stop_rule import StopRule

META = {"run_id": "20260101T120000Z-abcdef", "device": "cpu", "device_name": "test cpu"}
CASE = Case("rec", "gemm", "bf16", "fp32", 16, 32, 64, {}, seed=0, timing=StopRule())


def started() -> Record:
    return records.started(CASE, META)


def test_a_record_cannot_be_changed_only_derived():
    record = started()
    with pytest.raises(TypeError):
        record["status"] = "ok"  # no item assignment
    with pytest.raises(AttributeError):
        record.update(status="ok")  # no dict methods that write
    with pytest.raises(AttributeError):
        record._columns = {}  # nor its columns swapped
    done = record.replace(status="ok", time_ms_median=1.5, case_s=2.0)
    assert record["status"] == "failed" and "time_ms_median" not in record  # the one handed on is as it was
    # a known column keeps its place, a new one goes last: the order a dict's update gave
    assert list(done) == list(record) + ["time_ms_median", "case_s"]
    assert done == {**record, "status": "ok", "time_ms_median": 1.5, "case_s": 2.0}
    assert record.with_columns({"rel_err": 0.01}) == record.replace(rel_err=0.01)


@pytest.mark.parametrize("changes, problem", [
    ({"no_such_column": 1}, "'no_such_column' is no defined column"),
    ({"m": "16"}, "column m holds '16', expected int"),
    ({"time_ms_p10": True}, "expected float"),  # a bool is no number of a float column
    ({"samples_ms": [1.0, "x"]}, "expected list<float>"),
    ({"samples_ms": 1.0}, "expected list<float>"),
    ({"params": "[1, 2]"}, "expected json"),  # a JSON object, as the file check wants
    ({"started_at": "yesterday"}, "expected timestamp"),
    ({"m": 0}, "expected >= 1"),  # out of the column's range
    ({"rel_err": math.nan}, "expected >= 0"),  # NaN never
    ({"speedup_paired": 0.0}, "expected >= 1e-12, <= 1e+12"),
    ({"samples_ms": [1.0, -1.0]}, "expected >= 0"),  # each element of a list
    ({"status": "done"}, "status must be one of ok, skipped, failed"),
    ({"case_id": None}, "no case_id"),
    ({"k": None}, "m, k and n must be given together or not at all"),
    ({"status": "ok"}, "an ok case has no median time"),
])
def test_a_record_that_breaks_its_contract_is_refused_when_made(changes, problem):
    with pytest.raises(RecordInvalid, match="^record of case "):
        started().replace(**changes)  # derived: the new values and the rules across columns
    with pytest.raises(RecordInvalid, match="^record of case "):
        Record({**started(), **changes})  # made whole (a record arriving from a process)
    found = records.problems({**started(), **changes})
    assert any(problem in p for p in found), found


def test_values_as_the_journal_will_hold_them_are_accepted():
    np = pytest.importorskip("numpy")
    record = started().replace(status="ok", time_ms_median=np.float64(1.5), n_samples=np.int64(3),
                               samples_ms=np.array([1.0, 2.0]), samples_throttled=[np.bool_(False)],
                               first_call_kept=np.bool_(True), rel_ci=math.inf, m=None, k=None, n=None)
    assert jsonl.decode(jsonl.encode(record))["samples_ms"] == [1.0, 2.0]


def test_a_record_travels_as_the_dict_of_its_columns():
    record = started().replace(status="ok", time_ms_median=1.5, samples_ms=[1.5, 1.5])
    assert jsonl.encode(record) == jsonl.encode(dict(record))  # the same line, in the same order
    assert jsonl.encode({"kind": "case", "record": record}) == jsonl.encode({"kind": "case", "record": dict(record)})
    back = pickle.loads(pickle.dumps(record))  # a Ray worker's records come back pickled
    assert isinstance(back, Record) and list(back.items()) == list(record.items())


def test_an_error_keeps_the_columns_the_steps_before_it_found():
    draft = records.Draft(started())
    with records.outcome(draft):
        draft.record = draft.record.replace(emulated=True)
        raise Unsupported("no FP8 here")
    assert (draft.record["status"], draft.record["reason"], draft.record["emulated"]) == ("skipped", "no FP8 here",
                                                                                          True)
    with records.outcome(draft):
        draft.record = draft.record.replace(m=-5)  # a bug: the record it would make is refused
    assert draft.record["status"] == "failed" and "RecordInvalid" in draft.record["reason"]


VALUES = [0, 1, -1, 5e-324, 1e-13, 1e-6, 0.5, 2.0, 1e13, math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("column", ["m", "paired_rounds", "time_ms_median", "warmup_s", "speedup_paired", "rel_err",
                                    "peak_tflops", "rel_ci_level", "n_samples", "tflops"])
def test_the_record_and_the_file_check_agree_on_every_value(column):
    from suite.measure import columns

    kind, seen = columns.BY_NAME[column].type, set()
    for value in VALUES:
        if kind == "int" and not (isinstance(value, int) or value.is_integer()):
            continue
        value = int(value) if kind == "int" else float(value)
        row = {**dict(started()), "status": "skipped", column: value}
        del row["started_at"]  # ISO text here, a timestamp in a file
        table = pa.table({name: [v] for name, v in row.items() if v is not None})
        file_ok = not [p for p in validate.problems(table) if column in p]
        record_ok = not [p for p in records.problems(row) if column in p]
        assert record_ok == file_ok, (column, value, file_ok)
        seen.add(record_ok)
    assert seen == {True, False}  # each column takes some of the values and refuses others
