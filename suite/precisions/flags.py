"""Set-and-restore for the global float32 matmul/conv precision flags.

PyTorch has two APIs and they must not be mixed in one process state (recent versions raise when
the legacy flags are read after the new ones were set):
- since 2.9: `torch.backends.cuda.matmul.fp32_precision` and `torch.backends.cudnn.conv.fp32_precision`
  in {"ieee", "tf32"} ("none" = inherit). The top-level `torch.backends.fp32_precision` does not
  propagate to cudnn.conv/rnn, so each backend is set on its own.
- before: `torch.backends.cuda.matmul.allow_tf32`, `torch.backends.cudnn.allow_tf32`,
  `torch.set_float32_matmul_precision("highest" | "high")`.

Where the new API exists the legacy matmul value must still agree with it: inductor (2.11, and
until pytorch/pytorch#166387 is fixed) reads `torch.get_float32_matmul_precision()` for its
autotuning caches, and that read raises when cuda.matmul says tf32 while the legacy value says
"highest". So `float32_matmul(tf32=...)` sets the legacy value through its setter (which, since
2.9, sets the per-backend matmul values to match), then the new API's values, snapshots exactly
what it changes, and restores both on exit, so no case leaks its choice into the next one.
(Inductor's convolution templates read the legacy `cudnn.allow_tf32`, which raises once
cudnn.conv is set through the new API; the suite's workloads have no convolution.)
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


def has_fp32_precision_api() -> bool:
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _new_api_targets() -> dict[str, object]:
    """The per-backend fp32_precision holders the suite sets or the legacy setter changes."""
    b = torch.backends
    targets = {"cuda.matmul": b.cuda.matmul, "cudnn.conv": b.cudnn.conv}
    mkldnn = getattr(getattr(b, "mkldnn", None), "matmul", None)
    if hasattr(mkldnn, "fp32_precision"):
        targets["mkldnn.matmul"] = mkldnn  # the CPU's matmul, which the legacy setter also sets
    return targets


def legacy_matmul_precision() -> str | None:
    """`torch.get_float32_matmul_precision()`, or None where the flags are mixed and reading raises."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return None


@contextmanager
def float32_matmul(tf32: bool):
    """Within the block, float32 matmuls and convolutions use TF32 tensor cores iff `tf32`."""
    if has_fp32_precision_api():
        value = "tf32" if tf32 else "ieee"
        targets = _new_api_targets()
        saved = {name: t.fp32_precision for name, t in targets.items()}
        saved_legacy = legacy_matmul_precision()
        try:
            torch.set_float32_matmul_precision("high" if tf32 else "highest")
            targets["cuda.matmul"].fp32_precision = value
            targets["cudnn.conv"].fp32_precision = value
            if saved.get("mkldnn.matmul") in ("none", "ieee"):
                # TF32 here is a CUDA choice: the CPU's matmuls stay IEEE (the legacy value agrees)
                targets["mkldnn.matmul"].fp32_precision = saved["mkldnn.matmul"]
            yield
        finally:
            if saved_legacy is not None:
                torch.set_float32_matmul_precision(saved_legacy)
            for name, old in saved.items():  # after the legacy setter, which changes some of them
                targets[name].fp32_precision = old
    else:
        b = torch.backends
        saved = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, torch.get_float32_matmul_precision())
        try:
            b.cuda.matmul.allow_tf32 = tf32
            b.cudnn.allow_tf32 = tf32
            torch.set_float32_matmul_precision("high" if tf32 else "highest")
            yield
        finally:
            b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = saved[0], saved[1]
            torch.set_float32_matmul_precision(saved[2])


def snapshot() -> dict[str, str]:
    """The flags in force, read through the same API the suite sets them with (for records)."""
    b = torch.backends
    # Whether cuBLAS may reduce split-K partial sums of bf16/fp16 GEMMs in that precision (PyTorch's
    # default: allowed), so "float32 accumulation" is not the whole truth when they are True.
    reduced = {f"cuda.matmul.allow_{t}_reduced_precision_reduction":
               str(getattr(b.cuda.matmul, f"allow_{t}_reduced_precision_reduction", None)) for t in ("bf16", "fp16")}
    if has_fp32_precision_api():
        return {
            "cuda.matmul.fp32_precision": str(b.cuda.matmul.fp32_precision),
            "cudnn.conv.fp32_precision": str(b.cudnn.conv.fp32_precision),
            # what inductor reads; "mixed" where it disagrees with the above (reading it raises)
            "float32_matmul_precision": legacy_matmul_precision() or "mixed",
            **reduced,
        }
    return {
        "cuda.matmul.allow_tf32": str(b.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": str(b.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        **reduced,
    }
