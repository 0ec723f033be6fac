"""One training step of a Linear layer (`workload`): `linear` (y = x W^T) and `ln_linear`
(LayerNorm -> Linear -> Sigmoid, the block torchao's float8 roofline measures), forward and
backward: the three GEMMs of training."""

from typing import Annotated

from pydantic import Field

from suite.scenario.declare import WorkloadRecord, columns
from suite.scenario.params import COMPILES, Params
from suite.workloads.train_step import MFU_COLUMNS


class CompileParams(Params):
    """Layer workloads (`linear`, `ln_linear`)."""

    compile: bool = Field(False, description="torch.compile the step; its first call's time is compile_s",
                          json_schema_extra=COMPILES)
    compile_backend: Annotated[str, Field(min_length=1)] = Field("inductor", description="torch.compile backend")


COLUMNS = columns(
    "layers (linear, ln_linear)",
    ("sqnr_grad_input_db", "float", "dB", "SQNR of the input gradient"),
    ("sqnr_grad_weight_db", "float", "dB", "SQNR of the weight gradient"),
    ("rel_err_grad_input", "float", "", "relative error of the input gradient"),
    ("rel_err_grad_weight", "float", "", "relative error of the weight gradient"),
) + MFU_COLUMNS
DETAILS = (
    ("sqnr_db", "SQNR out dB", ".1f"), ("sqnr_grad_input_db", "SQNR grad in dB", ".1f"),
    ("sqnr_grad_weight_db", "SQNR grad W dB", ".1f"), ("compile_s", "compile s", ".3g"),
    ("mfu", "MFU (own peaks)", ".1%"), ("mfu_bf16", "MFU (bf16 peak)", ".1%"),
    # where the step's time goes: torch.profiler's split, and the roofline model's (docs/model.md)
    ("measured_gemm_ms", "GEMM ms (profiler)", ".3g"), ("measured_other_ms", "other ms (profiler)", ".3g"),
    ("predicted_gemm_ms", "GEMM ms (model)", ".3g"), ("predicted_cast_ms", "FP8 cast ms (model)", ".3g"),
)
CODE = "suite.workloads.linear.workload"
WORKLOADS = {
    "linear": WorkloadRecord(f"{CODE}:LINEAR", CompileParams, shaped=True, detail_columns=DETAILS,
                             description="a Linear layer's training step: y = x W^T, forward and backward",
                             columns=COLUMNS, gemms_per_call=3, roofline="linear_step"),
    "ln_linear": WorkloadRecord(f"{CODE}:LN_LINEAR", CompileParams, shaped=True, detail_columns=DETAILS,
                                description="LayerNorm -> Linear -> Sigmoid, forward and backward",
                                columns=COLUMNS, gemms_per_call=3, roofline="norm_linear_step"),
}
