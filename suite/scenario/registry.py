"""Every precision and workload the suite knows: one record each, naming its code, its parameter
model (`suite.scenario.params`) and what the rest of the pipeline needs to know about it.

Adding a precision or a workload is one file (its code) plus one record here; tests/test_registry.py
checks that every record is complete. Kept free of torch so that scenario validation
(`suite.scenario.spec`) can list valid names and check parameters without a torch import; `load`
imports the implementing object only when a case needs it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from suite.scenario import params as p


@dataclass(frozen=True)
class PrecisionRecord:
    target: str  # "module:attribute"; the attribute is a Precision instance
    params: type[p.Params] = p.NoParams
    # the vendor-peak column its throughput is set against (suite/core/peaks.py), or None
    peak: str | None = None


@dataclass(frozen=True)
class WorkloadRecord:
    target: str  # "module:attribute"; the attribute is a Workload instance
    params: type[p.Params] = p.NoParams
    shaped: bool = False  # cases defined by (m, k, n); the others take their shape from params
    # workload-specific record columns the report shows in a table of their own: (column, title, format)
    detail_columns: tuple[tuple[str, str, str], ...] = ()
    # each case is one torchrun launch of `world_size` ranks (suite.measure.executors.torchrun), not a call here
    launched: bool = False


TE = "suite.precisions.te"
UPDATE = "suite.precisions.update"
PRECISIONS: dict[str, PrecisionRecord] = {
    "fp32": PrecisionRecord("suite.precisions.floating:FP32", peak="fp32"),
    "tf32": PrecisionRecord("suite.precisions.floating:TF32", peak="tf32"),
    "bf16": PrecisionRecord("suite.precisions.floating:BF16", peak="bf16"),
    "fp16": PrecisionRecord("suite.precisions.floating:FP16", peak="fp16"),
    "fp16_noscaler": PrecisionRecord("suite.precisions.floating:FP16_NOSCALER", peak="fp16"),
    # update side (training steps): bf16 compute, weights and optimizer state in other formats
    "bf16_pure": PrecisionRecord(f"{UPDATE}:BF16_PURE", peak="bf16"),
    "bf16_pure_sr": PrecisionRecord(f"{UPDATE}:BF16_PURE_SR", p.TorchaoOptimParams, "bf16"),
    "bf16_pure_kahan": PrecisionRecord(f"{UPDATE}:BF16_PURE_KAHAN", peak="bf16"),
    "bf16_adamw8bit": PrecisionRecord(f"{UPDATE}:BF16_ADAMW8BIT", p.LowBitParams, "bf16"),
    "bf16_adamw4bit": PrecisionRecord(f"{UPDATE}:BF16_ADAMW4BIT", p.LowBitParams, "bf16"),
    "bf16_adamw_fp8": PrecisionRecord(f"{UPDATE}:BF16_ADAMW_FP8", p.LowBitParams, "bf16"),
    # FP8: torchao recipes (torch._scaled_mm GEMMs), emulated block scaling, Transformer Engine
    "fp8_tensorwise": PrecisionRecord("suite.precisions.fp8:FP8_TENSORWISE", p.FP8TensorwiseParams, "fp8"),
    "fp8_rowwise": PrecisionRecord("suite.precisions.fp8:FP8_ROWWISE", p.FP8GemmParams, "fp8"),
    "fp8_rowwise_gw_hp": PrecisionRecord("suite.precisions.fp8:FP8_ROWWISE_GW_HP", p.FP8GemmParams, "fp8"),
    "fp8_block": PrecisionRecord("suite.precisions.fp8:FP8_BLOCK", p.FP8GemmParams, "fp8"),
    "te_delayed": PrecisionRecord(f"{TE}:TE_DELAYED", p.TEDelayedParams, "fp8"),
    "te_current": PrecisionRecord(f"{TE}:TE_CURRENT", p.TECurrentParams, "fp8"),
    "te_block": PrecisionRecord(f"{TE}:TE_BLOCK", p.TECurrentParams, "fp8"),
    "mxfp8": PrecisionRecord(f"{TE}:TE_MXFP8", p.TEMXFP8Params, "fp8"),
    "nvfp4": PrecisionRecord(f"{TE}:TE_NVFP4", p.TENVFP4Params, "fp4"),
}

LAYER_DETAILS = (
    ("sqnr_db", "SQNR out dB", ".1f"), ("sqnr_grad_input_db", "SQNR grad in dB", ".1f"),
    ("sqnr_grad_weight_db", "SQNR grad W dB", ".1f"), ("compile_s", "compile s", ".3g"),
    # where the step's time goes: torch.profiler's split, and the roofline model's (docs/model.md)
    ("measured_gemm_ms", "GEMM ms (profiler)", ".3g"), ("measured_other_ms", "other ms (profiler)", ".3g"),
    ("predicted_gemm_ms", "GEMM ms (model)", ".3g"), ("predicted_cast_ms", "FP8 cast ms (model)", ".3g"),
)
WORKLOADS: dict[str, WorkloadRecord] = {
    "gemm": WorkloadRecord("suite.workloads.gemm:GEMM", shaped=True),
    "train_step": WorkloadRecord("suite.workloads.train_step:TRAIN_STEP", p.TrainStepParams, detail_columns=(
        ("tokens_per_s", "tokens/s", ".4g"), ("mfu", "MFU", ".1%"), ("final_loss", "final loss", ".4f"),
        ("loss_delta_vs_fp32", "loss - fp32 loss", "+.4f"), ("entropy_floor", "loss floor", ".4f"),
        ("grad_underflow_frac", "grads underflowed", ".1%"), ("diverged", "diverged", ""),
        ("compile_s", "compile s", ".3g"), ("excess_loss", "loss - floor", ".4f"),
        ("stuck_update_frac", "updates stuck", ".1%"), ("bytes_per_param", "B/param", ".3g"),
        ("textbook_bytes_per_param", "textbook B/param", ".3g"),
    )),
    # FSDP2 over torchrun ranks (suite/measure/executors/torchrun.py runs each case as one launch)
    "dist_train_step": WorkloadRecord("suite.workloads.dist_train_step:DIST_TRAIN_STEP", p.DistTrainStepParams,
                                      detail_columns=(
        ("world_size", "ranks", ".0f"), ("fp8_all_gather", "FP8 all-gather", ""),
        ("tokens_per_s", "tokens/s (group)", ".4g"), ("mfu", "MFU per GPU", ".1%"),
        ("loss_delta_vs_fp32", "loss - fp32 loss", "+.4f"), ("allgather_bytes_per_step", "all-gather B/step", ".4g"),
        ("allgather_ms_per_step", "all-gather ms/step", ".3g"),
        ("reduce_scatter_bytes_per_step", "reduce-scatter B/step", ".4g"),
        ("reduce_scatter_ms_per_step", "reduce-scatter ms/step", ".3g"), ("compile_s", "compile s", ".3g"),
    ), launched=True),
    "fidelity": WorkloadRecord("suite.workloads.fidelity:FIDELITY", p.FidelityParams, shaped=True),
    "linear": WorkloadRecord("suite.workloads.linear:LINEAR", p.CompileParams, shaped=True,
                             detail_columns=LAYER_DETAILS),
    "ln_linear": WorkloadRecord("suite.workloads.linear:LN_LINEAR", p.CompileParams, shaped=True,
                                detail_columns=LAYER_DETAILS),
    "outlier": WorkloadRecord("suite.workloads.outlier:OUTLIER", p.OutlierParams, shaped=True, detail_columns=(
        ("outlier", "outlier", ".0e"), ("sqnr_db", "SQNR dB", ".1f"),
        ("sqnr_db_clean", "SQNR without outlier dB", ".1f"), ("sqnr_drop_db", "SQNR drop dB", ".2f"),
    )),
}


def params_model(workload: str, precision: str) -> type[p.Params]:
    """The parameter model of one case: its workload's fields and its precision's."""
    return p.case_model(WORKLOADS[workload].params, PRECISIONS[precision].params)


def peak_column(precision: str) -> str | None:
    """The vendor-peak column a precision's throughput is set against (`suite.core.peaks`), or None
    (FP8 recipes share the fp8 column)."""
    record = PRECISIONS.get(precision)
    return record.peak if record else None


def load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def precision(name: str):
    return load(PRECISIONS[name].target)


def workload(name: str):
    return load(WORKLOADS[name].target)


def _type_text(prop: dict) -> str:
    """A JSON-schema property as a short type: `int > 0`, `'pre' or 'inline'`, `bool or none`."""
    if "anyOf" in prop:
        return " or ".join(_type_text(p) for p in prop["anyOf"])
    if "enum" in prop or "const" in prop:
        return " or ".join(repr(v) for v in prop.get("enum", [prop.get("const")]))
    kind = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "null": "none"}.get(
        prop.get("type"), str(prop.get("type")))
    for key, op in (("exclusiveMinimum", ">"), ("minimum", ">="), ("minLength", "length >=")):
        if key in prop:
            kind += f" {op} {prop[key]}"
    return kind


def parameters_markdown() -> str:
    """docs/parameters.md: every workload's and precision's parameters (`python -m
    suite.scenario.registry > docs/parameters.md`; a test fails when the page and the code differ)."""
    lines = [
        "# Parameters",
        "",
        "Generated from the parameter models (`suite/scenario/params.py`) and the registry",
        "(`suite/scenario/registry.py`): `python -m suite.scenario.registry > docs/parameters.md`.",
        "A sweep's `params` may hold the parameters of its workload and of its precisions; a list is",
        "swept. Types are strict (`true` is no 1, \"64\" is no 64); a key no one declares, or a bad value,",
        "is a one-line error when the scenario loads. A case keeps only the non-default values of the",
        "keys its own workload or precision declares: that is its identity (`case_id`).",
        "",
    ]
    for kind, table in (("workload", WORKLOADS), ("precision", PRECISIONS)):
        lines += [f"## By {kind}", ""]
        for name, record in table.items():
            fields = record.params.model_fields
            lines.append(f"### `{name}`" + ("" if fields else ": no parameters"))
            lines.append("")
            if fields:
                props = record.params.model_json_schema()["properties"]
                lines += [" ".join(record.params.__doc__.split()), "",
                          "| parameter | type | default | meaning |", "|---|---|---|---|"]
                for field, info in fields.items():
                    default = "(required)" if info.is_required() else f"`{info.default!r}`"
                    lines.append(f"| `{field}` | {_type_text(props[field])} | {default} | {info.description or ''} |")
                lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(parameters_markdown(), end="")

