"""One training step of a language model: forward, loss, backward, AdamW step, zero_grad.

The timed callable is one optimizer step on a fixed batch. `check()` (once, untimed, before timing)
trains the same model for `steps` steps from a fixed init on the synthetic corpus
(`suite.models.corpus`), then trains an fp32 twin (same init, same batches) as the reference, and
records the loss curve, the final loss, its delta against fp32 and against the corpus's entropy
floor, whether training diverged, the share of parameter entries the updates of the last fifth of
the steps left unchanged ("stuck": swamped by the weights' format), and the bytes per parameter of
weights, master copy, gradients and optimizer state, read off the live tensors at the last step.
Every step's batch is fresh, so each loss on the curve is measured on tokens the model has not
seen; `final_loss` is the mean of the last fifth of the curve (one step's loss alone swings with a
single large update; the mean over several does not).

Model-level precision goes through the recipe's hooks (`suite.precisions.base`):
    model = precision.prepare_module(model, device)
    with precision.active(), precision.autocast(device): loss = model(x, y)
and a GradScaler when `precision.grad_scaler` (fp16); the optimizer is the recipe's (`optimizer`:
torch's AdamW unless the recipe stores weights or state otherwise, `suite.precisions.update`).
fp32 parameters are the master weights unless the recipe keeps bf16 ones; FP8 recipes convert
Linear layers in `prepare_module` and find the layers to leave alone in the model's
`high_precision_modules` ("lm_head").

Divergence (a non-finite loss, or a final loss above the untrained one) is recorded, never raised:
the case stays `ok` with `diverged = True` and `divergence` saying what happened, because the step
time is still a valid measurement and the divergence is itself the result (fp16 without a scaler).

Parameters (scenario `params`; all optional):
    model       "gpt2" | "llama"                        size   a named size of that model
    n_layer, n_head, d_model, vocab, seq_len            override the size's dims
    n_kv_head, ffn_hidden, rope                         (llama only)
    batch       sequences per step                      steps  training steps run by check()
    lr, weight_decay, grad_clip (0: off)                AdamW and clipping, as nanoGPT
    lr_schedule "constant" | "cosine" (warmup_steps, then cosine decay to final_lr, as nanoGPT)
    data_vocab  tokens the corpus uses (default: vocab); a padded model (vocab 50304) trains on
                the same 50257-token corpus as the unpadded one
    compile     torch.compile the model (compile time: the `compile_s` column, never timed as a step)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import nn

from suite.core import peaks
from suite.scenario import registry
from suite.core.errors import UserError
from suite.models import corpus, flops, gpt2, llama
from suite.precisions.compiler import compile_unsupported
from suite.precisions.floating.recipes import FP32
from suite.core.errors import Unsupported
from suite.workloads.base import Prepared, Workload
from suite.workloads.train_step import TrainStepParams

LR_SCHEDULES = ("constant", "cosine")
MODELS = {"gpt2": (gpt2.GPT2, gpt2.config), "llama": (llama.Llama, llama.config)}
DEFAULT_SIZE = {"gpt2": "tiny", "llama": "tiny"}


@dataclass(frozen=True)
class StepSpec:
    """The case's parameters, checked and with defaults filled in."""

    model: str = "gpt2"
    size: str = ""
    batch: int = 4
    steps: int = 20
    # nanoGPT's GPT-2 124M settings: max lr 6e-4, betas (0.9, 0.95), weight decay 0.1, clip 1.0.
    lr: float = 6e-4
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    final_lr: float = 0.0
    data_vocab: int = 0  # 0: the model's vocab
    compile: bool = False
    dims: tuple[tuple[str, object], ...] = ()  # model config overrides

    @classmethod
    def from_params(cls, params: dict) -> "StepSpec":
        params = dict(params)
        model = params.pop("model", "gpt2")
        if model not in MODELS:
            raise UserError(f"train_step: unknown model {model!r}; valid: {', '.join(MODELS)}")
        cfg_fields = {f.name for f in fields(gpt2.GPT2Config if model == "gpt2" else llama.LlamaConfig)}
        dims = {k: params.pop(k) for k in list(params) if k in cfg_fields}
        own = {f.name for f in fields(cls)} - {"model", "dims"}
        unknown = sorted(set(params) - own)
        if unknown:
            valid = ", ".join(sorted(own | cfg_fields | {"model"}))
            raise UserError(f"train_step: unknown parameter {unknown[0]!r} for model {model}; valid: {valid}")
        spec = cls(model=model, dims=tuple(sorted(dims.items())), **params)
        spec._validate()
        return spec

    def _validate(self) -> None:
        for name in ("batch", "steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"train_step: {name} must be a positive integer, got {value!r}")
        if not isinstance(self.data_vocab, int) or self.data_vocab < 0:
            raise UserError(f"train_step: data_vocab must be a positive integer, got {self.data_vocab!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise UserError(f"train_step: lr_schedule must be one of {', '.join(LR_SCHEDULES)}, "
                            f"got {self.lr_schedule!r}")
        if not isinstance(self.warmup_steps, int) or isinstance(self.warmup_steps, bool) or self.warmup_steps < 0:
            raise UserError(f"train_step: warmup_steps must be a non-negative integer, got {self.warmup_steps!r}")
        for name in ("lr", "weight_decay", "grad_clip", "final_lr"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise UserError(f"train_step: {name} must be a non-negative number, got {value!r}")
        if not isinstance(self.compile, bool):
            raise UserError(f"train_step: compile must be true or false, got {self.compile!r}")
        cfg = self.config()
        if self.corpus_vocab > cfg.vocab:
            raise UserError(f"train_step: data_vocab {self.corpus_vocab} exceeds the model's vocab {cfg.vocab}")

    def lr_at(self, step: int) -> float:
        """The learning rate of training step `step` (0-based) of the accuracy check: nanoGPT's
        schedule, linear warm-up then a cosine from lr down to final_lr at the last step."""
        if self.lr_schedule == "constant":
            return self.lr
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        span = max(1, self.steps - 1 - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.final_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (self.lr - self.final_lr)

    def config(self):
        return MODELS[self.model][1](self.size or DEFAULT_SIZE[self.model], **dict(self.dims))

    @property
    def corpus_vocab(self) -> int:
        return self.data_vocab or self.config().vocab


def build_model(spec: StepSpec, seed: int) -> nn.Module:
    """The model with its initial weights, made on the CPU from `seed` alone: every precision, the
    fp32 reference and every device start from the same numbers."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MODELS[spec.model][0](spec.config())


@functools.lru_cache(maxsize=2)
def corpus_batches(vocab: int, seed: int, batch: int, seq_len: int, count: int) -> torch.Tensor:
    """`count` batches of (batch, seq_len + 1) tokens from the generated source, on the CPU
    (cached: the precisions of one configuration train on the very same tokens)."""
    source = corpus.generated(vocab, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.stack([source.sample(batch, seq_len + 1, gen) for _ in range(count)])


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def estimated_bytes(cfg, n_params: int, batch: int) -> int:
    """Rough upper estimate of what a case holds at once: two models (the timed one and the fp32
    reference) with fp32 weights, grads and two AdamW moments (16 B/param); one step's activations
    in fp32 (Korthikanti et al. 2022, eq. 1: s b h (34 + 5 a s / h) bytes per layer at 16 bits;
    doubled); fp32 logits, their gradient and the softmax (the largest tensors at a big vocab)."""
    s, b, h, a = cfg.seq_len, batch, cfg.d_model, cfg.n_head
    activations = 2 * cfg.n_layer * s * b * h * (34 + 5 * a * s / h)
    logits = 4 * 4 * s * b * cfg.vocab
    return int(2 * 16 * n_params + activations + logits)


def available_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return _meminfo_available()


def _decays(p: nn.Parameter) -> bool:
    return p.dim() >= 2  # matrices and embeddings; not biases or norm weights (as nanoGPT)


class Trainer:
    """A model, its AdamW and (fp16) GradScaler, and the step they take together."""

    def __init__(self, model: nn.Module, precision, device: torch.device, spec: StepSpec, compiled: bool):
        self.precision, self.device, self.grad_clip = precision, device, spec.grad_clip
        self.model = precision.prepare_module(model, device)
        self.forward = torch.compile(self.model) if compiled else self.model
        params = list(self.model.parameters())
        groups = [
            {"params": [p for p in params if _decays(p)], "weight_decay": spec.weight_decay},
            {"params": [p for p in params if not _decays(p)], "weight_decay": 0.0},
        ]
        # nanoGPT's betas; eps is torch's AdamW default (optimi's differs, so it is passed to all)
        self.optimizer = precision.optimizer(groups, lr=spec.lr, betas=(0.9, 0.95), eps=1e-8, device=device)
        self.scaler = torch.amp.GradScaler(device.type) if precision.grad_scaler else None

    def step(self, x: torch.Tensor, y: torch.Tensor, probe=None) -> torch.Tensor:
        """One optimizer step; returns the loss (detached, no synchronisation). `probe(model)` sees
        the gradients in true units (unscaled), before clipping and the update."""
        with self.precision.autocast(self.device):
            loss = self.forward(x, y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            if self.grad_clip or probe:
                self.scaler.unscale_(self.optimizer)  # true units before clipping (seeds, AMP loop)
        else:
            loss.backward()
        if probe:
            probe(self.model)
        if self.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped when a gradient is inf/NaN
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            if torch.is_tensor(group["lr"]):
                group["lr"].fill_(lr)  # torchao keeps lr as a tensor (no recompile when it changes)
            else:
                group["lr"] = lr

    def memory_split(self) -> dict[str, int]:
        """Bytes of weights, master copy, gradients and optimizer state, read off the live tensors
        (each counted once: a tied weight is one tensor). Optimizer state held under a key of
        MASTER_STATE is the master copy: the extra precision the update keeps beside the weights."""
        seen: set[int] = set()
        split = dict.fromkeys(MEMORY_ROLES, 0)

        def add(role: str, t) -> None:
            if torch.is_tensor(t) and id(t) not in seen:
                seen.add(id(t))
                split[role] += tensor_bytes(t)

        params = list(self.model.parameters())
        for p in params:
            add("weights", p)
        for p in params:
            add("grads", p.grad)
        for state in self.optimizer.state.values():
            for key, value in state.items():
                add("master" if key in MASTER_STATE else "optimizer", value)
        return split

    def state_bytes(self) -> int:
        """Bytes of parameters, gradients (when present) and optimizer state."""
        return sum(self.memory_split().values())


MEMORY_ROLES = ("weights", "master", "grads", "optimizer")
MASTER_STATE = ("kahan_comp",)  # torch-optimi's Kahan compensation buffer


def tensor_bytes(t: torch.Tensor) -> int:
    """Storage bytes of a tensor; a wrapper subclass (torchao's quantized optimizer state, FSDP2's
    DTensor: this rank's shard) is the sum of the tensors it wraps (its own element size is that of
    the dtype it poses as); what else it flattens to (a DTensor's device mesh) holds no storage."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        inner = (getattr(t, name) for name in names)
        return sum(tensor_bytes(v) for v in inner if isinstance(v, torch.Tensor))
    return t.numel() * t.element_size()


class GradZeros:
    """Probe: which gradient entries are exactly zero (fp16 underflow flushes small ones to 0)."""

    def __init__(self):
        self.masks: list[torch.Tensor] = []

    def __call__(self, model: nn.Module) -> None:
        self.masks = [(p.grad == 0) for p in model.parameters() if p.grad is not None]

    def fraction(self) -> float:
        total = sum(m.numel() for m in self.masks)
        return float(sum(int(m.sum()) for m in self.masks)) / total if total else math.nan


def underflow_fraction(case: GradZeros, reference: GradZeros) -> float:
    """Share of the entries that are non-zero in the fp32 reference's gradient but exactly zero in
    the case's, at the first step (same weights, same batch)."""
    lost = nonzero = 0
    for c, r in zip(case.masks, reference.masks):
        ref_nonzero = ~r
        nonzero += int(ref_nonzero.sum())
        lost += int((c & ref_nonzero).sum())
    return lost / nonzero if nonzero else math.nan


def final_loss(curve: list[float]) -> float:
    """Mean loss over the last fifth of the steps (at least one)."""
    tail = curve[-tail_steps(len(curve)) :]
    return sum(tail) / len(tail)


def divergence(curve: list[float]) -> str | None:
    """Why this training run counts as diverged (a non-finite loss, or a final loss above the
    untrained model's), or None."""
    for i, loss in enumerate(curve):
        if not math.isfinite(loss):
            return f"loss is {loss} at step {i}"
    if final_loss(curve) > curve[0]:
        return f"loss rose from {curve[0]:.4g} to {final_loss(curve):.4g} over {len(curve)} steps"
    return None


class StuckUpdates:
    """Share of parameter entries an optimizer step left exactly unchanged, over the steps watched.
    Every AdamW update is non-zero where the moments are, so an unchanged entry is one whose update
    rounded away in the weights' format (swamping: |u| < 2^-8 |w| in bf16, 2^-24 |w| in fp32)."""

    def __init__(self):
        self.unchanged = self.total = 0

    def around(self, model: nn.Module, step) -> None:
        params = list(model.parameters())
        before = [p.detach().clone() for p in params]
        step()
        for p, b in zip(params, before):
            self.unchanged += int((p.detach() == b).sum())
            self.total += b.numel()

    def fraction(self) -> float:
        return self.unchanged / self.total if self.total else math.nan


def train(trainer: Trainer, batches, probe: GradZeros | None = None, *, spec: StepSpec | None = None,
          start: int = 0, stuck: StuckUpdates | None = None, last_probe=None) -> tuple[list[float], int]:
    """Train on `batches` (probing the first step's gradients, and `last_probe` the last's); the
    loss curve and how many steps the GradScaler skipped (its scale drops exactly when it skips:
    reading it synchronises, which is fine here, outside the timed step). With `spec`, step `i`
    runs at the schedule's lr of step `start + i`; `stuck` watches the last fifth of the steps."""
    losses, skipped = [], 0
    for i, (x, y) in enumerate(batches):
        if spec is not None:
            trainer.set_lr(spec.lr_at(start + i))
        scale = trainer.scaler.get_scale() if trainer.scaler is not None else None
        due = [f for f, at in ((probe, 0), (last_probe, len(batches) - 1)) if f is not None and i == at]
        this_probe = (lambda model: [f(model) for f in due]) if due else None

        def step():
            losses.append(trainer.step(x, y, probe=this_probe))

        if stuck is not None and spec is not None and start + i >= spec.steps - tail_steps(spec.steps):
            stuck.around(trainer.model, step)
        else:
            step()
        if scale is not None and trainer.scaler.get_scale() < scale:
            skipped += 1
    return [float(v) for v in torch.stack(losses).float().cpu()], skipped


def tail_steps(steps: int) -> int:
    """The last fifth of the steps (at least one): what final_loss averages and StuckUpdates watches."""
    return max(1, steps // 5)


def memory_columns(split: dict[str, int], textbook: dict[str, float], n_params: int) -> dict:
    """Bytes per parameter by role, measured (`split`: bytes) and the recipe's textbook total."""
    out = {f"bytes_per_param_{role}": split.get(role, 0) / n_params for role in MEMORY_ROLES}
    out["bytes_per_param"] = sum(split.values()) / n_params
    out["textbook_bytes_per_param"] = float(sum(textbook.values()))
    return out


def _device_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


class TrainStep(Workload):
    name = "train_step"

    def prepare(self, case, precision, device):
        # the case's params hold its precision's too (e.g. a low-bit recipe's master)
        spec = StepSpec.from_params({k: v for k, v in case.params.items() if k in TrainStepParams.model_fields})
        cfg = spec.config()
        reason = compile_unsupported(device) if spec.compile else None
        reason = reason or precision.tokens_unsupported(spec.batch * cfg.seq_len, device)
        if reason:
            raise Unsupported(reason)
        n_params, flops_per_token, n_matmul_params = model_sizes(spec, cfg)
        _check_memory(spec, cfg, n_params, device)
        model = build_model(spec, case.seed)
        tokens = spec.batch * cfg.seq_len
        source = corpus.generated(spec.corpus_vocab, case.seed)
        data = corpus_batches(spec.corpus_vocab, case.seed, spec.batch, cfg.seq_len, spec.steps)
        train_batches = [(b[:, :-1].to(device), b[:, 1:].to(device)) for b in data]
        fixed = train_batches[0]

        # dynamo is reset once per setting by the runner (suite.precisions.compiler.cold_start), not
        # here: a reset per case would wipe the compiled code of the members prepared before it
        trainer = Trainer(model, precision, device, spec, compiled=spec.compile)

        def fn():
            return trainer.step(*fixed)

        check = _Check(case, spec, trainer, precision, device, train_batches, source, n_params)

        def derive(median_s: float) -> dict:
            tokens_per_s = tokens / median_s
            return {"tokens_per_s": tokens_per_s,
                    **mfu_columns(_device_name(device), precision.name, flops_per_token, tokens_per_s)}

        return Prepared(
            fn=fn,
            flops=float(flops_per_token * tokens),
            bytes_moved=None,
            check=check,
            first_call=check.first_step,
            first_call_column="compile_s" if spec.compile else None,
            extra={
                "model": spec.model,
                "n_layer": cfg.n_layer,
                "n_head": cfg.n_head,
                "d_model": cfg.d_model,
                "vocab": cfg.vocab,
                "data_vocab": spec.corpus_vocab,
                "seq_len": cfg.seq_len,
                "batch": spec.batch,
                "tokens_per_step": tokens,
                "n_params": n_params,
                "n_matmul_params": n_matmul_params,
                "flops_per_token": flops_per_token,
                "compiled": spec.compile,
                "gemm_path": precision.gemm_path(device, "layer"),
                "train_steps": spec.steps,
            },
            derive=derive,
        )


# The peak every recipe's MFU is also set against: the format a step's attention, norms and lm_head
# run in under every low-precision recipe here, so one yardstick across recipes.
BF16_PEAK = "bf16"


def mfu_columns(device_name: str | None, precision: str, flops_per_token: float, tokens_per_s: float) -> dict:
    """`mfu` against the precision's own vendor peak (its peak column) and `mfu_bf16` against the
    GPU's bf16 peak (null where no peak is known: CPUs, GPUs missing from suite.core.peaks). An FP8
    step against the FP8 peak reads about half bf16's MFU at the same speed, though much of it runs
    in bf16; against the bf16 peak the two compare."""
    own = peaks.peak_tflops(device_name, registry.peak_column(precision))
    bf16 = peaks.peak_tflops(device_name, BF16_PEAK)
    return {"mfu": flops.mfu(flops_per_token, tokens_per_s, own),
            "mfu_bf16": flops.mfu(flops_per_token, tokens_per_s, bf16)}


def model_sizes(spec: StepSpec, cfg) -> tuple[int, float, int]:
    """(parameters, FLOPs per token, matmul parameters) of the case's model, from its shapes alone."""
    with torch.device("meta"):  # sizes only: nothing is allocated before the memory check
        shape_only = MODELS[spec.model][0](cfg)
    return (flops.unique_parameters(shape_only), flops.model_flops_per_token(shape_only),
            flops.matmul_parameters(shape_only))


def _check_memory(spec: StepSpec, cfg, n_params: int, device: torch.device) -> None:
    """A case that would not fit in the device's free memory is skipped before anything is allocated."""
    need, have = estimated_bytes(cfg, n_params, spec.batch), available_bytes(device)
    if have is not None and need > have:
        raise Unsupported(
            f"needs about {need / 2**30:.1f} GiB (two models with AdamW state, activations, logits; "
            f"an estimate) and {device.type} has {have / 2**30:.1f} GiB available"
        )


class _Check:
    """A training step case's accuracy check: its `steps` training steps (the first is the runner's
    timed first call, `first_step`), then an fp32 reference on the same batches; the loss, gradient
    and update columns."""

    def __init__(self, case, spec: StepSpec, trainer, precision, device, train_batches, source, n_params: int):
        self.case, self.spec, self.trainer, self.precision, self.device = case, spec, trainer, precision, device
        self.train_batches, self.source, self.n_params = train_batches, source, n_params
        self.zeros, self.first, self.stuck, self.split = GradZeros(), [], StuckUpdates(), {}

    def read_split(self, _model) -> None:
        self.split.update(self.trainer.memory_split())  # gradients present, optimizer state built

    def first_step(self) -> None:
        """The check's first training step; it compiles a compiled model, so the runner times it
        (compile_s)."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.first.append(train(self.trainer, self.train_batches[:1], self.zeros, spec=self.spec, stuck=self.stuck,
                                last_probe=self.read_split if self.spec.steps == 1 else None))

    def __call__(self) -> dict:
        spec, trainer, precision, device = self.spec, self.trainer, self.precision, self.device
        out: dict = {}
        with precision.active():
            if not self.first:  # called without the runner's first call
                self.first_step()
            rest = (train(trainer, self.train_batches[1:], spec=spec, start=1, stuck=self.stuck,
                          last_probe=self.read_split) if spec.steps > 1 else ([], 0))
            curve, skipped = self.first[0][0] + rest[0], self.first[0][1] + rest[1]
            # CUDA: the allocator's high-water mark over these steps. CPU tensors have no
            # allocator statistics, and the process's peak RSS is not this case's.
            out["peak_mem_mb"] = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
            out["state_mem_mb"] = trainer.state_bytes() / 2**20
            out.update(memory_columns(self.split, precision.textbook_bytes(), self.n_params))
        if trainer.scaler is not None:
            out.update(scaler_skipped_steps=skipped, loss_scale_final=float(trainer.scaler.get_scale()))
        out.update(self.against_fp32(curve))
        return out

    def against_fp32(self, curve: list[float]) -> dict:
        """The loss columns against an fp32 twin trained on the same batches (the case itself where
        it is fp32 and eager)."""
        zeros, stuck, source = self.zeros, self.stuck, self.source
        if self.precision.name == FP32.name and not self.spec.compile:
            ref_curve, ref_zeros, ref_stuck = curve, zeros, stuck  # the case is its own reference
        else:
            ref_zeros, ref_stuck = GradZeros(), StuckUpdates()
            reference = Trainer(build_model(self.spec, self.case.seed), FP32, self.device, self.spec, compiled=False)
            with FP32.active():
                ref_curve, _ = train(reference, self.train_batches, ref_zeros, spec=self.spec, stuck=ref_stuck)
            del reference

        final, ref_final = final_loss(curve), final_loss(ref_curve)
        why, ref_why = divergence(curve), divergence(ref_curve)
        if ref_why is not None:
            why = f"{why + '; ' if why else ''}the fp32 reference diverged as well: {ref_why}"
        return dict(
            loss_curve=curve,
            fp32_loss_curve=ref_curve,
            final_loss=final,
            fp32_final_loss=ref_final,
            loss_delta_vs_fp32=final - ref_final,
            loss_rel_delta_vs_fp32=(final - ref_final) / ref_final if ref_final else math.nan,
            entropy_floor=source.entropy_rate,
            unigram_entropy=source.unigram_entropy,
            excess_loss=final - source.entropy_rate,
            diverged=divergence(curve) is not None,
            divergence=why,
            grad_zero_frac=zeros.fraction(),
            grad_underflow_frac=underflow_fraction(zeros, ref_zeros),
            stuck_update_frac=stuck.fraction(),
            fp32_stuck_update_frac=ref_stuck.fraction(),
        )


TRAIN_STEP = TrainStep()
