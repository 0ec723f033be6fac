"""Stage 1, what to run: scenario files (`spec`), their expansion into cases (`plan`), named shape
sets (`shapes`), the names of precisions and workloads (`registry`) and the timing rule's schema
(`stop_rule`). Torch-free: a scenario is validated before anything heavy is imported."""
