"""advise's measured side: the scenario of a step's GEMMs (`advise --scenario`), the measured
speedups read back from its run (`advise --from`), and the report's section for an advised run."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pandas as pd
import pytest

from suite import pipeline, report
from suite.analysis.advise import measured, scenario
from suite.core.errors import ScenarioError
from suite.models import architecture
from suite.models.architecture import Architecture
from suite.models.step import Gemm, Parallel, StepWork
from suite.models.step_work import step_work
from suite.results import store
from suite.scenario import plan, spec

# One dense layer and one MoE layer of a toy model: 2 x 16 tokens, hidden 32, FFN 64, 4 experts,
# top-2 (each expert 16 rows). The layer names carry text a page must show literally.
T, H, F, E = 32, 32, 64, 4
DENSE, EXPERTS = "layers.*.feed_forward.w1<b>", 'layers.*.moe."experts".w1'
RECIPES = ["fp16", "fp8_rowwise"]  # fp16 is CPU speed; FP8 on a CPU is emulated (numerics only)
# numbers, not speed: a CPU run as short as the record allows
QUICK = {"warmup_s": 0.0, "min_warmup": 1, "warmup_max_s": 0.02, "min_samples": 3, "budget_s": 0.02}


def tiny_work() -> StepWork:
    per = T * 2 // E
    gemms = (Gemm(DENSE, "mlp", "fprop", T, H, F, 2), Gemm(DENSE, "mlp", "dgrad", T, F, H, 2),
             Gemm(DENSE, "mlp", "wgrad", F, T, H, 2),
             Gemm(EXPERTS, "experts", "fprop", per, H, F, 2, E), Gemm(EXPERTS, "experts", "dgrad", per, F, H, 2, E),
             Gemm(EXPERTS, "experts", "wgrad", F, per, H, 2, E))
    return StepWork(gemms, 1e6, 1e5, 10_000, 10_000, 0.0, 0.0)


PARALLEL = Parallel(gpus=1, seq=16, batch=2)


def write(tmp_path, **options):
    path = tmp_path / "advised.toml"
    return path, scenario.write_scenario(path, tiny_work(), RECIPES, "tiny", PARALLEL, "H100", **options)


def test_the_scenario_holds_exactly_the_steps_gemms_and_layers(tmp_path):
    path, written = write(tmp_path)
    assert spec.load(path) == written  # what `run` reads is what was written
    by_workload = {s.workload: s for s in written.sweep}
    one, grouped, layer = (scenario.workload_of(k) for k in (scenario.ONE_GEMM, scenario.GROUPED_GEMM,
                                                             scenario.LAYER_STEP))
    assert set(by_workload) == {one, grouped, layer}
    # each pass at its own shape; the expert GEMMs as one call of M = rows x experts over 4 balanced experts
    assert sorted(by_workload[one].mkn) == [(T, H, F), (T, F, H), (F, T, H)]
    assert sorted(by_workload[grouped].mkn) == [(64, H, F), (64, F, H), (256, 16, H)]
    assert by_workload[grouped].params["experts"] == E
    assert by_workload[layer].mkn == [(T, H, F)]  # the dense layer's fprop shape, fwd+bwd
    assert by_workload[one].params["quantize"] == ["pre", "inline"]
    for sweep in written.sweep:
        assert sweep.precisions == ["bf16", *RECIPES]
    assert written.defaults.baseline == "bf16" and written.defaults.device == "auto"
    advised = written.advised
    assert (advised.model, advised.device, advised.gpus, advised.seq, advised.batch) == ("tiny", "H100", 1, 16, 2)
    assert measured.advised_gemms(advised) == list(tiny_work().gemms)  # layer names survive TOML, quotes and all
    cases = plan.expand(written)
    assert len(cases) == 3 * 4 + 3 * 3 + 1 * 3  # GEMMs: bf16, fp16, rowwise pre and inline; grouped inline only
    assert tomllib.loads(path.read_text())["advised"]["gemms"][2]["pass"] == "wgrad"


def test_a_models_step_gives_a_scenario_of_its_distinct_shapes(tmp_path):
    """A tiny mixture (`suite.models.step_work`, experts over two GPUs): every pass's shape once,
    the experts' GEMMs grouped over the local experts, each dense layer's fprop shape as a layer."""
    arch = Architecture("qwen3_moe", layers=2, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64,
                        vocab=64, experts=4, top_k=2, expert_intermediate=32, name="tiny-moe")
    layout = Parallel(gpus=2, ep=2, seq=16, batch=2)
    work = step_work(arch, layout)
    written = scenario.write_scenario(tmp_path / "moe.toml", work, ["fp8_rowwise"], "tiny-moe", layout, "H100")
    mkn = {s.workload: {tuple(x) for x in s.mkn} for s in written.sweep}
    dense = [g for g in work.gemms if g.groups == 1]
    experts = [g for g in work.gemms if g.groups > 1]
    assert experts and {g.groups for g in experts} == {arch.experts // layout.ep}
    assert mkn[scenario.workload_of(scenario.ONE_GEMM)] == {(g.m, g.k, g.n) for g in dense}
    assert mkn[scenario.workload_of(scenario.GROUPED_GEMM)] == {(g.m * g.groups, g.k, g.n) for g in experts}
    assert mkn[scenario.workload_of(scenario.LAYER_STEP)] == {(g.m, g.k, g.n) for g in dense if g.pass_ == "fprop"}
    assert measured.advised_gemms(written.advised) == list(work.gemms)
    assert (written.advised.gpus, written.advised.ep) == (2, 2)
    assert plan.expand(spec.load(tmp_path / "moe.toml"))


def test_a_scenario_advise_did_not_write_dumps_as_before():
    """The marker's field is left out of an unadvised scenario's dump: its runs' hash is unchanged."""
    plain = spec.load(spec.SHIPPED / "cpu.toml")
    assert "advised" not in plain.model_dump(mode="json")
    assert pipeline.scenario_spec(plain, "cpu")["spec"]["scenario"] == plain.model_dump(mode="json")


