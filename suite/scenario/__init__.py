"""Stage 1, what to run: scenario files (`spec`), their expansion into cases (`plan`), named shape
sets (`shapes`), the precisions and workloads the folders declare (`declare`, found by `registry`),
the generic parameter machinery (`params`) and the timing rule's schema (`stop_rule`). Torch-free:
a scenario is validated before anything heavy is imported."""
