"""Typed case parameters: what a sweep's `params` may hold, per workload and per precision.

Each workload and each precision declares one model here (torch-free, like `StopRule`), and its
registry record (`suite.scenario.registry`) names it. A case's parameters are the union of its
workload's and its precision's fields: strict types (TOML's `true` is no 1, "64" is no 64),
unknown keys refused, every field documented. They are checked when the scenario loads
(`suite.scenario.spec`), so a typo is a one-line error with exit status 2 before anything runs,
and normalised when it is planned (`normalise`): only non-default values of keys that the case's
own workload or precision knows are kept, so `{}` and the explicit defaults are one case (one
`case_id`), and a key meant for another precision of the sweep does not split a bf16 case in two.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from suite.core.errors import UserError

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ValueError("must be a finite number")
    return x


NonNegativeFloat = Annotated[float, Field(ge=0), AfterValidator(_finite)]
PositiveFloat = Annotated[float, Field(gt=0), AfterValidator(_finite)]


class Params(BaseModel):
    """Base of every parameter model: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @classmethod
    def of(cls, params: dict):
        """This model from a case's params (which may hold the other side's keys too: a case's
        params are its workload's and its precision's); a bad value is a one-line UserError."""
        try:
            return cls.model_validate({k: v for k, v in params.items() if k in cls.model_fields})
        except ValidationError as err:
            raise UserError(f"params.{one_line(err)}") from None


class NoParams(Params):
    """A workload or precision without parameters."""


# --- precisions -------------------------------------------------------------------------------


class FP8GemmParams(Params):
    """torchao-style FP8 recipes (`fp8_tensorwise`, `fp8_rowwise`, `fp8_rowwise_gw_hp`, `fp8_block`)."""

    quantize: Literal["pre", "inline"] = Field(
        "pre", description="GEMM cases: pre = operands quantized once, outside the timing; inline = "
                           "the casts are timed with the GEMM, as in training")
    use_fast_accum: bool = Field(False, description="the FP8 GEMM's fast (reduced-precision) accumulation")
    pad: bool = Field(False, description="pad K and N to multiples of 16 (torchao's pad_inner_dim)")


class FP8TensorwiseParams(FP8GemmParams):
    """torchao's tensorwise recipe (`fp8_tensorwise`): its scales can be computed on a weight's shards."""

    fp8_all_gather: bool = Field(
        False, description="models under FSDP2 (dist_train_step): torchao's enable_fsdp_float8_all_gather, weights "
                           "cast to float8 before the all-gather and their scales precomputed after each step")


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
    """Transformer Engine's MXFP8BlockScaling (`mxfp8`)."""

    margin: NonNegativeInt | None = Field(None, description="scale margin in powers of 2 (TE's default 0)")


class TEDelayedParams(TEMXFP8Params):
    """Transformer Engine's DelayedScaling (`te_delayed`): scales from an amax history."""

    amax_history_len: PositiveInt | None = Field(None, description="steps of amax history (TE's default 1024)")
    amax_compute_algo: Literal["max", "most_recent"] | None = Field(
        None, description="how the history becomes one amax (TE's default max)")


class TENVFP4Params(TEParams):
    """Transformer Engine's NVFP4BlockScaling (`nvfp4`): no format choice."""


class TorchaoOptimParams(Params):
    """torchao's optimizers (`bf16_pure_sr`): how their per-parameter step runs."""

    compile_step: bool = Field(
        True, description="torch.compile the step, as torchao does; false: the same step function run eagerly "
                          "(torch.compiler.set_stance('force_eager')): the same update, eager speed, no inductor "
                          "compile (minutes on a small CPU) and no C++ compiler needed")


class LowBitParams(TorchaoOptimParams):
    """torchao's low-bit AdamW recipes (`bf16_adamw8bit`, `bf16_adamw4bit`, `bf16_adamw_fp8`)."""

    master: Literal["fp32", "bf16_sr"] = Field(
        "fp32", description="fp32: fp32 parameters are the master weights (autocast); bf16_sr: bf16 parameters "
                            "and no master copy, the update stochastically rounded to bf16")


# --- workloads --------------------------------------------------------------------------------


class CompileParams(Params):
    """Layer workloads (`linear`, `ln_linear`)."""

    compile: bool = Field(False, description="torch.compile the step; its first call's time is compile_s")
    compile_backend: Annotated[str, Field(min_length=1)] = Field("inductor", description="torch.compile backend")


class OutlierParams(Params):
    """`outlier`: one planted value in A's row 0."""

    outlier: PositiveFloat = Field(description="the planted value's magnitude (required)")


