"""What a run came to, in the words and numbers the end of a run and the top of its report show:
the headline (sentences, each with its numbers: the answer, what makes the numbers unusual, what
was not measured and why) and the summary table (per workload and precision). Computed here, from
the records; the CLI prints them and the report (`suite.report`) lays them out."""

from __future__ import annotations

import pandas as pd

from suite.analysis.frame import derived, labels
from suite.analysis.outcome import answers
from suite.analysis.roofline import crossover
from suite.core.text import fmt
from suite.results import groups

SUMMARY_COLUMNS = [
    ("workload", "workload"), ("precision", "precision"), ("cases", "cases"),
    ("best_tflops", "best TFLOP/s"), ("geomean_speedup", "geomean speedup"),
    ("median_rel_err", "median rel. error"), ("note", "note"),
]


def summary_records(df: pd.DataFrame) -> list[dict]:
    """Per workload and precision (its short unique name, `suite.analysis.frame.labels`): case counts by
    status, the best TFLOP/s, the geometric-mean speedup over the in-run baseline, the median
    relative error and whether its speed is emulated, as numbers (None where not measured):
    `run --json`'s "summary" (docs/schemas/run.schema.json)."""
    def number(value):
        return None if value is None or value != value else float(value)

    return [{"workload": s["workload"], "precision": s["variant"], "ok": int(s["ok"]), "skipped": int(s["skipped"]),
             "failed": int(s["failed"]), "best_tflops": number(s["best_tflops"]),
             "geomean_speedup": number(s["geomean_speedup"]), "median_rel_err": number(s["median_rel_err"]),
             "emulated": bool(s["emulated"]),
             "geomean_speedup_of": {"paired": int(s["paired_speedups"]), "ratio_of_medians": int(s["medians_speedups"])}}
            for _, s in derived.summary(labels.with_labels(df)).iterrows()]


def speedup_estimator(of: dict[str, int]) -> str:
    """Which speedups a geomean averages, so that it never mixes the two estimators silently (the
    summary's note): 'speedups paired', 'speedups: ratio of medians', or 'speedups: 3 paired, 2 ratio
    of medians'; '' for none."""
    paired, medians = of["paired"], of["ratio_of_medians"]
    if not paired + medians:
        return ""
    if paired and medians:
        return f"speedups: {paired} paired, {medians} ratio of medians"
    return "speedups paired" if paired else "speedups: ratio of medians"


def summary_rows(df: pd.DataFrame) -> list[dict]:
    """The summary table's rows, as the report and the end of a run show them (formatted text)."""
    return [
        {
            "workload": s["workload"], "precision": s["precision"],
            "cases": ", ".join(f"{s[k]} {k}" for k in ("ok", "skipped", "failed") if s[k]) or "none",
            "best_tflops": fmt(s["best_tflops"], ".4g"),
            "geomean_speedup": fmt(s["geomean_speedup"], ".3g", "x"),
            "median_rel_err": fmt(s["median_rel_err"], ".2e"),
            "note": "; ".join(n for n in ("emulated: accuracy only" if s["emulated"] else "",
                                          speedup_estimator(s["geomean_speedup_of"])) if n),
        }
        for s in summary_records(df)
    ]


def headline(df: pd.DataFrame, families: list[dict] | None = None) -> list[str]:
    """The first lines of a report, each a sentence with its numbers: that it is partial, if so;
    the answer (per workload, at its largest case, each precision's speedup over the baseline and
    its error: `suite.analysis.outcome.answers`), then what the folders' answer hooks add (for update-side
    recipes, which trained to within a margin of the fp32-master loss and at what bytes per
    parameter: `suite.analysis.outcome.answers.declared_answers`); then what makes the numbers unusual (a
    slow path and its cause, cases cut short by the cap, stalls) and what was not measured and why."""
    df = labels.with_labels(df)  # names shared by every line: cases differing in parameters never pool
    lines = (_partial_lines(df) + _subset_lines(df) + groups.shard_lines(df) + answers.largest_setting_answers(df)
             + answers.versus_answers(df) + answers.trend_answers(df)
             + crossover.answer_lines(df, families) + answers.declared_answers(df) + _implausible_lines(df)
             + _unusual_lines(df) + _sequential_lines(df))
    missing = answers.not_measured(df)
    return lines + ([missing] if missing else [])


