"""Shards (`suite.fleet.shard`): a pure function of the plan and (K, N), every case in exactly one
shard, a case and its baseline together, balanced by the cost prior; the scheduler variables;
run groups read as one run (`suite.results.groups`)."""

from __future__ import annotations

import pandas as pd
import pytest

from suite.core.errors import UserError
from suite.fleet import shard
from suite.results import groups
from suite.scenario import plan, spec

SCENARIOS = ["cpu", "h100_fp8", "a100"]


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("count", [1, 3, 8])
def test_every_case_in_exactly_one_shard_with_its_baseline(name, count):
    cases = plan.expand(spec.resolve(name))
    parts = [shard.select(cases, shard.Shard(k, count)) for k in range(count)]
    ids = [c.case_id for part in parts for c in part]
    assert sorted(ids) == sorted(c.case_id for c in cases)  # each once
    where = {c.case_id: k for k, part in enumerate(parts) for c in part}
    for c in cases:  # the baseline, where the plan has it, runs in the same shard: speedups on one node
        if c.baseline_case_id in where:
            assert where[c.baseline_case_id] == where[c.case_id]
    for part in parts:  # plan order within a shard
        order = [cases.index(c) for c in part]
        assert order == sorted(order)


def test_the_assignment_depends_on_the_plan_only_not_its_order():
    cases = plan.expand(spec.resolve("h100_fp8"))
    forward = dict(zip((c.case_id for c in cases), shard.assign(cases, 8)))
    backward = dict(zip((c.case_id for c in reversed(cases)), shard.assign(list(reversed(cases)), 8)))
    assert forward == backward


def test_shards_are_balanced_by_estimated_cost():
    """LPT over settings: the heaviest shard is within the largest setting of the mean (Graham's
    bound for greedy list scheduling), and far from an unbalanced split by count."""
    cases = plan.expand(spec.resolve("h100_fp8"))
    loads = shard.loads(cases, 8)
    biggest = max(sum(map(shard.estimated_s, unit)) for unit in shard.settings(cases).values())
    assert max(loads) <= sum(loads) / 8 + biggest
    assert max(loads) - min(loads) <= biggest


def test_estimates_grow_with_work_and_stop_at_the_case_cap():
    bf16 = {c.m: c for c in plan.expand(spec.resolve("h100_fp8"))
            if c.workload == "gemm" and c.m == c.n == c.k and c.precision == "bf16"}
    small, large = bf16[1024], bf16[16384]
    assert shard.estimated_s(small) < shard.estimated_s(large) <= large.timing.case_cap("cuda")


def test_a_compiled_case_is_estimated_with_its_compile():
    # the compiling first call is outside the case cap: a compiled layer step costs more than its eager twin
    linear = [c for c in plan.expand(spec.resolve("h100_fp8")) if c.workload == "linear" and c.precision == "bf16"]
    eager = next(c for c in linear if not c.params.get("compile"))
    compiled = next(c for c in linear if c.params.get("compile") and (c.m, c.k, c.n) == (eager.m, eager.k, eager.n))
    assert shard.estimated_s(compiled) == pytest.approx(shard.estimated_s(eager) + shard.COMPILE_S)
    # torchao's optimizers compile their step unless told not to (compile_step = false, cpu_update)
    update = {c.precision: c for c in plan.expand(spec.resolve("h100")) if c.precision == "bf16_adamw8bit"}
    assert shard.compiles(update["bf16_adamw8bit"])
    assert not any(shard.compiles(c) for c in plan.expand(spec.resolve("cpu_update")))


def test_a_folders_own_compiling_parameter_counts_whatever_its_name():
    """A parameter is a compile by its folder's mark (`COMPILES`), not by its name: a precision's
    `toy_jit` counts on any workload's cases once they share one parameter model; an unmarked bool does not."""
    from pydantic import Field

    from suite.scenario.params import COMPILES, Params, case_model, compiles
    from suite.workloads.linear import CompileParams

    class ToyJit(Params):
        toy_jit: bool = Field(False, json_schema_extra=COMPILES)
        toy_flag: bool = False

    merged = case_model(CompileParams, ToyJit)
    assert compiles(merged.of({"toy_jit": True})) and compiles(merged.of({"compile": True}))
    assert not compiles(merged.of({"toy_flag": True})) and not compiles(merged.of({}))


@pytest.mark.parametrize(("text", "environ", "expected"), [
    ("2/8", {}, (2, 8)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "8"}, (4, 8)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "2",
              "SLURM_ARRAY_TASK_COUNT": "4"}, (3, 4)),
    ("auto/8", {"JOB_COMPLETION_INDEX": "7"}, (7, 8)),
])
def test_shard_from_the_command_line_or_the_scheduler(text, environ, expected):
    got = shard.parse(text, environ)
    assert (got.index, got.count) == expected


