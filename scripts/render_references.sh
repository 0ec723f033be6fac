#!/usr/bin/env bash
# Re-render every committed reference report (reports/) from its committed run (results/reference/,
# listed in docs/reference-runs.md) with the current renderer, so the committed pages match the code.
# Run from the repository root in the test environment: scripts/render_references.sh [python]
# Then `git add -f reports/` (reports/ is ignored but for these).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python}
R=results/reference
report() { "$PY" -m suite report "$R/$1" --out "reports/reference/$2" --quiet; }
report cpu_amx/cpu cpu_amx
report cpu_fp8 cpu_fp8
report cpu_models cpu_models
report cpu_roofline/amx cpu_roofline_amx
report cpu_roofline/avx2 cpu_roofline_avx2
report cpu_slow_path/cpu cpu_slow_path
report cpu_update cpu_update
report cpu_update_slow_path cpu_update_slow_path
report fidelity fidelity
report cpu_dist cpu_dist
report cpu_mx cpu_mx
report cpu_moe/avx2 cpu_moe_avx2
report cpu_moe/amx cpu_moe_amx
"$PY" -m suite compare torch=2.13.0,runs=all torch=2.14.1,runs=all --results "$R/cpu-torch-2.13.0-vs-2.14.1" \
    --out reports/compare/cpu-torch-2.13.0-vs-2.14.1 --quiet
"$PY" -m suite history cpu --results "$R/cpu-torch-2.13.0-vs-2.14.1" --out reports/history/cpu-torch-2.13.0-vs-2.14.1 --quiet
