"""`train_step` sharded with FSDP2 over the ranks of a process group: one data-parallel training step.

The models, the optimizer, the step and the loss bookkeeping are `suite.workloads.train_step`'s
(`StepSpec`, `build_model`, `Trainer`, `train`, `final_loss`, `divergence`); this file adds the
sharding. Each transformer block is its own FSDP2 unit (`fully_shard`), the root holds the
embeddings, the final norm and the (tied) lm_head, as torchtitan shards a model. Every rank starts
from the same init (built from the case's seed) and takes its own `batch` sequences of one global
batch, so the group trains on `batch x world_size` sequences per step whatever the sharding.

Precisions:
- fp32: no MixedPrecisionPolicy (fp32 parameters all-gathered, fp32 gradients reduce-scattered).
- bf16, FP8 recipes: `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` (torchtitan's
  default), the recipe's own autocast on top, as in `train_step`.
- FP8 (torchao): Linear layers converted before sharding (`prepare_module`); with the tensorwise
  recipe's `fp8_all_gather = true` torchao's `enable_fsdp_float8_all_gather` casts the weight shards to float8
  before the all-gather, and `precompute_float8_dynamic_scale_for_fsdp` computes the next step's
  scales in one all-reduce after each optimizer step (both in torchao's float8 README). Tensorwise
  scaling only: a rowwise scale needs the whole row, which a shard does not have.

The check trains `steps` steps and an fp32 twin with the same sharding on the same batches; the
loss curve is the mean over ranks (an all-reduce per curve, outside the timing).

This file only builds: the ranks are launched by `suite.measure.executors.torchrun` and measured by
`suite.measure.executors.rank` (the timing loop, torch.profiler for the collectives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from suite.models import corpus
from suite.precisions.compiler import compile_unsupported
from suite.precisions.floating.recipes import FP32
from suite.workloads.base import Prepared
from suite.workloads.dist_train_step import DistTrainStepParams
from suite.workloads.train_step import TrainStepParams
from suite.workloads.train_step import workload as ts

# the parameters this workload adds to train_step's (the rest go to StepSpec)
DIST_FIELDS = tuple(sorted(set(DistTrainStepParams.model_fields) - set(TrainStepParams.model_fields)))


@dataclass(frozen=True)
class DistSpec:
    step: ts.StepSpec
    world_size: int = 2
    reshard_after_forward: bool = True
    profile_steps: int = 2
    timeout_s: float = 900.0
    fp32_reference: bool = True

    @classmethod
    def from_params(cls, params: dict) -> "DistSpec":
        own = DistTrainStepParams.of(params)
        # train_step's own fields (the precision's, e.g. fp8_all_gather, are the recipe's business)
        rest = {k: v for k, v in params.items() if k in TrainStepParams.model_fields}
        return cls(ts.StepSpec.from_params(rest), **{k: getattr(own, k) for k in DIST_FIELDS})


class Sharded:
    """A precision recipe whose `prepare_module` also shards the model with FSDP2; everything else
    (autocast, flags, name) is the recipe's. Lets `train_step.Trainer` build a sharded trainer as is."""

    def __init__(self, precision, reshard_after_forward: bool):
        from torch.distributed.fsdp import MixedPrecisionPolicy

        self.precision, self.reshard = precision, reshard_after_forward
        self.fp8_all_gather = getattr(precision, "fsdp_float8_all_gather", False)
        low = precision.dtype if precision.dtype != torch.float32 else None
        self.policy = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32 if low else None)

    def __getattr__(self, name):
        return getattr(self.precision, name)

    def prepare_module(self, module: nn.Module, device: torch.device) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        module = self.precision.prepare_module(module, device)
        for blocks in [m for m in module.modules() if isinstance(m, nn.ModuleList)]:
            for block in blocks:
                fully_shard(block, mp_policy=self.policy, reshard_after_forward=self.reshard)
        fully_shard(module, mp_policy=self.policy, reshard_after_forward=self.reshard)
        return module


class ShardedTrainer(ts.Trainer):
    """train_step's Trainer on a sharded model; with FP8 all-gather, the next step's float8 scales
    are computed after each optimizer step (torchao: `precompute_float8_dynamic_scale_for_fsdp`)."""

    def __init__(self, model, sharded: Sharded, device, spec: ts.StepSpec, compiled: bool):
        super().__init__(model, sharded, device, spec, compiled)
        self.precompute = None
        if sharded.fp8_all_gather:
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            self.precompute = precompute_float8_dynamic_scale_for_fsdp

    def step(self, x, y, probe=None):
        loss = super().step(x, y, probe)
        if self.precompute is not None:
            self.precompute(self.model)
        return loss