def test_an_unknown_recipe_is_refused_before_any_file(tmp_path):
    with pytest.raises(ScenarioError, match="unknown precision 'fp7'"):
        scenario.write_scenario(tmp_path / "x.toml", tiny_work(), ["fp7"], "tiny", PARALLEL, "H100")
    assert not (tmp_path / "x.toml").exists()


def test_the_toml_writer_round_trips_any_text_and_nesting():
    data = {"name": "x", "text": 'q"\\\n\t\x01\x7f é 😀', "mkn": [[1, 2, 3]],
            "defaults": {"flag": True, "timing": {"budget_s": 0.5}},
            "advised": {"seq": 8, "gemms": [{"layer": "a.b", "pass": "fprop"}, {"layer": "c", "pass": "wgrad"}]},
            "sweep": [{"workload": "w", "params": {"quantize": ["pre", "inline"]}}, {"workload": "v"}]}
    assert tomllib.loads(scenario.toml_text(data, "a header\non two lines")) == data


def test_a_config_path_names_the_scenario_by_its_folder():
    assert scenario.default_name("/models/Llama 3 8B/config.json") == "advise-Llama-3-8B"
    assert scenario.default_name("llama3-8b") == "advise-llama3-8b"


@pytest.fixture(scope="module")
def advised_run(tmp_path_factory):
    """The advised scenario planned and run here, on the CPU, and its records read back."""
    folder = tmp_path_factory.mktemp("advised")
    _, written = write(folder, timing=QUICK)
    result = pipeline.run(pipeline.RunRequest(written, folder / "results", None, "cpu", progress=False))
    return result.run_id, store.read([result.path])


def test_the_run_carries_the_advised_marker_into_every_record(advised_run):
    _, df = advised_run
    assert (df["status"] != "failed").all(), df[["workload", "precision", "reason"]]
    specs = {json.loads(text)["scenario"]["advised"]["model"] for text in df["scenario_spec"]}
    assert specs == {"tiny"}


