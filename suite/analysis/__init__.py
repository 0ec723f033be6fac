"""Stage 4, numbers from records: derived columns and diagnoses (`derived`), statistics (`stats`),
run-against-run comparison (`compare`), history with change points (`history`) and pytest-benchmark
JSON interop (`bench_json`). Plots nothing."""
