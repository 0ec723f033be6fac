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

from dataclasses import dataclass

from suite.analysis.roofline import model
from suite.models.step import Gemm, Parallel, StepWork
from suite.scenario import registry

BASELINE = "bf16"

# --- the terms beside the GEMMs: constants (their sources: TERMS) -------------------------------

ATTENTION_EFFICIENCY = 0.5  # of the bf16 peak, forward and backward
ADAMW_BYTES_PER_PARAM = 28  # fp32 parameter, gradient and two moments: 16 B read, 12 B written
FSDP_PARAM_BYTES = 2  # bf16 all-gather
FSDP_GRAD_BYTES = 4  # fp32 reduce-scatter
FSDP_ALL_GATHERS = 2  # forward, and again for the backward
GPUS_PER_NODE = 8
# Link bandwidth per GPU, one direction, GB/s (half the vendor's bidirectional figure)
LINK_GBS = {"A100 SXM": 300.0, "H100 SXM": 450.0, "H200": 450.0, "GH200": 450.0, "B200": 900.0,
            "GB200": 900.0, "B300": 900.0, "H100 PCIe": 64.0, "H100 NVL": 64.0, "H200 NVL": 64.0,
            "A100 PCIe": 32.0, "L4": 32.0, "L40S": 32.0}
NETWORK_GBS = {"B300": 100.0}  # between nodes, per GPU
NETWORK_GBS_DEFAULT = 50.0

# Each term of the step: (term, how it is counted, its source or the assumption it is); the one
# place docs/advise.md takes them from (`suite.analysis.advise.published`).
TERMS = (
    ("GEMMs", "each linear's fprop, dgrad and wgrad on the roofline model: FLOPs at 0.78 of the format's "
     "peak, bytes at 0.92 of the bandwidth, a 2 us floor per kernel",
     "torchao roofline_utils (docs/model.md); dense vendor peaks, suite/core/peaks.py"),
    ("casts", "autocast-style as a training step runs them: fprop casts its input and weight, dgrad the output "
     "gradient, each into both layouts (wgrad reuses them); torchao under torch.compile or TE's own kernels "
     "(`model.fused_cast`); torchao's rowwise gradient GEMMs scale their output (no fast accumulation)",
     "torchao roofline_utils' cast bytes; torchao Float8LinearConfig's gradient GEMM configs (docs/model.md)"),
    ("attention core", f"attention FLOPs (forward and backward, causal) at {ATTENTION_EFFICIENCY:g} of the bf16 "
     "peak, in bf16 under every recipe",
     "FlashAttention-2 (Dao 2023, arXiv:2307.08691): 50-73% of peak on an A100, the backward below the "
     "forward: its low end; FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608): up to 75% on an H100, forward"),
    ("elementwise", "norms, activations, residual adds, rotary: their bytes at 0.92 of the memory bandwidth, "
     "the same under every recipe", "torchao roofline_utils' pct_achievable_mem_bw"),
    ("optimizer", f"AdamW on this GPU's FSDP shard: {ADAMW_BYTES_PER_PARAM} B per parameter at 0.92 of the "
     "memory bandwidth", "torch.optim.AdamW (fused or foreach) with fp32 states, torchtitan's default: reads "
     "parameter, gradient and both moments (16 B), writes parameter and moments (12 B)"),
    ("FSDP", f"ring all-gathers of the parameters ({FSDP_ALL_GATHERS}x, {FSDP_PARAM_BYTES} B each; "
     "a recipe declaring an FP8 all-gather (torchao's tensorwise): its converted weights at 1 B) and a reduce-scatter of the gradients "
     f"({FSDP_GRAD_BYTES} B), (dp - 1) / dp of them per GPU; exposed: only what exceeds the step's compute",
     "torchtitan's FSDP2 defaults (bf16 mixed_precision_param, fp32 mixed_precision_reduce, "
     "reshard_after_forward) and float8 runs' enable_fsdp_float8_all_gather; overlap: FSDP2 prefetches "
     "the next layer's all-gather (an assumption: perfect overlap up to the compute)"),
    ("tensor parallel", "its all-gathers and reduce-scatters (StepWork.tp_bytes), all exposed, in bf16 under "
     "every recipe", "vanilla TP (torchtitan's default, not async TP): nothing overlaps (an assumption); "
     "torchao's FP8 all-gather of TP inputs is not modelled"),
    ("expert parallel", "its all-to-alls (StepWork.ep_bytes), all exposed", "an assumption: no overlap"),
    ("activation checkpointing", "`--ac full`: each transformer block's forward runs again in its backward: its "
     "fprop GEMMs (with their casts) counted twice, the attention core's forward, the blocks' forward elementwise "
     "bytes and their forward TP and EP collectives once more; the embedding, final norm, output projection and "
     "loss once (suite/models/step_work.py)", "torchtitan's activation_checkpoint.mode = \"full\": a "
     "checkpoint_wrapper around each transformer block (torchtitan/distributed/activation_checkpoint.py); FSDP "
     "all-gathers each block again for the backward anyway (reshard_after_forward), so nothing more there"),
    ("links", f"NVLink (or PCIe) within {GPUS_PER_NODE} GPUs, the network beyond; per GPU, one direction: "
     + ", ".join(f"{k} {v:g}" for k, v in LINK_GBS.items()) + f" GB/s; network {NETWORK_GBS_DEFAULT:g} GB/s "
     "(B300 100)", "NVIDIA datasheets: NVLink 3 600 GB/s, NVLink 4 900 GB/s, NVLink 5 1.8 TB/s, PCIe Gen5 "
     "x16 128 GB/s, Gen4 64 GB/s (bidirectional, halved); ConnectX-7 400 Gb/s per GPU (DGX H100/H200/B200), "
     "ConnectX-8 800 Gb/s (DGX B300). Vendor rates: NCCL reaches less, so communication is a lower bound"),
)


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
    """One call of the GEMM; a grouped one is `groups` GEMMs of (m, k, n) in one kernel (the model's
    grouped GEMM: `groups` x m rows, a weight per group)."""
    return model.gemm(f"{gemm.pass_} GEMM", gemm.groups * gemm.m, gemm.k, gemm.n, fmt, groups=gemm.groups)


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


