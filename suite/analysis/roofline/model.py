"""Why a speedup is what it is: a roofline model of a case, from the device's peaks alone.

Torch-free: a case is a list of kernels, each with its FLOPs, the bytes it reads and writes and
the format its math runs in; a kernel takes

    t = max(FLOPs / (peak[format] x achievable), bytes / (bandwidth x achievable), floor)

and a case the sum of its kernels. The term that sets t is the kernel's bound (compute, memory or
overhead: the three regimes of Horace He's "Making Deep Learning Go Brrrr From First Principles");
the case's bound is the term that sets most of its time. The *roofline* of a case is the same sum
at 100% of peak and bandwidth, without floors: no timing can beat it, so a measurement
faster than it is flagged (`implausible`). docs/model.md has every equation, constant and source,
and the model against published measurements.

Kernels (`case_kernels`): a GEMM moves its operands once and writes its output once; an FP8
recipe adds the kernels that scale and cast its operands, counted per scaling (its folder declares
how it scales: `suite.scenario.declare.PrecisionRecord`) from the bytes they move: as
torch.compile fuses them (torchao's benchmarks/float8/float8_roofline.py, via
torchao/testing/training/roofline_utils.py) or as eager mode runs them (one kernel per op of
torchao's float8_utils / float8_training_tensor; this suite's fp8 numerics run the same ops). What
one call of a workload is to the model (`KERNELS`, or a kind of call its folder declares the
kernels of: `suite.scenario.declare.Hooks.rooflines`) is its folder's declaration too.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass

from suite.core import peaks
from suite.precisions import gates
from suite.scenario import registry

# --- constants, each from a published source (docs/model.md) -----------------------------------

# torchao roofline_utils (H100 entry, copied there for B200 and MI300X): "pct_achievable_gemm_tops
# 0.78, based on experimental observation with sample large inputs" and "pct_achievable_mem_bw 0.92,
# pointwise triton kernels with large inputs".
GPU_ACHIEVABLE_COMPUTE = 0.78
GPU_ACHIEVABLE_MEMORY = 0.92
# torchao roofline_utils KERNEL_LAUNCH_OVERHEAD_SEC: "a triton kernel with a single element
# read/write on an H100", GPU time from a trace: the least time any kernel takes.
GPU_KERNEL_FLOOR_S = 2e-6
# FLOPs per cycle per core (an FMA is 2): two FMA ports of 16 fp32 lanes (AVX-512) or 8 (AVX2);
# AVX512-BF16's vdpbf16ps and AVX512-FP16 on the same two ports do 2x the fp32 lanes; AMX's TMUL
# does 1024 bf16 (or fp16) FLOPs per cycle (Intel: 16x16x32 MACs per TDPBF16PS every 16 cycles).
# A format without native kernels is converted and multiplied at the fp32 rate (its slow path).
CPU_FP32_FLOPS_PER_CYCLE = (("avx512f", 64), ("avx2", 32))
CPU_HALF_FLOPS_PER_CYCLE = {"bf16": (("amx_bf16", 1024), ("avx512_bf16", 128)),
                            "fp16": (("amx_fp16", 1024), ("avx512_fp16", 128))}
# A measurement this many times faster than its roofline is impossible: GPU peaks are at the boost
# clock (10% for rounding in vendor tables); a CPU's recorded clock may be its nominal one, and
# turbo runs up to 1.9x it (Xeon Platinum 8480+: 2.0 GHz base, 3.8 GHz max turbo).
IMPLAUSIBLE_ABOVE = {"cuda": 1.1, "cpu": 2.0}
# A compute-bound GPU GEMM of at least 2 x 4096^3 FLOPs below this fraction of its roofline is
# flagged: half of the lowest published best-shape efficiency (mamf-finder, MI300X bf16: 51.4%).
SLOW_BELOW = 0.25
LARGE_GEMM_FLOPS = 2.0 * 4096**3

# Bytes per element of each GEMM format's operands and output (FP8/FP4 GEMMs write bf16, and the
# activations around them stay in what the GEMMs write).
OPERAND_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}
OUTPUT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "fp4": 2}
# What a format needs of a GPU (compute capability), beyond having a peak in the table; a recipe
# may need more (its declared `min_cc`): the one table, suite/precisions/gates.py.
MIN_CC = gates.FORMAT_MIN_CC
# This module, as the folders' cast kernels are handed it (`suite.scenario.declare.Casts`).
_THIS = sys.modules[__name__]


@dataclass(frozen=True)
class Device:
    label: str
    kind: str  # "cuda" or "cpu"
    peaks: dict[str, float]  # TFLOP/s per format column
    mem_tbs: float | None  # None: not known (a CPU's memory is not in its records)
    cc: float | None = None
    achievable_compute: float = 1.0
    achievable_memory: float = 1.0
    floor_s: float = 0.0


def gpu_device(name: str | None) -> Device | None:
    """The device of a GPU name in the peak table (or a short name: 'h100', 'b200'), else None."""
    gpu = peaks.match_gpu(name)
    if gpu is None:
        return None
    return Device(gpu.label, "cuda", dict(gpu.peaks), gpu.mem_tbs, gpu.cc,
                  GPU_ACHIEVABLE_COMPUTE, GPU_ACHIEVABLE_MEMORY, GPU_KERNEL_FLOOR_S)


def cpu_per_cycle(flags: set[str], native: bool) -> dict[str, int]:
    """FLOPs per cycle per core of each format on a CPU with these /proc/cpuinfo flags; `native`
    False when torch's dispatch is lowered below the CPU's ISA (bf16/fp16 then take the slow path)."""
    fp32 = next((n for flag, n in CPU_FP32_FLOPS_PER_CYCLE if flag in flags), 16)  # SSE: 2 ports x 4 lanes x 2
    out = {"fp32": fp32}
    for fmt, options in CPU_HALF_FLOPS_PER_CYCLE.items():
        out[fmt] = next((n for flag, n in options if flag in flags), fp32) if native else fp32
    return out


def cpu_device(threads, clock_mhz, flags, isa=None, isa_env=None, name: str = "CPU") -> Device | None:
    """A CPU from what its records hold: threads x clock x FLOPs per cycle per format. None where
    the clock or the thread count was not recorded."""
    if _missing(threads) or _missing(clock_mhz) or not threads or not clock_mhz:
        return None
    have = set(str(flags).split()) if not _missing(flags) else set()
    lowered = (bool(isa_env) and not _missing(isa_env)) or str(isa).upper() in ("AVX2", "DEFAULT", "NONE")
    rate = float(threads) * float(clock_mhz) * 1e6 / 1e12
    peaks_ = {fmt: rate * n for fmt, n in cpu_per_cycle(have, native=not lowered).items()}
    return Device(name, "cpu", peaks_, None)


def device_for(record: dict) -> Device | None:
    """The device a record was measured on, as the model sees it (None where not modelled)."""
    if record.get("device") == "cuda":
        return gpu_device(record.get("device_name"))
    if record.get("device") == "cpu":
        return cpu_device(record.get("cpu_threads"), record.get("cpu_clock_mhz"), record.get("cpu_flags"),
                          record.get("cpu_isa"), record.get("cpu_isa_env"), str(record.get("device_name") or "CPU"))
    return None


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


# --- kernels ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    what: str  # "matmul", "cast" (FP8 scaling and casting) or "other" (norms, activations, autocast casts)
    label: str
    bytes: float
    flops: float = 0.0
    fmt: str | None = None  # the format a GEMM's math runs in (a peak column)


def gemm(label: str, m: int, k: int, n: int, fmt: str, a_fmt: str | None = None, groups: int = 1) -> Kernel:
    """C[M, N] = A[M, K] @ B[K, N] in `fmt`: operands read once, output written once; `groups`
    weights B of (K, N) where one grouped kernel multiplies each of them by its own rows of A."""
    operand = OPERAND_BYTES[a_fmt or fmt]
    return Kernel("matmul", label, operand * (m * k + groups * k * n) + OUTPUT_BYTES[fmt] * m * n,
                  2.0 * m * k * n, fmt)


def tiny(label: str, count: int = 1, what: str = "cast") -> list[Kernel]:
    """Kernels over a handful of elements (a scale from an amax): each costs the launch floor."""
    return [Kernel(what, label, 0.0) for _ in range(count)]


def eager_cast(role: str, elements: float, source: int, pow2: bool) -> list[Kernel]:
    """One dynamic FP8 cast as eager PyTorch runs it, one kernel per op (torchao float8_utils
    tensor_to_amax / amax_to_scale / to_fp8_saturated and _ToFloat8ConstrFunc; fp8_numerics here):
    abs, max (whole tensor or per row: the same bytes), the scale (to float64, clamp, divide, to
    float32, and the reciprocal _scaled_mm takes; pow2: log2, floor, exp2), the upcast to float32
    (none from float32), the multiply, the clamp and the cast. `source`: bytes per element."""
    e = elements
    out = [Kernel("cast", f"{role} abs", 2 * source * e), Kernel("cast", f"{role} amax", source * e)]
    out += tiny(f"{role} scale", 5 + 3 * pow2)
    if source != 4:
        out.append(Kernel("cast", f"{role} to float32", (source + 4) * e))
    out += [Kernel("cast", f"{role} scale multiply", 8 * e), Kernel("cast", f"{role} clamp", 8 * e),
            Kernel("cast", f"{role} cast to fp8", 5 * e)]
    return out


def eager_block_cast(role: str, elements: float, source: int, width: float) -> list[Kernel]:
    """One block-scaled cast as torchao's `to_mx` runs it eagerly (prototype/mx_formats/mx_tensor.py,
    torchao 0.18; NVFP4's `nvfp4_quantize` is alike), one kernel per op: abs, the per-block amax,
    the upcast to float32, about a dozen ops on one value per block for the scale (the launch
    floor each), the divide, the clamp and the cast; e2m1 (`width` 0.5) rounds in about four float32
    passes (`f32_to_f4_unpacked`) and packs two values per byte."""
    e = elements
    out = [Kernel("cast", f"{role} abs", 2 * source * e), Kernel("cast", f"{role} block amax", source * e),
           Kernel("cast", f"{role} to float32", (source + 4) * e), *tiny(f"{role} block scales", 12),
           Kernel("cast", f"{role} divide", 8 * e), Kernel("cast", f"{role} clamp", 8 * e)]
    if width >= 1:
        return out + [Kernel("cast", f"{role} cast", (4 + width) * e)]
    return out + [Kernel("cast", f"{role} e2m1 rounding", 4 * 8 * e), Kernel("cast", f"{role} pack", 1.5 * e)]


def casts(scaling: str):
    """The cast kernels of a scaling kind, as its folder declares them (`suite.scenario.declare.Casts`)."""
    known = registry.scalings()
    if scaling not in known:
        raise ValueError(f"the model has no cast kernels for scaling {scaling!r}; known: {', '.join(known)}")
    return registry.load(known[scaling])


def fused_cast(role: str, elements: float, source: int, scaling: str, fuse_prev: bool,
               width: float = 1) -> list[Kernel]:
    """An operand's casts in a training step as torch.compile (torchao) or Transformer Engine's own
    kernels run them, bytes per kernel as torchao's roofline_utils counts them (the read of an
    activation or gradient fused into the op before it where `fuse_prev`; a fused-away kernel
    costs nothing here, where roofline_utils still charges it the floor). `role`: input, weight or
    grad_output. Both layouts a step needs (row- and column-major) are written; `width`: bytes per
    element of the format cast to (microscaled: MXFP8 1, NVFP4 0.5). The kernels per scaling kind
    are its folder's (`casts`)."""
    first = 0 if fuse_prev and role != "weight" else source  # the read a producer op already did
    return casts(scaling).fused(_THIS, role, elements, source, first, width)


