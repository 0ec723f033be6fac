"""Stage 4, numbers from records: derived columns and diagnoses (`derived`), statistics (`stats`),
run-against-run comparison (`compare`), history with change points (`history`) and pytest-benchmark
JSON interop (`bench_json`); `load`, the records as a notebook wants them (`notebook`). Plots nothing."""

from suite.analysis.notebook import load

__all__ = ["load"]
