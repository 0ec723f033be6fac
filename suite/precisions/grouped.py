"""`torch._grouped_mm`, the one grouped GEMM the recipes call (PyTorch >= 2.8; on the CPU since 2.9).

One call multiplies each expert's rows of A (M, K) by that expert's weight (K, N): `offs` holds the
cumulative end row of each expert, int32. CUDA's kernels want each expert's weight column-major
(torch: "Expected mat2 to be transposed"), i.e. the (E, N, K) layout nn.Linear stores, viewed as
(E, K, N); the CPU takes either. torch does not check the offsets on the CPU (beyond M, or
decreasing ones, silently give wrong rows): the workload builds and checks them.
"""

from __future__ import annotations

import torch

from suite.core.errors import Unsupported


def column_major(w: torch.Tensor) -> torch.Tensor:
    """(E, K, N) weights as the (E, K, N) view of an (E, N, K) contiguous tensor."""
    return w.transpose(1, 2).contiguous().transpose(1, 2)


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """torch._grouped_mm(a, b, offs=offs), or Unsupported where this torch has none for the device."""
    op = getattr(torch, "_grouped_mm", None)
    if op is None:
        raise Unsupported(f"torch {torch.__version__} has no torch._grouped_mm (PyTorch 2.8 or newer)")
    try:
        return op(a, b, offs=offs)
    except NotImplementedError as err:  # no kernel for this device in this build
        raise Unsupported(f"torch {torch.__version__}: torch._grouped_mm: {str(err).splitlines()[0]}") from None
