"""The contract between a workload and the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from suite.scenario.plan import Case
from suite.precisions.base import Precision


@dataclass
class Prepared:
    """A case ready to run: `fn` is timed, `check` computes the accuracy metrics once, untimed."""

    fn: Callable[[], object]
    flops: float | None
    bytes_moved: float | None
    check: Callable[[], dict[str, float]]
    extra: dict[str, object] = field(default_factory=dict)  # more record columns
    # More record columns that depend on the measured median time in seconds (e.g. tokens/s, MFU),
    # called by the runner with the median once timing is done.
    derive: Callable[[float], dict[str, object]] | None = None
    # The accuracy metrics from the output of one call of `fn`, where that is all `check` does: the
    # runner then times that first call and checks its output, so a call that takes a minute (bf16
    # on a CPU without native bf16) is paid once, not twice.
    check_output: Callable[[object], dict[str, float]] | None = None
    # A one-time call the runner makes and times (synchronised) before the accuracy check: a
    # compiled case's first, compiling call. Its seconds go in the record column `first_call_column`
    # (compile_s) where set; the workload itself times nothing.
    first_call: Callable[[], object] | None = None
    first_call_column: str | None = None
    # After timing, profile a few calls and split their time into GEMMs and the rest
    # (suite.measure.attribution): layer steps, where FP8's scaling and casting is the rest.
    split_kernels: bool = False


class Workload(Protocol):
    name: str

    def prepare(self, case: Case, precision: Precision, device: torch.device) -> Prepared:
        """Build inputs and the callable. Raise `Unsupported(reason)` for a case that cannot run
        here (it is recorded as skipped); any other exception records the case as failed."""
