"""The run journal: an append-only file of JSON lines, one per finished case, made durable as each
case ends, so a crash, a kill or a power cut loses at most the case that was running.

Layout (one JSON object per line, each line ending in a newline):
    {"kind": "header", "format": 1, ...run facts...}      written when the run starts
    {"kind": "case", "record": {...one record...}}         one per finished case, in finishing order

Each line is written with a single `write` and fsynced before the next case starts. A process
killed in the middle of a write leaves an unterminated (or unparsable) last line: readers ignore
it, and reopening the journal to continue the run cuts it off first. Damage anywhere else is not
something a crash can cause, so it is reported instead of guessed around.

While a process appends to a journal it holds an exclusive `flock` on it; the kernel drops the
lock when the process dies (even by SIGKILL), so a stale lock cannot outlive its run, and two
processes can never append to the same run.

This module knows the file format only. Where journals live and when they turn into a results file
is `suite.results.store`'s business: the pipeline reaches journals through `store` alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from suite.core import files
from suite.core.jsontext import JSONLimit
from suite.core.jsonl import decode, encode
from suite.core.errors import JournalError
from suite.results import location

try:  # POSIX; without it (Windows) a journal is simply not locked
    import fcntl
except ImportError:  # pragma: no cover - exercised only off POSIX
    fcntl = None

FORMAT = 1
# A journal holds one line per case: 1 KB, up to 20 KB with thousands of samples (the committed
# reference runs), so plan.MAX_CASES (100,000) cases make at most about 2 GB. A file past this limit
# is no journal of ours (or a run far past that bound), and is refused by name rather than read
# into memory.
MAX_BYTES = 4 * 2**30


@dataclass
class Contents:
    header: dict | None
    records: list[dict] = field(default_factory=list)
    valid_bytes: int = 0  # length of the intact prefix: everything after it is a torn last line
    torn: bool = False


def parse(data: bytes, path: Path | str = "<journal>") -> Contents:
    """Header and case records of a journal's bytes; a torn last line is dropped, not an error."""
    lines = data.split(b"\n")
    # After the split, the last element is what follows the final newline: empty when intact.
    complete, tail = lines[:-1], lines[-1]
    out = Contents(header=None)
    offset = 0
    for number, line in enumerate(complete, start=1):
        try:
            obj = decode(line)
        except JSONLimit as err:  # a whole line no crash writes: refused wherever it is, never cut off
            raise JournalError(f"{path}: line {number} is refused: {err}") from None
        except (ValueError, UnicodeDecodeError) as err:
            if number == len(complete) and not tail:
                out.torn = True  # the last line was written but is garbage: killed mid-write
                break
            raise JournalError(f"{path}: line {number} is damaged ({err}); only the last line of a "
                               "journal can be cut short by a crash, so this file was changed by hand") from None
        kind = obj.get("kind")
        if number == 1:
            if kind != "header":
                raise JournalError(f"{path}: not an mpsuite run journal (line 1 is not a header)")
            if obj.get("format") != FORMAT:
                raise JournalError(f"{path}: journal format {obj.get('format')!r}; this mpsuite reads format {FORMAT}")
            out.header = obj
        elif kind == "case" and isinstance(obj.get("record"), dict) and isinstance(obj["record"].get("case_id"), str):
            out.records.append(obj["record"])
        else:
            raise JournalError(f"{path}: line {number} is not a case record")
        offset += len(line) + 1
    out.valid_bytes = offset
    out.torn = out.torn or bool(tail)
    return out


def read(path: str | Path) -> Contents:
    """Read a journal without locking it (e.g. to watch a running run from another process), or
    the uploaded copy of a remote run's journal (`suite.results.location`)."""
    path = location.where(path)
    try:
        remote = isinstance(path, location.Remote)
        data = path.read_bytes() if remote else files.read_bytes(path, MAX_BYTES, "run journal")
    except OSError as err:
        raise JournalError(f"{path}: cannot read run journal: {err}") from None
    return parse(data, path)


