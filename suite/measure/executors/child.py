"""A process that runs cases for a parent: `python -m suite.measure.executors.child` runs one case
(`process`: `--isolate`), `... child --serve` runs cases until its stdin closes (`cuda_worker`).

A request is one JSON line (`protocol`: the case, the device, the run's facts); the record goes back
as one JSON line on the process's original stdout. Before anything heavy is imported, fd 1 is
pointed at stderr, so whatever a library prints lands in the log and the record channel carries
records only; a segfault prints the Python stack into the log (faulthandler) before the process dies.
"""

from __future__ import annotations

import faulthandler
import os
import sys


def apply_threads(run_meta: dict) -> None:
    """The run's `threads` setting in this process too: a child does not inherit the parent's
    torch.set_num_threads (records say cpu_threads; it must be true here as well)."""
    threads = run_meta.get("threads_setting")
    if threads:
        import torch

        torch.set_num_threads(int(threads))


def _run(request: dict) -> tuple[dict, object]:
    """The record of the requested case, run here (`suite.measure.executors.run_here`), and its device."""
    import torch

    from suite.measure.executors import run_here
    from suite.measure.executors.protocol import case_from_json
    from suite.measure.timing import clock_for

    apply_threads(request["run_meta"])
    case = case_from_json(request["case"])
    device = torch.device(request["device"])
    return run_here(case, device, clock_for(device), request["run_meta"]), device


def serve() -> int:
    """A worker: cases from stdin, one JSON line each, records to the original stdout, until stdin
    closes or a case leaves the process unusable (then it says so in the record and exits)."""
    faulthandler.enable()
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)

    from suite.core import jsonl
    from suite.measure.executors.cuda_worker import CASE_END, poisoned

    for line in sys.stdin.buffer:
        record, device = _run(jsonl.decode(line))
        bad = poisoned(record, device)
        sys.stderr.write(f"\n{CASE_END}{record['case_id']}\n")  # what it wrote so far was this case's
        sys.stderr.flush()
        channel.write(jsonl.encode({**record, "worker_poisoned": bad}))
        channel.flush()
        if bad:
            return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """The child: one case from stdin, its record to the original stdout (`--serve`: many)."""
    if (argv if argv is not None else sys.argv[1:]) == ["--serve"]:
        return serve()
    faulthandler.enable()
    record_fd = os.dup(1)
    os.dup2(2, 1)  # from here on, anything written to stdout goes to the log

    from suite.core import jsonl

    record, _ = _run(jsonl.decode(sys.stdin.buffer.read()))
    with os.fdopen(record_fd, "wb") as channel:
        channel.write(jsonl.encode(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
