"""Write a file so that readers see the old version or the new one, never half of one.

Used for results (parquet) and reports alike: two runs rendering into the same folder at once
each leave whole files behind. A path in an object store (`suite.results.location.Remote`) gets
the object-store form of it: a unique hidden key, then a copy to the final one.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Callable

from suite.results import location


def atomic_write(path: "str | Path | location.Remote", write: Callable[[Path], object]) -> "Path | location.Remote":
    """Call write(tmp_path), fsync it, and rename it to `path` (unique tmp name: no collisions).
    A remote `path` (`suite.results.location`) is published whole the object-store way instead."""
    if isinstance(path, location.Remote):
        return path.publish(write)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path, "tmp")
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


def _tmp_sibling(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.{kind}")


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    return False  # EINVAL (a file system without it), ENOSYS: fall back to two renames


def replace_dir(path: str | Path, fill: Callable[[Path], object]) -> object:
    """Call fill(staging) on a new sibling folder, then put it in place of `path` whole: a reader
    sees the old folder or the new one, never a mix (with RENAME_EXCHANGE, never neither). A kill
    midway leaves a hidden `.<name>.<pid>.<hex>.tmp` sibling, which `remove_stale` clears."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = _tmp_sibling(path, "tmp")
    staging.mkdir()
    try:
        result = fill(staging)
        if path.exists() and _exchange(staging, path):
            shutil.rmtree(staging)  # now the old folder
        else:
            if path.exists():
                old = _tmp_sibling(path, "tmp")
                os.replace(path, old)
                os.replace(staging, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staging, path)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return result


_STALE = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp")


def remove_stale(folder: str | Path) -> list[Path]:
    """Delete the temporaries (`atomic_write`'s files, `replace_dir`'s folders) in `folder` left by
    a process of this machine that no longer exists (killed mid-write); those of live processes stay."""
    removed = []
    if isinstance(folder, location.Remote):
        return removed  # a pid of another machine means nothing here; readers skip the hidden keys
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _STALE.fullmatch(entry.name)
        if not match or _alive(int(match["pid"])):
            continue
        try:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            removed.append(entry)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process, or not a pid we can ask about: leave its files alone
    return True