def _group_mean(curve: list[float], device: torch.device) -> list[float]:
    """The loss curve averaged over the ranks (each rank's loss is on its own sequences)."""
    import torch.distributed as dist

    t = torch.tensor(curve, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return (t / dist.get_world_size()).tolist()


class DistTrainStep:
    name = "dist_train_step"

    def launch_size(self, case) -> tuple[int, float]:
        """(ranks, seconds the whole launch may take) of a case."""
        spec = DistSpec.from_params(case.params)
        return spec.world_size, spec.timeout_s

    def launch_unsupported(self, case, precision, device: torch.device) -> str | None:
        """Why this case cannot be launched here, or None: checked by the parent before any rank starts."""
        spec = DistSpec.from_params(case.params)
        if device.type == "cuda":
            have = torch.cuda.device_count()
            if have < spec.world_size:
                return f"needs {spec.world_size} GPUs (world_size, one per rank); this machine has {have}"
        elif device.type != "cpu":
            return f"dist_train_step runs on CUDA (NCCL) or the CPU (gloo); device is {device.type}"
        if precision.grad_scaler:
            return f"{precision.name} needs a loss scaler that knows the shards (ShardedGradScaler); not built here"
        reason = compile_unsupported(device) if spec.step.compile else None
        return reason or precision.tokens_unsupported(spec.step.batch * spec.step.config().seq_len, device)

    def prepare(self, case, precision, device):
        """Inside a rank of an initialised process group: the sharded model and its step."""
        import torch.distributed as dist

        spec = DistSpec.from_params(case.params)
        step = spec.step
        rank, world = dist.get_rank(), dist.get_world_size()
        if world != spec.world_size:
            raise RuntimeError(f"launched with {world} ranks for a world_size {spec.world_size} case")
        cfg = step.config()
        n_params, flops_per_token, n_matmul_params = ts.model_sizes(step, cfg)
        tokens_rank = step.batch * cfg.seq_len
        source = corpus.generated(step.corpus_vocab, case.seed)
        # one global batch of batch x world sequences per step; this rank's slice of it
        data = ts.corpus_batches(step.corpus_vocab, case.seed, step.batch * world, cfg.seq_len, step.steps)
        mine = data[:, rank * step.batch:(rank + 1) * step.batch]
        batches = [(b[:, :-1].to(device), b[:, 1:].to(device)) for b in mine]
        fixed = batches[0]

        if step.compile:
            torch._dynamo.reset()
        sharded = Sharded(precision, spec.reshard_after_forward)
        trainer = ShardedTrainer(ts.build_model(step, case.seed), sharded, device, step, compiled=step.compile)

        def fn():
            return trainer.step(*fixed)

        check = _Check(case, spec, trainer, precision, device, batches, source)
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None

        def derive(median_s: float) -> dict:
            """From the slowest rank's median step: the group's tokens/s and each GPU's MFU, against
            the precision's own peak and against bf16's (ts.mfu_columns)."""
            tokens_per_s = tokens_rank * world / median_s
            return {"tokens_per_s": tokens_per_s,
                    **ts.mfu_columns(device_name, precision.name, flops_per_token, tokens_per_s / world)}

        return Prepared(
            fn=fn,
            flops=float(flops_per_token * tokens_rank),  # per rank: tflops is one GPU's rate
            bytes_moved=None,
            check=check,
            first_call=check.first_step,
            first_call_column="compile_s" if step.compile else None,
            extra={
                "model": step.model, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "d_model": cfg.d_model,
                "vocab": cfg.vocab, "data_vocab": step.corpus_vocab, "seq_len": cfg.seq_len, "batch": step.batch,
                "tokens_per_step": tokens_rank * world, "n_params": n_params, "n_matmul_params": n_matmul_params,
                "flops_per_token": flops_per_token, "compiled": step.compile, "train_steps": step.steps,
                "world_size": world, "fp8_all_gather": sharded.fp8_all_gather,
                "reshard_after_forward": spec.reshard_after_forward,
            },
            derive=derive,
        )


class _Check:
    """A rank's accuracy check: its `steps` training steps (the first is the runner's timed first
    call, `first_step`), the loss curve averaged over the ranks, and, where asked, the fp32 twin of
    the same sharding from the same init on the same batches."""

    def __init__(self, case, spec: DistSpec, trainer, precision, device, batches, source):
        self.case, self.spec, self.trainer, self.precision, self.device = case, spec, trainer, precision, device
        self.batches, self.source = batches, source
        self.first: list = []

    def first_step(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.first.append(ts.train(self.trainer, self.batches[:1]))

    def __call__(self) -> dict:
        step, trainer, device, source = self.spec.step, self.trainer, self.device, self.source
        with self.precision.active():
            if not self.first:
                self.first_step()
            rest = ts.train(trainer, self.batches[1:]) if step.steps > 1 else ([], 0)
            curve = _group_mean(self.first[0][0] + rest[0], device)
            state = trainer.state_bytes()  # this rank's shards
        final, why = ts.final_loss(curve), ts.divergence(curve)
        out = {
            "state_mem_mb": state / 2**20,
            "loss_curve": curve,
            "final_loss": final,
            "entropy_floor": source.entropy_rate,
            "unigram_entropy": source.unigram_entropy,
            "excess_loss": final - source.entropy_rate,
            "diverged": why is not None,
            "divergence": why,
        }
        ref_curve = self.reference_curve(curve)
        if ref_curve is None:
            return out
        ref_final, ref_why = ts.final_loss(ref_curve), ts.divergence(ref_curve)
        if ref_why is not None:
            out["divergence"] = f"{why + '; ' if why else ''}the fp32 reference diverged as well: {ref_why}"
        out.update(
            fp32_loss_curve=ref_curve,
            fp32_final_loss=ref_final,
            loss_delta_vs_fp32=final - ref_final,
            loss_rel_delta_vs_fp32=(final - ref_final) / ref_final if ref_final else math.nan,
        )
        return out

    def reference_curve(self, curve: list[float]) -> list[float] | None:
        """The fp32 twin's loss curve (the case's own where it is fp32 and eager), or None unasked."""
        spec, step = self.spec, self.spec.step
        if self.precision.name == FP32.name and not step.compile:
            return curve  # the case is its own reference
        if not spec.fp32_reference:
            return None
        # the fp32 twin of the same sharding, from the same init, on the same batches
        reference = ShardedTrainer(ts.build_model(step, self.case.seed),
                                   Sharded(FP32, spec.reshard_after_forward), self.device, step, compiled=False)
        with FP32.active():
            ref_curve = _group_mean(ts.train(reference, self.batches)[0], self.device)
        del reference
        return ref_curve


DIST_TRAIN_STEP = DistTrainStep()
