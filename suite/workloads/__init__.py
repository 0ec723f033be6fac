"""Workloads: build inputs and the callable to time, count FLOPs and bytes. They never time."""