@pytest.mark.parametrize(("text", "environ", "message"), [
    ("8/8", {}, "from 0 to 7"),
    ("1", {}, "expected K/N"),
    ("a/3", {}, "not a whole number"),
    ("0/0", {}, "at least 1"),
    ("auto", {}, "neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX"),
    ("auto", {"JOB_COMPLETION_INDEX": "1"}, "auto/N"),
    ("auto", {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, "grid"),
])
def test_bad_shards_are_one_line_errors(text, environ, message):
    with pytest.raises(UserError, match=message):
        shard.parse(text, environ)


def test_group_names_from_flag_environment_or_scheduler():
    assert shard.group_name("nightly", {"SLURM_ARRAY_JOB_ID": "9"}) == "nightly"
    assert shard.group_name(None, {"MPSUITE_RUN_GROUP": "k8s-uid-1", "SLURM_ARRAY_JOB_ID": "9"}) == "k8s-uid-1"
    assert shard.group_name(None, {"SLURM_ARRAY_JOB_ID": "9"}) == "slurm-9"
    assert shard.group_name(None, {"GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "2"}) == "gha-77-2"
    assert shard.group_name(None, {}) is None
    with pytest.raises(UserError, match="run group"):
        shard.group_name("../x", {})


def _rows(group, shard_run_id, index, count, case_ids, **extra):
    return [{"run_id": shard_run_id, "shard_run_id": shard_run_id, "run_group": group, "shard_index": index,
             "shard_count": count, "case_id": c, "scenario": "s", **extra} for c in case_ids]


def test_a_group_reads_as_one_run_named_after_its_first_shard():
    df = pd.DataFrame(_rows("g.1", "20261201T100005Z-aaaaaa", 1, 2, ["c", "d"])
                      + _rows("g.1", "20261201T100001Z-bbbbbb", 0, 2, ["a", "b"])
                      + [{"run_id": "20261201T090000Z-cccccc", "case_id": "a", "scenario": "s"}])
    out = groups.as_runs(df, warn=pytest.fail)
    grouped = out[out["run_group"].notna()]
    assert grouped["run_id"].nunique() == 1
    run_id = grouped["run_id"].iloc[0]
    assert run_id.startswith("20261201T100001Z-") and run_id != "20261201T100001Z-bbbbbb"
    assert set(out.loc[out["run_group"].isna(), "run_id"]) == {"20261201T090000Z-cccccc"}  # others untouched
    assert groups.shard_lines(out) == []


def test_a_shard_measured_twice_keeps_the_newest_and_says_so():
    df = pd.DataFrame(_rows("g.1", "20261201T100001Z-bbbbbb", 0, 1, ["a", "b"], time_ms_median=1.0)
                      + _rows("g.1", "20261201T110000Z-dddddd", 0, 1, ["a", "b"], time_ms_median=2.0))
    said = []
    out = groups.as_runs(df, warn=said.append)
    assert sorted(out["case_id"]) == ["a", "b"] and set(out["time_ms_median"]) == {2.0}
    assert "20261201T100001Z-bbbbbb" in said[0]


def test_missing_and_unfinished_shards_are_named():
    df = pd.DataFrame(_rows("g.1", "20261201T100001Z-bbbbbb", 0, 4, ["a"], run_partial=False)
                      + _rows("g.1", "20261201T100002Z-eeeeee", 2, 4, ["c"], run_partial=True))
    [line] = groups.shard_lines(groups.as_runs(df))
    assert "of 4 shards" in line and "shards 1, 3 have no results" in line
    assert "shard 2 stopped midway" in line and "--resume 20261201T100002Z-eeeeee" in line


def test_selectors_count_a_stored_group_as_one_run(tmp_path):
    from suite.results import select, store

    def write(run_id, case_ids, **fleet):
        records = [{"case_id": c, "scenario": "s", "run_id": run_id, "workload": "gemm", "precision": "fp32",
                    "status": "ok", "reason": None, "time_ms_median": 1.0, **fleet} for c in case_ids]
        store.write_run(records, store.run_path(tmp_path, "s", run_id))

    write("20261201T090000Z-000001", ["a", "b"])  # an ordinary run before the fleet run
    for k, run_id in enumerate(["20261201T100000Z-00000a", "20261201T100007Z-00000b"]):
        write(run_id, ["ab"[k]], run_group="n.1234abcd", shard_index=k, shard_count=2, shard_run_id=run_id)
    newest = select.select("scenario=s", tmp_path)
    assert sorted(newest["case_id"]) == ["a", "b"] and newest["run_id"].nunique() == 1  # both shards: the newest run
    assert set(newest["shard_run_id"]) == {"20261201T100000Z-00000a", "20261201T100007Z-00000b"}
    before = select.select("scenario=s,skip=1", tmp_path)
    assert set(before["run_id"]) == {"20261201T090000Z-000001"}
    assert select.select("scenario=s,runs=all", tmp_path)["run_id"].nunique() == 2
