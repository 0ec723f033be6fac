"""Results any standard tool reads: pandas, pyarrow, polars and DuckDB read a results folder that
mixes CPU-build and CUDA-build runs, an unfinished run's journal and the committed reference runs,
with no options: one explicit schema for every file, side files where a folder read skips them; and
mpsuite reads a results file they wrote back (issue #35)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from suite.results import columns, store

ROOT = Path(__file__).resolve().parent.parent


def records(run_id: str, cuda: str | None, workload: str = "gemm") -> list[dict]:
    base = {"run_id": run_id, "scenario": "mix", "workload": workload, "precision": "bf16", "status": "ok",
            "m": 64, "k": 64, "n": 64, "params": "{}", "time_ms_median": 1.5, "samples_ms": [1.4, 1.5, 1.6],
            "device": "cuda" if cuda else "cpu", "cuda_version": cuda, "cudnn_version": "91000" if cuda else None,
            "triton_version": "3.5.0" if cuda else None, "started_at": "2026-12-01T10:00:00+00:00"}
    if workload == "train_step":
        base.update(m=None, k=None, n=None, loss_curve=[3.0, 2.5], tokens_per_s=1e5)
    return [{**base, "case_id": f"{run_id}-{i}"} for i in range(3)]


@pytest.fixture
def mixed(tmp_path):
    results = tmp_path / "results"
    for run_id, cuda, workload in (("20261201T100000Z-aaaaaa", None, "gemm"),
                                   ("20261201T100100Z-bbbbbb", "13.0", "gemm"),
                                   ("20261201T100200Z-cccccc", "13.0", "train_step")):
        store.write_run(records(run_id, cuda, workload), store.run_path(results, "mix", run_id))
    unfinished = store.start_run(results, "mix", "20261201T100300Z-dddddd", {"plan": ["x"]})
    unfinished.close()
    return results


def test_every_file_has_the_one_schema(mixed):
    expected = columns.arrow_schema()
    for path in (mixed / "mix").glob("*.parquet"):
        schema = pq.read_schema(path)
        assert schema.names == expected.names
        assert [f.type for f in schema] == [f.type for f in expected]
        assert schema.field("time_ms_median").metadata[b"unit"] == b"ms"


def test_pandas_pyarrow_polars_and_duckdb_read_the_folder_with_no_options(mixed):
    import duckdb
    import pandas as pd
    import polars as pl

    assert len(pd.read_parquet(mixed / "mix")) == 9  # the journal beside them is not read
    assert len(pd.read_parquet(mixed)) == 9
    assert ds.dataset(mixed, format="parquet").count_rows() == 9
    assert pl.scan_parquet(f"{mixed}/**/*.parquet").select(pl.len()).collect().item() == 9
    got = duckdb.sql(f"select count(*), count(cuda_version), sum(len(samples_ms)) "
                     f"from read_parquet('{mixed}/**/*.parquet')").fetchall()[0]
    assert got == (9, 6, 27)
    # started_at, ISO text in the records, is a timestamp in UTC to each of them
    assert str(pd.read_parquet(mixed)["started_at"].dtype).endswith(", UTC]")
    assert pl.scan_parquet(f"{mixed}/**/*.parquet").collect_schema()["started_at"].time_zone == "UTC"
    assert duckdb.sql(f"select distinct typeof(started_at) from read_parquet('{mixed}/**/*.parquet')").fetchall() == [
        ("TIMESTAMP WITH TIME ZONE",)]


def test_the_committed_results_folder_reads_with_no_options():
    import duckdb
    import pandas as pd

    folder = ROOT / "results"
    n = len(pd.read_parquet(folder))
    assert n > 0 and ds.dataset(folder, format="parquet").count_rows() == n
    assert duckdb.sql(f"select count(*) from read_parquet('{folder}/**/*.parquet')").fetchall()[0][0] == n


# --- files written back by pandas, polars and DuckDB ---------------------------------------------

REFERENCE = ROOT / "results" / "reference" / "cpu_amx" / "cpu" / "20261201T091332Z-cb2509.parquet"


def _pandas(source: Path, target: Path, edit=None) -> None:
    import pandas as pd

    df = pd.read_parquet(source)
    (edit or (lambda d: d))(df).to_parquet(target)


def _polars(source: Path, target: Path) -> None:
    import polars as pl

    pl.read_parquet(source).write_parquet(target)


def _duckdb(source: Path, target: Path) -> None:
    import duckdb

    duckdb.sql(f"COPY (SELECT * FROM read_parquet('{source}')) TO '{target}' (FORMAT parquet)")


@pytest.mark.usefixtures("quick_png")
@pytest.mark.parametrize("write", [_pandas, _polars, _duckdb])
def test_a_results_file_written_back_by_pandas_polars_or_duckdb_reads_and_reports(write, tmp_path, capsys):
    """What a notebook does to drop a case or fix a label: the metadata is gone (the version is in
    its column), ints with nulls are float64 (pandas), text large_string, lists large_list (polars)."""
    from suite import cli

    folder = tmp_path / "results" / "cpu"
    folder.mkdir(parents=True)
    target = folder / REFERENCE.name
    write(REFERENCE, target)
    assert store.META_KEY not in (pq.read_schema(target).metadata or {})
    read = store.read_file(target)
    expected = store.read_file(REFERENCE)
    assert read.columns.tolist() == expected.columns.tolist()
    for name in expected.columns:  # the same values in the same types
        assert read[name].dtype == expected[name].dtype, name
        assert read[name].astype(str).tolist() == expected[name].astype(str).tolist(), name
    assert cli.main(["report", str(target), "--out", str(tmp_path / "report")]) == 0
    assert "bf16 is 3.74x faster than fp32" in (tmp_path / "report" / "report.md").read_text()
    assert "error" not in capsys.readouterr().err


def test_a_file_without_the_metadata_or_the_version_column_is_not_a_results_file(tmp_path):
    target = tmp_path / "x.parquet"
    _pandas(REFERENCE, target, lambda df: df.drop(columns="schema_version"))
    with pytest.raises(store.UserError, match="not an mpsuite results file"):
        store.read_file(target)


@pytest.mark.parametrize("edit, message", [
    (lambda df: df.assign(n_samples=df["n_samples"] + 0.5), "column n_samples holds double values, expected int"),
    # the Arrow type the file holds: pandas 3 writes text as large_string, pandas 2 as string
    (lambda df: df.assign(m=df["m"].astype(str)), "column m holds (large_)?string values, expected int"),
    (lambda df: df.assign(rel_err=df["rel_err"].astype(str)),
     "column rel_err holds (large_)?string values, expected float"),
    (lambda df: df.assign(schema_version=[5, 6] * (len(df) // 2) + [6] * (len(df) % 2)),
     "column schema_version holds 5, 6, expected one schema version"),
])
def test_genuinely_wrong_types_written_back_are_refused_naming_the_column(tmp_path, edit, message):
    target = tmp_path / "x.parquet"
    _pandas(REFERENCE, target, edit)
    with pytest.raises(store.UserError, match=message) as err:
        store.read_file(target)
    assert str(target) in str(err.value) and "\n" not in str(err.value)


def test_timestamps_in_another_unit_or_zone_and_text_views_are_taken_as_declared():
    import pyarrow as pa

    from suite.results import validate

    table = pq.read_table(REFERENCE)
    at = table.schema.get_field_index("started_at")
    table = table.set_column(at, "started_at", table.column(at).cast(pa.timestamp("ns")))
    i = table.schema.get_field_index("run_id")
    table = table.set_column(i, "run_id", table.column(i).cast(pa.string_view()))
    conformed = validate.conform(table)
    assert conformed.schema.field("started_at").type == columns.arrow_schema().field("started_at").type
    assert conformed.schema.field("run_id").type == pa.string()
    assert conformed.column("started_at").equals(pq.read_table(REFERENCE).column("started_at"))
    assert not validate.problems(conformed)