def gemm_case(precision: str, m: int, k: int, n: int, params: dict, groups: int = 1, fused: bool = False) -> list[Kernel]:
    """One GEMM (the `gemm` workload's call), or one grouped GEMM of `groups` weights; an FP8
    recipe's operands quantized before timing (`pre`) or in the timed call (`inline`, eager: A and
    the weight B^T, each from bf16; `fused`: by its library's own cast kernels)."""
    recipe = registry.PRECISIONS[precision]
    fmt, scaling = recipe.peak, recipe.scaling
    if scaling is None:
        return [gemm("GEMM", m, k, n, fmt, groups=groups)]
    opts, kind = recipe.params.of(params), casts(scaling)
    kernels = [gemm(f"{fmt.upper()} GEMM", m, k, n, fmt, groups=groups)]
    if kind.output is not None:  # what the kind applies to the GEMM's output (rowwise scales)
        kernels += kind.output(_THIS, opts, m, n)
    if recipe.fused_casts or fused:  # one te.Linear forward: TE's own cast kernels for the input and the weight
        width = OPERAND_BYTES[fmt]
        return kernels + fused_cast("input", m * k, 2, scaling, False, width) + \
            fused_cast("weight", groups * n * k, 2, scaling, False, width)
    # A and the weight B^T, each cast from bf16 in the timed call, where the case's parameters say so
    if kind.inline is not None and kind.inline(opts):
        for role, elements in (("A", m * k), ("B", groups * n * k)):
            kernels += kind.eager(_THIS, role, elements, 2, OPERAND_BYTES[fmt])
    return kernels


