"""Reading files from folders the suite does not own (scenarios, results, journals, JSON to import):
only regular files, and never more than a stated size.

A FIFO named `*.toml` or `*.parquet` blocks its reader forever (issue #24: `list`, `run` and
`report` hung), and a link to /dev/zero fills memory; a socket or device is no data either. So a
file is opened without blocking (O_NONBLOCK: opening a FIFO returns at once), checked on its open
descriptor (fstat: no race between the check and the read), and refused unless it is a regular
file of at most `limit` bytes. The error is an OSError, which every reader already turns into its
one-line message naming the file ("left out ...", "cannot read scenario file: ...").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link"}


class NotARegularFile(OSError):
    """A path that is a FIFO, device, socket or folder: named, never read."""


class TooLarge(OSError):
    """A file over the size its kind may have."""


def kind(mode: int) -> str | None:
    """'a FIFO', 'a character device', ... for a file mode that is not a regular file's; else None."""
    return None if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def size_text(n: int) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n:,} bytes"


def _checked(fd: int, limit: int | None, what: str) -> os.stat_result:
    info = os.fstat(fd)
    special = kind(info.st_mode)
    if special:
        raise NotARegularFile(f"it is {special}, not a regular file (left unread)")
    if limit is not None and info.st_size > limit:
        raise TooLarge(f"it is {size_text(info.st_size)}, over the {size_text(limit)} a {what} may be")
    return info


def open_regular(path: str | Path, limit: int | None = None, what: str = "file", flags: int = os.O_RDONLY) -> int:
    """A descriptor of `path` opened with `flags`, after checking that it is a regular file of at
    most `limit` bytes (links are followed: a scenario may be a link to a regular file)."""
    fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))  # POSIX flags
    try:
        _checked(fd, limit, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file never blocks; the flag only guarded the open
    except BaseException:
        os.close(fd)
        raise
    return fd


def reader(path: str | Path, limit: int | None = None, what: str = "file") -> BinaryIO:
    """`open_regular` as a binary file object (for pyarrow, or a line at a time)."""
    return os.fdopen(open_regular(path, limit, what), "rb")


def read_bytes(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The whole of a regular file of at most `limit` bytes (one that grew past it meanwhile too)."""
    with reader(path, limit, what) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(size + 1)  # not read(limit + 1): that allocates the whole limit up front
        if len(data) > size:  # it grows while we read: read on, up to the limit
            data += f.read(limit + 1 - len(data))
    if len(data) > limit:
        raise TooLarge(f"it grew past the {size_text(limit)} a {what} may be while it was read")
    return data


def held(folder: str | Path) -> list[str]:
    """Every entry of a folder but subfolders, at any depth, as '/'-joined relative paths (links and
    special files included, never followed): what a report or export folder holds."""
    found = []
    for root, dirs, names in os.walk(folder):
        base = Path(root).relative_to(folder)
        found += [(base / n).as_posix() for n in names + [d for d in dirs if (Path(root) / d).is_symlink()]]
    return sorted(found)
