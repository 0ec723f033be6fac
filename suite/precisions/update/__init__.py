"""Update-side recipes (`recipes`): bf16 compute, weights and optimizer state kept otherwise (pure
bf16, stochastic rounding, Kahan summation, low-bit AdamW state); each is judged against `bf16`'s
loss (fp32 master weights) by the update-side answer (`answers`, a headline hook: `HOOKS`)."""

from typing import Literal

from pydantic import Field

from suite.precisions.fp8 import TORCHAO
from suite.scenario.declare import Hooks, PrecisionRecord
from suite.scenario.params import COMPILES, NoParams, Params


class TorchaoOptimParams(Params):
    """torchao's optimizers (`bf16_pure_sr`): how their per-parameter step runs."""

    compile_step: bool = Field(
        True, description="torch.compile the step, as torchao does; false: the same step function run eagerly "
                          "(torch.compiler.set_stance('force_eager')): the same update, eager speed, no inductor "
                          "compile (minutes on a small CPU) and no C++ compiler needed", json_schema_extra=COMPILES)


class LowBitParams(TorchaoOptimParams):
    """torchao's low-bit AdamW recipes (`bf16_adamw8bit`, `bf16_adamw4bit`, `bf16_adamw_fp8`)."""

    master: Literal["fp32", "bf16_sr"] = Field(
        "fp32", description="fp32: fp32 parameters are the master weights (autocast); bf16_sr: bf16 parameters "
                            "and no master copy, the update stochastically rounded to bf16")


CODE = "suite.precisions.update.recipes"
REFERENCE = "bf16"  # fp32 master weights: the recipe whose only low precision is the compute
COMPUTE = "bf16 autocast compute; "


def _update(attr: str, params, description: str, libraries=()) -> PrecisionRecord:
    return PrecisionRecord(f"{CODE}:{attr}", params, "bf16", COMPUTE + description, reference=REFERENCE,
                           libraries=libraries)


PRECISIONS = {
    "bf16_pure": _update("BF16_PURE", NoParams, "bf16 weights and AdamW state, round-to-nearest updates"),
    "bf16_pure_sr": _update("BF16_PURE_SR", TorchaoOptimParams,
                            "bf16 weights and AdamW state, stochastically rounded updates (torchao)", (TORCHAO,)),
    "bf16_pure_kahan": _update("BF16_PURE_KAHAN", NoParams,
                               "bf16 weights and AdamW state, Kahan-compensated updates (torch-optimi)"),
    "bf16_adamw8bit": _update("BF16_ADAMW8BIT", LowBitParams, "fp32 master weights, 8-bit AdamW moments (torchao)",
                              (TORCHAO,)),
    "bf16_adamw4bit": _update("BF16_ADAMW4BIT", LowBitParams, "fp32 master weights, 4-bit AdamW moments (torchao)",
                              (TORCHAO,)),
    "bf16_adamw_fp8": _update("BF16_ADAMW_FP8", LowBitParams, "fp32 master weights, fp8 AdamW moments (torchao)",
                              (TORCHAO,)),
}
# the headline's update-side answer: which recipes trained within the margin, at what bytes per parameter
HOOKS = Hooks(answers=("suite.precisions.update.answers:update_answers",))
