"""What other work took of this machine's CPUs while a setting was timed.

A speedup measured beside another job is the contended machine's speedup, not the quiet one's, and
pairing the rounds cannot undo that: with both cores of a 2-core VM in use, one CPU-bound process
beside the run moved bf16's speedup over fp32 at 1024^3 from 3.9x to 9.3x, paired and unpaired alike
(results/reference/paired_stability/hog: the two libraries' kernels suffer a lost core differently).
So every timed case records how many CPUs other processes kept busy while it was timed, and where
that left its threads fewer CPUs than they asked for, the run's headline says so
(`suite.analysis.frame.derived.contended`).

Read from the kernel's counters, not estimated from our own samples: the whole machine's busy time
in /proc/stat (steal time included: in a VM, the hypervisor running other guests on our CPUs, the
noisy neighbour of a shared CI runner) less this process' own CPU time (`os.times`; all its threads).
Linux only; elsewhere the columns are null. Granularity is the kernel's tick (10 ms per CPU), a few
hundredths of a CPU over a setting's window of a second or more. In a container /proc/stat is the
host's: `machine_cpus` is the host's count and `others_cpus` includes other containers' work, while
a CPU quota's throttling of this container is not seen here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

PROC_STAT = "/proc/stat"


@dataclass(frozen=True)
class Reading:
    wall_s: float
    machine_busy_s: float  # every CPU's busy time, summed
    own_s: float  # this process' CPU time, all threads
    machine_cpus: int


def read(stat_path: str = PROC_STAT) -> Reading | None:
    """The counters now, or None where /proc/stat cannot be read (not Linux)."""
    try:
        with open(stat_path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError:
        return None
    total = lines[0].split()
    if len(total) < 9 or total[0] != b"cpu" or not all(x.isdigit() for x in total[1:9]):
        return None
    # user nice system idle iowait irq softirq steal; guest time is already inside user and nice
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in total[1:9])
    cpus = sum(1 for line in lines[1:] if line.startswith(b"cpu"))
    own = os.times()
    return Reading(time.perf_counter(), (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"),
                   own.user + own.system, cpus)


def others_cpus(before: Reading, after: Reading) -> float | None:
    """CPUs other processes (and the hypervisor) kept busy between the two readings, on average."""
    wall = after.wall_s - before.wall_s
    if wall <= 0:
        return None
    others = (after.machine_busy_s - before.machine_busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / wall)  # the two counters tick apart: a quiet machine can read a hair below 0


class Watch:
    """`with Watch() as watch: ...` then `watch.columns()`: the record columns for the block."""

    def __init__(self, stat_path: str = PROC_STAT):
        self.stat_path = stat_path
        self.before: Reading | None = None
        self.after: Reading | None = None

    def __enter__(self) -> "Watch":
        self.before = read(self.stat_path)
        return self

    def __exit__(self, *exc) -> None:
        self.after = read(self.stat_path)

    def columns(self) -> dict[str, object]:
        if self.before is None or self.after is None:
            return {"others_cpus": None, "machine_cpus": None}
        return {"others_cpus": others_cpus(self.before, self.after), "machine_cpus": self.after.machine_cpus}

