"""Set-and-restore for the global float32 matmul/conv precision flags.

PyTorch has two APIs and they must not be mixed in one process state (recent versions raise when
the legacy flags are read after the new ones were set):
- since 2.9: `torch.backends.cuda.matmul.fp32_precision` and `torch.backends.cudnn.conv.fp32_precision`
  in {"ieee", "tf32"} ("none" = inherit). The top-level `torch.backends.fp32_precision` does not
  propagate to cudnn.conv/rnn, so each backend is set on its own.
- before: `torch.backends.cuda.matmul.allow_tf32`, `torch.backends.cudnn.allow_tf32`,
  `torch.set_float32_matmul_precision("highest" | "high")`.
`float32_matmul(tf32=...)` picks the new API where it exists, snapshots exactly what it will
change, and restores it on exit, so no case leaks its choice into the next one.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


def has_fp32_precision_api() -> bool:
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _new_api_targets():
    b = torch.backends
    return [b.cuda.matmul, b.cudnn.conv]


@contextmanager
def float32_matmul(tf32: bool):
    """Within the block, float32 matmuls and convolutions use TF32 tensor cores iff `tf32`."""
    if has_fp32_precision_api():
        value = "tf32" if tf32 else "ieee"
        targets = _new_api_targets()
        saved = [t.fp32_precision for t in targets]
        try:
            for t in targets:
                t.fp32_precision = value
            yield
        finally:
            for t, old in zip(targets, saved):
                t.fp32_precision = old
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
            **reduced,
        }
    return {
        "cuda.matmul.allow_tf32": str(b.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": str(b.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        **reduced,
    }
