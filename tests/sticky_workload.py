"""A workload that fails the way CUDA does, for the worker-process tests (tests/test_process.py).

A module of its own so that each worker process a test starts imports torch and this, not the test
module with everything it imports (the CLI, pandas, pyarrow): 1.6 s of CPU a launch, measured."""

from __future__ import annotations

import sys
import time

import torch

STICKY_ERROR = "CUDA error: an illegal memory access was encountered"


class Sticky:
    """Fails the way a poisoned CUDA context does: after the `poison` case, every later case in the
    same process fails with the same error, as every CUDA call does after an illegal access."""

    poisoned = False

    def prepare(self, case, precision, device):
        from suite.core.accuracy import error_metrics
        from suite.workloads.base import Prepared

        mode = case.params["mode"]
        if mode == "poison":
            Sticky.poisoned = True
        if Sticky.poisoned:
            raise RuntimeError(STICKY_ERROR)
        if mode == "segv":
            import ctypes

            ctypes.string_at(0)  # a segfault inside the workload
        if mode == "hang":  # a compile or kernel that never returns
            print("compiling the step", file=sys.stderr, flush=True)
            time.sleep(300)
        if mode == "warn":  # what torchao and inductor say when they fall back
            import logging
            import warnings

            warnings.warn("cuBLAS fell back to a slower kernel")
            logging.getLogger("torchao").warning("Failed to load /site-packages/torchao/_C.so: undefined symbol")
        if mode == "fail":
            print("the kernel said: no", file=sys.stderr, flush=True)
            raise ValueError("shapes cannot be multiplied")
        a = torch.ones(8, 8)
        return Prepared(lambda: a @ a, 2.0 * 8**3, None, lambda: error_metrics(a @ a, a.double() @ a.double()))


STICKY = Sticky()
