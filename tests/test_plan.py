"""Expanding scenarios into cases, and the stability of case ids."""

from __future__ import annotations

from suite.scenario import plan, spec
from suite.scenario.shapes import SHAPE_SETS

BASE = """
name = "p"
[defaults]
baseline = "fp32"
[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16", "fp16"]
shapes = "square"
sizes = [64, 128]
"""


def cases_of(write_scenario, text):
    return plan.expand(spec.load(write_scenario(text)))


def test_product_of_precisions_and_shapes(write_scenario):
    cases = cases_of(write_scenario, BASE)
    assert len(cases) == 3 * 2
    assert {(c.precision, c.m) for c in cases} == {(p, s) for p in ("fp32", "bf16", "fp16") for s in (64, 128)}
    assert all(c.m == c.k == c.n for c in cases)


def test_params_lists_are_swept_for_the_precisions_that_take_them(write_scenario):
    text = BASE.replace('"fp16"]', '"fp8_tensorwise"]') + 'params = {quantize = ["pre", "inline"], pad = true}\n'
    cases = cases_of(write_scenario, text)
    fp8 = [c for c in cases if c.precision == "fp8_tensorwise"]
    # quantize = "pre" is the default, so it is left out of the case's identity
    assert sorted((c.m, c.params_json()) for c in fp8) == sorted(
        (m, p) for m in (64, 128) for p in ('{"pad": true}', '{"pad": true, "quantize": "inline"}'))
    # fp32 and bf16 take neither parameter: one case per shape, not one per value of another's
    others = [c for c in cases if c.precision != "fp8_tensorwise"]
    assert len(others) == 2 * 2 and all(c.params == {} for c in others)
    fp32 = {c.m: c.case_id for c in others if c.precision == "fp32"}
    assert all(c.baseline_case_id == fp32[c.m] for c in cases)  # the baseline is a case that exists


def test_the_defaults_spelled_out_are_the_same_case(write_scenario):
    text = BASE.replace('"fp16"]', '"fp8_tensorwise"]')
    implicit = cases_of(write_scenario, text)
    explicit = cases_of(write_scenario, text + 'params = {quantize = "pre", pad = false}\n')
    assert [c.case_id for c in implicit] == [c.case_id for c in explicit]
    # use_fast_accum's default is unset (torchao's forward: fast): true and false are cases of their own
    for value in ("true", "false"):
        spelled = cases_of(write_scenario, text + f'params = {{use_fast_accum = {value}}}\n')
        fp8 = [c.case_id for c in spelled if c.precision == "fp8_tensorwise"]
        assert fp8 and not set(fp8) & {c.case_id for c in implicit}


def test_exclude_and_include(write_scenario):
    text = BASE + 'exclude = [{precision = "fp16", m = 128}]\ninclude = [{precision = "fp16", m = 8, k = 16, n = 24}]\n'
    cases = cases_of(write_scenario, text)
    assert ("fp16", 128) not in {(c.precision, c.m) for c in cases}
    assert any((c.precision, c.m, c.k, c.n) == ("fp16", 8, 16, 24) for c in cases)
    assert len(cases) == 6 - 1 + 1


def test_explicit_mkn_and_named_llama_set(write_scenario):
    text = BASE.replace('shapes = "square"\nsizes = [64, 128]', "mkn = [[16, 32, 48]]")
    assert {(c.m, c.k, c.n) for c in cases_of(write_scenario, text)} == {(16, 32, 48)}
    # Llama-3-8B: hidden 4096, intermediate 14336, 32 heads of 128, 8 KV heads -> QKV out 4096 + 2*1024.
    assert SHAPE_SETS["llama3_8b"].triples(None, 1024) == [
        (1024, 4096, 6144), (1024, 4096, 4096), (1024, 4096, 28672), (1024, 14336, 4096)
    ]
    assert SHAPE_SETS["llama3_70b"].triples(None, None)[0] == (16384, 8192, 10240)