def fp8_all_gather(recipe: str) -> float | None:
    """Bytes per converted weight element a recipe all-gathers where it casts weights before FSDP's
    all-gather (its declared `fsdp_gather`: torchao's tensorwise, as torchtitan's float8 runs enable
    it); None: bf16 all-gathers."""
    fmt = registry.PRECISIONS[recipe].fsdp_gather
    return model.OPERAND_BYTES[fmt] if fmt else None


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
        seconds = {"gemm_ms": self.gemm_s, "gemm_only_ms": self.gemm_only_s, "attention_ms": self.attention_s,
                   "elementwise_ms": self.elementwise_s, "optimizer_ms": self.optimizer_s, "fsdp_ms": self.fsdp_s,
                   "fsdp_exposed_ms": self.fsdp_exposed_s, "tp_ms": self.tp_s, "ep_ms": self.ep_s,
                   "step_ms": self.step_s}
        return {key: value * 1e3 for key, value in seconds.items()}


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
    fp8_bytes = fp8_all_gather(recipe)
    # the converted weights, from wgrad's (out x in) (fprop's count includes recomputed forwards)
    fp8_elements = sum(g.count * g.groups * g.m * g.n for g in step.gemms
                       if g.pass_ == "wgrad" and g.layer in converted) if fp8_bytes else 0.0
    fsdp = fsdp_seconds(step, parallel, device, fp8_elements, fp8_bytes or FSDP_PARAM_BYTES)
    attention, elementwise, optimizer, tp, ep = side_terms(step, parallel, device)
    return Terms(sum(r.seconds for r in rows), sum(r.gemm_seconds for r in rows), attention, elementwise, optimizer,
                 fsdp, tp, ep)


def time_all(step: StepWork, parallel: Parallel, device: model.Device, recipes) -> dict:
    """(gemm, recipe) -> Timed for every GEMM of the step under each recipe (the device runs them all)."""
    shards = data_parallel(parallel)
    return {(g, recipe): time_gemm(g, recipe, device, shards if fp8_all_gather(recipe) else 1)
            for recipe in recipes for g in step.gemms}
