"""FP8 recipes on PyTorch's own kernels (`recipes`: torch._scaled_mm for GEMMs, torchao for
layers) and the scaling numerics they share (`numerics`): torchao's tensorwise, rowwise and
rowwise_with_gw_hp recipes, and 1x128 / 128x128 block scaling with an emulated GEMM."""

from typing import Literal

from pydantic import Field

from suite.scenario.declare import Hooks, Library, PrecisionRecord
from suite.scenario.params import Params


class FP8GemmParams(Params):
    """torchao-style FP8 recipes (`fp8_tensorwise`, `fp8_rowwise`, `fp8_rowwise_gw_hp`, `fp8_block`)."""

    quantize: Literal["pre", "inline"] = Field(
        "pre", description="GEMM cases: pre = operands quantized once, outside the timing; inline = "
                           "the casts are timed with the GEMM, as in training")
    use_fast_accum: bool | None = Field(
        None, description="the FP8 GEMM's fast (reduced-precision) accumulation; default: torchao's forward GEMM's "
                          "(Float8LinearConfig.gemm_config_output, and every GEMM of its FP8 MoE grouped GEMMs): fast. "
                          "false times what torchao runs for the two gradient GEMMs (rowwise: the unit-scale kernel, "
                          "then the scales multiplied into its output)")
    pad: bool = Field(False, description="pad K and N to multiples of 16 (torchao's pad_inner_dim)")

    def fast_accum(self) -> bool:
        """Whether the GEMM accumulates fast: as set, else torchao's forward default (fast). Left
        unset, the key stays out of the case's identity, so explicit true and false keep theirs."""
        return self.use_fast_accum is not False


class FP8TensorwiseParams(FP8GemmParams):
    """torchao's tensorwise recipe (`fp8_tensorwise`): its scales can be computed on a weight's shards."""

    fp8_all_gather: bool = Field(
        False, title="fp8 all-gather", description="models under FSDP2 (dist_train_step): torchao's enable_fsdp_float8_all_gather, weights "
                           "cast to float8 before the all-gather and their scales precomputed after each step")


CODE = "suite.precisions.fp8.recipes"
# torchao's float8 layers and numerics (here), its block-scaled formats (suite/precisions/mx) and
# optimizers (suite/precisions/update): one declaration, which those folders take from here.
TORCHAO = Library("torchao_version", "torchao", ("torchao",), "torchao", install="torchao")
PRECISIONS = {
    "fp8_tensorwise": PrecisionRecord(
        f"{CODE}:FP8_TENSORWISE", FP8TensorwiseParams, "fp8", scaling="tensorwise", fsdp_gather="fp8",
        libraries=(TORCHAO,),
        description="torchao tensorwise recipe: e4m3 forward operands, one dynamic scale per tensor (e5m2 gradients)"),
    "fp8_rowwise": PrecisionRecord(
        f"{CODE}:FP8_ROWWISE", FP8GemmParams, "fp8", scaling="rowwise", libraries=(TORCHAO,),
        description="torchao rowwise recipe: e4m3 everywhere, one power-of-two scale per row of A and column of B"),
    "fp8_rowwise_gw_hp": PrecisionRecord(
        f"{CODE}:FP8_ROWWISE_GW_HP", FP8GemmParams, "fp8", scaling="rowwise_with_gw_hp", weight_grad_format="bf16",
        libraries=(TORCHAO,),
        description="torchao rowwise_with_gw_hp: rowwise forward, grad-weight GEMM kept in bf16"),
    "fp8_block": PrecisionRecord(
        f"{CODE}:FP8_BLOCK", FP8GemmParams, "fp8", libraries=(TORCHAO,),
        no_roofline="fp8_block's GEMM runs in float32 on every device: no FP8 roofline",
        description="1x128 activation / 128x128 weight block-scaled e4m3 (power-of-two scales), emulated GEMM"),
}
# the roofline model's cast kernels per scaling kind (`casts`); measurements published for these
# recipes, which the model is checked against (`anchors`)
HOOKS = Hooks(scalings={
    "tensorwise": "suite.precisions.fp8.casts:TENSORWISE",
    "rowwise": "suite.precisions.fp8.casts:ROWWISE",
    "rowwise_with_gw_hp": "suite.precisions.fp8.casts:ROWWISE_WITH_GW_HP",
},
              anchors=("suite.precisions.fp8.anchors:anchors",))
