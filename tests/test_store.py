"""The results store and the run journal: durable appends, torn tails, locks, atomic parquet, and
reading files of other schema versions (migrate or say which version it is)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from suite.core import jsonl
from suite.results import columns, journal, store
from suite.core.errors import UserError

RUN = "20260101T120000Z-abcdef"


def rec(case_id: str, **extra) -> dict:
    return {"case_id": case_id, "scenario": "s", "run_id": RUN, "workload": "gemm", "precision": "fp32",
            "status": "ok", "reason": None, "time_ms_median": 1.0, **extra}


def start(tmp_path, plan=("a", "b", "c")) -> journal.Journal:
    return store.start_run(tmp_path, "s", RUN, {"plan": list(plan)})


# --- journal format ---------------------------------------------------------------------------


def test_records_round_trip_exactly(tmp_path):
    values = rec("a", time_ms_median=0.1 + 0.2, sqnr_db=math.inf, rel_err=float("nan"), samples_ms=[1.5, 2.25],
                 n_samples=np.int64(2), flops=np.float32(3.0), m=None, note="<tab>\t\"quoted\" ü \udcff")
    with start(tmp_path) as run:
        run.append(values)
    back = journal.read(store.journal_path(tmp_path, "s", RUN))
    (r,) = back.records
    assert r["time_ms_median"] == 0.1 + 0.2  # repr round trip: bit-exact floats
    assert r["sqnr_db"] == math.inf and math.isnan(r["rel_err"])
    assert r["samples_ms"] == [1.5, 2.25] and r["n_samples"] == 2 and r["flops"] == 3.0 and r["m"] is None
    assert r["note"] == values["note"]
    assert back.header["plan"] == ["a", "b", "c"] and back.header["run_id"] == RUN and not back.torn


def test_values_json_cannot_name_are_kept_as_text():
    # The journal and the --isolate child protocol share this encoder.
    line = jsonl.encode({"case_id": "a", "path": Path("x"), "nested": {"t": (1, 2)}, "s": {3}})
    assert json.loads(line) == {"case_id": "a", "path": "x", "nested": {"t": [1, 2]}, "s": [3]}


@pytest.mark.parametrize("tail", [b'{"kind":"case","record":{"case_id":"c"', b"\x00\x00\x00", b'{"kind":"ca\n'])
def test_a_torn_last_line_is_ignored_and_cut_off_on_resume(tmp_path, tail):
    with start(tmp_path) as run:
        run.append(rec("a"))
        run.append(rec("b"))
    path = run.path
    intact = path.read_bytes()
    path.write_bytes(intact + tail)  # what a kill in the middle of a write leaves behind

    seen = journal.read(path)
    assert [r["case_id"] for r in seen.records] == ["a", "b"] and seen.torn

    with store.continue_run(tmp_path, "s", RUN) as again:
        assert path.read_bytes() == intact  # the torn tail is gone before anything is appended
        again.append(rec("c"))
    after = journal.read(path)
    assert [r["case_id"] for r in after.records] == ["a", "b", "c"] and not after.torn


def test_damage_before_the_last_line_is_an_error_naming_the_line(tmp_path):
    with start(tmp_path) as run:
        run.append(rec("a"))
        run.append(rec("b"))
    lines = run.path.read_bytes().split(b"\n")
    lines[1] = b"garbage"
    run.path.write_bytes(b"\n".join(lines))
    with pytest.raises(journal.JournalError, match="line 2 is damaged"):
        journal.read(run.path)


def test_a_file_that_is_not_a_journal_is_refused(tmp_path):
    path = tmp_path / "x.journal.jsonl"
    path.write_text('{"kind": "case", "record": {"case_id": "a"}}\n')
    with pytest.raises(journal.JournalError, match="not an mpsuite run journal"):
        journal.read(path)
    path.write_text('{"kind": "header", "format": 99}\n')
    with pytest.raises(journal.JournalError, match="format 99"):
        journal.read(path)


def test_a_run_killed_before_its_header_cannot_be_resumed(tmp_path):
    path = store.journal_path(tmp_path, "s", RUN)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"kind":"hea')
    with pytest.raises(UserError, match="before its journal header"):
        store.continue_run(tmp_path, "s", RUN)


def test_one_run_has_one_writer(tmp_path):
    with start(tmp_path) as run:
        with pytest.raises(UserError, match="already exists"):
            start(tmp_path)
        with pytest.raises(UserError, match="another process is running this run"):
            store.continue_run(tmp_path, "s", RUN)
        run.append(rec("a"))
        with pytest.raises(ValueError, match="already in"):
            run.append(rec("a"))
    with store.continue_run(tmp_path, "s", RUN) as again:  # the lock died with the first writer
        assert again.case_ids == {"a"}


# --- run lifecycle --------------------------------------------------------------------------------


def test_finish_writes_the_parquet_in_plan_order_and_removes_the_journal(tmp_path):
    run = start(tmp_path)
    for case_id in ("c", "a", "b"):
        run.append(rec(case_id, time_ms_median=1.0))
    path, records = store.finish_run(run, tmp_path, order=["a", "b", "c"])
    assert path == store.run_path(tmp_path, "s", RUN)
    assert list(store.read_file(path)["case_id"]) == ["a", "b", "c"]
    pd.testing.assert_frame_equal(records, store.read_file(path))  # handed on as the reader reads them
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no journal, no temp file
    with pytest.raises(UserError, match="already complete"):
        store.continue_run(tmp_path, "s", RUN)


@pytest.mark.parametrize("stored", ["cpu_roofline/amx/20261201T212230Z-31abe7", "cpu_models/20261129T160030Z-8c367d",
                                    "cpu_fp8/20261129T155958Z-2e8c43"])
def test_a_finished_run_hands_on_the_frame_its_file_reads_back_as(tmp_path, stored):
    """Within one run the records go from the store to analysis in memory: they must be exactly what
    reading the file back would give (types, nulls, lists, timestamps), or a report would differ."""
    reference = store.read_file(Path(__file__).resolve().parent.parent / "results" / "reference" / f"{stored}.parquet")
    records = store.records_of(reference)
    with store.start_run(tmp_path, records[0]["scenario"], RUN, {"plan": [r["case_id"] for r in records]}) as run:
        for record in records:
            run.append({**record, "run_id": RUN})
        path, frame = store.finish_run(run, tmp_path, [r["case_id"] for r in records])
    pd.testing.assert_frame_equal(frame, store.read_file(path), check_exact=True)


def test_resuming_an_unknown_run_lists_the_runs_that_can_be(tmp_path):
    start(tmp_path).close()
    with pytest.raises(UserError, match=f"runs that can be resumed: {RUN}"):
        store.continue_run(tmp_path, "s", "20260101T120000Z-000000")


@pytest.mark.parametrize("bad", ["../../etc/passwd", "", "latest", RUN + "/..", RUN.upper()])
def test_run_ids_are_never_paths(tmp_path, bad):
    with pytest.raises(UserError, match="is not a run id"):
        store.journal_path(tmp_path, "s", bad)


@pytest.mark.parametrize("bad", ["..", ".", "", "a/b"])
def test_scenario_names_are_one_folder(tmp_path, bad):
    with pytest.raises(UserError, match="cannot name a file or folder"):
        store.run_path(tmp_path, bad, RUN)


def test_a_journal_of_another_schema_version_is_not_continued(tmp_path, monkeypatch):
    start(tmp_path).close()
    monkeypatch.setattr(store, "SCHEMA_VERSION", store.SCHEMA_VERSION + 1)
    with pytest.raises(UserError, match=f"schema version {store.SCHEMA_VERSION - 1}"):
        store.continue_run(tmp_path, "s", RUN)


# --- schema versions ------------------------------------------------------------------------------


def write_version(path, version: bytes, columns: dict) -> None:
    table = pa.table(columns).replace_schema_metadata({store.META_KEY: version})
    pq.write_table(table, path)


# A made-up "version 0" layout: the median was called `time_ms` and there was no `reason` column.
V0 = {"run_id": [RUN], "scenario": ["s"], "case_id": ["a"], "workload": ["gemm"], "precision": ["fp32"],
      "status": ["ok"], "time_ms": [1.25]}


def test_a_version_0_file_without_a_migration_names_its_version(tmp_path):
    path = tmp_path / "old.parquet"
    write_version(path, b"0", V0)
    with pytest.raises(UserError, match=rf"schema version 0 has no migration to {store.SCHEMA_VERSION}"):
        store.read_file(path)


def test_a_version_0_file_is_read_through_the_migration_chain(tmp_path, monkeypatch):
    path = tmp_path / "old.parquet"
    write_version(path, b"0", V0)

    def v0_to_v1(df: pd.DataFrame) -> pd.DataFrame:
        return df.rename(columns={"time_ms": "time_ms_median"}).assign(reason=None)

    monkeypatch.setitem(store.MIGRATIONS, 0, v0_to_v1)
    df = store.read_file(path)
    assert df["time_ms_median"].tolist() == [1.25] and "time_ms" not in df
    assert df["schema_version"].tolist() == [store.SCHEMA_VERSION]


def test_a_version_3_file_reads_and_rewrites_with_started_at_as_a_timestamp(tmp_path):
    # Version 3 held started_at as ISO 8601 text, with or without an offset (none meant UTC).
    path = tmp_path / "v3.parquet"
    v3 = {"run_id": [RUN] * 3, "scenario": ["s"] * 3, "case_id": ["a", "b", "c"], "workload": ["gemm"] * 3,
          "precision": ["fp32"] * 3, "status": ["ok"] * 3, "time_ms_median": [1.25] * 3,
          "started_at": ["2026-12-01T10:00:00+01:00", "2026-12-01T09:30:00", None]}
    write_version(path, b"3", v3)
    when = [pd.Timestamp("2026-12-01T09:00:00Z"), pd.Timestamp("2026-12-01T09:30:00Z")]
    df = store.read_file(path)
    assert df["started_at"].iloc[:2].tolist() == when and pd.isna(df["started_at"].iloc[2])
    store.rewrite(path)
    assert store.schema_version_of(path) == store.SCHEMA_VERSION
    stored = pq.read_table(path).column("started_at")
    assert stored.type == columns.arrow_schema().field("started_at").type and stored.type.tz == "UTC"
    assert stored.to_pylist()[:2] == [w.to_pydatetime() for w in when] and stored.to_pylist()[2] is None


def test_a_journal_holds_started_at_as_text_and_the_store_writes_a_timestamp(tmp_path):
    with start(tmp_path, plan=("a",)) as run:
        run.append(rec("a", started_at="2026-12-01T10:00:00+00:00"))
    (text,) = [r["started_at"] for r in journal.read(run.path).records]
    assert text == "2026-12-01T10:00:00+00:00"  # JSON has no time type
    assert store.read_journal(run.path)["started_at"].tolist() == [pd.Timestamp(text)]
    with store.continue_run(tmp_path, "s", RUN) as again:
        path = store.finish_run(again, tmp_path, ["a"]).path
    assert pa.types.is_timestamp(pq.read_schema(path).field("started_at").type)
    assert store.read_file(path)["started_at"].tolist() == [pd.Timestamp(text)]


@pytest.mark.parametrize("version, message", [
    (b"99", "schema version 99, newer than"),
    (b"v2", "schema version b'v2' is not a number"),
])
def test_unreadable_versions_are_named(tmp_path, version, message):
    path = tmp_path / "x.parquet"
    write_version(path, version, V0)
    with pytest.raises(UserError, match=message):
        store.read_file(path)


def test_foreign_and_broken_files_are_one_line_errors(tmp_path):
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"a": [1]}), foreign)
    with pytest.raises(UserError, match="not an mpsuite results file"):
        store.read_file(foreign)
    good = tmp_path / "good.parquet"
    store.write_run([rec("a")], good)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(UserError, match="cannot read results file"):
        store.read_file(cut)


def test_a_column_of_mixed_types_is_kept_as_text_not_lost(tmp_path):
    path = store.write_run([rec("a", extra=1, flops=2.0), rec("b", extra="n/a", flops=3)], tmp_path / "x.parquet")
    df = store.read_file(path)
    assert list(df["extra"]) == ["1", '"n/a"'] and list(df["flops"]) == [2.0, 3.0]
    assert json.loads(pq.read_schema(path).metadata[b"mpsuite.text_columns"]) == ["extra"]


def test_a_lean_read_leaves_empty_columns_undecoded_and_still_checks_their_types(tmp_path):
    """A report's read decodes only the columns some record fills (the file's statistics say which are
    empty): the same frame as a whole read keeps, and an empty column in a type its declaration
    refuses still leaves the file out."""
    path = store.write_run([rec("a", samples_ms=[1.0, 1.1]), rec("b", samples_ms=None, sqnr_db=40.0)],
                           tmp_path / f"{RUN}.parquet")
    lean = store.read_file(path, lean=True)
    whole = store.read_file(path)
    assert "rel_ci" not in lean and "reason" in lean  # the contract's columns stay, even empty
    assert list(lean["sqnr_db"].isna()) == [True, False] and lean["case_id"].tolist() == whole["case_id"].tolist()
    table = pq.read_table(path)
    at = table.schema.get_field_index("rel_ci")
    bad = table.set_column(at, pa.field("rel_ci", pa.date32()), pa.nulls(2, pa.date32()))
    pq.write_table(bad, path)
    with pytest.raises(UserError, match="column rel_ci holds date32"):
        store.read_file(path, lean=True)


def test_a_version_5_file_calls_te_mxfp8_and_te_nvfp4_by_their_old_names(tmp_path):
    """Before torchao's formats took the names, `mxfp8` and `nvfp4` were Transformer Engine's: a file
    of schema 5 or older is read with TE's new names and case ids, so it never joins torchao's cases."""
    from suite.scenario import plan

    path = tmp_path / f"{RUN}.parquet"
    params = '{"quantize": "inline"}'
    v5 = {"run_id": [RUN] * 3, "scenario": ["s"] * 3, "case_id": ["a", "b", "c"], "baseline_case_id": ["c"] * 3,
          "workload": ["gemm"] * 3, "precision": ["mxfp8", "nvfp4", "bf16"], "baseline": ["bf16"] * 3,
          "m": [64] * 3, "k": [64] * 3, "n": [64] * 3, "params": [params, params, "{}"], "status": ["skipped"] * 3}
    write_version(path, b"5", v5)
    df = store.read_file(path)
    assert df["precision"].tolist() == ["te_mxfp8", "te_nvfp4", "bf16"]
    assert df["case_id"].iloc[0] == plan.case_hash("gemm", "te_mxfp8", 64, 64, 64, {"quantize": "inline"})
    assert df["case_id"].iloc[0] != plan.case_hash("gemm", "mxfp8", 64, 64, 64, {"quantize": "inline"})
    assert df["case_id"].iloc[2] == "c" and df["baseline_case_id"].iloc[0] == plan.case_hash("gemm", "bf16", 64, 64, 64, {})
    assert store.renamed(5) == {"mxfp8": "te_mxfp8", "nvfp4": "te_nvfp4"}


@pytest.mark.skipif(not store.CATEGORICALS, reason="pandas 2: a lean read keeps run-constant strings as strings")
def test_a_lean_read_gives_run_constant_strings_as_ordered_categoricals(tmp_path):
    """A report's read keeps run-constant strings as codes (`store.RUN_CONSTANT`), ordered as their
    strings order: the newest run is the largest run id, a sort orders runs as text; other string
    columns, and a whole read, stay strings."""
    later = "20260102T120000Z-abcdef"
    store.write_run([rec("a", run_id=later, status="skipped", reason="no fp8")], tmp_path / f"{later}.parquet")
    store.write_run([rec("a"), rec("b")], tmp_path / f"{RUN}.parquet")
    lean, whole = store.read([tmp_path], lean=True), store.read([tmp_path])
    for name in ("run_id", "status", "workload"):
        assert isinstance(lean[name].dtype, pd.CategoricalDtype) and lean[name].cat.ordered
        assert not isinstance(whole[name].dtype, pd.CategoricalDtype)
        assert lean[name].tolist() == whole[name].tolist()
    assert lean["run_id"].max() == later and lean.groupby("case_id")["run_id"].max().tolist() == [later, RUN]
    assert lean.sort_values("run_id", kind="stable")["run_id"].tolist() == sorted(whole["run_id"])
    assert not isinstance(lean["case_id"].dtype, pd.CategoricalDtype) and lean["reason"].fillna("").tolist() == ["", "", "no fp8"]