class FidelityParams(Params):
    """`fidelity`: which peer harness times the same GEMM."""

    harness: Literal["timer", "do_bench", "do_bench_cudagraph"] = Field(
        "timer", description="torch.utils.benchmark's Timer, or triton's do_bench / do_bench_cudagraph")


class TrainStepParams(Params):
    """`train_step`: one optimizer step of a model on a synthetic corpus. Model-config fields
    override the named size's (a field the chosen model has not is refused when planned)."""

    model: Literal["gpt2", "llama"] = Field("gpt2", description="model family (suite/models/)")
    size: str = Field("", description="named size of the family (e.g. 124m, llama3_8b; default tiny)")
    batch: PositiveInt = Field(4, description="sequences per step")
    steps: PositiveInt = Field(20, description="training steps of the accuracy check")
    lr: NonNegativeFloat = Field(6e-4, description="AdamW learning rate (nanoGPT's GPT-2 124M)")
    weight_decay: NonNegativeFloat = Field(0.1, description="AdamW weight decay")
    grad_clip: NonNegativeFloat = Field(1.0, description="gradient-norm clip")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="learning rate over the accuracy check's steps: constant, or linear warm-up then "
                                "cosine decay to final_lr (nanoGPT)")
    warmup_steps: NonNegativeInt = Field(0, description="cosine: steps of linear warm-up from 0 to lr")
    final_lr: NonNegativeFloat = Field(0.0, description="cosine: the learning rate of the last step")
    data_vocab: NonNegativeInt = Field(0, description="the corpus's vocabulary (0: the model's)")
    compile: bool = Field(False, description="torch.compile the model")
    # model-config overrides (suite/models/gpt2.py GPT2Config, suite/models/llama.py LlamaConfig)
    n_layer: PositiveInt | None = Field(None, description="transformer blocks")
    n_head: PositiveInt | None = Field(None, description="attention heads")
    n_kv_head: PositiveInt | None = Field(None, description="llama only: key/value heads (grouped-query attention)")
    d_model: PositiveInt | None = Field(None, description="model width")
    ffn_hidden: PositiveInt | None = Field(None, description="llama only: SwiGLU hidden width")
    vocab: PositiveInt | None = Field(None, description="the model's vocabulary (embedding and lm_head rows)")
    seq_len: PositiveInt | None = Field(None, description="tokens per sequence")
    rope: bool | None = Field(None, description="llama only: rotary position embedding")
    rope_theta: PositiveFloat | None = Field(None, description="llama only: RoPE base")
    norm_eps: PositiveFloat | None = Field(None, description="llama only: RMSNorm epsilon")

    @model_validator(mode="after")
    def _fields_of_the_model(self):
        if self.model == "gpt2":
            extra = [name for name in LLAMA_ONLY if getattr(self, name) is not None]
            if extra:
                raise ValueError(f"{extra[0]} is a llama field; gpt2 has n_layer, n_head, d_model, vocab, seq_len")
        return self


LLAMA_ONLY = ("n_kv_head", "ffn_hidden", "rope", "rope_theta", "norm_eps")


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




# --- the parameters of one case ----------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def case_model(workload_params: type[Params], precision_params: type[Params]) -> type[Params]:
    """One model with the fields of both (a field both declare must agree on its type)."""
    if precision_params is NoParams:
        return workload_params
    if workload_params is NoParams:
        return precision_params
    fields = {}
    for model in (workload_params, precision_params):
        for name, info in model.model_fields.items():
            fields.setdefault(name, (info.annotation, info))
    return create_model(f"{workload_params.__name__}_{precision_params.__name__}", __base__=Params, **fields)


def one_line(err: ValidationError) -> str:
    """A pydantic error as `key: what is wrong` (the first of them)."""
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"] if not str(p).startswith("function-"))
    msg = "unknown parameter" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def field_error(model: type[Params], key: str, value: Any) -> str | None:
    """Why `value` is not valid for `key` of `model` (None when it is), checked alone: errors about
    other fields (a required one left to another sweep entry) do not count here."""
    try:
        model.model_validate({key: value})
    except ValidationError as err:
        mine = [e for e in err.errors(include_url=False) if e["loc"] and e["loc"][0] == key]
        if mine:
            return mine[0]["msg"].removeprefix("Value error, ")
    return None


def normalise(model: type[Params], raw: dict) -> dict:
    """The case's parameters as its identity sees them: the keys `model` knows, validated, with
    values equal to their defaults left out. Raises ValidationError for a bad value."""
    known = {k: v for k, v in raw.items() if k in model.model_fields}
    return model.model_validate(known).model_dump(exclude_defaults=True)
