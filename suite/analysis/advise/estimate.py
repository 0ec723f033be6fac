"""One training step's time per recipe, term by term, on one GPU of the peak table.

    step = GEMMs (each linear's fprop, dgrad and wgrad, with the casts its pass runs)
         + attention core + elementwise + optimizer update
         + exposed FSDP communication + tensor parallel + expert parallel communication

Every GEMM and cast is the roofline model's (`suite.analysis.roofline.model`: its `gemm`,
`fused_cast`, the scaling kinds' cast kernels, its achievable fractions and floor); the terms beside
them are here, each constant with its source or the assumption it is (docs/advise.md lists them all).

Casts, autocast-style as a training step runs them: fprop casts its input and its weight, dgrad the
output gradient, each into both layouts the step needs (`model.fused_cast`: torchao under
torch.compile, as torchtitan runs it, or Transformer Engine's own kernels), so wgrad casts nothing
of its own; torchao's rowwise gradient GEMMs apply their scales to the output (no fast
accumulation: the kind's `output` kernels). The GEMM-only (pre-quantized) time is the GEMM kernel alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from suite.analysis.roofline import model
from suite.models.step import Gemm, Parallel, StepWork
from suite.scenario import registry

BASELINE = "bf16"

# --- the terms beside the GEMMs: constants and sources (docs/advise.md) -------------------------

# The attention core (FlashAttention, bf16 on every recipe) at this fraction of the bf16 peak,
# forward and backward: the low end of FlashAttention-2's measured 50-73% of peak on an A100
# (Dao 2023, arXiv:2307.08691), whose backward reaches less than its forward; FlashAttention-3
# reports up to 75% on an H100 forward (Shah et al. 2024, arXiv:2407.08608).
ATTENTION_EFFICIENCY = 0.5
# AdamW's update per fp32 parameter (torch.optim.AdamW, fused or foreach, fp32 states: torchtitan's
# default): reads the parameter, its gradient and both moments (16 B), writes the parameter and
# both moments (12 B). Memory-bound, at the model's achievable bandwidth.
ADAMW_BYTES_PER_PARAM = 28
# FSDP2 as torchtitan configures it: parameters all-gathered in bf16 (mixed_precision_param), once
# for the forward and again for the backward (reshard_after_forward), gradients reduce-scattered in
# fp32 (mixed_precision_reduce). torchao's tensorwise recipe all-gathers its converted linears'
# weights in FP8 instead (enable_fsdp_float8_all_gather, as torchtitan's float8 runs enable it);
# other recipes all-gather bf16.
FSDP_PARAM_BYTES = 2
FSDP_GRAD_BYTES = 4
FSDP_ALL_GATHERS = 2
FP8_ALL_GATHER = {"fp8_tensorwise": 1}  # recipe -> bytes per converted weight element all-gathered
# Overlap: FSDP2 prefetches the next layer's all-gather and reduce-scatters behind the backward, so
# only the communication beyond the step's compute is exposed. Tensor parallel (torchtitan's vanilla
# TP, not async TP) and expert parallel all-to-alls are not overlapped: all exposed.
GPUS_PER_NODE = 8
# Link bandwidth per GPU, one direction, GB/s: half the vendor's bidirectional figure. NVLink: A100
# SXM 600 GB/s (NVLink 3), H100/H200 SXM and GH200 900 GB/s (NVLink 4), B200, GB200, B300 1.8 TB/s
# (NVLink 5) (NVIDIA datasheets). PCIe cards (their NVLink bridges join pairs or fours only): PCIe
# Gen5 x16 128 GB/s (H100 PCIe, H100 NVL, H200 NVL), Gen4 x16 64 GB/s (A100 PCIe, L4, L40S).
# Vendor rates: NCCL reaches less, so communication here is a lower bound.
LINK_GBS = {"A100 SXM": 300.0, "H100 SXM": 450.0, "H200": 450.0, "GH200": 450.0, "B200": 900.0,
            "GB200": 900.0, "B300": 900.0, "H100 PCIe": 64.0, "H100 NVL": 64.0, "H200 NVL": 64.0,
            "A100 PCIe": 32.0, "L4": 32.0, "L40S": 32.0}
# Between nodes: one 400 Gb/s NIC per GPU (ConnectX-7: DGX H100, H200, B200), 800 Gb/s on
# Blackwell Ultra (ConnectX-8 SuperNIC: DGX B300, GB300 NVL72).
NETWORK_GBS = {"B300": 100.0}
NETWORK_GBS_DEFAULT = 50.0


@dataclass(frozen=True)
class Timed:
    """One GEMM of the step under one recipe, summed over its `count` calls."""

    seconds: float  # the GEMM and the casts its pass runs
    gemm_seconds: float  # the GEMM kernel alone (pre-quantized)
    source: str = "predicted"  # or "measured" (rows of a run: `--from`)


def gemm_format(recipe: str, pass_: str) -> str:
    """The format a recipe's GEMM of this pass runs in (a peak column)."""
    record = registry.PRECISIONS[recipe]
    return (record.weight_grad_format or record.peak) if pass_ == "wgrad" else record.peak


