"""`predict`: the roofline model's table for a scenario on a GPU, without running it."""

from __future__ import annotations

import sys

from suite.cli.output import print_json, table

COLUMNS = [("workload", "workload"), ("shape", "MxKxN"), ("params", "params"), ("precision", "precision"),
           ("predicted_ms", "predicted ms"), ("tflops", "TFLOP/s"), ("speedup", "speedup"),
           ("bound", "bound"), ("gemm_ms", "GEMM ms"), ("cast_ms", "cast ms"), ("note", "not modelled")]
FORMATS = [("predicted_ms", ".4g"), ("tflops", ".4g"), ("speedup", ".3g"), ("gemm_ms", ".4g"), ("cast_ms", ".4g")]


def main(args) -> int:
    from suite.analysis import predict
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