def test_from_results_each_pass_and_layer_gets_its_own_measured_speedup(advised_run):
    run_id, df = advised_run
    found = measured.measured_speedups(df, tiny_work().gemms, RECIPES)
    rows = found.rows
    fp16 = rows[rows["recipe"] == "fp16"]
    # three passes of each layer plus the dense layer's fwd+bwd, all measured CPU speed, from this run
    passes = ("fprop", "dgrad", "wgrad")
    assert sorted(zip(fp16["layer"], fp16["pass"])) == sorted(
        [(DENSE, p) for p in (*passes, measured.LAYER_PASS)] + [(EXPERTS, p) for p in passes])
    assert (fp16["source"] == "measured").all() and (fp16["run_id"] == run_id).all()
    assert np.isfinite(fp16["speedup"]).all() and (fp16["speedup"] > 0).all()
    # each row's speedup is its own shape's record's: wgrad (F x T) @ (T x H) is not fprop's case
    for r in fp16[fp16["groups"] == 1].to_dict("records"):
        case = df[df["case_id"] == r["case_id"]].iloc[0]
        assert (case["m"], case["k"], case["n"], case["precision"]) == (r["m"], r["k"], r["n"], "fp16")
    # FP8 on a CPU is emulated: no speed, left to the model, with why
    fp8 = found.unmatched[found.unmatched["recipe"] == "fp8_rowwise"]
    assert len(fp8) == 7 and set(fp8["note"]) == {"emulated"}
    assert not (rows["recipe"] == "fp8_rowwise").any()


def frame(rows: list[dict]) -> pd.DataFrame:
    """Records as `--from` reads them, with their speedups already computed."""
    base = {"status": "ok", "emulated": False, "baseline": "bf16", "params": "{}", "scenario": "s",
            "run_id": "20260101T000000Z-a", "reason": None}
    out = pd.DataFrame([{**base, **r} for r in rows])
    out["case_id"] = [f"c{i}" for i in range(len(out))]
    return out


def test_matching_takes_the_inline_case_as_the_speedup_the_pre_case_as_the_gemm_alone_and_the_newest_run():
    gemm = Gemm("layers.*.w", "mlp", "fprop", 64, 32, 48, 1)
    df = frame([
        {"workload": "gemm", "precision": "fp8_rowwise", "m": 64, "k": 32, "n": 48, "speedup": 1.5},
        {"workload": "gemm", "precision": "fp8_rowwise", "m": 64, "k": 32, "n": 48, "speedup": 1.2,
         "params": '{"quantize": "inline"}'},
        {"workload": "gemm", "precision": "fp8_rowwise", "m": 64, "k": 32, "n": 48, "speedup": 9.0,
         "run_id": "20250101T000000Z-old"},  # an older run of the same case
        {"workload": "gemm", "precision": "fp8_rowwise", "m": 64, "k": 32, "n": 48, "speedup": 7.0,
         "params": '{"use_fast_accum": false}'},  # another setting: not what the scenario measures
        {"workload": "gemm", "precision": "fp8_rowwise", "m": 48, "k": 32, "n": 64, "speedup": 3.0},  # transposed
        {"workload": "linear", "precision": "fp8_rowwise", "m": 64, "k": 32, "n": 48, "status": "skipped",
         "reason": "no FP8 here"},
    ])
    found = measured.measured_speedups(df, [gemm], ["fp8_rowwise"])
    assert found.rows[["pass", "speedup", "gemm_only_speedup", "run_id"]].values.tolist() == [
        ["fprop", 1.2, 1.5, "20260101T000000Z-a"]]
    assert found.unmatched[["pass", "note"]].values.tolist() == [[measured.LAYER_PASS, "skipped"]]
    assert measured.lookup(found)[("layers.*.w", "fprop", 64, 32, 48, 1, "fp8_rowwise")]["speedup"] == 1.2
    assert "no FP8 here" in found.unmatched["why"].iloc[0]


def test_a_grouped_case_matches_only_balanced_experts_in_one_call():
    gemm = Gemm("layers.*.experts.w1", "experts", "fprop", 16, 32, 64, 1, groups=4)
    grouped = {"workload": "grouped_gemm", "precision": "fp16", "m": 64, "k": 32, "n": 64}
    df = frame([{**grouped, "speedup": 2.0, "params": '{"experts": 4, "impl": "loop"}'},
                {**grouped, "speedup": 3.0, "params": '{"experts": 4, "load": "zipf"}'},
                {**grouped, "speedup": 4.0, "params": '{"experts": 8}'}])
    found = measured.measured_speedups(df, [gemm], ["fp16"])
    assert found.rows.empty and found.unmatched["note"].tolist() == ["absent"]
    found = measured.measured_speedups(frame([{**grouped, "speedup": 1.7, "params": '{"experts": 4}'}]), [gemm], ["fp16"])
    assert found.rows["speedup"].tolist() == [1.7]


