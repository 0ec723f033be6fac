"""What `advise` knows of one training step of a model on one GPU, torch-free: how the step is laid
out over GPUs (`Parallel`), each GEMM it runs (`Gemm`) and the work beside them (`StepWork`).

The GEMMs of a step are built from a model's dimensions (`suite.models.architecture`); the step's
time and each recipe's speedup are estimated from them (`suite.analysis.advise`). The two meet only
here, so either side can change how it works without the other.
"""

from __future__ import annotations

from dataclasses import dataclass

PASSES = ("fprop", "dgrad", "wgrad")
# Activation checkpointing, torchtitan's `activation_checkpoint.mode` names: "none" keeps every
# activation; "full" recomputes each transformer block's forward in its backward (torchtitan wraps
# every block, not the embedding, the final norm or the output projection).
AC_MODES = ("none", "full")


@dataclass(frozen=True)
class Parallel:
    """How one step is laid out: `batch` sequences of `seq` tokens per GPU (micro-batch of one data
    parallel rank), tensor parallel over `tp` GPUs (column- then row-parallel linears, Megatron's
    layout), experts spread over `ep` GPUs, FSDP over the data-parallel ranks (gpus // tp); `ac`
    the activation checkpointing (one of AC_MODES)."""

    gpus: int = 1
    tp: int = 1
    ep: int = 1
    seq: int = 2048
    batch: int = 1
    ac: str = "none"

    @property
    def forwards(self) -> int:
        """How many times each transformer block's forward runs per step: twice under full AC."""
        return 2 if self.ac == "full" else 1


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a training step on one GPU: (m x k) @ (k x n), run `count` times per step.

    `layer` is the linear's fully qualified name pattern in torchtitan's convention
    ("layers.*.attention.wq", "output"): what a `module_filter_fn` or torchtitan's `filter_fqns`
    matches. fprop is (tokens x in) @ (in x out) (its `count` includes the recomputed forward under
    full activation checkpointing, so a layer's weights are `count` of its wgrad); dgrad (tokens x out) @ (out x in); wgrad
    (out x tokens) @ (tokens x in). `groups` > 1: a grouped GEMM over that many local experts, `m`
    the tokens each expert gets."""

    layer: str
    module: str  # "attention", "mlp", "experts", "shared_experts", "router", "output"
    pass_: str  # one of PASSES
    m: int
    k: int
    n: int
    count: int
    groups: int = 1


@dataclass(frozen=True)
class StepWork:
    """One training step on one GPU: its linears' GEMMs and the work that is not a linear."""

    gemms: tuple[Gemm, ...]
    attention_flops: float  # the attention core (Q K^T, softmax-weighted V), forward (and its recomputation) and backward, causal
    elementwise_bytes: float  # norms, activation functions, residual adds, rotary: bytes read and written (recomputation included)
    params_local: int  # parameters this GPU holds after tensor and expert parallel, before FSDP
    params_total: int  # the whole model's
    tp_bytes: float  # bytes tensor parallel all-gathers and reduce-scatters per step, recomputed forward's included (0 without TP)
    ep_bytes: float  # bytes expert parallel's all-to-alls move per step, recomputed forward's included (0 without EP)