def grouped_case(task, precision: str, m: int, k: int, n: int, params: dict) -> list[Kernel]:
    """A MoE layer's expert GEMMs (`grouped_matmul`): the groups the workload declares (rows per
    expert, `WorkloadRecord.groups`), as one grouped kernel that reads only the weights of experts
    with rows, or as one GEMM per such expert (each paying its own floor and casts). A block-scaled
    format's grouped call casts with torchao's own kernels (its MoE path's triton and CUDA casts)."""
    counts, one_kernel = registry.load(task.groups)(m, params)
    busy = [rows for rows in counts if rows]
    if one_kernel:
        scaling = registry.PRECISIONS[precision].scaling
        fused = scaling is not None and casts(scaling).grouped_fused
        return gemm_case(precision, m, k, n, params, groups=len(busy), fused=fused)
    return [kernel for rows in busy for kernel in gemm_case(precision, rows, k, n, params)]


def layer_gemms(precision: str, m: int, k: int, n: int) -> list[Kernel]:
    """A Linear's training step: output (M, K, N), input gradient (M, N, K), weight gradient (K, M, N)."""
    recipe = registry.PRECISIONS[precision]
    fmt = recipe.peak
    return [gemm("output GEMM", m, k, n, fmt), gemm("input-gradient GEMM", m, n, k, fmt),
            gemm("weight-gradient GEMM", k, m, n, recipe.weight_grad_format or fmt)]


