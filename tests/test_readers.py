"""Results any standard tool reads: pandas, pyarrow, polars and DuckDB read a results folder that
mixes CPU-build and CUDA-build runs, an unfinished run's journal and the committed reference runs,
with no options: one explicit schema for every file, side files where a folder read skips them."""

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
