"""The Python side of scripts/gpu_check.sh, one subcommand per step of the check:

    python scripts/gpu_check.py plan [--limits FILE] [--case-timeout S] [SCENARIO ...]
    python scripts/gpu_check.py probe
    python scripts/gpu_check.py summary RESULTS_DIR

`plan` comes first: the packages the check needs beyond torch, then its cases and estimated GPU
time (the cost prior `plan --shards` uses, per case, plus a start per scenario); `--limits` writes
each scenario's file, name, device and wall-clock limit for the shell loop. `probe` says what the machine
is: GPU, driver, CUDA, cuBLAS and torch versions, what importing torchao printed, and the TF32
flags as the suite sets them both ways. `summary` comes last: the results as one table, the
anchors they are checked against (docs/gpu-check.md), the warnings the CUDA workers wrote, and
energy per TFLOP of bf16 against each FP8 recipe where NVML measured it.

Run from the repository root with the root on PYTHONPATH (gpu_check.sh does both).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import math
import platform
import sys
from pathlib import Path

# The check's scenarios, most telling first (a lease that ends early keeps the anchors): the
# suite's timing against triton's do_bench, the bf16/tf32 GEMMs, the FP8 GEMMs and eager layer,
# then the compiled layer, the compiled tf32 model step and the update recipes.
DEFAULT_SCENARIOS = ["gpu_check_fidelity", "gpu_check_h100", "gpu_check_h100_fp8", "gpu_check_compiled",
                     "gpu_check_tf32_compiled", "gpu_check_update"]
# What the check imports outside a case (the scenario schema, tables, reports): the image lacks
# some and the wheelhouse carries those (scripts/wheelhouse.py).
NEEDED = ("pydantic", "pandas", "pyarrow", "jinja2", "matplotlib", "rich")
# Each scenario is one `suite run`: a Python importing torch, a CUDA worker starting with its
# context, a report rendered at the end. A prior, like shard.COMPILE_S, until a GPU run's case_s
# and wall times replace it.
SCENARIO_START_S = 15.0
# The whole check must leave room for a rerun in a 15-minute lease: at most this on an H100.
BUDGET_S = 360.0
PREFIX = "gpu_check:"


def say(*parts) -> None:
    print(PREFIX, *parts, flush=True)


# --- plan ---------------------------------------------------------------------------------------


def scenario_path(name: str) -> str:
    return name if name.endswith(".toml") else f"scenarios/{name}.toml"


def estimate(names: list[str]) -> list[dict]:
    """Per scenario: its file, name, cases, compiled cases and estimated seconds."""
    from suite.fleet import shard
    from suite.scenario import plan, spec

    rows = []
    for name in names:
        scenario = spec.load(scenario_path(name))
        cases = plan.expand(scenario)
        rows.append({"path": scenario_path(name), "name": scenario.name, "device": scenario.defaults.device,
                     "cases": len(cases),
                     "compiled": sum(map(shard.compiles, cases)),
                     "estimated_s": SCENARIO_START_S + sum(map(shard.estimated_s, cases))})
    return rows


def cmd_plan(args) -> int:
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        print(f"{PREFIX} error: missing Python packages {missing}; make their wheels with `nox -s wheelhouse` "
              "(scripts/wheelhouse.py) on a machine with an index and carry .whl/ here (docs/gpu-check.md)",
              file=sys.stderr)
        return 2
    rows = estimate(args.scenarios or DEFAULT_SCENARIOS)
    total = sum(r["estimated_s"] for r in rows)
    say(f"plan: {sum(r['cases'] for r in rows)} cases in {len(rows)} scenarios, estimated {total / 60:.1f} min "
        f"of GPU time (the cost prior of `plan --shards`: warm-up + budget + work at a nominal rate per case, "
        f"a compile per compiled case, {SCENARIO_START_S:g} s per scenario's start)")
    for r in rows:
        say(f"plan:   {r['name']}: {r['cases']} cases ({r['compiled']} compiled), ~{r['estimated_s']:.0f} s")
    if total > BUDGET_S:
        say(f"plan: note: over the check's budget of {BUDGET_S / 60:g} min")
    if args.limits:
        # a scenario's wall-clock limit: twice its estimate plus one hung case's time limit
        Path(args.limits).write_text("".join(
            f"{r['path']}\t{r['name']}\t{r['device']}\t{math.ceil(2 * r['estimated_s'] + args.case_timeout)}\n"
            for r in rows))
    return 0


# --- probe --------------------------------------------------------------------------------------


def version(name: str) -> str | None:
    for dist in (name, name.replace("_", "-")):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            pass
    return None


def cublas_version() -> str | None:
    """cuBLAS as loaded into this process (cublasGetProperty), else the installed wheel's version."""
    import ctypes

    try:
        maps = Path("/proc/self/maps").read_text().split()
        path = next(p for p in maps if "/libcublas.so" in p)
        lib = ctypes.CDLL(path)
        parts = []
        for kind in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL (libraryPropertyType)
            value = ctypes.c_int()
            if lib.cublasGetProperty(kind, ctypes.byref(value)) != 0:
                raise OSError("cublasGetProperty failed")
            parts.append(str(value.value))
        return ".".join(parts)
    except (OSError, StopIteration, AttributeError):
        pass
    for dist in ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12"):
        if version(dist):
            return f"{version(dist)} ({dist} wheel)"
    return None


