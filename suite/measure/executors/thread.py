"""Cases run in this process, on one worker thread while the main thread waits in short polls.

Python runs a signal handler only in the main thread and only between bytecodes, so a main thread
inside a minute-long GEMM hears Ctrl-C when the GEMM returns (80 and 122 s, measured with bf16
2048^3 on an AVX2-only CPU). Waiting here instead, it acts within one poll; the abandoned call is
left to finish or to die with the process (`busy` tells the caller to exit without waiting for it).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable

from suite.measure.executors.base import OneByOne
from suite.measure.progress import Progress
from suite.measure.timing import clock_for
from suite.scenario.plan import Case


class CaseThread:
    """Runs each job on one worker thread while the calling (main) thread waits in short polls (why:
    this module's docstring)."""

    POLL_S = 0.1

    def __init__(self):
        self.busy = False
        self._requests: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="mpsuite-case", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._requests.get()) is not None:
            try:
                self._results.put((job(), None))
            except BaseException as err:  # handed to the main thread, which raises it
                self._results.put((None, err))

    def call(self, job: Callable[[], dict], on_wait: Callable[[float], None] | None = None) -> dict:
        """job() on the worker thread; on_wait(seconds so far) after each poll while it runs."""
        started = time.perf_counter()
        self.busy = True  # until the result is back: an interrupt leaves it set
        self._requests.put(job)
        while True:
            try:
                result, err = self._results.get(timeout=self.POLL_S)
            except queue.Empty:
                if on_wait is not None:
                    on_wait(time.perf_counter() - started)
                continue
            self.busy = False
            if err is not None:
                raise err
            return result

    def close(self) -> None:
        """End the worker thread: now, or, when it is inside an abandoned job, once that returns
        (without waiting for it here)."""
        self._requests.put(None)
        if not self.busy:
            self._thread.join()


class InThread(OneByOne):
    """Runs each case in this process (`run_here(case, device, clock, run_meta)`, the way
    `suite.measure.executors.choose` names) on one `CaseThread` for the whole run, so thread-local
    state (autocast, cuBLAS handles) is set up once; a long case's wait feeds `progress`'s heartbeat."""

    def __init__(self, device, run_here: Callable[..., dict]):
        self.device, self.run_here = device, run_here
        self.clock = clock_for(device)
        self.thread = CaseThread()

    @property
    def busy(self) -> bool:
        return self.thread.busy

    def run_case(self, case: Case, run_meta: dict, progress: Progress | None = None) -> dict:
        return self.thread.call(lambda: self.run_here(case, self.device, self.clock, run_meta),
                                progress.heartbeat if progress else None)

    def close(self) -> None:
        self.thread.close()
