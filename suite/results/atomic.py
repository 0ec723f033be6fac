"""Write a file so that readers see the old version or the new one, never half of one.

Used for results (parquet) and reports alike: two runs rendering into the same folder at once
each leave whole files behind.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call write(tmp_path), fsync it, and rename it to `path` (unique tmp name: no collisions)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
