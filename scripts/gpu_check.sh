#!/usr/bin/env bash
# The prepared GPU check (about five minutes on an H100/H200, docs/gpu-check.md): the suite's timing
# against triton's do_bench, subsets of h100 and h100_fp8, a compiled layer and model step, and the
# update recipes, on a bare machine with torch and no network.
#
#   scripts/gpu_check.sh [--pack] [OUT_DIR]      OUT_DIR defaults to $OUT, else ./gpu_check
#
# - Carried wheels: every .whl/*.whl (made by `nox -s wheelhouse` on a machine with an index) is
#   installed offline into a temporary folder put first on PYTHONPATH; without .whl/ the installed
#   packages run.
# - Prints the plan's estimated GPU time first, then a probe of the machine (GPU, driver, CUDA,
#   cuBLAS and torch versions, torchao's import warnings, the TF32 flags both ways), each scenario's
#   progress, and a summary last (also in OUT_DIR/gpu_check_summary.txt).
# - Each scenario runs under a wall-clock limit (`plan`'s: twice its estimate plus one case's limit)
#   and each case under GPU_CHECK_CASE_TIMEOUT seconds (default 120) in its CUDA worker, so a hang
#   costs that case or that scenario, not the lease.
# - Writes OUT_DIR/results/<scenario>/ and OUT_DIR/reports/<scenario>/; with --pack, one
#   OUT_DIR/<scenario>.tar.gz per scenario instead, written as soon as the scenario ends
#   (a check stopped midway keeps the scenarios it finished). Without CUDA every case is recorded
#   as skipped (with the reason) and the script still ends with the summary.
# - GPU_CHECK_SCENARIOS (space-separated scenario names, or .toml paths absolute or relative to the
#   repository) overrides the scenario list (scripts/gpu_check.py DEFAULT_SCENARIOS).
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
case_timeout="${GPU_CHECK_CASE_TIMEOUT:-120}"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
if [[ $pack == 1 ]]; then
    stage="$scratch/stage"
else
    stage="$out_dir"
fi

# Carried wheels first (quietly), so that everything below runs what the check will run.
shopt -s nullglob
wheels=(.whl/*.whl)
shopt -u nullglob
site=""
if (( ${#wheels[@]} )); then
    PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$scratch/site" "${wheels[@]}"
    site="$scratch/site:"
fi
export PYTHONPATH="$site$repo${PYTHONPATH:+:$PYTHONPATH}"

# shellcheck disable=SC2086  # the scenario list is space-separated on purpose
"$python" scripts/gpu_check.py plan --limits "$scratch/limits.tsv" --case-timeout "$case_timeout" \
    ${GPU_CHECK_SCENARIOS:-} || exit 2
if (( ${#wheels[@]} )); then
    echo "gpu_check: carried wheels: ${wheels[*]#.whl/}"
fi
"$python" scripts/gpu_check.py probe || echo "gpu_check: the probe failed (status $?); the check goes on"

status=0
while IFS=$'\t' read -r scenario name device limit; do
    echo "gpu_check: running $scenario (at most $limit s)"
    run=("$python" -m suite run "$scenario" --results "$stage/results" --reports "$stage/reports")
    if [[ $device == cuda ]]; then
        run+=(--case-timeout "$case_timeout")  # each case in the CUDA worker; a CPU run has none to stop
    fi
    if command -v timeout >/dev/null; then
        run=(timeout --kill-after=30 "$limit" "${run[@]}")
    fi
    rc=0
    "${run[@]}" </dev/null || rc=$?
    if (( rc == 124 )); then
        echo "gpu_check: $scenario ran past its $limit s limit and was stopped (its finished cases are in its journal)"
        status=1
    elif (( rc != 0 )); then
        echo "gpu_check: $scenario exited with status $rc"
        status=1
    fi
    if [[ $pack == 1 ]]; then
        parts=()
        for part in "results/$name" "reports/$name"; do
            [[ -e "$stage/$part" ]] && parts+=("$part")
        done
        if (( ${#parts[@]} )); then
            tar -czf "$out_dir/$name.tar.gz" -C "$stage" "${parts[@]}"
            echo "gpu_check: packed ${parts[*]} into $out_dir/$name.tar.gz"
        fi
    fi
done < "$scratch/limits.tsv"
if [[ $pack == 0 ]]; then
    echo "gpu_check: results in $out_dir/results, reports in $out_dir/reports"
fi

"$python" scripts/gpu_check.py summary "$stage/results" | tee "$out_dir/gpu_check_summary.txt" || status=1
exit $status
