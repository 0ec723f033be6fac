"""Scenario files: valid ones load; each kind of mistake gives one line naming file and field."""

from __future__ import annotations

import pytest

from suite.scenario import spec
from suite.core.errors import ScenarioError

GOOD = """
name = "ok"
[defaults]
baseline = "fp32"
[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16"]
shapes = "square"
sizes = [64]
"""


def error_of(write_scenario, text: str) -> str:
    path = write_scenario(text)
    with pytest.raises(ScenarioError) as err:
        spec.load(path)
    message = str(err.value)
    assert "\n" not in message, "errors are one line"
    assert message.startswith(str(path)), "errors name the file"
    return message


def test_good_file_loads(write_scenario):
    scenario = spec.load(write_scenario(GOOD))
    assert scenario.name == "ok"
    assert scenario.sweep[0].precisions == ["fp32", "bf16"]
    assert scenario.defaults.timing.min_samples >= 1


def test_shipped_scenarios_are_valid():
    found = spec.load_dir("scenarios")
    assert "cpu" in found


def test_unknown_precision_lists_valid_names(write_scenario):
    msg = error_of(write_scenario, GOOD.replace('"bf16"', '"bf61"'))
    assert "sweep[0].precisions" in msg and "'bf61'" in msg
    assert "valid:" in msg and "fp32" in msg and "bf16" in msg


def test_unknown_workload_lists_valid_names(write_scenario):
    msg = error_of(write_scenario, GOOD.replace('workload = "gemm"', 'workload = "gemmm"'))
    assert "sweep[0].workload" in msg and "'gemmm'" in msg and "gemm" in msg


def test_wrong_type(write_scenario):
    msg = error_of(write_scenario, GOOD.replace("sizes = [64]", 'sizes = ["big"]'))
    assert "sweep[0].sizes[0]" in msg and "integer" in msg


@pytest.mark.parametrize("size", ["0", "-128"])
def test_non_positive_sizes(write_scenario, size):
    msg = error_of(write_scenario, GOOD.replace("sizes = [64]", f"sizes = [{size}]"))
    assert "sweep[0].sizes[0]" in msg and "greater than 0" in msg


def test_non_positive_mkn(write_scenario):
    text = GOOD.replace('shapes = "square"\nsizes = [64]', "mkn = [[16, 0, 16]]")
    msg = error_of(write_scenario, text)
    assert "sweep[0].mkn[0]" in msg and "greater than 0" in msg


def test_empty_sweep_list(write_scenario):
    msg = error_of(write_scenario, 'name = "x"\nsweep = []\n')
    assert "sweep" in msg and "at least 1" in msg


def test_missing_sweep(write_scenario):
    msg = error_of(write_scenario, 'name = "x"\n')
    assert "sweep: required field is missing" in msg


def test_empty_precisions(write_scenario):
    msg = error_of(write_scenario, GOOD.replace('precisions = ["fp32", "bf16"]', "precisions = []"))
    assert "sweep[0].precisions" in msg


def test_unknown_field(write_scenario):
    msg = error_of(write_scenario, GOOD.replace('workload = "gemm"', 'workload = "gemm"\nsizez = [1]'))
    assert "sweep[0].sizez: unknown field" in msg


def test_invalid_toml_names_the_line(write_scenario):
    msg = error_of(write_scenario, 'name = "x"\n[[sweep]\nworkload = 1\n')
    assert "invalid TOML" in msg and "line 2" in msg


def test_unreadable_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        spec.load(tmp_path / "missing.toml")


def test_baseline_must_be_measured(write_scenario):
    msg = error_of(write_scenario, GOOD.replace('baseline = "fp32"', 'baseline = "fp16"'))
    assert "baseline 'fp16' is not among" in msg


def test_shape_set_rules(write_scenario):
    msg = error_of(write_scenario, GOOD.replace('"square"', '"square_pow2"').replace("[64]", "[96]"))
    assert "powers of two" in msg and "96" in msg
    msg = error_of(write_scenario, GOOD.replace('"square"', '"squares"'))
    assert "unknown shape set 'squares'" in msg