def matmul(gemm: Gemm, fmt: str) -> model.Kernel:
    """One call of the GEMM; a grouped one is `groups` GEMMs of (m, k, n) in one kernel."""
    one = model.gemm(f"{gemm.pass_} GEMM", gemm.m, gemm.k, gemm.n, fmt)
    return replace(one, bytes=one.bytes * gemm.groups, flops=one.flops * gemm.groups)


def pass_casts(gemm: Gemm, recipe: str, weight_shards: int = 1) -> list[model.Kernel]:
    """The casts a training step runs for this pass (module docstring); a weight all-gathered in
    FP8 is cast on its shard, 1/`weight_shards` of it."""
    record = registry.PRECISIONS[recipe]
    elements = gemm.groups * gemm.m * gemm.k
    roles = {"fprop": (("input", elements), ("weight", gemm.groups * gemm.n * gemm.k / weight_shards)),
             "dgrad": (("grad_output", elements),), "wgrad": ()}[gemm.pass_]
    width = model.OPERAND_BYTES[record.peak]
    kernels = [c for role, e in roles for c in model.fused_cast(role, e, 2, record.scaling, False, width)]
    kind = model.casts(record.scaling)
    if kind.output is not None and gemm.pass_ != "fprop" and gemm_format(recipe, gemm.pass_) != BASELINE:
        kernels += kind.output(model, record.params.of({"use_fast_accum": False}), gemm.groups * gemm.m, gemm.n)
    return kernels


def time_gemm(gemm: Gemm, recipe: str, device: model.Device, weight_shards: int = 1) -> Timed:
    """The GEMM's time per step under a recipe: with its pass's casts, and alone."""
    kernels = [matmul(gemm, gemm_format(recipe, gemm.pass_))]
    if registry.PRECISIONS[recipe].scaling is not None:
        kernels += pass_casts(gemm, recipe, weight_shards)
    pred = model.predict(kernels, device)
    return Timed(gemm.count * pred.seconds, gemm.count * pred.gemm_s)


