"""A GPU dry run: every case of a GPU scenario on fake CUDA tensors, on any machine.

Each case runs its recipe's `unsupported(device)` against a pretended GPU (this module's `GPUS`),
the workload's `prepare` and ONE call of the timed callable (forward and backward where the case
trains) under torch's `FakeTensorMode` with device "cuda": tensors have shapes, dtypes and strides
but no data, and every op runs torch's own meta function, so the CUDA kernels' contracts
(`torch._scaled_mm` layouts and scale shapes, grouped-GEMM offsets, 16-alignment, dtypes under CUDA
autocast) are checked. Nothing is timed and nothing is written to `results/`.

It needs torch's CUDA build (`TORCH_PIN`): `launch` checks it, builds the driver shim (`shim`) and
starts `child` in a process of its own, whose patches (`fake`) go in before torchao is imported.
This module is torch-free: the GPU table, the outcome of a case and the JSON document
(docs/schemas/dry-run.schema.json).

A case's status:
- ok: the whole path ran on fake tensors (`reason` holds the output's dtype and shape);
- skipped: the suite's own reason (the recipe's `unsupported`, the workload's `Unsupported`);
- beyond: something a fake run cannot do, named in `reason` (a data-dependent read, inductor's code
  generation, a library this environment lacks, a multi-process launch);
- failed: a contract or an error, whole: the case would fail on the GPU too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

from suite.core import peaks

TORCH_PIN = "2.14.1"  # the torch (CUDA build) whose fake-tensor and meta behaviour the dry run is built on
TORCHAO_PIN = "0.18.0"
INSTALL = f"pip install torch=={TORCH_PIN} torchao=={TORCHAO_PIN}"
STATUSES = ("ok", "skipped", "beyond", "failed")
# What a skip reason says when this environment, not the GPU, lacks something (an optional library).
ENVIRONMENT_MARKERS = ("is not importable", "is not installed", "not installed")


class GpuProps(NamedTuple):
    """What the pretended GPU answers to device queries (the driver shim and torch.cuda)."""

    sms: int  # multiprocessors
    l2_mb: int
    mem_gb: int
    name: str  # as the driver reports it (matched against suite.core.peaks by `peaks.match_gpu`)


# Keyed like suite.core.peaks.PEAKS (its labels; a test checks both hold the same GPUs); the
# capability is the peak table's `cc`. SMs, L2 and memory from NVIDIA's architecture whitepapers and
# datasheets (A100: 108 SMs, 40 MB L2; H100 SXM and H200: 132 SMs, 50 MB; H100 PCIe: 114 SMs; B200:
# 148 SMs; B300, NVIDIA's "Inside NVIDIA Blackwell Ultra": 160 SMs, 288 GB, its L2 taken as B200's). A fake run reads them only where torch picks a path by them (SDPA's backend, split-K).
PROPS: dict[str, GpuProps] = {
    "GB200": GpuProps(148, 126, 186, "NVIDIA GB200"),
    "B300": GpuProps(160, 126, 288, "NVIDIA B300 SXM6 AC"),
    "B200": GpuProps(148, 126, 180, "NVIDIA B200"),
    "GH200": GpuProps(132, 50, 96, "NVIDIA GH200 480GB"),
    "H200 NVL": GpuProps(132, 50, 141, "NVIDIA H200 NVL"),
    "H200": GpuProps(132, 50, 141, "NVIDIA H200"),
    "H100 NVL": GpuProps(132, 50, 94, "NVIDIA H100 NVL"),
    "H100 PCIe": GpuProps(114, 50, 80, "NVIDIA H100 PCIe"),
    "H100 SXM": GpuProps(132, 50, 80, "NVIDIA H100 80GB HBM3"),
    "A100 PCIe": GpuProps(108, 40, 80, "NVIDIA A100 80GB PCIe"),
    "A100 SXM": GpuProps(108, 40, 80, "NVIDIA A100-SXM4-80GB"),
    "L40S": GpuProps(142, 96, 48, "NVIDIA L40S"),
    "L4": GpuProps(58, 48, 24, "NVIDIA L4"),
}


class FakeGpu(NamedTuple):
    label: str
    capability: tuple[int, int]
    props: GpuProps

    def env(self) -> str:
        """The one value the driver shim and the child read (MPSUITE_DRYRUN_GPU): name;major;minor;sms;l2;mem."""
        p = self.props
        return f"{p.name};{self.capability[0]};{self.capability[1]};{p.sms};{p.l2_mb};{p.mem_gb}"

    @classmethod
    def parse(cls, value: str) -> "FakeGpu":
        name, major, minor, sms, l2, mem = value.split(";")
        gpu = peaks.match_gpu(name)
        return cls(gpu.label if gpu else name, (int(major), int(minor)), GpuProps(int(sms), int(l2), int(mem), name))


def resolve_gpu(name: str) -> FakeGpu | None:
    """The pretended GPU for a short name ('h100', 'a100', 'b200', 'h200', 'l40s'...) or a driver
    name, from the peak table (capability) and `PROPS`; None when the peak table has no such GPU."""
    gpu = peaks.match_gpu(name)
    if gpu is None or gpu.label not in PROPS:
        return None
    major, minor = divmod(round(gpu.cc * 10), 10)
    return FakeGpu(gpu.label, (major, minor), PROPS[gpu.label])


def gpu_names() -> str:
    return ", ".join(label.lower().replace(" ", "-") for label in PROPS)


@dataclass(frozen=True)
class Outcome:
    """One case's dry run (a row of the JSON document's `cases`)."""

    case_id: str
    workload: str
    precision: str
    params: dict
    status: str
    reason: str
    seconds: float = 0.0
    shape: str | None = None  # (m, k, n) of a shaped case, as 'MxKxN'

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is none of {', '.join(STATUSES)}")

    def row(self) -> dict:
        return asdict(self)


def skip_outcome(reason: str) -> tuple[str, str]:
    """(status, reason) of a case the suite skipped: beyond a fake run when this environment (not the
    GPU) lacks what it needs (an optional library), else skipped with the suite's own reason."""
    if any(marker in reason for marker in ENVIRONMENT_MARKERS):
        return "beyond", f"this environment lacks it (the GPU machine may not): {reason}"
    return "skipped", reason