def layer_casts(precision: str, m: int, k: int, n: int, compiled: bool, fuse_prev: bool, master: bool) -> list[Kernel]:
    """An FP8 recipe's scaling and casting kernels in one training step of a Linear: compiled or by
    its library's kernels, each operand's `fused_cast`; eager, as its scaling kind's folder counts
    them (`Casts.layer`: torchao casts each operand once per GEMM that uses it and copies the FP8
    operands into the layout _scaled_mm needs)."""
    recipe = registry.PRECISIONS[precision]
    scaling, w = recipe.scaling, 4 if master else 2
    tensors = (("input", m * k, 2), ("weight", n * k, w), ("grad_output", m * n, 2))
    width = OPERAND_BYTES[recipe.peak]
    if compiled or recipe.fused_casts:
        return [c for role, e, s in tensors for c in fused_cast(role, e, s, scaling, fuse_prev, width)]
    return casts(scaling).layer(_THIS, tensors, width)


def layer_case(norm: bool, precision: str, m: int, k: int, n: int, compiled: bool, master: bool = True) -> list[Kernel]:
    """A Linear's training step (y = x W^T, forward and backward), with `norm` LayerNorm -> Linear
    -> Sigmoid. `master`: fp32 master weights under autocast, as this suite's layers train (bf16/FP8
    recipes then also cast the weight down and its gradient up); False: bf16 weights (torchao's benchmark)."""
    recipe = registry.PRECISIONS[precision]
    fmt = recipe.peak
    kernels = layer_gemms(precision, m, k, n)
    if recipe.scaling is not None:
        kernels += layer_casts(precision, m, k, n, compiled, norm and compiled, master)
    if master and fmt not in ("fp32", "tf32"):
        if recipe.scaling is None:  # autocast's weight cast (FP8 casts read the fp32 weight directly)
            kernels.append(Kernel("other", "weight to bf16 (autocast)", 6.0 * n * k))
        kernels.append(Kernel("other", "weight gradient to fp32", 6.0 * n * k))
    if norm:
        act = OUTPUT_BYTES[fmt]  # the activations are what the GEMMs write
        kernels += [Kernel("other", "LayerNorm", 2 * act * m * k), Kernel("other", "Sigmoid", 2 * act * m * n),
                    Kernel("other", "Sigmoid backward", 3 * act * m * n), Kernel("other", "LayerNorm backward", 3 * act * m * k)]
    return kernels