def gpu_line(torch) -> str:
    """The GPU, its driver and NVML's energy counter, or why there is no GPU."""
    from suite.measure import env, telemetry

    if not torch.cuda.is_available():
        return "gpu none (torch.cuda.is_available() is False)"
    info = env.device_info(torch.device("cuda"))
    device, note = telemetry.open_nvml(torch.cuda.current_device())
    cuda_driver = None
    energy = f"no NVML ({note})"
    if device is not None:
        raw = device._query(getattr(device.nvml, "nvmlSystemGetCudaDriverVersion", None))
        cuda_driver = f"{raw // 1000}.{raw % 1000 // 10}" if raw else None
        energy = "yes" if device.energy_mj() is not None else "no (nvmlDeviceGetTotalEnergyConsumption unsupported)"
    l2 = info["l2_bytes"] / 2**20 if info["l2_bytes"] else None
    return (f"gpu {info['device_name']} (sm {info['compute_capability']}, {info['sm_count']} SMs, "
            f"{info['gpu_memory_gb']} GiB, L2 {l2:g} MiB) | driver {env.driver_version()} | CUDA driver API {cuda_driver} "
            f"| NVML energy counter: {energy}")


def torchao_line() -> str:
    """What importing torchao (and its float8 training API) printed: its warnings, or its error."""
    import logging
    import warnings

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep(logging.WARNING)
    loggers = [logging.getLogger(), logging.getLogger("torch")]  # torch's logger does not propagate
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torchao.float8  # noqa: F401
        records += [f"{w.category.__name__}: {w.message}" for w in caught]
    except Exception as err:  # noqa: BLE001 - any import failure is what this line reports
        return f"torchao not importable: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    said = "; ".join(dict.fromkeys(r.splitlines()[0][:200] for r in records)) or "none"
    return f"torchao {version('torchao')} imported; its warnings: {said}"


def tf32_lines() -> list[str]:
    """The float32 matmul flags as recorded by default, inside the suite's tf32 and fp32 settings,
    and after them (restored)."""
    from suite.precisions import flags

    def shown(snapshot: dict) -> str:
        return ", ".join(f"{k}={v}" for k, v in snapshot.items() if "reduced_precision" not in k)

    before = flags.snapshot()
    lines = [f"TF32 flags by default: {shown(before)}"]
    for tf32 in (True, False):
        with flags.float32_matmul(tf32=tf32):
            lines.append(f"TF32 flags as {'tf32' if tf32 else 'fp32'} sets them: {shown(flags.snapshot())}")
    lines.append(f"TF32 flags restored after both: {flags.snapshot() == before}")
    return lines


def cmd_probe(args) -> int:
    import torch

    say(f"probe: python {platform.python_version()} | torch {torch.__version__} | CUDA runtime {torch.version.cuda} "
        f"| cuDNN {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None} "
        f"| cuBLAS {cublas_version() if torch.cuda.is_available() else None} | "
        + " | ".join(f"{n} {version(n)}" for n in ("triton", "torchao", "transformer_engine", "nvidia-ml-py",
                                                    "torch-optimi", "pandas", "pyarrow", "pydantic", "jinja2", "rich")))
    say("probe:", gpu_line(torch))
    say("probe:", torchao_line())
    for line in tf32_lines():
        say("probe:", line)
    return 0


# --- summary ------------------------------------------------------------------------------------


def _col(df, name):
    import pandas as pd

    return df[name] if name in df else pd.Series(None, index=df.index, dtype=object)


def measured_table(ok):
    import pandas as pd

    from suite.analysis.frame import derived

    return pd.DataFrame({
        "scenario": ok["scenario"], "case": derived.shape_labels(ok), "precision": ok["precision"],
        "ms": ok["time_ms_median"], "TFLOP/s": ok["tflops"], "%peak": ok["pct_of_peak"],
        "speedup": ok["speedup"], "ci": _col(ok, "rel_ci"), "stop": _col(ok, "stop_reason"),
        "sm_MHz": _col(ok, "sm_clock_mhz_mean"), "throttled": _col(ok, "throttled_fraction"),
        "J/TFLOP": _col(ok, "joules_per_tflop"), "vs_ref": _col(ok, "fidelity_ratio"),
    })


