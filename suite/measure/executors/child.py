"""A process that runs cases for a parent: `python -m suite.measure.executors.child` runs one unit
(`process`: `--isolate`), `... child --serve` runs units until its stdin closes (`cuda_worker`).

A request is one JSON line (`protocol`: a unit's cases, the device, the run's facts); each record
goes back as one JSON line on the process's original stdout. Before anything heavy is imported, fd 1 is
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


def _run(request: dict) -> tuple[list[dict], object]:
    """The records of the requested unit, run here (`suite.measure.executors.run_here`), and its device."""
    import torch

    from suite.measure.executors import run_here
    from suite.measure.executors.protocol import unit_of
    from suite.measure.timing import clock_for

    apply_threads(request["run_meta"])
    device = torch.device(request["device"])
    return run_here(unit_of(request), device, clock_for(device), request["run_meta"]), device


def serve() -> int:
    """A worker: units from stdin, one JSON line each, their records to the original stdout, one
    line each, until stdin closes or a unit leaves the process unusable (then its records say so
    and it exits)."""
    faulthandler.enable()
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)

    from suite.core import jsonl
    from suite.measure.executors.cuda_worker import CASE_END, poisoned
    from suite.measure.executors.protocol import POISONED

    for line in sys.stdin.buffer:
        out, device = _run(jsonl.decode(line))
        bad = any(poisoned(record, device) for record in out)
        sys.stderr.write(f"\n{CASE_END}{out[0]['case_id'] if out else ''}\n")  # what it wrote so far was this unit's
        sys.stderr.flush()
        channel.write(b"".join(jsonl.encode({**record, POISONED: bad}) for record in out))
        channel.flush()
        if bad:
            return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """The child: one unit from stdin, its records to the original stdout (`--serve`: many)."""
    if (argv if argv is not None else sys.argv[1:]) == ["--serve"]:
        return serve()
    faulthandler.enable()
    record_fd = os.dup(1)
    os.dup2(2, 1)  # from here on, anything written to stdout goes to the log

    from suite.core import jsonl

    out, _ = _run(jsonl.decode(sys.stdin.buffer.read()))
    with os.fdopen(record_fd, "wb") as channel:
        channel.write(b"".join(jsonl.encode(record) for record in out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
