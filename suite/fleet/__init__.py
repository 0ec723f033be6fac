"""Fleet runs on an existing scheduler: shard assignment (`shard`), the Ray executor (`ray_executor`).
Knows cases and their costs, never a workload; results and journals stay `suite.results`' business."""
