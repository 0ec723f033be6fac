"""Running cases: how a case runs (`executors`: here on a thread, a process per case, a CUDA worker,
torchrun ranks, a Ray cluster, and the one place that chooses), one case measured in a process
(`inprocess`), the one timing loop (`timing`), the one record builder and error triage (`record`),
what a run shows while it goes (`progress`), GPU telemetry (`telemetry`), the profiler's split of a
step (`attribution`), collectives (`collectives`) and the machine's facts (`env`). Writes no files:
it yields records."""
