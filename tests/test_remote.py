"""Results at an `s3://` URL, on a real S3-compatible server started here (moto's server mode, over
HTTP, through s3fs: not a mock of the client): runs written, read, reported, compared, resumed, and
no partial object under a final name when an upload fails."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite import cli, pipeline
from suite.analysis.regression import compare, history
from suite.report import pages, plots
from suite.core.errors import UserError
from suite.results import atomic, journal, lease, location, store
from suite.scenario import plan, spec
from tests.conftest import quick_toml

ROOT = Path(__file__).resolve().parent.parent
moto_server = pytest.importorskip("moto.server", reason="needs moto[server] (the test extra)")
pytest.importorskip("s3fs", reason="needs s3fs (the remote extra)")

# Two cases: the least a run with a speedup has.
SMALL = quick_toml("small", """
[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16"]
shapes = "square"
sizes = [32]
""", baseline="fp32")


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """A bucket on a moto server of this module's own, and the environment s3fs reads it with."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
                           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                           "MPSUITE_SPOOL": str(tmp_path_factory.mktemp("spool"))}.items():
            mp.setenv(key, value)
        fs = location.where("s3://mpsuite-test").fs
        fs.mkdir("mpsuite-test")
        try:
            yield fs
        finally:
            server.stop()


@pytest.fixture
def url(bucket):
    """A fresh prefix in the bucket for one test."""
    return f"s3://mpsuite-test/{secrets.token_hex(4)}"


@pytest.fixture
def small(write_scenario):
    return write_scenario(SMALL, "small.toml")


def test_runs_written_read_reported_and_compared_under_an_s3_url(bucket, url, small, monkeypatch):
    for _ in range(2):
        assert cli.main(["run", str(small), "--results", url, "--no-report", "--quiet"]) == 0
    keys = bucket.find(url.removeprefix("s3://"))
    assert len(keys) == 2 and all(k.endswith(".parquet") and "/small/" in k for k in keys)  # no journal, no temporary
    df = store.read([f"{url}/small"])
    assert len(df) == 4 and df.groupby("run_id").size().tolist() == [2, 2]
    assert set(df["case_id"]) == {c.case_id for c in plan.expand(spec.load(small))}

    # the report of the bucket's records, into the bucket too (rendered here, uploaded); an object of
    # an earlier render that this one lacks is removed. Plots are tested with local reports.
    monkeypatch.setattr(plots, "PLOTS", {})
    reports = f"{url}-reports/small"
    bucket.pipe_file(f"{reports}/.mpsuite-report".removeprefix("s3://"), b"an earlier report")
    bucket.pipe_file(f"{reports}/old_plot.png".removeprefix("s3://"), b"a plot of an earlier render")
    assert cli.main(["report", f"{url}/small", "--out", reports, "--quiet"]) == 0
    held = sorted(k.rsplit("/", 1)[-1] for k in bucket.find(reports.removeprefix("s3://")))
    assert held == [".mpsuite-report", "index.html", "report.md"]
    page = bucket.cat_file(f"{reports}/report.md".removeprefix("s3://")).decode()
    assert max(df["run_id"]) in page and min(df["run_id"]) not in page  # the newest run
    bucket.pipe_file(f"{url}-data/table.csv".removeprefix("s3://"), b"a,b")
    with pytest.raises(UserError, match="not an mpsuite report"):
        pages.output_dir(f"{url}-data")

    # compare and history select from the bucket as from a folder (their pages are rendered as for
    # local results: that is tested in their own modules)
    old, new = compare.load_sides(f"{url}/small,skip=1", "scenario=small", url)
    assert set(old.records["run_id"]) == {min(df["run_id"])} and set(new.records["run_id"]) == {max(df["run_id"])}
    result = compare.compare(old, new, compare.Options(min_runs=1, noise=0.05, fail_on=()))
    assert set(result.cases["case_id"]) == set(df["case_id"])
    assert len(history.build("small", url).runs) == 2