def _partial_lines(df: pd.DataFrame) -> list[str]:
    lines = []
    if "run_partial" in df:
        partial = df[df["run_partial"].fillna(False).astype(bool)]
        if "run_group" in partial:  # a shard's is said by `groups.shard_lines`, with the shard's own run id
            partial = partial[partial["run_group"].isna()]
        for (scenario, run), g in partial.groupby(["scenario", "run_id"], sort=True):
            # a journal whose header has no plan leaves the column out of a lean read
            planned = g["run_planned_cases"].dropna() if "run_planned_cases" in g else ()
            of = f" of {int(planned.iloc[0])}" if len(planned) else ""
            lines.append(f"Partial report: run {run} stopped after {len(g)}{of} cases; "
                         f"`python -m suite run {scenario} --resume {run}` finishes it.")
    return lines


def _subset_lines(df: pd.DataFrame) -> list[str]:
    """A run given `--only` measured part of its scenario: said first, so no one reads it as whole."""
    if "run_only" not in df:
        return []
    subset = df[df["run_only"].notna()]
    return [f"Subset: run {run} measured only the cases matching --only {only} ({len(g)} cases), "
            f"not the whole {scenario} scenario."
            for (scenario, run, only), g in subset.groupby(["scenario", "run_id", "run_only"], sort=True)]


def _implausible_lines(df: pd.DataFrame) -> list[str]:
    """Timings the roofline model says cannot be right (the record's `implausible` column)."""
    if "implausible" not in df:
        return []
    bad = df[df["implausible"].notna()]
    if bad.empty:
        return []
    shapes, variants = derived.shape_labels(bad), derived.variants(bad)
    shown = "; ".join(f"{r['workload']} {variant} {shape}: {r['implausible']}"
                      for r, variant, shape in zip(bad.head(3).to_dict("records"), variants, shapes.head(3)))
    more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
    return [f"{len(bad)} timing(s) flagged by the roofline model: {shown}{more}."]


def _roofline_note(df: pd.DataFrame, run_id: str, precision: str) -> str:
    """', at 0.45% of its roofline of 0.333 TFLOP/s' for a slow path's cases, where recorded (on a CPU
    without native bf16 that roofline is its fp32 FMA peak)."""
    if "roofline_fraction" not in df:
        return ""
    g = df[(df["run_id"] == run_id) & (df["precision"] == precision)]
    fraction = derived.geomean(g["roofline_fraction"])
    if not fraction == fraction:  # nan: not modelled
        return ""
    peak = pd.to_numeric(g["roofline_tflops"], errors="coerce").dropna()
    at = f" of {peak.iloc[0]:.3g} TFLOP/s" if len(peak) else ""
    return f", at {fraction:.2%} of its roofline{at}"


def _slow_path_lines(df: pd.DataFrame) -> list[str]:
    """A line per recipe slower than its baseline, with the cause; recipes of one run that share
    their baseline and their cause (the update-side recipes against bf16, say) share one line."""
    slow = derived.slow_paths(df)
    groups: dict[tuple, list[dict]] = {}
    for s in slow:
        groups.setdefault((s["run_id"], s["baseline"], s["cause"]), []).append(s)
    lines = []
    for (_, baseline, cause), members in groups.items():
        if len(members) == 1:
            lines.append(f"{members[0]['variant']} is {members[0]['slowdown']:.3g}x slower than {baseline} here"
                         f"{_within(df, members[0])}{': ' + cause if cause else ''}.")
        else:
            each = "; ".join(f"{m['variant']} {m['slowdown']:.3g}x{_within(df, m)}" for m in members)
            lines.append(f"{len(members)} recipes are slower than {baseline} here: {each}"
                         f"{'. For each, ' + cause if cause else ''}.")
    return lines