def test_duplicates_across_sweeps_are_kept_once(write_scenario):
    text = BASE + BASE[BASE.index("[[sweep]]"):]
    assert len(cases_of(write_scenario, text)) == 6


def test_baseline_case_id_points_at_the_same_case_in_the_baseline_precision(write_scenario):
    cases = cases_of(write_scenario, BASE)
    by_id = {c.case_id: c for c in cases}
    for case in cases:
        base = by_id[case.baseline_case_id]
        assert base.precision == "fp32" and (base.m, base.k, base.n) == (case.m, case.k, case.n)


def test_case_id_depends_on_parameters_only(write_scenario):
    a = cases_of(write_scenario, BASE)
    other = BASE.replace('name = "p"', 'name = "q"\ndescription = "elsewhere"').replace(
        "[defaults]", "[defaults]\nseed = 7\ndevice = \"cpu\""
    )
    b = cases_of(write_scenario, other)
    assert [c.case_id for c in a] == [c.case_id for c in b]
    assert len({c.case_id for c in a}) == len(a)


def test_case_id_is_stable_across_versions():
    # Pinned value: changing the hash breaks joins with every stored result, so it must be deliberate.
    assert plan.case_hash("gemm", "bf16", 1024, 1024, 1024, {}) == "4764a82df1373e50"


def test_case_hash_is_the_sorted_compact_json_of_the_key():
    # The plan builds the key's JSON in two parts (shape, and the rest); the id must stay the hash
    # of the whole key written at once, or stored results stop joining.
    import hashlib
    import json

    keys = [("gemm", "bf16", 1024, 1024, 1024, {}), ("train_step", "fp8_rowwise", None, None, None,
            {"model": "gpt2", "compile": True, "zeta": [1, 2.5], "nested": {"b": None, "a": "é"}}),
            ("outlier", "fp16", 16, 32, 48, {"outlier": 10.0}), ("gemm", "fp32", 0, 1, 2**40, {"k": "v"})]
    for workload, precision, m, k, n, params in keys:
        key = {"workload": workload, "precision": precision, "m": m, "k": k, "n": n, "params": params}
        text = json.dumps(key, sort_keys=True, separators=(",", ":"))
        assert plan.case_hash(workload, precision, m, k, n, params) == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_planned_ids_are_the_hash_of_each_case_and_follow_a_replace(write_scenario):
    import dataclasses

    text = BASE.replace('"fp16"]', '"fp8_tensorwise"]') + 'params = {quantize = ["pre", "inline"]}\n'
    text += 'include = [{precision = "bf16", m = 8, k = 16, n = 24}]\n'
    for case in cases_of(write_scenario, text):
        assert case.case_id == plan.case_hash(case.workload, case.precision, case.m, case.k, case.n, case.params)
        moved = dataclasses.replace(case, m=7)
        assert moved.case_id == plan.case_hash(case.workload, case.precision, 7, case.k, case.n, case.params)


def test_each_precision_and_params_pair_is_validated_once(write_scenario, monkeypatch):
    calls = []
    real = plan.identity_params
    monkeypatch.setattr(plan, "identity_params", lambda *a, **kw: calls.append(a[:2]) or real(*a, **kw))
    text = BASE.replace('"fp16"]', '"fp8_tensorwise"]').replace("sizes = [64, 128]", "sizes = [64, 128, 256]")
    cases = cases_of(write_scenario, text + 'params = {quantize = ["pre", "inline"]}\n')
    assert len(cases) == 3 * (2 + 2)  # fp32 and bf16 take no quantize: one case per shape each
    # 3 precisions x 2 quantize values, then the baseline (fp32) once per quantize value; not per shape
    assert sorted(calls) == sorted([("gemm", p) for p in ("fp32", "bf16", "fp8_tensorwise") for _ in range(2)]
                                   + [("gemm", "fp32")] * 2)