def data_parallel(parallel: Parallel) -> int:
    """FSDP's ranks: the GPUs over tensor parallel."""
    return max(1, parallel.gpus // parallel.tp)


def link_gbs(device: model.Device, span: int) -> float:
    """GB/s per GPU of a collective over `span` GPUs: NVLink (or PCIe) within a node, the network beyond."""
    if span <= GPUS_PER_NODE:
        return LINK_GBS.get(device.label, NETWORK_GBS_DEFAULT)
    return NETWORK_GBS.get(device.label, NETWORK_GBS_DEFAULT)


@dataclass(frozen=True)
class Terms:
    """One step's time on one GPU, term by term (s)."""

    gemm_s: float  # the linears' GEMMs with their casts
    gemm_only_s: float  # the same GEMMs alone
    attention_s: float
    elementwise_s: float
    optimizer_s: float
    fsdp_s: float  # all-gathers and reduce-scatters, before overlap
    tp_s: float
    ep_s: float

    @property
    def compute_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s

    @property
    def fsdp_exposed_s(self) -> float:
        return max(0.0, self.fsdp_s - self.compute_s)

    @property
    def step_s(self) -> float:
        return self.compute_s + self.optimizer_s + self.fsdp_exposed_s + self.tp_s + self.ep_s

    def as_ms(self) -> dict:
        names = ("gemm", "gemm_only", "attention", "elementwise", "optimizer", "fsdp", "tp", "ep")
        out = {f"{name}_ms": getattr(self, f"{name}_s") * 1e3 for name in names}
        return {**out, "fsdp_exposed_ms": self.fsdp_exposed_s * 1e3, "step_ms": self.step_s * 1e3}


def fsdp_seconds(step: StepWork, parallel: Parallel, device: model.Device, fp8_elements: float,
                 fp8_bytes: float) -> float:
    """FSDP's all-gathers (twice) and reduce-scatter of this GPU's parameters over the data-parallel
    ranks, ring collectives: each GPU moves (dp - 1) / dp of the whole; `fp8_elements` of the
    parameters all-gathered at `fp8_bytes` each instead of bf16."""
    dp = data_parallel(parallel)
    if dp == 1:
        return 0.0
    gathered = (step.params_local - fp8_elements) * FSDP_PARAM_BYTES + fp8_elements * fp8_bytes
    moved = (FSDP_ALL_GATHERS * gathered + step.params_local * FSDP_GRAD_BYTES) * (dp - 1) / dp
    return moved / (link_gbs(device, parallel.gpus) * 1e9)


def side_terms(step: StepWork, parallel: Parallel, device: model.Device) -> tuple[float, float, float, float, float]:
    """(attention, elementwise, optimizer, tp, ep) seconds: the terms no recipe changes."""
    bandwidth = device.mem_tbs * 1e12 * device.achievable_memory
    attention = step.attention_flops / (device.peaks[BASELINE] * 1e12 * ATTENTION_EFFICIENCY)
    optimizer = step.params_local / data_parallel(parallel) * ADAMW_BYTES_PER_PARAM / bandwidth
    tp = step.tp_bytes / (link_gbs(device, parallel.tp) * 1e9)
    ep = step.ep_bytes / (link_gbs(device, parallel.tp * parallel.ep) * 1e9)
    return attention, step.elementwise_bytes / bandwidth, optimizer, tp, ep


def step_terms(step: StepWork, parallel: Parallel, device: model.Device, recipe: str,
               converted: set[str], timed: dict | None = None) -> Terms:
    """The step under `recipe` with only the linears in `converted` (layer patterns) converted, the
    rest in bf16. `timed`: (gemm, recipe) -> Timed already computed (`time_all`)."""
    timed = timed if timed is not None else time_all(step, parallel, device, (BASELINE, recipe))
    rows = [timed[(g, recipe if g.layer in converted else BASELINE)] for g in step.gemms]
    fp8_bytes = FP8_ALL_GATHER.get(recipe)
    fp8_elements = sum(g.count * g.groups * g.k * g.n for g in step.gemms
                       if g.pass_ == "fprop" and g.layer in converted) if fp8_bytes else 0.0
    fsdp = fsdp_seconds(step, parallel, device, fp8_elements, fp8_bytes or FSDP_PARAM_BYTES)
    return Terms(sum(r.seconds for r in rows), sum(r.gemm_seconds for r in rows), *side_terms(step, parallel, device)[:3],
                 fsdp, *side_terms(step, parallel, device)[3:])


def time_all(step: StepWork, parallel: Parallel, device: model.Device, recipes) -> dict:
    """(gemm, recipe) -> Timed for every GEMM of the step under each recipe (the device runs them all)."""
    shards = data_parallel(parallel)
    return {(g, recipe): time_gemm(g, recipe, device, shards if recipe in FP8_ALL_GATHER else 1)
            for recipe in recipes for g in step.gemms}
