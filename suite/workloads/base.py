"""The contract between a workload and the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from suite.plan import Case
from suite.precisions.base import Precision


@dataclass
class Prepared:
    """A case ready to run: `fn` is timed, `check` computes the accuracy metrics once, untimed."""

    fn: Callable[[], object]
    flops: float | None
    bytes_moved: float | None
    check: Callable[[], dict[str, float]]
    extra: dict[str, object] = field(default_factory=dict)  # more record columns


class Workload(Protocol):
    name: str

    def prepare(self, case: Case, precision: Precision, device: torch.device) -> Prepared:
        """Build inputs and the callable. Raise `Unsupported(reason)` for a case that cannot run
        here (it is recorded as skipped); any other exception records the case as failed."""


class Unsupported(Exception):
    """This case cannot run on this machine or setup; the message is the skip reason."""
