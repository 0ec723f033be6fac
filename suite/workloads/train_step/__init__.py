"""One optimizer step of a model (`workload`: GPT-2 or Llama from `suite.models`) on a synthetic
corpus whose entropy rate is known, checked against an fp32 twin trained on the same batches: loss
against fp32 and against the corpus's floor, gradient underflow, divergence, and the bytes per
parameter of the recipe's weights and optimizer state."""

from typing import Literal

from pydantic import Field, model_validator

from suite.scenario.declare import Hooks, Metric, Plot, WorkloadRecord, columns
from suite.scenario.params import COMPILES, NonNegativeFloat, NonNegativeInt, Params, PositiveFloat, PositiveInt

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
    compile: bool = Field(False, description="torch.compile the model", json_schema_extra=COMPILES)
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


# MFU two ways, declared once for the model steps and the layer steps (suite/workloads/linear).
MFU_COLUMNS = columns(
    "utilisation (train_step, dist_train_step, linear, ln_linear)",
    ("mfu", "float", "fraction", "FLOPs utilisation against the precision's own vendor peak (its peak column, "
                                 "FP8 recipes the FP8 peak; a layer step's weight-gradient GEMM at the peak of the "
                                 "format its recipe runs it in: fp8_rowwise_gw_hp's bf16). A model step's "
                                 "attention, norms, lm_head and "
                                 "optimizer stay bf16/fp32 under FP8 recipes, so an FP8 step reads about half "
                                 "bf16's MFU at the same speed: compare mfu_bf16; null without a known peak"),
    ("mfu_bf16", "float", "fraction", "FLOPs utilisation against the GPU's bf16 dense peak, whatever the precision: "
                                      "one yardstick for every recipe (a step faster than bf16's reads higher than "
                                      "bf16's); null without a known peak (CPUs)"),
)
COLUMNS = MFU_COLUMNS + columns(
    "training steps (train_step)",
    ("model", "string", "", "gpt2 or llama"),
    ("n_layer", "int", "", "transformer blocks"),
    ("n_head", "int", "", "attention heads"),
    ("d_model", "int", "", "model width"),
    ("vocab", "int", "", "the model's vocabulary"),
    ("data_vocab", "int", "", "the synthetic corpus's vocabulary"),
    ("seq_len", "int", "tokens", "tokens per sequence"),
    ("batch", "int", "", "sequences per step"),
    ("tokens_per_step", "int", "tokens", "batch x seq_len"),
    ("n_params", "int", "", "parameters"),
    ("n_matmul_params", "int", "", "parameters in matmuls (what FLOPs count)"),
    ("flops_per_token", "int", "FLOP", "training FLOPs per token (6N + attention)"),
    ("compiled", "bool", "", "torch.compile'd"),
    ("train_steps", "int", "", "steps of the accuracy check"),
    ("tokens_per_s", "float", "tokens/s", "tokens_per_step / median step time"),
    ("peak_mem_mb", "float", "MiB", "CUDA allocator high-water mark over the check's steps"),
    ("state_mem_mb", "float", "MiB", "parameters, gradients and optimizer state"),
    ("loss_curve", "list<float>", "nats", "loss per step of the check"),
    ("fp32_loss_curve", "list<float>", "nats", "the fp32 reference's loss per step"),
    ("final_loss", "float", "nats", "mean loss of the last steps"),
    ("fp32_final_loss", "float", "nats", "the same for the fp32 reference"),
    ("loss_delta_vs_fp32", "float", "nats", "final_loss - fp32_final_loss"),
    ("loss_rel_delta_vs_fp32", "float", "fraction", "loss_delta_vs_fp32 / fp32_final_loss"),
    ("entropy_floor", "float", "nats", "the corpus's entropy rate: the lowest reachable loss"),
    ("unigram_entropy", "float", "nats", "the corpus's unigram entropy"),
    ("excess_loss", "float", "nats", "final_loss - entropy_floor"),
    ("diverged", "bool", "", "the loss went non-finite or blew up"),
    ("divergence", "string", "", "how it diverged"),
    ("grad_zero_frac", "float", "fraction", "gradient elements exactly zero"),
    ("grad_underflow_frac", "float", "fraction", "gradient elements zero here but not in fp32 (underflow)"),
    ("scaler_skipped_steps", "int", "", "steps a GradScaler skipped (fp16)"),
    ("loss_scale_final", "float", "", "the GradScaler's last scale"),
) + columns(
    "update precision (train_step)",
    ("stuck_update_frac", "float", "fraction", "parameter entries an optimizer step left unchanged, over the "
                                               "last fifth of the check's steps (updates swamped by the weights' "
                                               "format)"),
    ("fp32_stuck_update_frac", "float", "fraction", "the same for the fp32 reference"),
    ("bytes_per_param", "float", "B", "weights, master copy, gradients and optimizer state per parameter, "
                                      "read off the live tensors at the check's last step"),
    ("bytes_per_param_weights", "float", "B", "the parameters' bytes per parameter (fp32 ones are the master copy)"),
    ("bytes_per_param_master", "float", "B", "a master copy beside the weights (a Kahan compensation buffer "
                                             "counts here), per parameter"),
    ("bytes_per_param_grads", "float", "B", "gradients per parameter"),
    ("bytes_per_param_optimizer", "float", "B", "optimizer state per parameter (quantized state: codes and scales)"),
    ("textbook_bytes_per_param", "float", "B", "the recipe's bytes per parameter as the textbook counts them "
                                               "(suite/precisions/update/)"),
)
# The report's table of these cases: (column, title, format)
DETAILS = (
    ("tokens_per_s", "tokens/s", ".4g"), ("mfu", "MFU (own peak)", ".1%"), ("mfu_bf16", "MFU (bf16 peak)", ".1%"),
    ("final_loss", "final loss", ".4f"),
    ("loss_delta_vs_fp32", "loss - fp32 loss", "+.4f"), ("entropy_floor", "loss floor", ".4f"),
    ("grad_underflow_frac", "grads underflowed", ".1%"), ("diverged", "diverged", ""),
    ("compile_s", "compile s", ".3g"), ("excess_loss", "loss - floor", ".4f"),
    ("stuck_update_frac", "updates stuck", ".1%"), ("bytes_per_param", "B/param", ".3g"),
    ("textbook_bytes_per_param", "textbook B/param", ".3g"),
)
# The loss per step against the fp32 twin's (`plots.loss_curves`; dist_train_step's too).
LOSS_PLOT = Plot("loss", "suite.workloads.train_step.plots:loss_curves")
# Padding the vocabulary: step times at each vocabulary, and the lm_head's share from the `gemm`
# cases of the same run shaped like its three GEMMs (`derived.vocab_padding`).
VOCAB_PLOT = Plot("vocab_padding", "suite.workloads.train_step.plots:vocab_padding_effect", {"gemms": "gemm"})
WORKLOADS = {
    "train_step": WorkloadRecord(
        "suite.workloads.train_step.workload:TRAIN_STEP", TrainStepParams, detail_columns=DETAILS, columns=COLUMNS,
        description="one optimizer step of GPT-2 or Llama on a synthetic corpus, against an fp32 twin",
        plots=(LOSS_PLOT, VOCAB_PLOT)),
}
# Each training step's final loss against its reference (`derived.with_loss_gaps`), which "which
# precision" and the update-side answer judge.
LOSS_GAP_COLUMNS = columns(
    "derived (train_step)",
    ("loss_gap_nats", "float", "nats", "final_loss minus its reference's: the recipe the setting's update-side "
                                       "recipes declare, else the fp32 twin's (loss_delta_vs_fp32)"),
    ("loss_reference", "string", "", "what loss_gap_nats is against"),
)
# 0.01 nats of cross-entropy is a 1% higher perplexity (exp(0.01) = 1.010): beyond the run-to-run
# noise of the paired comparison (same init, same batches) and what a practitioner would notice.
LOSS_MARGIN_NATS = 0.01
# A training step has no relative error (its output is a loss curve): a budget bounds its loss gap,
# the report's within the margin and ten times tighter; "fastest measured" only where it trained.
LOSS_GAP = Metric(
    "loss_gap_nats", "max_loss_delta", "loss", "training steps: |final loss - the fp32 twin's| at most NATS", "NATS",
    absolute=True, meets="loss within {b:.3g} nats of its reference", over="loss {v:+.3g} nats, over {b:.3g}",
    shown="loss {v:+.3g} nats vs {reference}", cell="loss {v:+.3g} nats", headline="loss delta {v:+.3g} nats",
    reference="loss_reference", tight=LOSS_MARGIN_NATS / 10, loose=LOSS_MARGIN_NATS, margin=LOSS_MARGIN_NATS,
    outside=", outside the {m:g}-nat margin", judges="training steps")
HOOKS = Hooks(derived=("suite.workloads.train_step.derived:with_loss_gaps",), columns=LOSS_GAP_COLUMNS,
              metrics=(LOSS_GAP,))
