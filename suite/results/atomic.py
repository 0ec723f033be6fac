"""Write a file so that readers see the old version or the new one, never half of one.

Used for results (parquet) and reports alike: two runs rendering into the same folder at once
each leave whole files behind. A path in an object store (`suite.results.location.Remote`) gets
the object-store form of it: a unique hidden key, then a copy to the final one.

Temporaries are hidden siblings that say who made them, `.<name>.<machine>-<pid>.<hex>.tmp`:
`machine` is a hash of this host's name, boot id and PID namespace, since a pid names one process
only within all three (a results folder on NFS, a Kubernetes volume or a bind mount is shared with
other nodes, pods and containers, each with its own pids). `remove_stale` sweeps a temporary only
when it is provably dead (made by this machine, and its pid gone) or older than `STALE_AFTER_S`.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from suite.results import location

# No write of the suite takes a day (a report of a million records renders in about a minute), so
# a temporary untouched for that long was left by a process that is gone, wherever it ran.
STALE_AFTER_S = 24 * 3600


@dataclass(frozen=True)
class Owner:
    """Who made a temporary: the machine (`machine()`) and the process id there."""
    machine: str
    pid: int


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.readline().strip()
    except OSError:
        return ""


@functools.lru_cache(maxsize=None)
def _machine(pid: int) -> str:
    try:
        namespace = os.readlink("/proc/self/ns/pid")  # e.g. pid:[4026531836]: one per container
    except OSError:
        namespace = ""
    identity = "\0".join([socket.gethostname(), _first_line("/proc/sys/kernel/random/boot_id"), namespace])
    return hashlib.sha256(identity.encode()).hexdigest()[:8]


def machine() -> str:
    """8 hex digits naming this host, boot and PID namespace: where a pid means one process."""
    return _machine(os.getpid())  # keyed by pid: a forked child may live in a namespace of its own


def temporary_name(name: str, owner: Owner | None = None) -> str:
    """A hidden, unique name for a temporary of `name`, saying who made it."""
    owner = owner or Owner(machine(), os.getpid())
    return f".{name}.{owner.machine}-{owner.pid}.{secrets.token_hex(4)}.tmp"


STALE = re.compile(r"\.(?P<name>.+)\.(?P<machine>[0-9a-f]{8})-(?P<pid>\d+)\.[0-9a-f]{8}\.tmp")
# What an mpsuite before issue #24 named them: a pid alone, which cannot say whose it is.
LEGACY = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp")


def atomic_write(path: "str | Path | location.Remote", write: Callable[[Path], object],
                 parents: bool = True) -> "Path | location.Remote":
    """Call write(tmp_path), fsync it, and rename it to `path` (unique tmp name: no collisions).
    `parents=False` where the folder must exist already (a report's staging folder: one that
    vanished is an error, never made again). A remote `path` (`suite.results.location`) is
    published whole the object-store way instead."""
    if isinstance(path, location.Remote):
        return path.publish(write)
    path = Path(path)
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temporary_name(path.name))
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


def atomic_write_text(path: str | Path, text: str, parents: bool = True) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), parents)


def _exchange(a: Path, b: Path) -> int | None:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE): 0, or the errno (ENOENT: `b`
    is absent; EINVAL, ENOSYS: a file system or kernel without it); None without renameat2."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return None
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return 0
    return ctypes.get_errno()


class StagingVanished(OSError):
    """The folder a report was being rendered into was removed by another process midway."""


def _same(path: Path, made: os.stat_result) -> bool:
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    return (now.st_ino, now.st_dev) == (made.st_ino, made.st_dev)


# Renders that keep replacing one folder at the same moment: each attempt is one rename, so a few
# dozen means other processes won every race, which no real use comes near.
_ATTEMPTS = 50


def _swap_in(staging: Path, path: Path) -> list[Path]:
    """Put `staging` at `path`; returns the folders it displaced, now under hidden names. With
    RENAME_EXCHANGE the old folder is swapped out in the same step; without it, it is moved aside
    first. A folder another process put at `path` meanwhile is swapped out the same way."""
    displaced: list[Path] = []
    for _ in range(_ATTEMPTS):
        swapped = _exchange(staging, path)
        if swapped == 0:
            return displaced + [staging]  # staging's name now holds what was at `path`
        if swapped not in (errno.ENOENT, errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, None):
            raise OSError(swapped, os.strerror(swapped), str(path))
        try:
            os.rename(staging, path)  # nothing there (or an empty folder)
            return displaced
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        if swapped != errno.ENOENT:  # no exchange here: move the folder aside, then rename again
            aside = path.with_name(temporary_name(path.name))
            try:
                os.rename(path, aside)
                displaced.append(aside)
            except FileNotFoundError:
                pass  # another process moved it first
    raise OSError(errno.EBUSY, f"other processes kept replacing it ({_ATTEMPTS} attempts)", str(path))


def replace_dir(path: str | Path, fill: Callable[[Path], object],
                discard: Callable[[Path], object] = shutil.rmtree) -> object:
    """Call fill(staging) on a new hidden sibling folder, then put it in place of `path` whole: a
    reader sees the old folder or the new one, never a mix (with RENAME_EXCHANGE, never neither).
    The old folder, under a hidden name by then, goes to `discard`. Two calls finishing together
    into a folder that did not exist both succeed (the later one swaps out the earlier's). A staging
    folder that vanished midway fails the call (`StagingVanished`); a kill midway leaves it for
    `remove_stale`. `path` must not be a symbolic link (the caller replaces the folder it names)."""
    path = Path(path)
    if path.is_symlink():
        raise OSError(errno.ELOOP, "a symbolic link: replace the folder it points to", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(temporary_name(path.name))
    staging.mkdir()
    made = os.lstat(staging)
    try:
        result = fill(staging)
        if not _same(staging, made):
            raise FileNotFoundError(errno.ENOENT, "gone", str(staging))
        displaced = _swap_in(staging, path)
    except BaseException as err:
        if _same(staging, made):
            shutil.rmtree(staging, ignore_errors=True)
        elif isinstance(err, Exception):
            raise StagingVanished(f"{staging}: the folder being rendered into vanished midway (another process "
                                  "removed it); nothing was replaced") from err
        raise
    for old in displaced:
        discard(old)
    return result


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - os.lstat(path).st_mtime > seconds
    except OSError:
        return False


def remove_stale(folder: str | Path) -> list[Path]:
    """Delete the temporaries (`atomic_write`'s files, `replace_dir`'s folders) in `folder` that are
    provably dead: made by a process of this machine (`machine()`) that no longer exists, or left
    untouched for `STALE_AFTER_S` whoever made them. Those of other machines, namespaces or older
    mpsuites (a pid alone) stay until then: their pid means nothing here."""
    removed = []
    if isinstance(folder, location.Remote):
        return removed  # a pid of another machine means nothing here; readers skip the hidden keys
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    here = machine()
    for entry in entries:
        match = STALE.fullmatch(entry.name)
        if match is None and not LEGACY.fullmatch(entry.name):
            continue
        dead = match is not None and match["machine"] == here and not alive(int(match["pid"]))
        if not dead and not _older_than(entry, STALE_AFTER_S):
            continue
        try:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            removed.append(entry)
        except OSError:
            pass
    return removed


def alive(pid: int) -> bool:
    """Whether a process of this machine has this pid (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process, or not a pid we can ask about: leave its files alone
    return True
