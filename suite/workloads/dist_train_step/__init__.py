"""`train_step`'s model and step sharded with FSDP2 over torchrun ranks (`workload`), one launch
per case (suite/measure/executors/torchrun.py)."""

from typing import Annotated

from pydantic import Field

from suite.scenario.declare import WorkloadRecord, columns
from suite.scenario.params import PositiveFloat, PositiveInt
from suite.workloads.train_step import COLUMNS as STEP_COLUMNS
from suite.workloads.train_step import LOSS_PLOT
from suite.workloads.train_step import TrainStepParams


class DistTrainStepParams(TrainStepParams):
    """`dist_train_step`: `train_step`'s model and step sharded with FSDP2 over `world_size` ranks
    that the suite launches with torchrun, one launch per case; `batch` is per rank."""

    world_size: Annotated[int, Field(ge=2)] = Field(2, description="ranks (processes; one GPU each on CUDA)")
    reshard_after_forward: bool = Field(True, description="FSDP2: free the gathered weights after forward "
                                                          "(gathered again in backward), as ZeRO-3")
    profile_steps: PositiveInt = Field(2, description="steps run under torch.profiler for collective bytes and times")
    fp32_reference: bool = Field(True, description="train the fp32 twin of the same sharding in the check (the "
                                                   "loss_delta_vs_fp32 columns); false where it does not fit next "
                                                   "to the case's own model")
    timeout_s: PositiveFloat = Field(900.0, description="the whole launch (start-up, check, timing): a rank that "
                                                       "hangs past it fails the case")


COLUMNS = STEP_COLUMNS + columns(
    "distributed (dist_train_step)",
    ("world_size", "int", "", "ranks of the launch (one GPU each on CUDA)"),
    ("fp8_all_gather", "bool", "", "weights all-gathered in float8 (torchao's enable_fsdp_float8_all_gather)"),
    ("reshard_after_forward", "bool", "", "FSDP2 freed the gathered weights after forward"),
)
DETAILS = (
    ("world_size", "ranks", ".0f"), ("fp8_all_gather", "FP8 all-gather", ""),
    ("tokens_per_s", "tokens/s (group)", ".4g"), ("mfu", "MFU per GPU (own peak)", ".1%"),
    ("mfu_bf16", "MFU per GPU (bf16 peak)", ".1%"),
    ("loss_delta_vs_fp32", "loss - fp32 loss", "+.4f"), ("allgather_bytes_per_step", "all-gather B/step", ".4g"),
    ("allgather_ms_per_step", "all-gather ms/step", ".3g"),
    ("reduce_scatter_bytes_per_step", "reduce-scatter B/step", ".4g"),
    ("reduce_scatter_ms_per_step", "reduce-scatter ms/step", ".3g"), ("compile_s", "compile s", ".3g"),
)
WORKLOADS = {
    "dist_train_step": WorkloadRecord(
        "suite.workloads.dist_train_step.workload:DIST_TRAIN_STEP", DistTrainStepParams, detail_columns=DETAILS,
        launched=True, columns=COLUMNS, description="train_step under FSDP2 over torchrun ranks, one launch per case",
        plots=(LOSS_PLOT,)),
}
