"""`env`: the versions and device a run would record."""

from __future__ import annotations

KEYS = ["python_version", "torch_version", "cuda_version", "torchao_version", "te_version", "triton_version",
        "device_name", "compute_capability", "driver_version", "git_sha"]


def main(args) -> int:
    import torch

    from suite.measure import env

    info = env.capture(env.resolve_device("auto"))
    print(" | ".join(f"{k.removesuffix('_version')} {info[k]}" for k in KEYS if info.get(k) is not None)
          + f" | cuda available {torch.cuda.is_available()}")
    return 0