def test_exclude_keys_are_checked(write_scenario):
    msg = error_of(write_scenario, GOOD + 'exclude = [{precison = "bf16"}]\n')
    assert "exclude[0]: unknown key 'precison'" in msg


def test_scenario_name_is_a_safe_folder_name(write_scenario):
    msg = error_of(write_scenario, GOOD.replace('name = "ok"', 'name = "../escape"'))
    assert "name" in msg


def test_duplicate_scenario_names(write_scenario):
    write_scenario(GOOD, "a.toml")
    second = write_scenario(GOOD, "b.toml")
    with pytest.raises(ScenarioError, match="already used by"):
        spec.load_dir(second.parent)


def test_resolve_by_name_and_unknown_name(write_scenario):
    path = write_scenario(GOOD, "a.toml")
    assert spec.resolve("ok", path.parent).name == "ok"
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'.*valid: ok"):
        spec.resolve("nope", path.parent)


def test_scenario_is_data_not_code(write_scenario):
    # A string that would run code if the file were executed or templated is just a string.
    scenario = spec.load(write_scenario(GOOD.replace('name = "ok"', 'name = "ok"\ndescription = "__import__(\'os\').system(\'false\')"')))
    assert scenario.description.startswith("__import__")


# --- typed parameters: checked when the scenario loads ----------------------------------------

FP8_GEMM = """
name = "p"
[[sweep]]
workload = "gemm"
precisions = ["bf16", "fp8_tensorwise"]
mkn = [[64, 64, 64]]
params = {params}
"""
TRAIN = """
name = "t"
[[sweep]]
workload = "train_step"
precisions = ["fp32"]
params = {params}
"""


@pytest.mark.parametrize("text, expected", [
    (FP8_GEMM.replace("{params}", '{ quantise = "pre", use_fast_acum = true }'),
     "sweep[0]: params.quantise: unknown parameter for workload 'gemm' with precisions bf16, fp8_tensorwise; "
     "valid: fp8_all_gather, pad, quantize, use_fast_accum"),
    (FP8_GEMM.replace("{params}", '{ quantize = "bogus" }'),
     "sweep[0]: params.quantize: 'bogus' is not valid for 'fp8_tensorwise': Input should be 'pre' or 'inline'"),
    (TRAIN.replace("{params}", "{ batchh = 2 }"), "sweep[0]: params.batchh: unknown parameter for workload 'train_step'"),
    (TRAIN.replace("{params}", "{ batch = 0 }"), "sweep[0]: params.batch: 0 is not valid for workload 'train_step': "
                                                 "Input should be greater than 0"),
    (TRAIN.replace("{params}", '{ batch = "2" }'), "params.batch: '2' is not valid"),  # strict: no coercion
    (TRAIN.replace("{params}", "{ compile = 1 }"), "params.compile: 1 is not valid"),
    (FP8_GEMM.replace('["bf16", "fp8_tensorwise"]', '["te_delayed"]').replace("{params}", "{ amax_history_len = [16, 0] }"),
     "params.amax_history_len: 0 is not valid for 'te_delayed': Input should be greater than 0"),
    (FP8_GEMM.replace('workload = "gemm"', 'workload = "outlier"').replace("params = {params}\n", ""),
     "sweep[0]: params.outlier: required by workload 'outlier'"),
])
def test_parameter_mistakes_are_one_line_errors_at_load(write_scenario, text, expected):
    assert expected in error_of(write_scenario, text)


def test_a_parameter_mistake_from_the_command_line_exits_2_before_anything_runs(write_scenario, capsys):
    from suite import cli

    path = write_scenario(TRAIN.replace("{params}", "{ batchh = 2 }"))
    assert cli.main(["run", str(path), "--results", str(path.parent / "r"), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "params.batchh: unknown parameter" in err
    assert not (path.parent / "r").exists()  # nothing ran, nothing was written


def test_a_field_of_the_other_model_is_refused_when_planned(write_scenario):
    from suite.scenario import plan

    scenario = spec.load(write_scenario(TRAIN.replace("{params}", '{ model = "gpt2", ffn_hidden = 64 }')))
    with pytest.raises(ScenarioError, match="ffn_hidden is a llama field"):
        plan.expand(scenario)