def anchor_lines(ok) -> list[str]:
    """The measured numbers docs/gpu-check.md checks: bf16 and FP8 GEMMs at 8192^3 against the
    vendor peak and each other, and the suite's time against triton's do_bench."""
    import pandas as pd

    big = ok[(ok["workload"] == "gemm") & (ok["m"] == 8192) & (ok["k"] == 8192) & (ok["n"] == 8192)]
    lines = []
    bf16 = big[big["precision"] == "bf16"]
    if len(bf16) and bf16["tflops"].notna().any():
        best = bf16.loc[bf16["tflops"].idxmax()]
        peak = best.get("peak_tflops")
        frac = f" = {best['tflops'] / peak:.0%} of the vendor peak {peak:.4g}" if pd.notna(peak) and peak else ""
        lines.append(f"bf16 GEMM 8192^3: {best['tflops']:.4g} TFLOP/s{frac} (anchor: near 80%)")
    for precision in ("fp8_tensorwise", "fp8_rowwise"):
        rows = big[(big["precision"] == precision) & big["speedup"].notna()]
        for _, r in rows.iterrows():
            lines.append(f"{precision} GEMM 8192^3 {r['params']}: {r['speedup']:.3g}x bf16, {r['tflops']:.4g} TFLOP/s"
                         + (" (anchor: rowwise ~1.9x with fast accumulation, quantized before timing)"
                            if precision == "fp8_rowwise" else ""))
    ratios = ok[_col(ok, "ref_harness") == "triton.testing.do_bench"]["fidelity_ratio"] if "fidelity_ratio" in ok else []
    if len(ratios):
        lines.append(f"suite / do_bench time: median {pd.Series(ratios).median():.3f} over {len(ratios)} GEMMs "
                     "(anchor: within 2%)")
    return lines


def warning_lines(df) -> list[str]:
    """The warning lines the CUDA workers wrote, each once, with the cases that saw it."""
    if "worker_warnings" not in df:
        return []
    seen: dict[str, int] = {}
    for text in df["worker_warnings"].dropna():
        for line in str(text).splitlines():
            seen[line] = seen.get(line, 0) + 1
    return [f"[{n} case{'s' * (n != 1)}] {line}" for line, n in seen.items()]


def energy_lines(df) -> list[str]:
    from suite.analysis.outcome import energy

    table = energy.vs_bf16(df)
    lines = []
    for r in table.to_dict("records"):
        base = "bf16 not measured" if math.isnan(r["bf16_j_per_tflop"]) else \
            f"bf16 {r['bf16_j_per_tflop']:.3g} J/TFLOP: {r['vs_bf16']:.3g}x of it"
        lines.append(f"{r['case']} {r['precision']}: {r['j_per_tflop']:.3g} J/TFLOP ({base})")
    return lines


def cmd_summary(args) -> int:
    from suite.analysis.frame import derived
    from suite.results import store

    folder = Path(args.results)
    if not any(folder.rglob("*.parquet")):
        print(f"{PREFIX} no results were written", file=sys.stderr)
        return 1
    df = derived.with_speedups(derived.latest_runs(store.read([folder])))
    counts = df["status"].value_counts().to_dict()
    print("\n== gpu_check summary: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + " ==")
    not_ok = df[df["status"] != "ok"]
    if len(not_ok):
        groups = not_ok.groupby(["scenario", "status", "reason"], dropna=False).size().reset_index(name="cases")
        print(groups.to_string(index=False, max_colwidth=90))
    ok = df[df["status"] == "ok"]
    if len(ok):
        print(measured_table(ok).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    for title, lines in (("anchors", anchor_lines(ok) if len(ok) else []), ("warnings", warning_lines(df)),
                         ("energy (NVML): FP8 against bf16", energy_lines(df))):
        if lines:
            print("\n".join(["", f"== {title} =="] + lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    pl = sub.add_parser("plan")
    pl.add_argument("scenarios", nargs="*", help=f"names or .toml paths (default: {' '.join(DEFAULT_SCENARIOS)})")
    pl.add_argument("--limits", help="write each scenario's path, name, device and wall-clock limit here (TSV)")
    pl.add_argument("--case-timeout", type=float, default=120.0, help="the run's per-case time limit (s)")
    sub.add_parser("probe")
    su = sub.add_parser("summary")
    su.add_argument("results", help="the results folder the scenarios wrote")
    args = p.parse_args(argv)
    return {"plan": cmd_plan, "probe": cmd_probe, "summary": cmd_summary}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
