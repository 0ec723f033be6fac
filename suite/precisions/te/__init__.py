"""Transformer Engine's recipes (`recipes`): DelayedScaling, Float8CurrentScaling,
Float8BlockScaling, MXFP8BlockScaling and NVFP4BlockScaling, on TE's own kernels (CUDA only)."""

from typing import Literal

from pydantic import Field

from suite.precisions.fp8 import FP8GemmParams
from suite.scenario.declare import Hooks, Library, PrecisionRecord
from suite.scenario.params import NonNegativeInt, PositiveInt

FP8Format = Literal["HYBRID", "E4M3"]


class TEParams(FP8GemmParams):
    """Transformer Engine recipes: the forward GEMM's accumulation defaults to the recipe's own."""

    use_fast_accum: bool | None = Field(
        None, description="the forward GEMM's fast accumulation (TE: not fp8_gemm_fprop.use_split_accumulator); "
                          "default: the recipe's own. Only Float8CurrentScaling can choose; DelayedScaling, "
                          "MXFP8 and NVFP4 always accumulate fast (false is skipped), Float8BlockScaling "
                          "always splits (true is skipped)")


class TECurrentParams(TEParams):
    """Transformer Engine's Float8CurrentScaling and Float8BlockScaling (`te_current`, `te_block`)."""

    fp8_format: FP8Format | None = Field(
        None, description="HYBRID: e4m3 forward, e5m2 backward; E4M3 everywhere (TE's default HYBRID)")


class TEMXFP8Params(TECurrentParams):
    """Transformer Engine's MXFP8BlockScaling (`te_mxfp8`)."""

    margin: NonNegativeInt | None = Field(None, description="scale margin in powers of 2 (TE's default 0)")


class TEDelayedParams(TEMXFP8Params):
    """Transformer Engine's DelayedScaling (`te_delayed`): scales from an amax history."""

    amax_history_len: PositiveInt | None = Field(None, description="steps of amax history (TE's default 1024)")
    amax_compute_algo: Literal["max", "most_recent"] | None = Field(
        None, description="how the history becomes one amax (TE's default max)")


class TENVFP4Params(TEParams):
    """Transformer Engine's NVFP4BlockScaling (`te_nvfp4`): no format choice."""


CODE = "suite.precisions.te.recipes"
# Installed from source against the torch already there (as noxfile.py installs it): its pip package
# builds its extension without an isolated build environment.
TE = Library("te_version", "Transformer Engine", ("transformer_engine", "transformer-engine"), "transformer_engine",
             install="transformer_engine[pytorch]", install_options=("--no-build-isolation",))


def _te(attr: str, params, peak: str, scaling: str, description: str, min_cc: float = 8.9,
        formerly: tuple[str, int] | None = None) -> PrecisionRecord:
    return PrecisionRecord(f"{CODE}:{attr}", params, peak, description, scaling=scaling, fused_casts=True,
                           min_cc=min_cc, formerly=formerly, libraries=(TE,))


# FP8 needs Ada or Hopper (sm89), block scaling Hopper (sm90), MXFP8 and NVFP4 Blackwell (sm100):
# TE's own rules (its recipes' docstrings and is_*_available checks).
PRECISIONS = {
    "te_delayed": _te("TE_DELAYED", TEDelayedParams, "fp8", "delayed",
                      "Transformer Engine DelayedScaling: per-tensor scales from an amax history"),
    "te_current": _te("TE_CURRENT", TECurrentParams, "fp8", "current",
                      "Transformer Engine Float8CurrentScaling: per-tensor scales from the current amax"),
    "te_block": _te("TE_BLOCK", TECurrentParams, "fp8", "block",
                    "Transformer Engine Float8BlockScaling: 1x128 activation, 128x128 weight blocks", 9.0),
    # Called mxfp8 and nvfp4 in results of schema version 5 and older, before torchao's formats of
    # the same names (suite/precisions/mx) came: reading such a file renames them (`formerly`).
    "te_mxfp8": _te("TE_MXFP8", TEMXFP8Params, "fp8", "microscaled",
                    "Transformer Engine MXFP8BlockScaling: e4m3 with one e8m0 scale per 32 values (Blackwell)", 10.0,
                    formerly=("mxfp8", 5)),
    "te_nvfp4": _te("TE_NVFP4", TENVFP4Params, "fp4", "microscaled",
                    "Transformer Engine NVFP4BlockScaling: fp4 e2m1, e4m3 scale per 16 values (Blackwell)", 10.0,
                    formerly=("nvfp4", 5)),
}
# the roofline model's cast kernels per scaling kind (`casts`); measurements published for these
# recipes, which the model is checked against (`anchors`: TE's GEMM profiling guide)
HOOKS = Hooks(scalings={
    "current": "suite.precisions.te.casts:CURRENT",
    "delayed": "suite.precisions.te.casts:DELAYED",
    "block": "suite.precisions.te.casts:BLOCK",
},
              anchors=("suite.precisions.te.anchors:anchors",))
