"""Which cases a machine runs: cost-balanced shards of a plan for an existing scheduler, the settings
a shard (or a Ray worker) keeps together, and the run group that ties the shards of one fleet run
(`shard`). Knows cases and their costs, never a workload; results and journals stay `suite.results`'
business, running cases `suite.measure.executors`'."""
