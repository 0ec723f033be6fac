"""What a run shows while it goes: a line per case (or, on a terminal, a progress bar above the
finished cases' lines), a heartbeat during a long case, and an estimate of the time left that weighs
each case by its predicted cost (`CostModel`), since one case may take 1000 times another."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from suite.core.text import printable
from suite.scenario import registry
from suite.scenario.plan import Case


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def case_work(case: Case) -> float | None:
    """What a case computes, known before it runs: 2*M*N*K for a shaped case (a layer's training
    step is three such GEMMs), None where the shape lives in params (a model's step)."""
    if case.m is None or case.k is None or case.n is None:
        return None
    return 2.0 * case.m * case.n * case.k * registry.gemms_per_call(case.workload)


class CostModel:
    """Predicts a case's wall time from what finished cases showed: each precision's speed (work
    per second of one call) times the case's work, bounded the way the timing rule bounds a case
    (at most the cap plus one call). Case counts are no ETA when one case is 1000 times another."""

    def __init__(self, device_type: str):
        self.device_type = device_type
        self.speed: dict[str, float] = {}  # precision -> work per second of one call
        self.walls: list[float] = []  # wall seconds of finished cases

    def learn(self, case: Case, record: dict, wall_s: float) -> None:
        self.walls.append(wall_s)
        work, call_ms = case_work(case), record.get("time_ms_median")
        if record.get("status") == "ok" and work and call_ms:
            self.speed[case.precision] = work / (call_ms / 1e3)

    def call_s(self, case: Case) -> float | None:
        work = case_work(case)
        speed = self.speed.get(case.precision) or (min(self.speed.values()) if self.speed else None)
        return work / speed if work and speed else None

    def wall_s(self, case: Case) -> float:
        rule = case.timing
        typical = sorted(self.walls)[len(self.walls) // 2] if self.walls else rule.warmup_s + rule.budget_s
        call = self.call_s(case)
        if call is None:
            return typical
        cap = rule.case_cap(self.device_type)
        return min(cap + call, max(typical, call * (rule.min_warmup + rule.min_samples)))


# A case running longer than this gets a heartbeat line, and another every HEARTBEAT_EVERY_S.
HEARTBEAT_AFTER_S = 5.0
HEARTBEAT_EVERY_S = 10.0


def unit_label(cases: list[Case]) -> str:
    """What a unit of cases timed together is called: `gemm 512x512x512: fp32, bf16, fp16`."""
    first = cases[0]
    rest = first.label.removeprefix(f"{first.workload} {first.precision}")
    return f"{first.workload}{rest}: {', '.join(c.precision for c in cases)}"


class Progress:
    """One line per case: position, case, outcome, elapsed time and an estimate of what is left,
    weighted by each case's predicted cost (`CostModel`); a heartbeat line during a long case. The
    cases of a unit, timed together, get a line that names them as they begin, and a line each as
    they end."""

    def __init__(self, total: int, stream: TextIO | None = None, already_done: int = 0, device_type: str = "cpu"):
        self.total, self.stream, self.start, self.done = total, stream or sys.stderr, time.perf_counter(), already_done
        self.width = len(str(self.total))
        self.already_done = already_done  # finished by an earlier process of a resumed run
        self.cost = CostModel(device_type)
        self._todo: list[Case] = []
        self._unit: list[Case] = []  # the cases running (one, or a unit's timed together)
        self._together = False  # the running cases are a unit's, timed together
        self._case_start = 0.0
        self._next_beat = HEARTBEAT_AFTER_S
        self.out_of_order = False  # cases finish elsewhere, several at once (`finished`)

    @property
    def _case(self) -> Case | None:
        return self._unit[0] if len(self._unit) == 1 else None

    @property
    def running_label(self) -> str:
        return self._unit[0].label if len(self._unit) == 1 else unit_label(self._unit)

    def plan(self, todo: list[Case]) -> None:
        """The cases this process will run, in order (for the work-weighted estimate)."""
        self._todo = list(todo)

    def begin(self, case: Case) -> None:
        self.begin_unit([case])

    def begin_unit(self, cases) -> None:
        """The cases of a unit begin, timed together (one case: its line begins)."""
        self._unit, self._case_start, self._next_beat = list(cases), time.perf_counter(), HEARTBEAT_AFTER_S
        self._together = len(self._unit) > 1
        if not self._together:
            self.stream.write(f"[{self.done + 1:>{self.width}}/{self.total}] {self._unit[0].label} ... ")
        else:
            self.stream.write(f"[{self.done + 1}-{self.done + len(self._unit)}/{self.total}] "
                              f"{self.running_label}, timed together ...\n")
        self.stream.flush()

    def finished(self, case: Case, record: dict) -> None:
        """A case that ran elsewhere (a Ray worker) has ended: its line at once. Such cases finish out
        of order and several at a time, so the estimate left is the average rate so far."""
        self.out_of_order = True
        self.begin(case)
        self.end(record)

    def heartbeat(self, running_s: float) -> None:
        """Called while a case runs; writes a line once it has run HEARTBEAT_AFTER_S, then every
        HEARTBEAT_EVERY_S, so a minute-long case is visibly alive."""
        if running_s < self._next_beat or not self._unit:
            return
        self._next_beat = running_s + HEARTBEAT_EVERY_S
        guess = sum(self.cost.wall_s(c) for c in self._unit) if self.cost.speed else None
        expected = f", expected ~{fmt_duration(guess)}" if guess and guess > running_s else ""
        self.stream.write(f"\n    ... {self.running_label}: still running after {fmt_duration(running_s)}{expected} ")
        self.stream.flush()

    def interrupted(self) -> None:
        """End the half-written line of the case that was running when the run was stopped."""
        if self._unit:
            self.stream.write(f"    {self.running_label}: interrupted\n" if self._together else "interrupted\n")
            self.stream.flush()

    def left_s(self) -> float:
        return sum(self.cost.wall_s(c) for c in self._todo)

    def _ended(self, record: dict) -> Case | None:
        """The running case `record` is of, taken off the unit and the plan (the cost model learns
        from it: a unit's wall time is shared among its cases)."""
        case = next((c for c in self._unit if c.case_id == record.get("case_id")), self._case)
        if case is None:
            return None
        wall = (time.perf_counter() - self._case_start) / max(1, len(self._unit))
        self.cost.learn(case, record, wall)
        self._todo = [c for c in self._todo if c is not case]
        return case

    def end(self, record: dict) -> None:
        self.done += 1
        now = time.perf_counter()
        elapsed = now - self.start
        case = self._ended(record)
        if (self._todo or case is not None) and not self.out_of_order:
            left = self.left_s()
        else:  # no plan given: the average case so far
            left = elapsed / max(1, self.done - self.already_done) * (self.total - self.done)
        named = case if self._together or now - self._case_start >= HEARTBEAT_AFTER_S else None
        self._write_end(outcome(record), elapsed, left, named)
        self._unit = [c for c in self._unit if c is not case]

    def _write_end(self, what: str, elapsed: float, left: float, named: Case | None) -> None:
        if named is not None:  # heartbeat lines or a unit's other cases came between: name the case again
            what = f"{'' if self._together else chr(10)}[{self.done:>{self.width}}/{self.total}] {named.label}: {what}"
        self.stream.write(f"{what}  [{fmt_duration(elapsed)} elapsed, ~{fmt_duration(left)} left]\n")
        self.stream.flush()

    def close(self) -> None:
        """The run is over (finished or stopped)."""


def outcome(record: dict) -> str:
    """How a case ended, in a few words: its time, rate and accuracy, or why it did not run."""
    if record["status"] != "ok":
        return f"{record['status']}: {record['reason']}"
    rate = f" {record['tflops']:.3g} TFLOP/s" if record.get("tflops") else ""
    if record.get("emulated"):
        rate = " (emulated: not device speed)"
    err = f" rel_err {record['rel_err']:.2e}" if record.get("rel_err") is not None else ""
    few = ""
    if record.get("stop_reason") == "cap":
        few = f" ({record['n_samples']} sample{'s' * (record['n_samples'] != 1)}: case cap {record['case_cap_s']:g} s)"
    paired = ""
    if record.get("speedup_paired") is not None:
        paired = f", {record['speedup_paired']:.3g}x paired"
    return f"ok {record['time_ms_median']:.4g} ms{rate}{err}{few}{paired}"


class TerminalProgress(Progress):
    """On a terminal: the finished cases' lines scroll above a rich progress bar (the case running
    and for how long, cases done, elapsed, the work-weighted estimate of what is left). Piped
    output gets `Progress`'s plain lines instead, which logs and CI read better."""

    def __init__(self, total: int, stream: TextIO | None = None, already_done: int = 0, device_type: str = "cpu",
                 force_terminal: bool | None = None):
        super().__init__(total, stream, already_done, device_type)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

        raw = getattr(self.stream, "raw", self.stream)  # past the CLI's control-character filter: the bar's codes
        console = Console(file=raw, force_terminal=force_terminal, highlight=False, markup=False, emoji=False)
        from rich.table import Column

        # On a narrow terminal the description gives way (cut with an ellipsis), never a number.
        fixed = dict(no_wrap=True, overflow="fold")
        self._bar = Bar(TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
                        BarColumn(bar_width=12), MofNCompleteColumn(table_column=Column(min_width=5, **fixed)),
                        TimeElapsedColumn(table_column=Column(min_width=7, **fixed)),
                        TextColumn("{task.fields[left]}", table_column=Column(min_width=10, **fixed)),
                        console=console, transient=True, expand=True)
        self._task = self._bar.add_task("starting", total=total, completed=already_done, left="")
        self._bar.start()

    def begin_unit(self, cases) -> None:
        self._unit, self._case_start, self._next_beat = list(cases), time.perf_counter(), HEARTBEAT_AFTER_S
        self._together = len(self._unit) > 1
        together = " (timed together)" if self._together else ""
        self._bar.update(self._task, description=printable(self.running_label + together))

    def heartbeat(self, running_s: float) -> None:
        if self._unit:
            self._bar.update(self._task, description=printable(f"{self.running_label} (running {fmt_duration(running_s)})"))

    def interrupted(self) -> None:
        if self._unit:
            self._bar.console.print(printable(f"[{self.done + 1:>{self.width}}/{self.total}] {self.running_label}: "
                                              "interrupted"))
        self.close()

    def _write_end(self, what: str, elapsed: float, left: float, named: Case | None) -> None:
        label = named.label if named is not None else (self._case.label if self._case is not None else "")
        self._bar.console.print(printable(f"[{self.done:>{self.width}}/{self.total}] {label}: {what}"))
        self._bar.update(self._task, completed=self.done, left=f"~{fmt_duration(left)} left")

    def close(self) -> None:
        self._bar.stop()


def progress_for(total: int, already_done: int, device_type: str, stream: TextIO | None = None) -> Progress:
    """A progress display: the rich bar on a terminal, plain lines otherwise."""
    stream = stream or sys.stderr
    kind = TerminalProgress if stream.isatty() else Progress
    return kind(total, stream, already_done=already_done, device_type=device_type)
