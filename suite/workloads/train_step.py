"""One training step of a language model: forward, loss, backward, AdamW step, zero_grad.

The timed callable is one optimizer step on a fixed batch. `check()` (once, untimed, before timing)
trains the same model for `steps` steps from a fixed init on the synthetic corpus
(`suite.models.corpus`), then trains an fp32 twin (same init, same batches) as the reference, and
records the loss curve, the final loss, its delta against fp32 and against the corpus's entropy
floor, and whether training diverged. Every step's batch is fresh, so each loss on the curve is
measured on tokens the model has not seen; `final_loss` is the mean of the last fifth of the curve
(one step's loss alone swings with a single large update; the mean over several does not).

Model-level precision goes through the recipe's hooks (`suite.precisions.base`):
    model = precision.prepare_module(model, device)
    with precision.active(), precision.autocast(device): loss = model(x, y)
and a GradScaler when `precision.grad_scaler` (fp16). fp32 parameters are the master weights in
every recipe; FP8 recipes convert Linear layers in `prepare_module` and find the layers to leave
alone in the model's `high_precision_modules` ("lm_head").

Divergence (a non-finite loss, or a final loss above the untrained one) is recorded, never raised:
the case stays `ok` with `diverged = True` and `divergence` saying what happened, because the step
time is still a valid measurement and the divergence is itself the result (fp16 without a scaler).

Parameters (scenario `params`; all optional):
    model       "gpt2" | "llama"                        size   a named size of that model
    n_layer, n_head, d_model, vocab, seq_len            override the size's dims
    n_kv_head, ffn_hidden, rope                         (llama only)
    batch       sequences per step                      steps  training steps run by check()
    lr, weight_decay, grad_clip (0: off)                AdamW and clipping, as nanoGPT
    data_vocab  tokens the corpus uses (default: vocab); a padded model (vocab 50304) trains on
                the same 50257-token corpus as the unpadded one
    compile     torch.compile the model (compile time: the `compile_s` column, never timed as a step)
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import nn

from suite.measure import peaks
from suite.errors import UserError
from suite.models import corpus, flops, gpt2, llama
from suite.precisions.floating import FP32
from suite.errors import Unsupported
from suite.workloads.base import Prepared, Workload, compile_unsupported

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
        for name in ("lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise UserError(f"train_step: {name} must be a non-negative number, got {value!r}")
        if not isinstance(self.compile, bool):
            raise UserError(f"train_step: compile must be true or false, got {self.compile!r}")
        cfg = self.config()
        if self.corpus_vocab > cfg.vocab:
            raise UserError(f"train_step: data_vocab {self.corpus_vocab} exceeds the model's vocab {cfg.vocab}")

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
        # Fused AdamW on CUDA (nanoGPT does the same): one kernel for the update, and GradScaler then
        # checks for inf without a host synchronisation inside the timed step.
        fused = True if device.type == "cuda" else None
        self.optimizer = torch.optim.AdamW(groups, lr=spec.lr, betas=(0.9, 0.95), fused=fused)
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

    def state_bytes(self) -> int:
        """Bytes of parameters, gradients and optimizer state, read off the live tensors."""
        tensors = {id(p): p for p in self.model.parameters()}
        for p in self.model.parameters():
            if p.grad is not None:
                tensors[id(p.grad)] = p.grad
        for state in self.optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    tensors[id(value)] = value
        return sum(t.numel() * t.element_size() for t in tensors.values())


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
    tail = curve[-max(1, len(curve) // 5) :]
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


def train(trainer: Trainer, batches, probe: GradZeros | None = None) -> tuple[list[float], int]:
    """Train on `batches` (probing the first step's gradients); the loss curve and how many steps
    the GradScaler skipped (its scale drops exactly when it skips: reading it synchronises, which
    is fine here, outside the timed step)."""
    losses, skipped = [], 0
    for i, (x, y) in enumerate(batches):
        scale = trainer.scaler.get_scale() if trainer.scaler is not None else None
        losses.append(trainer.step(x, y, probe=probe if i == 0 else None))
        if scale is not None and trainer.scaler.get_scale() < scale:
            skipped += 1
    return [float(v) for v in torch.stack(losses).float().cpu()], skipped


def _device_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


class TrainStep(Workload):
    name = "train_step"

    def prepare(self, case, precision, device):
        spec = StepSpec.from_params(case.params)
        reason = compile_unsupported(device) if spec.compile else None
        if reason:
            raise Unsupported(reason)
        cfg = spec.config()
        reason = precision.tokens_unsupported(spec.batch * cfg.seq_len, device)
        if reason:
            raise Unsupported(reason)
        with torch.device("meta"):  # sizes only: nothing is allocated before the memory check
            shape_only = MODELS[spec.model][0](cfg)
        n_params = flops.unique_parameters(shape_only)
        flops_per_token = flops.model_flops_per_token(shape_only)
        n_matmul_params = flops.matmul_parameters(shape_only)
        del shape_only
        need, have = estimated_bytes(cfg, n_params, spec.batch), available_bytes(device)
        if have is not None and need > have:
            raise Unsupported(
                f"needs about {need / 2**30:.1f} GiB (two models with AdamW state, activations, logits; "
                f"an estimate) and {device.type} has {have / 2**30:.1f} GiB available"
            )
        model = build_model(spec, case.seed)
        tokens = spec.batch * cfg.seq_len
        source = corpus.generated(spec.corpus_vocab, case.seed)
        data = corpus_batches(spec.corpus_vocab, case.seed, spec.batch, cfg.seq_len, spec.steps)
        train_batches = [(b[:, :-1].to(device), b[:, 1:].to(device)) for b in data]
        fixed = train_batches[0]

        if spec.compile:
            torch._dynamo.reset()  # a cold start: compile time does not depend on earlier cases
        trainer = Trainer(model, precision, device, spec, compiled=spec.compile)
        if spec.compile:
            # Compiled code stays cached in dynamo until reset; drop it when the case is released.
            weakref.finalize(trainer, torch._dynamo.reset)
        def fn():
            return trainer.step(*fixed)

        zeros = GradZeros()
        first: list = []

        def first_step() -> None:
            """The check's first training step; it compiles a compiled model, so the runner times it
            (compile_s)."""
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            first.append(train(trainer, train_batches[:1], zeros))

        def check() -> dict:
            out: dict = {}
            with precision.active():
                if not first:  # called without the runner's first call
                    first_step()
                rest = train(trainer, train_batches[1:]) if spec.steps > 1 else ([], 0)
                curve, skipped = first[0][0] + rest[0], first[0][1] + rest[1]
                # CUDA: the allocator's high-water mark over these steps. CPU tensors have no
                # allocator statistics, and the process's peak RSS is not this case's.
                out["peak_mem_mb"] = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
                out["state_mem_mb"] = trainer.state_bytes() / 2**20
            if trainer.scaler is not None:
                out.update(scaler_skipped_steps=skipped, loss_scale_final=float(trainer.scaler.get_scale()))

            if precision.name == FP32.name and not spec.compile:
                ref_curve, ref_zeros = curve, zeros  # the case is its own reference
            else:
                ref_zeros = GradZeros()
                reference = Trainer(build_model(spec, case.seed), FP32, device, spec, compiled=False)
                with FP32.active():
                    ref_curve, _ = train(reference, train_batches, ref_zeros)
                del reference

            final, ref_final = final_loss(curve), final_loss(ref_curve)
            why, ref_why = divergence(curve), divergence(ref_curve)
            if ref_why is not None:
                why = f"{why + '; ' if why else ''}the fp32 reference diverged as well: {ref_why}"
            out.update(
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
            )
            return out

        peak = peaks.peak_tflops(_device_name(device), precision.name)

        def derive(median_s: float) -> dict:
            tokens_per_s = tokens / median_s
            return {"tokens_per_s": tokens_per_s, "mfu": flops.mfu(flops_per_token, tokens_per_s, peak)}

        return Prepared(
            fn=fn,
            flops=float(flops_per_token * tokens),
            bytes_moved=None,
            check=check,
            first_call=first_step,
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
                "train_steps": spec.steps,
            },
            derive=derive,
        )


TRAIN_STEP = TrainStep()