def test_an_interrupted_run_resumes_from_the_uploaded_journal_on_another_machine(bucket, url, small, monkeypatch):
    scenario = spec.load(small)
    order = [c.case_id for c in plan.expand(scenario)]
    run_id = interrupted_run(scenario, url, monkeypatch)
    remote = store.journal_path(url, "small", run_id)
    assert len(journal.read(remote).records) == 1  # the uploaded copy holds the finished case
    assert not store.lease_path(remote).exists()  # released as the run stopped: another machine may go on
    assert store.incomplete_runs(url, "small") == [run_id]
    partial = store.read([url], unfinished=True)
    assert partial["run_partial"].all() and len(partial) == 1

    location.spool(remote).unlink()  # another machine: only the bucket's copy is left
    done = pipeline.run(pipeline.RunRequest(scenario, url, None, "cpu", progress=False, resume=run_id))
    assert sorted(done.records["case_id"]) == sorted(order)  # every case exactly once
    assert not remote.exists() and store.incomplete_runs(url, "small") == []
    with pytest.raises(UserError, match="already complete"):
        store.continue_run(url, "small", run_id)


RECORDS = [{"run_id": "20260101T000000Z-abcdef", "scenario": "small", "case_id": "c1", "status": "ok",
            "workload": "gemm", "precision": "fp32", "reason": None, "time_ms_median": 1.0}]


@pytest.mark.parametrize("conditional", [True, False], ids=["one-conditional-upload", "hidden-key-then-copy"])
def test_a_failed_upload_leaves_no_object_under_the_final_name(bucket, url, monkeypatch, conditional):
    final = store.run_path(url, "small", "20260101T000000Z-abcdef")
    # fsspec hands out one instance per filesystem and options: this is the one the store uses
    assert final.fs is bucket
    assert final.conditional() is None  # moto honours If-None-Match and If-Match, as S3 does
    if not conditional:  # a store without them: the file goes to a hidden key, then is copied
        monkeypatch.setattr(location.Remote, "conditional", lambda self: "no conditional writes here")

    def cut_short(lpath, rpath, **kwargs):
        if not conditional:  # a backend whose upload can leave part of the bytes under the key it writes
            with open(lpath, "rb") as f:
                bucket.pipe_file(rpath, f.read()[:100])
        raise ConnectionError("connection reset while uploading")  # (S3 keeps no part of a PUT cut short)

    with monkeypatch.context() as mp:
        mp.setattr(bucket, "put_file", cut_short)
        with pytest.raises(ConnectionError):
            store.write_run(RECORDS, final)
    assert bucket.find(url.removeprefix("s3://")) == []  # neither the final key nor the temporary

    if not conditional:
        def refused(*args, **kwargs):
            raise OSError("copy refused")

        with monkeypatch.context() as mp:
            mp.setattr(bucket, "copy", refused)
            with pytest.raises(OSError, match="copy refused"):
                store.write_run(RECORDS, final)
        assert bucket.find(url.removeprefix("s3://")) == []

    store.write_run(RECORDS, final)
    before = final.read_bytes()
    with pytest.raises(FileExistsError, match="never overwritten"):
        store.write_run([{**RECORDS[0], "status": "failed"}], final)
    assert final.read_bytes() == before and bucket.find(url.removeprefix("s3://")) == [final.path]


def test_a_run_id_taken_in_the_bucket_is_refused_as_a_local_one_is(bucket, url, tmp_path):
    run_id = "20260101T000000Z-abcdef"
    first = store.start_run(url, "small", run_id, {"plan": ["c1"]})
    try:
        # another machine (its own spool) starting a run of the same id: the bucket's conditional write refuses
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MPSUITE_SPOOL", str(tmp_path))
            with pytest.raises(journal.JournalError, match="already exists"):
                store.start_run(url, "small", run_id, {"plan": ["c2"]})
        assert journal.read(store.journal_path(url, "small", run_id)).header["plan"] == ["c1"]
    finally:
        first.close()


