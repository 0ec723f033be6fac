"""The compute capability each precision needs on a CUDA GPU: the one table the recipes' own
checks, the roofline model (`suite.analysis.roofline.model`), the GPU dry run (`suite.measure.dryrun`) and
docs/precisions.md share. Torch-free.

A precision needs what its number format needs (`FORMAT_MIN_CC`, keyed by the declaration's `peak`
column) or more, where its declaration says so (`min_cc`, e.g. 10.0 for the block-scaled formats'
kernels). A CPU emulates every format (real numerics, no speed); the gate is for CUDA GPUs only.
`python -m suite.precisions.gates` prints the table as docs/precisions.md has it (a test compares)."""

from __future__ import annotations

from suite.scenario import registry

# TF32 and bf16 tensor cores: Ampere (8.0); FP8: Ada and Hopper (8.9); FP4: Blackwell (10.0).
FORMAT_MIN_CC = {"tf32": 8.0, "bf16": 8.0, "fp8": 8.9, "fp4": 10.0}


def min_cc(precision: str) -> float:
    """The compute capability `precision` needs on a CUDA GPU (0.0: any)."""
    record = registry.PRECISIONS[precision]
    return max(FORMAT_MIN_CC.get(record.peak, 0.0), record.min_cc)


def capability(value: float) -> tuple[int, int]:
    """8.9 -> (8, 9): a capability as torch.cuda.get_device_capability gives it."""
    return divmod(round(value * 10), 10)


def below(precision: str, device_capability: tuple[int, int]) -> bool:
    """Whether a GPU of this capability is below what `precision` needs."""
    return tuple(device_capability) < capability(min_cc(precision))


def table() -> dict[str, float]:
    return {name: min_cc(name) for name in sorted(registry.PRECISIONS)}


def markdown() -> str:
    """The table as docs/precisions.md shows it: capability and the precisions that need it."""
    by_need: dict[float, list[str]] = {}
    for name, need in table().items():
        by_need.setdefault(need, []).append(name)
    lines = ["| compute capability | precisions |", "|---|---|"]
    for need in sorted(by_need):
        names = ", ".join(f"`{n}`" for n in by_need[need])
        lines.append(f"| {'any' if need == 0 else f'>= {need:.1f}'} | {names} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
