"""One writer per run in an object store: a run's lease, an object beside its journal
(`<url>/<scenario>/_journals/<run_id>.lease`), is what a local journal's `flock` is on one machine.

The lease is created only if absent (S3's If-None-Match: one request, so of two processes taking it
at once exactly one gets it), before the run measures anything; a process that finds it held exits
with one line naming the holder. The holder renews it after each case and before writing the run's
results, replacing it only if it is still the object it wrote (If-Match on its ETag), and uploads
the journal the same way, so a process that lost the run (its lease taken over) finds out at its
next write and stops instead of overwriting. It is deleted when the run ends or its process exits
(the run finished, stopped, or failed).

A lease of a process that died (SIGKILL, a lost node) cannot be released by it: it lapses
`LEASE_S` after its last renewal, and one whose process was on this machine and is gone lapses at
once; a lapsed lease is taken over by replacing it under the ETag it was read with (so of two
taking it over, one wins). Deleting the lease object by hand hands the run over at once: the
refusal names it. Lapsing compares the lease's time with this machine's clock.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
from datetime import datetime, timedelta, timezone

from suite.core.errors import JournalError
from suite.core.text import printable
from suite.results import atomic, location

# A run renews its lease after each case: a case (a setting's cases, timed together) taking longer
# than this lets another process take the run over once it asks; this one then stops at its next
# write. Longer than any case of a scenario we ship, short enough that a dead node's run is not
# locked for long.
LEASE_S = 1800
# A lease is a few hundred bytes; anything far larger is no lease of ours.
MAX_BYTES = 1 << 16


class Held(JournalError):
    """Another process holds the run's lease: it is writing the run."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _body(token: str) -> bytes:
    now = _now()
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "machine": atomic.machine(),
                       "token": token, "renewed_at": now.isoformat(timespec="seconds"),
                       "expires_at": (now + timedelta(seconds=LEASE_S)).isoformat(timespec="seconds")}).encode()


def _holder(data: bytes) -> dict:
    """The lease's fields; {} for an object that is no lease of ours (it then never lapses)."""
    try:
        held = json.loads(data) if len(data) <= MAX_BYTES else {}
    except ValueError:
        return {}
    return held if isinstance(held, dict) else {}


def _time(held: dict, key: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(held[key])
    except (KeyError, TypeError, ValueError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _lapsed(held: dict) -> str | None:
    """Why a lease no longer holds (its time is up, or its process on this machine is gone), or None."""
    until = _time(held, "expires_at")
    if until is not None and until < _now():
        return f"it lapsed at {until:%Y-%m-%d %H:%M:%S} UTC"
    pid = held.get("pid")
    if held.get("machine") == atomic.machine() and isinstance(pid, int) and not atomic.alive(pid):
        return f"its process {pid} on this machine is gone"
    return None


def describe(held: dict) -> str:
    """Who holds a lease, and until when, as one line (its fields made safe for a terminal)."""
    if not held:
        return "an object that is no mpsuite lease"
    renewed, until = _time(held, "renewed_at"), _time(held, "expires_at")
    return (f"process {printable(str(held.get('pid')))} on host {printable(str(held.get('host')))}"
            + (f", lease renewed {renewed:%Y-%m-%d %H:%M:%S} UTC" if renewed else "")
            + (f", until {until:%Y-%m-%d %H:%M:%S} UTC" if until else ""))


class Lease:
    """This process's lease on a run, and the ETag of the run's journal as this process last wrote
    or read it: `take`, then `upload` after each case, `release`."""

    def __init__(self, remote: location.Remote, journal: location.Remote, etag: str, token: str):
        self.remote, self.journal, self.etag, self.token = remote, journal, etag, token
        self.journal_etag: str | None = None

    @classmethod
    def take(cls, remote: location.Remote, journal: location.Remote, run: str) -> "Lease":
        """The run's lease, created or taken over from a lapsed one; `Held` if another process holds it."""
        token = secrets.token_hex(8)
        for _ in range(3):  # created, or read; gone again before it was read (released): once more
            try:
                return cls(remote, journal, remote.create_object(_body(token)), token)
            except FileExistsError:
                pass
            try:
                data, etag = remote.read_object()
            except FileNotFoundError:
                continue
            held = _holder(data)
            if held.get("token") == token:  # our create went through though its answer was lost
                return cls(remote, journal, etag, token)
            why = _lapsed(held)
            if why is None:
                raise Held(f"run {run} is being written by {describe(held)} ({remote}); if that process is gone, "
                           "delete that object, or wait until the lease lapses, and resume again")
            try:
                etag = remote.replace_object(_body(token), etag)
            except location.Changed:
                continue  # another process took it over first: read who
            print(f"mpsuite: taking run {run} over from {describe(held)}: {why}", file=sys.stderr)
            return cls(remote, journal, etag, token)
        raise Held(f"run {run}: its lease {remote} keeps changing hands; another process is taking the run")

    def renew(self) -> None:
        """Extend the lease, if it is still ours; `Held` naming the new holder if it is not."""
        try:
            if self.etag is not None:  # None: lost (or released) already
                self.etag = self.remote.replace_object(_body(self.token), self.etag)
                return
        except location.Changed:
            pass
        try:
            data, etag = self.remote.read_object()
            held = _holder(data)
        except FileNotFoundError:
            etag, held = None, None
        if held is not None and held.get("token") == self.token:  # our last renewal went through, its answer lost
            self.etag = self.remote.replace_object(_body(self.token), etag)
            return
        self.etag = None  # not ours to release
        raise Held(f"{self.remote}: this process lost the run's lease, now held by "
                   f"{describe(held) if held is not None else 'no one (it was deleted)'}; "
                   "it stops without writing more") from None

    def upload(self, data: bytes) -> None:
        """The journal's bytes in place of the copy this process last wrote, the lease renewed
        first: `Held` if another process has the run now."""
        self.renew()
        try:
            if self.journal_etag is None:
                self.journal_etag = self.journal.create_object(data)
            else:
                self.journal_etag = self.journal.replace_object(data, self.journal_etag)
        except (FileExistsError, location.Changed):
            raise Held(f"{self.journal}: the run journal was changed by another process; this one stops "
                       "without writing more") from None

    def release(self) -> None:
        """Delete the lease if it is still ours (once; a lease taken over is left to its holder).
        Read first, then deleted under the ETag read (where the server takes a condition on DELETE)."""
        etag, self.etag = self.etag, None
        if etag is None:
            return
        try:
            data, etag = self.remote.read_object()
            if _holder(data).get("token") != self.token:
                return
            try:
                self.remote.delete_object(etag)
            except (location.Changed, FileNotFoundError):
                pass
            except OSError:  # a server without conditional DELETE: the lease was ours a moment ago
                self.remote.unlink(missing_ok=True)
        except FileNotFoundError:
            pass
        except Exception as err:  # any backend's error: it lapses by itself
            print(f"mpsuite: warning: cannot release the run's lease {self.remote} ({err}); it lapses within "
                  f"{LEASE_S // 60} minutes", file=sys.stderr)
