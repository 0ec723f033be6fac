"""Workloads, one folder each: its torch-free `__init__.py` declares it (parameters, columns,
report formats: `suite.scenario.declare.WorkloadRecord`) and the registry finds it; its code sits
beside it, builds inputs and the callable to time, and counts FLOPs and bytes. They never time.
`base` is the contract between a workload and the runner."""