# (exception class name, why a fake run cannot go on): what is beyond a fake run, not the case's fault.
BEYOND_ERRORS = {
    "DataDependentOutputException": "reads a value (data-dependent: .item(), .tolist(), a tensor's bool)",
    "DynamicOutputShapeException": "an output shape depends on the data (nonzero, unique, masked select)",
    "UnsupportedOperatorException": "an operator with no fake (meta) implementation",
    "CaseTimeout": "too slow under fake tensors",
}


def error_outcome(kind: str, message: str, causes: tuple[str, ...] = ()) -> tuple[str, str]:
    """(status, reason) of a case that raised `kind` with `message` (`causes`: the class names of
    the exceptions it was raised from, innermost last): beyond a fake run for what fake tensors cannot
    do, else failed, with the error whole."""
    text = f"{kind}: {message.strip()}" if message.strip() else kind
    for name in (kind, *causes):
        if name in BEYOND_ERRORS:
            return "beyond", f"{BEYOND_ERRORS[name]}: {text}"
    return "failed", text


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    return {status: sum(o.status == status for o in outcomes) for status in STATUSES}


def document(scenario: str, gpu: FakeGpu, torch_version: str, outcomes: list[Outcome], seconds: float) -> dict:
    """The `run --dry-run --json` document (docs/schemas/dry-run.schema.json)."""
    return {"scenario": scenario, "dry_run": True,
            "gpu": {"label": gpu.label, "name": gpu.props.name, "capability": list(gpu.capability),
                    "sms": gpu.props.sms, "l2_mb": gpu.props.l2_mb, "memory_gb": gpu.props.mem_gb},
            "torch": torch_version, "seconds": round(seconds, 1), "counts": counts(outcomes),
            "cases": [o.row() for o in outcomes]}
