#!/usr/bin/env bash
# A prepared GPU check (a few minutes on an H100/H200): a subset of h100_fp8 and h100 plus the
# fidelity scenario, on a bare machine with torch and no network.
#
#   scripts/gpu_check.sh [--pack] [OUT_DIR]      OUT_DIR defaults to $OUT, else ./gpu_check
#
# - Carried wheels: every .whl/*.whl (made by scripts/wheelhouse.py on a machine with an index:
#   pydantic, jinja2, torchao and their dependencies, resolved) is installed offline into a
#   temporary folder put first on PYTHONPATH; without .whl/ the installed ones run.
# - Writes OUT_DIR/results/<scenario>/<run>.parquet and OUT_DIR/reports/<scenario>/ (index.html,
#   report.md, plots); with --pack, one OUT_DIR/gpu_check.tar.gz holding both instead.
# - Prints versions first and a summary table last. Without CUDA every case is recorded as skipped
#   (with the reason) and the script still ends with the table.
# - GPU_CHECK_SCENARIOS (space-separated scenario names, or .toml paths absolute or relative to the
#   repository) overrides the scenario list.
# Exit status: 0 when every run ended without a failed case, 1 otherwise, 2 on a setup error.
set -euo pipefail

pack=0
if [[ "${1:-}" == "--pack" ]]; then
    pack=1
    shift
fi
out_dir="${1:-${OUT:-gpu_check}}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"  # resolved from the caller's directory
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-$(command -v python3 || command -v python)}"
scenarios="${GPU_CHECK_SCENARIOS:-gpu_check_h100_fp8 gpu_check_h100 gpu_check_fidelity}"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
if [[ $pack == 1 ]]; then
    stage="$scratch/stage"
else
    stage="$out_dir"
fi

# Carried wheels first (quietly), so the version print below shows what will run.
shopt -s nullglob
wheels=(.whl/*.whl)
shopt -u nullglob
if (( ${#wheels[@]} )); then
    PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$scratch/site" "${wheels[@]}"
    export PYTHONPATH="$scratch/site${PYTHONPATH:+:$PYTHONPATH}"
fi

"$python" - <<'EOF'
import importlib, importlib.metadata as md, importlib.util, platform, sys
import torch
def version(name):
    for dist in (name, name.replace("_", "-")):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            pass
    try:
        return getattr(importlib.import_module(name), "__version__", "importable")
    except Exception:
        return None
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
driver = None
try:
    import pynvml
    pynvml.nvmlInit()
    driver = pynvml.nvmlSystemGetDriverVersion()
    driver = driver.decode() if isinstance(driver, bytes) else driver
except Exception:
    pass
names = ["torchao", "triton", "transformer_engine", "nvidia-ml-py", "pydantic", "pandas", "pyarrow"]
print(f"gpu_check: python {platform.python_version()} | torch {torch.__version__} | cuda {torch.version.cuda}"
      f" | gpu {gpu} | driver {driver} | " + " | ".join(f"{n} {version(n)}" for n in names), flush=True)
missing = [m for m in ("pydantic", "pandas", "pyarrow", "jinja2", "matplotlib") if importlib.util.find_spec(m) is None]
if missing:
    print(f"gpu_check: error: missing Python packages {missing}; make their wheels with "
          "`python scripts/wheelhouse.py` on a machine with an index and carry .whl/ here "
          "(docs/gpu-check.md)", file=sys.stderr)
    sys.exit(2)
EOF
if (( ${#wheels[@]} )); then
    echo "gpu_check: using carried wheels: ${wheels[*]#.whl/}"
fi

status=0
for scenario in $scenarios; do
    [[ "$scenario" == *.toml ]] || scenario="scenarios/$scenario.toml"
    echo "gpu_check: running $scenario"
    rc=0
    "$python" -m suite run "$scenario" --results "$stage/results" --reports "$stage/reports" || rc=$?
    if (( rc != 0 )); then
        echo "gpu_check: $scenario exited with status $rc"
        status=1
    fi
done

if [[ $pack == 1 ]]; then
    tar -czf "$out_dir/gpu_check.tar.gz" -C "$stage" $(cd "$stage" && ls -d results reports 2>/dev/null)
    echo "gpu_check: packed results/ and reports/ into $out_dir/gpu_check.tar.gz"
else
    echo "gpu_check: results in $out_dir/results, reports in $out_dir/reports"
fi

"$python" - "$stage/results" <<'EOF'
import sys
from pathlib import Path
import pandas as pd
from suite.analysis import derived
from suite.results import store

folder = Path(sys.argv[1])
if not any(folder.rglob("*.parquet")):
    sys.exit("gpu_check: no results were written")
df = derived.with_speedups(derived.latest_runs(store.read([folder])))
counts = df["status"].value_counts().to_dict()
print("\n== gpu_check summary: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + " ==")
not_ok = df[df["status"] != "ok"]
if len(not_ok):
    groups = not_ok.groupby(["scenario", "status", "reason"], dropna=False).size().reset_index(name="cases")
    print(groups.to_string(index=False, max_colwidth=90))
ok = df[df["status"] == "ok"].copy()
if len(ok):
    def col(name):
        return ok[name] if name in ok else pd.Series(None, index=ok.index, dtype=object)
    ok["shape"] = ok.apply(derived.shape_label, axis=1)
    table = pd.DataFrame({
        "scenario": ok["scenario"], "case": ok["shape"], "precision": ok["precision"],
        "ms": ok["time_ms_median"], "TFLOP/s": ok["tflops"], "%peak": ok["pct_of_peak"],
        "speedup": ok["speedup"], "ci": col("rel_ci"), "stop": col("stop_reason"),
        "sm_MHz": col("sm_clock_mhz_mean"), "throttled": col("throttled_fraction"),
        "vs_ref": col("fidelity_ratio"),
    })
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))

    # Is the suite's number sane? bf16 and the best FP8 GEMM at 8192^3 against the vendor peak,
    # and the suite's time against triton's do_bench on the same GEMMs.
    big = ok[(ok["workload"] == "gemm") & (ok["m"] == 8192) & (ok["k"] == 8192) & (ok["n"] == 8192)]
    lines = []
    for label, rows in (("bf16", big[big["precision"] == "bf16"]),
                        ("fp8 (best)", big[big["precision"].str.startswith(("fp8", "te_"))])):
        if len(rows) and rows["tflops"].notna().any():
            best = rows.loc[rows["tflops"].idxmax()]
            peak = best.get("peak_tflops")
            frac = f" = {best['tflops'] / peak:.0%} of the vendor peak {peak:.4g}" if pd.notna(peak) and peak else ""
            lines.append(f"{label} 8192^3: {best['tflops']:.4g} TFLOP/s ({best['precision']}){frac}")
    ratios = ok[(col("ref_harness") == "triton.testing.do_bench")]["fidelity_ratio"] if "fidelity_ratio" in ok else []
    if len(ratios):
        lines.append(f"suite / do_bench time: median {pd.Series(ratios).median():.3f} over {len(ratios)} GEMMs")
    if lines:
        print("\n".join(["", "== sanity =="] + lines))
EOF
exit $status
