"""Numbers derived from records: speedups against the in-run baseline, summaries. No plotting."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from suite.analysis.frame import labels
from suite.results import columns
from suite.scenario import registry
from suite.scenario.params import params_without


def rows(df: pd.DataFrame, keep) -> pd.DataFrame:
    """The rows where `keep` is true; the frame itself when that is every row (a filter copies every
    column: a second for a million records of 170 columns, for nothing)."""
    keep = np.asarray(keep, dtype=bool)
    return df if keep.all() else df[keep]


def latest_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The newest run of each scenario (run ids start with their UTC start time)."""
    newest = df.groupby("scenario")["run_id"].transform("max")
    return rows(df, df["run_id"] == newest)


def with_speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Add `speedup`, `speedup_medians` and `pct_of_peak`. `speedup_medians` is the baseline's median
    time over this case's (same run and device); `speedup` is the paired speedup where the case was
    timed in paired rounds with its baseline (`speedup_paired`: both seen by the machine in the same
    state, so a stall or a burst of other work in one case's window does not move it), else that
    ratio of medians. A frame that has them (a `prepare`d one, or a subset of it) is returned as it
    is: the baseline of a kept row may have been filtered out since."""
    if "speedup" in df:
        return df
    df = df.copy(deep=False)  # new columns only: the caller's frame keeps its own
    is_ok = (df["status"] == "ok").to_numpy(bool)
    # the baseline case's time, looked up by (run, device, case) as integer keys (a run on a mixed
    # fleet holds each case once per kind of card: a speedup is over the baseline on the same kind);
    # case ids and their baselines factorised together, so one hash lookup of ints serves a million rows
    runs = pd.factorize(df["run_id"])[0].astype(np.int64)
    if "device_name" in df:
        devices = pd.factorize(df["device_name"], use_na_sentinel=False)[0].astype(np.int64)
        runs = runs * (devices.max() + 1) + devices
    cases, vocabulary = pd.factorize(pd.concat([df["case_id"], df["baseline_case_id"]], ignore_index=True))
    n = len(df)
    own, wanted = runs * (len(vocabulary) + 1) + cases[:n], runs * (len(vocabulary) + 1) + cases[n:]
    keys = pd.Index(own[is_ok])
    first = ~keys.duplicated()
    where = pd.Index(keys[first]).get_indexer(wanted)
    ok_times = pd.to_numeric(df["time_ms_median"], errors="coerce").to_numpy(float)[is_ok][first]
    base = np.append(ok_times, np.nan)[where]  # -1 (no such ok case) picks the nan
    time_ms = pd.to_numeric(df["time_ms_median"], errors="coerce")
    df["speedup_medians"] = np.where(df["status"] == "ok", base / time_ms, np.nan)
    medians = df["speedup_medians"].to_numpy(float)
    paired = (pd.to_numeric(df["speedup_paired"], errors="coerce").to_numpy(float) if "speedup_paired" in df
              else np.full(n, np.nan))
    # only where the baseline is here too: a subset without it has no speedup of either kind
    df["speedup"] = np.where(paired_speedups(df), paired, medians)
    peak = pd.to_numeric(df["peak_tflops"], errors="coerce")
    df["pct_of_peak"] = 100.0 * pd.to_numeric(df["tflops"], errors="coerce") / peak
    return df


# Per-sample lists: what the report path needs of them is `stall_share` (`prepare`).
SAMPLE_COLUMNS = ("samples_ms",)


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """The records as the report path works on them: speedups and stall shares computed once, and
    the per-sample lists and the columns no record fills left out, so the many filters after it
    move a fraction of the data (a million records have 140 columns, most of them empty)."""
    if "stall_share" in df and "speedup" in df:
        return labels.with_labels(df)
    contract = {c.name for c in columns.COLUMNS if c.contract}
    keep = [c for c in df.columns if c not in SAMPLE_COLUMNS and (c in contract or df[c].notna().any())]
    # named whole, once: every table, plot and headline line names a case the same way
    return labels.with_labels(with_versus(with_speedups(df[keep].assign(stall_share=stalls(df)))))


def with_versus(df: pd.DataFrame) -> pd.DataFrame:
    """Add `versus_speedup` where a workload declares `versus` (param, value): the median time of
    the case differing from this one only in `param` = `value` (same run, device, precision and
    shape) over this case's, e.g. a grouped GEMM's loop of per-expert GEMMs over the grouped call.
    Null elsewhere, and on the reference cases themselves."""
    if "versus_speedup" in df:
        return df
    df = df.copy(deep=False)
    out = pd.Series(np.nan, index=df.index)
    for workload, record in registry.WORKLOADS.items():
        versus = record.versus
        rows = df[(df["workload"] == workload) & (df["status"] == "ok")] if versus else df.iloc[:0]
        if rows.empty:
            continue
        value = rows["params"].map(lambda p: str((json.loads(p) if isinstance(p, str) else {}).get(versus.param)))
        parts = [rows[c].astype(str) for c in ("run_id", "device_name", "precision", "m", "k", "n") if c in rows]
        key = rows["params"].map(lambda p: params_without(p, versus.param))
        for part in parts:
            key = part + "|" + key
        time_ms = pd.to_numeric(rows["time_ms_median"], errors="coerce")
        is_ref = value == versus.value
        reference = pd.Series(time_ms[is_ref].to_numpy(), index=key[is_ref].to_numpy())
        reference = reference[~reference.index.duplicated()]
        out.loc[rows.index[~is_ref]] = (key[~is_ref].map(reference) / time_ms[~is_ref]).to_numpy()
    df["versus_speedup"] = out
    return df


def is_emulated(df: pd.DataFrame) -> pd.Series:
    if "emulated" not in df:
        return pd.Series(False, index=df.index)
    return df["emulated"].fillna(False).astype(bool)


def shape_label(row) -> str:
    """How a case is named in tables and plots, without its precision."""
    parts = []
    if pd.notna(row.get("m")):
        parts.append(f"{int(row['m'])}x{int(row['k'])}x{int(row['n'])}")
    params = json.loads(row["params"]) if isinstance(row.get("params"), str) else {}
    parts += [f"{k}={v}" for k, v in sorted(params.items())]
    return " ".join(parts) or row["workload"]


def shape_labels(df: pd.DataFrame) -> pd.Series:
    """Each row's short shape name: M x K x N and only the workload parameters that differ within
    the frame (`suite.analysis.frame.labels`; a frame that was named whole keeps its names)."""
    return labels.with_labels(df)["shape"]


def variants(df: pd.DataFrame) -> pd.Series:
    """Each row's precision with the parameters of its own that differ within the frame
    (`bf16_adamw8bit (master=bf16_sr)`): what tables, headlines and geomeans name and group by."""
    return labels.with_labels(df)["variant"]


def reciprocal(x: float) -> float:
    """1 / x, inf for a subnormal x (a speedup of 5e-324 is a slowdown beyond any float) without a warning."""
    with np.errstate(divide="ignore", over="ignore"):
        return float(np.float64(1.0) / np.float64(x))


def geomean(xs) -> float:
    """Of the positive finite values (nan when there are none)."""
    v = pd.to_numeric(pd.Series(xs, dtype=object), errors="coerce").to_numpy(float)
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.exp(np.log(v).mean())) if len(v) else math.nan


def _narrow(df: pd.DataFrame, names) -> pd.DataFrame:
    """The columns of `names` that `df` has: what a grouping then copies (a million records' group
    of every column costs seconds)."""
    return df[[c for c in names if c in df]]


# What `summary` and `slow_paths` read of a record.
SUMMARY_READS = ("workload", "variant", "precision", "status", "emulated", "tflops", "speedup", "speedup_paired",
                 "speedup_medians", "rel_err")
SLOW_PATH_READS = ("run_id", "variant", "baseline", "precision", "status", "emulated", "speedup", "speedup_paired",
                   "speedup_medians", "device",
                   "cpu_isa", "cpu_flags", "cpu_isa_env")


def paired_speedups(df: pd.DataFrame) -> np.ndarray:
    """Which rows' `speedup` is the paired-rounds one (`with_speedups`), not the ratio of medians."""
    def column(name):
        return pd.to_numeric(df[name], errors="coerce").to_numpy(float) if name in df else np.full(len(df), np.nan)
    paired, medians = column("speedup_paired"), column("speedup_medians")
    return np.isfinite(medians) & np.isfinite(paired) & (paired > 0)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload, precision): case counts by status, best TFLOP/s, geomean speedup (and
    how many of its cases' speedups are paired, how many ratios of medians), median relative error.
    Emulated timings are not speed: their throughput columns stay empty."""
    df = labels.with_labels(with_speedups(df))
    rows = []
    for (workload, variant), g in _narrow(df, SUMMARY_READS).groupby(["workload", "variant"], sort=False):
        ok = g[g["status"] == "ok"]
        real = ok[~is_emulated(ok)]
        rows.append({
            "workload": workload,
            "precision": g["precision"].iloc[0],
            "variant": variant,
            "ok": len(ok),
            "skipped": int((g["status"] == "skipped").sum()),
            "failed": int((g["status"] == "failed").sum()),
            "best_tflops": real["tflops"].max() if len(real) else math.nan,
            "geomean_speedup": geomean(real["speedup"]) if len(real) else math.nan,
            # which estimator each case's speedup is (`with_speedups`): a geomean names its mix
            "paired_speedups": int(paired_speedups(real).sum()),
            "medians_speedups": int((np.isfinite(pd.to_numeric(real["speedup"], errors="coerce"))
                                     & ~paired_speedups(real)).sum()),
            # of the cases that have one: under pandas 2 a median of nulls only warns ("Mean of empty slice")
            "median_rel_err": ok["rel_err"].dropna().median() if "rel_err" in ok else math.nan,
            "emulated": bool(len(ok)) and bool(is_emulated(ok).all()),
        })
    return pd.DataFrame(rows)


# -- why a reduced precision is slow here (CPU capability, thread stalls) ----------------------

# The /proc/cpuinfo flags of native bf16 and fp16 matmul on x86 (oneDNN's kernels need one).
NATIVE_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
FLAG_NAMES = {"bf16": "AVX512-BF16/AMX", "fp16": "AVX512-FP16/AMX-FP16"}
# A precision whose geomean speedup is below this is reported as a slow path.
SLOW_PATH_BELOW = 0.8


def _first(g: pd.DataFrame, column: str):
    if column not in g:
        return None
    values = g[column].dropna()
    return values.iloc[0] if len(values) else None


def _compute_dtype(precision: str | None) -> str | None:
    """The half format a precision's GEMMs run in (its declared peak column), where a CPU may lack
    native kernels for it; None for the others."""
    record = registry.PRECISIONS.get(precision or "")
    return record.peak if record is not None and record.peak in NATIVE_FLAGS else None


def slow_path_cause(precision: str, device: str | None, isa, flags, isa_env, baseline: str | None = None) -> str:
    """Why `precision` may be slower than its baseline on this machine, from the recorded CPU
    facts; empty where nothing recorded explains it."""
    dtype = _compute_dtype(precision)
    if device != "cpu" or dtype is None:
        return ""
    if _compute_dtype(baseline) == dtype:  # e.g. an update-side recipe against bf16: same GEMMs
        return (f"its GEMMs run in {dtype} as {baseline}'s do, so the CPU's {dtype} support does not "
                "explain it: the rest of its step (its optimizer, say) costs more")
    have = set(str(flags).split()) if flags is not None else None
    if have is None:
        return f"the CPU's flags were not recorded, so whether it has native {dtype} ({FLAG_NAMES[dtype]}) is unknown"
    native = sorted(have & set(NATIVE_FLAGS[dtype]))
    if not native:
        return (f"this CPU has no native {dtype} matmul (no {FLAG_NAMES[dtype]}; torch dispatches to "
                f"{isa or 'an unknown ISA'}), so {dtype} GEMMs take a slow path")
    if isa_env or str(isa).upper() in ("AVX2", "DEFAULT", "NONE"):
        forced = f" ({isa_env})" if isa_env else ""
        return (f"the CPU has {', '.join(native)} but torch dispatches to {isa}{forced}, so {dtype} GEMMs "
                "take the slow path")
    return f"the CPU has native {dtype} ({', '.join(native)}): small shapes or thread stalls may explain it"


def slow_paths(df: pd.DataFrame) -> list[dict]:
    """Per run and precision whose measured speedups (geomean, non-emulated) are below
    SLOW_PATH_BELOW: how many times slower than the baseline it is, over how many cases (how many of
    their speedups paired, the rest ratios of medians), and the likely cause (`slow_path_cause`). Slowest first."""
    df = _narrow(labels.with_labels(with_speedups(df)), SLOW_PATH_READS)
    speedup = pd.to_numeric(df["speedup"], errors="coerce")
    # a speedup of 0 or inf (a time a reader would refuse, handed in directly) says nothing of speed
    ok = df[(df["status"] == "ok") & ~is_emulated(df) & np.isfinite(speedup) & (speedup > 0)]
    out = []
    for (run, variant, baseline), g in ok.groupby(["run_id", "variant", "baseline"], sort=False):
        precision = g["precision"].iloc[0]
        if precision == baseline:
            continue
        gm = geomean(g["speedup"])
        if not gm < SLOW_PATH_BELOW:
            continue
        out.append({
            "run_id": run, "precision": precision, "variant": variant, "baseline": baseline, "slowdown": 1 / gm,
            "worst": reciprocal(g["speedup"].min()), "cases": len(g), "paired": int(paired_speedups(g).sum()),
            "device": _first(g, "device"),
            "cause": slow_path_cause(precision, _first(g, "device"), _first(g, "cpu_isa"),
                                     _first(g, "cpu_flags"), _first(g, "cpu_isa_env"), baseline),
        })
    return sorted(out, key=lambda r: -r["slowdown"])


# A sample more than this many times the case's median is a stall (a descheduled thread, a page
# fault storm), not the kernel's speed; a case with at least STALL_SHARE of them is flagged.
STALL_FACTOR = 2.0
STALL_SHARE = 0.05


MIN_STALL_SAMPLES = 5  # fewer cannot tell a stall from a slow first call


def stalls(df: pd.DataFrame) -> pd.Series:
    """Per record: the share of its samples above STALL_FACTOR times its median, where that share
    is at least STALL_SHARE (else nan; nan too for a case with fewer than MIN_STALL_SAMPLES samples
    or none). Columnar: every sample of every case in one array. A `prepare`d frame holds it."""
    if "stall_share" in df:
        return df["stall_share"]
    if "samples_ms" not in df or df.empty:
        return pd.Series(math.nan, index=df.index, dtype=float)
    median = pd.to_numeric(df["time_ms_median"], errors="coerce").to_numpy(float)
    ok = ((df["status"] == "ok").to_numpy(bool)) & (median > 0)
    samples = list_column(df["samples_ms"])
    lengths = pc.fill_null(pc.list_value_length(samples), 0).to_numpy()
    values = pc.list_flatten(samples).to_numpy(zero_copy_only=False).astype(float, copy=False)
    # each record's samples lie together, in order: its count of stalls is a sum over its own run
    above = values > np.repeat(STALL_FACTOR * median, lengths)
    filled, over = lengths > 0, np.zeros(len(df), dtype=np.int64)
    if filled.any():  # (reduceat sums up to the next start: empty runs left out, it reaches the right one)
        over[filled] = np.add.reduceat(above, (np.cumsum(lengths) - lengths)[filled], dtype=np.int64)
    share = np.divide(over, lengths, out=np.zeros(len(df)), where=lengths > 0)
    flagged = ok & (lengths >= MIN_STALL_SAMPLES) & (share >= STALL_SHARE)
    return pd.Series(np.where(flagged, share, math.nan), index=df.index)


# Other work beside a case (suite/measure/contention.py) counts where it left the case's threads
# fewer CPUs than they asked for, by more than this: the counters tick at 10 ms per CPU, and the
# run's own helper processes (a parent waiting on its worker) count as others.
CONTENTION_SLACK_CPUS = 0.25


def contended(df: pd.DataFrame) -> pd.Series:
    """Per record: whether other processes kept so many CPUs busy while it was timed that its threads
    had fewer than they asked for (`others_cpus` > `machine_cpus` - threads + slack). Threads are
    `cpu_threads` on a CPU and the one host thread that launches a GPU's kernels."""
    if not {"others_cpus", "machine_cpus", "cpu_threads", "device"} <= set(df.columns) or df.empty:
        return pd.Series(False, index=df.index)
    others = pd.to_numeric(df["others_cpus"], errors="coerce").astype(float)
    cpus = pd.to_numeric(df["machine_cpus"], errors="coerce").astype(float)
    threads = pd.to_numeric(df["cpu_threads"], errors="coerce").astype(float).where(df["device"] == "cpu", 1.0)
    return pd.Series((others > cpus - threads.fillna(1.0) + CONTENTION_SLACK_CPUS).to_numpy(bool), index=df.index)


def list_column(values: pd.Series) -> pa.Array:
    """A list column as Arrow: as a `lean` read gives it (no copy), or from a list or array per
    cell (records in memory, a default read)."""
    if isinstance(values.dtype, pd.ArrowDtype):
        return pa.chunked_array(values.array.__arrow_array__()).combine_chunks()
    cells = [c if isinstance(c, (list, tuple, np.ndarray)) or not pd.isna(c) else None  # None, NaN or pd.NA
             for c in values.to_numpy(dtype=object)]
    return pa.array(cells, type=pa.list_(pa.float64()))