def _within(df: pd.DataFrame, slow: dict) -> str:
    """' (geomean of 6 cases, up to 1.12e+03x, at 0.39% of its roofline of 0.333 TFLOP/s)'."""
    worst = f", up to {slow['worst']:.3g}x" if slow["worst"] > 1.05 * slow["slowdown"] else ""
    mixed = 0 < slow["paired"] < slow["cases"]  # two estimators in one geomean: say so
    apart = slow["cases"] - slow["paired"]
    kinds = f", {slow['paired']} paired and {apart} ratio{'s' if apart > 1 else ''} of medians" if mixed else ""
    cases = f"geomean of {slow['cases']} cases{kinds}" if slow["cases"] > 1 else "one case"
    return f" ({cases}{worst}{_roofline_note(df, slow['run_id'], slow['precision'])})"


def _unusual_lines(df: pd.DataFrame) -> list[str]:
    lines = _slow_path_lines(df)
    ok = df[df["status"] == "ok"]
    if "stop_reason" in ok:
        capped = ok[ok["stop_reason"] == "cap"]
        if len(capped):
            fewest = int(capped["n_samples"].min())
            lines.append(f"{len(capped)} case(s) stopped at the whole-case cap with fewer samples than asked "
                         f"(as few as {fewest}): one call is slow against the cap, so their medians are "
                         "known less well (see their ±CI).")
    stalled = df[derived.stalls(df).notna()]
    if len(stalled):
        lines.append(f"{len(stalled)} case(s) show stalls (at least {derived.STALL_SHARE:.0%} of samples over "
                     f"{derived.STALL_FACTOR:g}x the median): {_stall_advice(stalled)}")
    return lines + _contention_lines(df)


def _contention_lines(df: pd.DataFrame) -> list[str]:
    """Cases timed while other work took CPUs their threads needed (`derived.contended`): their
    speedups are a contended machine's, which pairing does not turn into a quiet one's."""
    busy = df[(df["status"] == "ok") & derived.contended(df)]
    if busy.empty:
        return []
    others = pd.to_numeric(busy["others_cpus"], errors="coerce")
    low, high = others.min(), others.max()
    kept = f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f} to {high:.2f}"
    cpus = int(pd.to_numeric(busy["machine_cpus"], errors="coerce").max())
    return [f"{len(busy)} case(s) were timed while other processes kept {kept} of this machine's {cpus} CPUs "
            "busy, fewer than their threads needed: their speedups are the busy machine's (a lost core can "
            "change the kernels' relative speed, and pairing does not undo that); a quiet machine, or "
            "`--threads` within the free CPUs, gives the quiet machine's."]


def _sequential_lines(df: pd.DataFrame) -> list[str]:
    """Settings timed one case after another rather than in paired rounds (`pairing` sequential),
    and cases timed alone beside their settings' rounds (`pairing` alone): how many, and why (the
    commonest reason, with its numbers)."""
    if "pairing" not in df:
        return []
    lines = []
    seq = df[df["pairing"] == "sequential"]
    if not seq.empty:
        settings = seq.drop_duplicates(["run_id", "pairing_group"])
        lines.append(f"{len(settings)} setting(s) were timed one case after another, not in paired rounds, so their "
                     f"speedups are ratios of medians only{_commonest(settings['pairing_note'])}.")
    alone = df[df["pairing"] == "alone"]
    if not alone.empty:
        lines.append(f"{len(alone)} case(s) were timed alone, their calls too slow for a round, while the rest of "
                     "their settings stayed paired: their speedups are ratios of medians only"
                     f"{_commonest(alone['pairing_note'])}.")
    return lines


def _commonest(notes: pd.Series) -> str:
    """The commonest of these notes as "; e.g. <note>", or nothing where there is none."""
    notes = notes.dropna()
    return f"; e.g. {notes.value_counts().index[0]}" if len(notes) else ""


def _stall_advice(stalled: pd.DataFrame) -> str:
    """What steadies stalled cases: fewer threads where they ran on several; on one thread, only a
    quieter machine (other work took its core)."""
    threads = pd.to_numeric(stalled["cpu_threads"], errors="coerce") if "cpu_threads" in stalled else pd.Series(dtype=float)
    if (threads > 1).any():
        return "threads descheduled on a busy machine? `--threads 1` steadies them."
    return ("they ran on one thread, so other work on this machine took its core: a quieter machine "
            "steadies them (`uptime` shows the load).")