def test_the_report_of_an_advised_run_has_its_section(advised_run):
    _, df = advised_run
    view = report.build_view(df)
    [section] = view["advised"]
    assert section["title"] == "tiny on H100" and "TP 1, EP 1, 2 x 16 tokens per GPU" in section["layout"]
    found = measured.measured_speedups(df, tiny_work().gemms, RECIPES).rows
    shown = {(r["layer"], r["pass"]): r["fp16"] for r in section["rows"]}
    assert len(shown) == 7
    for r in found[found["recipe"] == "fp16"].to_dict("records"):
        assert shown[(r["layer"], r["pass"])] == f"{r['speedup']:.3g}x"  # the record's number
    assert {r["fp8_rowwise"] for r in section["rows"]} == {"emulated"}
    md, page = report.markdown(view), report.html(view)
    assert "## Advised: tiny on H100" in md and "Advised: tiny on H100" in page
    assert "w1<b>" not in page and "w1&lt;b&gt;" in page  # a record's text, escaped


def test_the_report_of_any_other_run_has_no_advised_section(advised_run):
    _, df = advised_run
    plain = json.loads(df["scenario_spec"].iloc[0])
    del plain["scenario"]["advised"]
    view = report.build_view(df.assign(scenario_spec=json.dumps(plain, sort_keys=True)))
    assert view["advised"] == []
    assert "Advised" not in report.markdown(view) and "Advised" not in report.html(view)


def test_cases_whose_parameters_do_not_read_match_nothing():
    gemm = Gemm("layers.*.experts.w1", "experts", "fprop", 16, 32, 64, 1, groups=4)
    grouped = {"workload": "grouped_gemm", "precision": "fp16", "m": 64, "k": 32, "n": 64, "speedup": 2.0}
    df = frame([{**grouped, "params": "{not json"}, {**grouped, "params": "[4]"},
                {**grouped, "params": '{"experts": 1000000000}'}, {**grouped, "params": '{"experts": -4}'},
                {**grouped, "m": float("nan")}])
    found = measured.measured_speedups(df, [gemm], ["fp16"])
    assert found.rows.empty and found.unmatched["note"].tolist() == ["absent"]


def test_the_command_writes_the_scenario_and_reads_its_run_back(tmp_path, capsys):
    """`advise CONFIG --scenario OUT.toml`, `run OUT.toml` on this CPU, `advise CONFIG --from` the run:
    the recipe that runs at CPU speed (fp16) is measured for every GEMM of the step, each at its own
    shape's record; FP8 would be emulated here and stays predicted."""
    from suite import cli
    from tests.json_docs import cli_json

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
                                  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                                  "vocab_size": 32, "tie_word_embeddings": False}))
    out = tmp_path / "advised.toml"
    layout = ["--device", "h100", "--seq", "8", "--batch", "2", "--recipes", "fp16"]
    assert cli.main(["advise", str(config), *layout, "--scenario", str(out), "--quiet"]) == 0
    text = out.read_text().replace("[defaults]\n", "[defaults]\ntiming = " + scenario.toml_value(QUICK) + "\n", 1)
    written = spec.parse(tomllib.loads(text), str(out))
    result = pipeline.run(pipeline.RunRequest(written, tmp_path / "results", None, "cpu", progress=False))
    capsys.readouterr()
    doc = cli_json(capsys, ["advise", str(config), *layout, "--from", str(result.path), "--json"])
    cells = [g["recipes"]["fp16"] for g in doc["gemms"]]
    assert cells and all(c["source"] == "measured" for c in cells)
    gemms = step_work(architecture.resolve(str(config)), Parallel(seq=8, batch=2)).gemms
    rows = measured.lookup(measured.measured_speedups(store.read([result.path]), gemms, ["fp16"]))
    for g in doc["gemms"]:
        row = rows[(g["layer"], g["pass"], g["m"], g["k"], g["n"], g["groups"], "fp16")]
        assert g["recipes"]["fp16"]["speedup"] == pytest.approx(row["speedup"])
    # the terminal marks each measured speedup and says what the mark means
    assert cli.main(["advise", str(config), *layout, "--from", str(result.path)]) == 0
    shown = capsys.readouterr().out
    assert f"{doc['gemms'][0]['recipes']['fp16']['speedup']:.2f}x*" in shown and "* measured: " in shown