def test_locations_local_paths_need_no_fsspec(tmp_path, monkeypatch):
    assert location.where(f"file://{tmp_path}") == tmp_path
    assert location.where("results") == location.Path("results")
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if not installed
    store.write_run(RECORDS, store.run_path(tmp_path, "small", RECORDS[0]["run_id"]))
    assert len(store.read([tmp_path])) == 1
    with pytest.raises(UserError, match=r"pip install -e \.\[remote\]"):
        store.read(["s3://bucket/results"])


def test_a_storage_service_that_cannot_be_used_is_a_one_line_error(bucket, capsys):
    from botocore.exceptions import EndpointConnectionError

    assert location.is_storage_error(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert not location.is_storage_error(ValueError("a bug of ours"))
    assert cli.main(["report", "nosuch://x/y"]) == 2
    assert "Protocol not known" in capsys.readouterr().err


def test_shards_of_a_group_write_to_the_bucket_and_a_requeued_shard_finds_its_run_there(bucket, url, write_scenario):
    two = write_scenario(SMALL.replace("sizes = [32]", "sizes = [32, 48]"), "small.toml")  # two settings, one a shard
    for k in (0, 1):
        assert cli.main(["run", str(two), "--shard", f"{k}/2", "--group", "nightly", "--results", url,
                         "--no-report", "--quiet"]) == 0
    files = sorted(k for k in bucket.find(url.removeprefix("s3://")) if k.endswith(".parquet"))
    df = store.read([f"{url}/small"])
    assert len(files) == 2 and df["run_id"].nunique() == 1 and len(df) == 4  # one run of the group
    assert df["run_group"].str.startswith("nightly.").all() and sorted(df["shard_index"].unique()) == [0, 1]
    # the scheduler starts shard 0 again: it finds its complete run in the bucket, runs nothing, adds nothing
    assert cli.main(["run", str(two), "--shard", "0/2", "--group", "nightly", "--results", url,
                     "--no-report", "--quiet"]) == 0
    assert sorted(k for k in bucket.find(url.removeprefix("s3://")) if k.endswith(".parquet")) == files


# --- one writer per run (issue #35): two resumers, the results file created once -------------------------

# A resumer that waits, once it holds the run, for the test to let it measure: the other resumer is
# then started and finished while this one is known to be running (no race left to chance).
HELD_RESUMER = """
import pathlib, sys, time
from suite import cli
from suite.results import journal
gate, append = pathlib.Path(sys.argv[1]), journal.Journal.append
def gated(self, record):
    deadline = time.monotonic() + 120
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    append(self, record)
journal.Journal.append = gated
sys.exit(cli.main(sys.argv[2:]))
"""


def interrupted_run(scenario, url, monkeypatch) -> str:
    """A run of `scenario` at `url` stopped after its first case (as by a preempted node), its id."""
    append = journal.Journal.append

    def killed_after_one(self, record):
        if len(self):
            raise KeyboardInterrupt
        append(self, record)

    monkeypatch.setattr(journal.Journal, "append", killed_after_one)
    with pytest.raises(pipeline.RunInterrupted) as stopped:
        pipeline.run(pipeline.RunRequest(scenario, url, None, "cpu", progress=False))
    monkeypatch.setattr(journal.Journal, "append", append)
    return stopped.value.run_id


def held_resumer(args: list[str], spool, gate) -> subprocess.Popen:
    """Another machine (its own spool) resuming a run, held once it has the run until `gate` exists
    (HELD_RESUMER above)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPSUITE_SPOOL": str(spool)}
    return subprocess.Popen([sys.executable, "-c", HELD_RESUMER, str(gate), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_machines_resuming_one_run_one_measures_the_rest_the_other_refuses_up_front(
        bucket, url, write_scenario, monkeypatch, tmp_path, capsys):
    path = write_scenario(SMALL.replace("sizes = [32]", "sizes = [32, 48]"), "small.toml")
    scenario = spec.load(path)
    order = [c.case_id for c in plan.expand(scenario)]
    run_id = interrupted_run(scenario, url, monkeypatch)
    remote = store.journal_path(url, "small", run_id)
    location.spool(remote).unlink()  # both resumers are other machines: only the bucket's copy is left
    args = ["run", str(path), "--resume", run_id, "--results", url,
            "--no-report", "--quiet"]
    gate = tmp_path / "go"
    first = held_resumer(args, tmp_path / "spool-a", gate)
    try:
        deadline = time.monotonic() + 120
        announced = ""
        while "resuming with 1 done" not in announced and time.monotonic() < deadline:
            line = first.stderr.readline()
            assert line, first.communicate()
            announced += line
        assert "resuming with 1 done" in announced  # it holds the run and is about to measure
        # the second machine: this process, with a spool of its own (a process of its own would
        # import torch only to refuse; should it not refuse, it measures the rest and ends anyway)
        monkeypatch.setenv("MPSUITE_SPOOL", str(tmp_path / "spool-b"))
        capsys.readouterr()
        assert cli.main(args) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("mpsuite: error: ")
        assert run_id in err and socket.gethostname() in err and "resuming with" not in err  # nothing measured
        assert not list((tmp_path / "spool-b").rglob("*.journal.jsonl"))
    finally:
        gate.touch()
        _, rest = first.communicate(timeout=300)
    assert first.returncode == 0, rest
    keys = bucket.find(url.removeprefix("s3://"))
    assert len(keys) == 1 and keys[0].endswith(f"/small/{run_id}.parquet")  # no journal, no lease, no temporary
    done = store.read_file(f"s3://{keys[0]}")
    assert sorted(done["case_id"]) == sorted(order)  # every case exactly once
    assert not list((tmp_path / "spool-a").rglob("*.journal.jsonl"))


def test_the_results_file_never_replaces_one_another_writer_created_meanwhile(bucket, url, monkeypatch):
    final = store.run_path(url, "small", "20260101T000000Z-abcdef")
    real_exists = location.Remote.exists
    # another writer's file lands between any look this writer takes and its own write
    monkeypatch.setattr(location.Remote, "exists", lambda self: False if self == final else real_exists(self))
    store.write_run(RECORDS, final)
    before = final.read_bytes()
    with pytest.raises(FileExistsError, match="never overwritten"):
        store.write_run([{**RECORDS[0], "status": "failed"}], final)
    assert final.read_bytes() == before
    assert bucket.find(url.removeprefix("s3://")) == [final.path]  # and no temporary left beside it


RUN = "20260101T000000Z-abcdef"


def as_another_machine(monkeypatch, tmp_path, name: str) -> None:
    monkeypatch.setenv("MPSUITE_SPOOL", str(tmp_path / name))  # its own spool, as on its own disk


def test_a_writer_that_lost_its_lease_stops_without_writing_the_journal_or_the_results(
        bucket, url, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lease, "LEASE_S", -1)  # its lease lapses at once (as after a case longer than LEASE_S)
    first = store.start_run(url, "small", RUN, {"plan": ["c1", "c2"]})
    monkeypatch.setattr(lease, "LEASE_S", 1800)
    remote = store.journal_path(url, "small", RUN)
    first.append(RECORDS[0])  # it renews its lease (still its own) and uploads
    assert len(journal.read(remote).records) == 1

    monkeypatch.setattr(lease, "LEASE_S", -1)
    first.append({**RECORDS[0], "case_id": "c0"})  # lapsed again: nobody took the run over, so it goes on
    monkeypatch.setattr(lease, "LEASE_S", 1800)
    as_another_machine(monkeypatch, tmp_path, "b")
    second = store.continue_run(url, "small", RUN)  # takes the lapsed lease over
    assert "taking run" in capsys.readouterr().err and len(second) == 2
    uploaded = remote.read_bytes()
    with pytest.raises(lease.Held, match="lost the run's lease"):
        first.append({**RECORDS[0], "case_id": "c2"})
    assert remote.read_bytes() == uploaded  # the journal is the new writer's
    assert not first.path.exists()  # and this machine's copy, out of date now, is gone
    with pytest.raises(lease.Held):
        store.finish_run(first, url, ["c1"])
    assert not store.run_path(url, "small", RUN).exists()

    second.append({**RECORDS[0], "case_id": "c2"})
    store.finish_run(second, url, ["c1", "c2"])
    keys = bucket.find(url.removeprefix("s3://"))
    assert keys == [store.run_path(url, "small", RUN).path]  # no journal, no lease left


def write_lease(path, **fields) -> None:
    path.fs.pipe_file(path.path, json.dumps(fields).encode())


def test_a_lease_lapses_by_its_time_or_its_dead_process_here_and_never_when_unreadable(bucket, url, tmp_path, monkeypatch):
    started = store.start_run(url, "small", RUN, {"plan": ["c1"]})
    started.lease = None  # the process died without releasing it
    started.close()
    key = store.lease_path(store.journal_path(url, "small", RUN))
    as_another_machine(monkeypatch, tmp_path, "b")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    later = "2999-01-01T00:00:00+00:00"
    refused = [({"host": "node7", "pid": 1234, "machine": "elsewhere", "expires_at": later}, "process 1234 on host node7"),
               (b"\x00 not json", "no mpsuite lease"),
               ({"host": "a\x1b[2Jb", "pid": 1, "machine": "elsewhere"}, r"host a\[2Jb")]  # no time: never lapses
    for held, named in refused:
        key.fs.pipe_file(key.path, held if isinstance(held, bytes) else json.dumps(held).encode())
        with pytest.raises(lease.Held, match=named) as err:
            store.continue_run(url, "small", RUN)
        assert str(key) in str(err.value) and "\n" not in str(err.value)
        assert not list((tmp_path / "b").rglob("*.journal.jsonl"))  # refused before the journal was read
    for held in ({"host": "node7", "pid": 1234, "machine": "elsewhere", "expires_at": "2000-01-01T00:00:00+00:00"},
                 {"host": "here", "pid": int(gone.stdout), "machine": atomic.machine(), "expires_at": later}):
        write_lease(key, **held)
        resumed = store.continue_run(url, "small", RUN)
        assert json.loads(key.read_bytes())["pid"] == os.getpid()  # taken over
        resumed.close()
        assert not key.exists()  # released on close


def test_resume_is_refused_up_front_where_the_store_cannot_keep_one_writer(bucket, url, small, tmp_path, monkeypatch, capsys):
    store.start_run(url, "small", RUN, {"plan": ["c1"]}).close()
    keys = sorted(bucket.find(url.removeprefix("s3://")))
    call_s3 = bucket.call_s3

    def ignoring_conditions(method, *args, **kwargs):  # an S3-compatible server that ignores them
        return call_s3(method, *args, **{k: v for k, v in kwargs.items() if k not in ("IfNoneMatch", "IfMatch")})

    monkeypatch.setattr(bucket, "call_s3", ignoring_conditions)
    monkeypatch.setattr(location, "_PROBED", {})
    as_another_machine(monkeypatch, tmp_path, "b")
    assert cli.main(["run", str(small), "--resume", RUN, "--results", url, "--no-report", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ignores conditional writes (If-None-Match)" in err and RUN in err
    assert sorted(bucket.find(url.removeprefix("s3://"))) == keys  # nothing written, the probe's key gone

    memory = f"memory://mpsuite/{secrets.token_hex(4)}"  # a store mpsuite has no conditional write for
    store.start_run(memory, "small", RUN, {"plan": ["c1"]}).close()  # a new run still goes there
    with pytest.raises(UserError, match=r"cannot resume run .* memory:// has no conditional write"):
        store.continue_run(memory, "small", RUN)


def test_a_run_that_loses_its_lease_mid_run_does_not_offer_to_resume_it(bucket, url, small, monkeypatch, capsys):
    """The writer that lost the run to another process stops with the lease's own message: the
    usual "--resume continues the run" would send it back to take the run mid-write."""
    def lost(self, record):
        raise lease.Held(f"{url}: this process lost the run's lease, now held by another machine")

    monkeypatch.setattr(journal.Journal, "append", lost)
    assert cli.main(["run", str(small), "--results", url, "--no-report", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "lost the run's lease" in err and "--resume" not in err