# What one call of a workload is to the model, by its declaration's `roofline`; a layer step's
# workload has a `compile` parameter: (workload record, precision, m, k, n, params) -> kernels
KERNELS = {
    "matmul": lambda task, precision, m, k, n, params: gemm_case(precision, m, k, n, params),
    "grouped_matmul": grouped_case,
    "linear_step": lambda task, precision, m, k, n, params: layer_case(
        False, precision, m, k, n, task.params.of(params).compile),
    "norm_linear_step": lambda task, precision, m, k, n, params: layer_case(
        True, precision, m, k, n, task.params.of(params).compile),
}


def case_kernels(workload: str, precision: str, m, k, n, params: dict | None = None) -> list[Kernel] | str:
    """The kernels one timed call of a case runs, or why the model has none for it."""
    recipe, task = registry.PRECISIONS.get(precision), registry.WORKLOADS.get(workload)
    if recipe is None:
        return f"unknown precision {precision!r}"
    if recipe.no_roofline:
        return recipe.no_roofline
    if task is None or task.roofline is None or _missing(m) or _missing(k) or _missing(n):
        return f"the model covers shaped GEMM and Linear-layer cases, not {workload}"
    if task.roofline in KERNELS:
        return KERNELS[task.roofline](task, precision, int(m), int(k), int(n), params or {})
    declared = registry.rooflines()  # a kind of call its folder declares (`Hooks.rooflines`)
    if task.roofline not in declared:
        return f"the model has no kernels for {workload}'s calls ({task.roofline!r}); its folder declares none"
    return registry.load(declared[task.roofline])(_THIS, task, precision, int(m), int(k), int(n), params or {})


def unsupported(precision: str, device: Device) -> str | None:
    """Why a device cannot run a precision's kernels at all (the model predicts nothing then)."""
    recipe = registry.PRECISIONS[precision]
    fmt = recipe.peak
    if fmt not in device.peaks:
        return f"{device.label} has no {fmt} peak in the table"
    need = gates.min_cc(precision)
    if device.kind == "cuda" and device.cc is not None and device.cc < need:
        return f"{precision} needs compute capability >= {need:g}; {device.label} is {device.cc:g}"
    return None


# --- prediction -----------------------------------------------------------------------------------


def kernel_time(kernel: Kernel, device: Device) -> tuple[float, str]:
    """(seconds, bound) of one kernel at the device's achievable rates and floor."""
    compute = kernel.flops / (device.peaks[kernel.fmt] * 1e12 * device.achievable_compute) if kernel.flops else 0.0
    memory = kernel.bytes / (device.mem_tbs * 1e12 * device.achievable_memory) if device.mem_tbs else 0.0
    return max((compute, "compute"), (memory, "memory"), (device.floor_s, "overhead"))


def roofline_time(kernel: Kernel, device: Device, cold: bool = True) -> float:
    """The least time physics allows a kernel: its FLOPs at peak, its bytes at full bandwidth
    (only where the cache was flushed before the call: warm operands may come from cache)."""
    compute = kernel.flops / (device.peaks[kernel.fmt] * 1e12) if kernel.flops else 0.0
    memory = kernel.bytes / (device.mem_tbs * 1e12) if device.mem_tbs and cold else 0.0
    return max(compute, memory)