def has_header(path: str | Path) -> bool:
    """Whether the journal's first line is a whole header (a run killed while creating its journal
    leaves none, and cannot be resumed)."""
    path = location.where(path)
    try:
        if isinstance(path, location.Remote):
            with path.open("rb") as f:
                line = f.readline()
        else:
            with files.reader(path) as f:
                line = f.readline(1 << 20)  # a header is a few KB; a file without newlines is no journal
        return line.endswith(b"\n") and decode(line[:-1]).get("kind") == "header"
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return False


def fsync_dir(folder: Path) -> None:
    """Make a file's creation, rename or removal itself durable, not only its contents."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Journal:
    """An open journal, locked for appending. Use `create` or `resume`, then `append`, `close`."""

    def __init__(self, path: Path, fd: int, contents: Contents):
        self.path, self._fd = path, fd
        self.header: dict = contents.header or {}
        self.records: list[dict] = list(contents.records)
        self.case_ids: set[str] = {r["case_id"] for r in self.records}
        # called with the path after each durable append (the store uploads a remote run's copy)
        self.mirror: Callable[[Path], None] | None = None
        # a remote run's lease (`suite.results.lease`): this process writes the run until close
        self.lease = None

    @staticmethod
    def _lock(fd: int, path: Path) -> None:
        if fcntl is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JournalError(f"{path}: another process is running this run right now") from None

    @classmethod
    def create(cls, path: str | Path, header: dict) -> "Journal":
        """A new journal holding only `header`; fails if the file exists (run ids are unique)."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except FileExistsError:
            raise JournalError(f"{path}: a run journal with this run id already exists") from None
        except OSError as err:
            raise JournalError(f"{path}: cannot create run journal: {err}") from None
        cls._lock(fd, path)
        header = {"kind": "header", "format": FORMAT, **header}
        journal = cls(path, fd, Contents(header=header))
        try:
            journal._append_line(encode(header))
            fsync_dir(path.parent)
        except BaseException:  # no half-made journal left behind to be mistaken for a resumable run
            journal.close()
            path.unlink(missing_ok=True)
            raise
        return journal

    @classmethod
    def resume(cls, path: str | Path, check: Callable[[Contents], None] = lambda contents: None) -> "Journal":
        """Reopen an existing journal to append to it: the lock is taken first, then `check` sees
        what it holds (and may refuse it: the file is then left exactly as it was), then a torn last
        line (left by a kill) is cut off so that the next record starts on a line of its own."""
        path = Path(path)
        try:
            fd = files.open_regular(path, MAX_BYTES, "run journal", os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            raise JournalError(f"{path}: no such run journal") from None
        except OSError as err:
            raise JournalError(f"{path}: cannot open run journal: {err}") from None
        cls._lock(fd, path)
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            contents = parse(b"".join(chunks), path)
            if contents.header is None:
                raise JournalError(f"{path}: the run was stopped before its journal header was written; "
                                   "start a new run")
            check(contents)
            if contents.torn:
                os.ftruncate(fd, contents.valid_bytes)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, contents)

    def _append_line(self, line: bytes) -> None:
        try:
            _write_all(self._fd, line)
            os.fsync(self._fd)
        except OSError as err:
            raise JournalError(f"{self.path}: cannot append to run journal: {err}") from None
        if self.mirror is not None:
            self.mirror(self.path)

    def append(self, record: dict) -> None:
        """Add one finished case, durably: when this returns, the record survives a crash."""
        if record["case_id"] in self.case_ids:
            raise ValueError(f"case {record['case_id']} is already in {self.path}")
        self._append_line(encode({"kind": "case", "record": record}))
        # Keep what a reader of the file would get back (JSON round trip), not the live object.
        self.records.append(decode(encode(record)))
        self.case_ids.add(record["case_id"])

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # also releases the flock
            self._fd = -1
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.records)

