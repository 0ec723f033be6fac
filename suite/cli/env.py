"""`env`: the versions and device a run would record."""

from __future__ import annotations

from suite.cli import arguments
from suite.cli.arguments import Command
from suite.cli.output import print_json
from suite.results import columns

KEYS = ["python_version", "torch_version", "cuda_version", columns.LIBRARIES, "triton_version",
        "device_name", "compute_capability", "driver_version", "git_sha"]


def main(args) -> int:
    import torch

    from suite.measure import env

    info = env.capture(env.resolve_device("auto"))
    if args.json:  # every fact a record would carry, under its column's name (docs/results-schema.md)
        print_json({**info, "cuda_available": torch.cuda.is_available()})
        return 0
    shown = columns.with_libraries(KEYS)
    print(" | ".join(f"{k.removesuffix('_version')} {info[k]}" for k in shown if info.get(k) is not None)
          + f" | cuda available {torch.cuda.is_available()}")
    return 0


COMMAND = Command("env", main, "print the versions and device a run would record", [*arguments.QUIET, *arguments.JSON])