@dataclass(frozen=True)
class Prediction:
    seconds: float  # predicted time of one call
    roofline_s: float  # the least physically possible time
    bound: str  # compute, memory or overhead: the term that sets most of the time
    gemm_s: float  # predicted time in GEMMs
    cast_s: float  # predicted time scaling and casting (FP8), 0 otherwise
    kernels: tuple[tuple[Kernel, float, str], ...]

    @property
    def compute_flops(self) -> float:
        return sum(k.flops for k, _, _ in self.kernels)


def predict(kernels: list[Kernel], device: Device, cold: bool = True) -> Prediction:
    timed = [(k, *kernel_time(k, device)) for k in kernels]
    by_bound: dict[str, float] = {}
    for _, t, bound in timed:
        by_bound[bound] = by_bound.get(bound, 0.0) + t
    return Prediction(
        seconds=sum(t for _, t, _ in timed),
        roofline_s=sum(roofline_time(k, device, cold) for k in kernels),
        bound=max(by_bound, key=by_bound.get),
        gemm_s=sum(t for k, t, _ in timed if k.what == "matmul"),
        cast_s=sum(t for k, t, _ in timed if k.what == "cast"),
        kernels=tuple(timed),
    )


def predict_case(workload: str, precision: str, m, k, n, params: dict | None, device: Device,
                 cold: bool = True) -> Prediction | str:
    """The prediction of one case on a device, or why there is none."""
    kernels = case_kernels(workload, precision, m, k, n, params)
    if isinstance(kernels, str):
        return kernels
    return unsupported(precision, device) or predict(kernels, device, cold)


# --- beside every measured record --------------------------------------------------------------


def implausible(measured_s: float, pred: Prediction, device: Device) -> str | None:
    """Why a measurement cannot be right, or None: faster than its roofline allows (beyond the
    margin of `IMPLAUSIBLE_ABOVE`), or a large compute-bound GPU GEMM far below its roofline."""
    fraction = pred.roofline_s / measured_s
    if fraction > IMPLAUSIBLE_ABOVE[device.kind]:
        return (f"faster than physically possible: {fraction:.3g}x its roofline on {device.label} "
                "(missing synchronisation?)")
    if (device.kind == "cuda" and pred.bound == "compute" and pred.compute_flops >= LARGE_GEMM_FLOPS
            and fraction < SLOW_BELOW):
        return (f"a large compute-bound case at {fraction:.1%} of its roofline on {device.label}, below "
                f"{SLOW_BELOW:.0%}: throttled, another process on the GPU, or not on tensor cores?")
    return None


def record_columns(record: dict) -> dict:
    """The model's columns beside a measured record (suite/measure/columns.py, group "roofline model");
    {} for a record the model does not cover (not ok, emulated, unmodelled workload or device)."""
    if record.get("status") != "ok" or record.get("emulated") or _missing(record.get("time_ms_median")):
        return {}
    device = device_for(record)
    if device is None:
        return {}
    params = json.loads(record["params"]) if isinstance(record.get("params"), str) else record.get("params") or {}
    shape = (record.get("workload"), record.get("m"), record.get("k"), record.get("n"), params)
    cold = record.get("cache") != "warm"
    pred = predict_case(shape[0], record["precision"], *shape[1:], device, cold)
    if isinstance(pred, str):
        return {}
    measured_s = float(record["time_ms_median"]) / 1e3
    baseline = record.get("baseline")
    base = predict_case(shape[0], baseline, *shape[1:], device, cold) if baseline in registry.PRECISIONS else None
    recipe = registry.PRECISIONS[record["precision"]]
    return {
        "predicted_ms": pred.seconds * 1e3,
        "predicted_speedup": base.seconds / pred.seconds if isinstance(base, Prediction) else None,
        "roofline_ms": pred.roofline_s * 1e3,
        "roofline_fraction": pred.roofline_s / measured_s,
        "roofline_tflops": device.peaks.get(recipe.peak),
        "bound": pred.bound,
        "implausible": implausible(measured_s, pred, device),
        "predicted_gemm_ms": pred.gemm_s * 1e3,
        "predicted_cast_ms": pred.cast_s * 1e3 if recipe.scaling is not None else None,
    }
