"""Deliberate breaks of CUDA-only contracts, each one token of the suite's source changed: the CPU
kernels accept what cuBLASLt and CUTLASS do not, so the CPU tests pass with each of them applied
(`mutant_plugin`), and the GPU dry run must fail (`test_mutants`). Each says which contract it breaks
and which cases of which scenario show it."""

from __future__ import annotations

import inspect
import sys
import textwrap
from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Mutant:
    module: str  # where the function lives
    qualname: str  # the function or method, e.g. "ScaledFloat8._matmul_fn"
    old: str  # the source text replaced ...
    new: str  # ... by this
    contract: str  # the CUDA contract it breaks (what the dry run must report)
    scenario: str
    gpu: str
    only: str  # the cases (run --only) that must fail

    def apply(self) -> None:
        """Recompile the function with `new` for `old`, and put it wherever the original is bound."""
        module = import_module(self.module)
        owner_name, _, name = self.qualname.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        original = getattr(owner, name)
        source = textwrap.dedent(inspect.getsource(original))
        assert self.old in source, f"{self.qualname} no longer holds {self.old!r}: update the mutant"
        space: dict = {}
        exec(compile(source.replace(self.old, self.new), module.__file__, "exec"), vars(module), space)
        for holder in [owner] + [m for n, m in list(sys.modules.items()) if n.startswith("suite.")]:
            for key, value in list(vars(holder).items()):
                if value is original:
                    setattr(holder, key, space[name])


FP8 = "suite.precisions.fp8.recipes"
MUTANTS = {
    "row_major_b": Mutant(
        FP8, "ScaledFloat8._matmul_fn", "a, b = qa.data, qw.data.t()", "a, b = qa.data, qw.data.t().contiguous()",
        "mat2 must be col_major", "gpu_check_h100_fp8", "h100", "workload=gemm,precision=fp8_*"),
    "grouped_scale_shape": Mutant(
        FP8, "ScaledFloat8.grouped_gemm", "qw.inv_scale.view(experts, n)", "qw.inv_scale.view(-1)",
        "Expected scale_b batch dimension", "gpu_check_h100_fp8", "h100", "workload=grouped_gemm,precision=fp8_rowwise"),
    "padding_dropped": Mutant(
        FP8, "ScaledFloat8.gemm", "(q.round_up(k, 16), q.round_up(n, 16)) if opts.pad", "(k, n) if opts.pad",
        "divisible by 16", "h100_fp8", "h100", "workload=gemm,k=4104,pad=True"),
}
