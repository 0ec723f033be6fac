"""`predict`: the roofline model's table for a scenario on a GPU, without running it."""

from __future__ import annotations

import sys

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import print_json, table

COLUMNS = [("workload", "workload"), ("shape", "MxKxN"), ("params", "params"), ("precision", "precision"),
           ("predicted_ms", "predicted ms"), ("tflops", "TFLOP/s"), ("speedup", "speedup"),
           ("bound", "bound"), ("gemm_ms", "GEMM ms"), ("cast_ms", "cast ms"), ("note", "not modelled")]
FORMATS = [("predicted_ms", ".4g"), ("tflops", ".4g"), ("speedup", ".3g"), ("gemm_ms", ".4g"), ("cast_ms", ".4g")]


ARGUMENTS = [
    *arguments.SCENARIOS, *arguments.QUIET, *arguments.JSON,
    arguments.SCENARIO_NAME,
    arg("--device", required=True, help="a GPU of the peak table: a100, a100-pcie, h100, h100-pcie, "
        "h100-nvl, h200, h200-nvl, gh200, b200, gb200, b300, l4, l40s (or a driver name such as 'NVIDIA H100 80GB HBM3')"),
    arg("--only", metavar="TERMS", action="append", help="only the cases matching TERMS (as for run)"),
]


def main(args) -> int:
    from suite.analysis.roofline import predict
    from suite.scenario import spec

    result = predict.predict_scenario(spec.resolve(args.scenario, args.scenarios), args.device, args.only)
    if args.json:
        print_json(result)
        return 0
    table(rows(result["cases"]), COLUMNS, f"{result['scenario']} on {result['device']['label']}, predicted by "
                                          "the roofline model (docs/model.md)")
    for row in result["crossovers"]:
        print(f"mpsuite: {row['text']}", file=sys.stderr)
    return 0


def rows(cases: list[dict]) -> list[dict]:
    """The table's rows: a case's shape and parameters as text, its predictions formatted."""
    return [{**r, "shape": f"{r['m']}x{r['k']}x{r['n']}" if r["m"] is not None else "",
             "params": " ".join(f"{k}={v}" for k, v in sorted(r["params"].items())),
             **{key: "" if r.get(key) is None else format(r[key], spec) for key, spec in FORMATS}} for r in cases]


COMMAND = Command("predict", main, "the roofline model's table for a scenario on a GPU, without running it",
                  ARGUMENTS, description="Each case's predicted time, TFLOP/s, speedup over its baseline and bound "
                  "(compute, memory, overhead) on a GPU of the peak table, and where each recipe starts to "
                  "pay (docs/model.md). Runs on any machine in seconds: plan a GPU lease with it.")
