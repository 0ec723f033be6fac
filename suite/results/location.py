"""Where results live: a local folder (a `pathlib.Path`, as always) or a URL that fsspec reaches
(`s3://bucket/prefix`, `gs://`, `az://`, ...), behind the few path operations the store uses.

`where(text)` gives a `Path` for a local path (and for `file://`, which is one) and a `Remote` for
any other URL, so the store has one code path: it joins, lists, reads and publishes through this
interface and never asks which kind it holds. fsspec (and its backend: s3fs, gcsfs, adlfs) is
imported only when a URL is used: the `remote` extra, `pip install -e .[remote]`.

An object store has no rename and no append, so the guarantees of local files are kept this way:
- a results file is created whole under its final key, never over an existing object: on a store
  that writes conditionally (`Remote.conditional`: S3's If-None-Match and If-Match, probed once per
  bucket) in one upload that the server refuses if the key is taken; elsewhere through a unique
  hidden key beside it (`.<name>.<pid>.<hex>.tmp`, which readers skip) copied to the final key
  after a look that it is free. A reader sees the whole object or none, and a failed upload leaves
  no object under the final name (`Remote.publish`);
- the same conditions keep a run to one writer (`suite.results.lease`);
- a report is rendered into a local folder and then uploaded file by file (`upload_folder`);
- a run's journal is appended on local disk (`spool`), each case fsynced as for a local run, and
  the whole journal is uploaded after each case (an object replaced whole), so a run can be resumed
  from its journal on this machine or, from the uploaded copy, on another one (`suite.results.store`).

Credentials and endpoints come from the backend's usual configuration (for S3: the AWS environment
variables or files, `AWS_ENDPOINT_URL` for an S3-compatible server such as MinIO).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable

from suite.core.errors import UserError

# scheme://rest, as RFC 3986 spells a scheme; a Windows drive (C:\) has no '//'
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)")


def is_url(text) -> bool:
    return isinstance(text, str) and _URL.fullmatch(text) is not None


def where(place: "str | Path | Remote") -> "Path | Remote":
    """The results location `place` names: a Path for a local path or a file:// URL, else a Remote."""
    if isinstance(place, (Path, Remote)):
        return place
    match = _URL.fullmatch(str(place))
    if match is None:
        return Path(place)
    if match["scheme"].lower() == "file":
        return Path(match["rest"] or "/")
    return Remote.of(match["scheme"].lower(), match["rest"])


def _filesystem(scheme: str):
    try:
        import fsspec
    except ImportError:
        raise UserError(f"results at {scheme}:// need fsspec: pip install -e .[remote]") from None
    try:
        # no listings cache: another process (a shard, a colleague) may have written since we listed
        return fsspec.filesystem(scheme, use_listings_cache=False)
    except ImportError as err:  # fsspec knows the scheme, its backend (s3fs, gcsfs, adlfs) is missing
        raise UserError(f"results at {scheme}:// need the fsspec backend for it: {err}") from None
    except ValueError as err:  # a scheme fsspec does not know
        raise UserError(f"results at {scheme}://: {err}") from None


class Remote:
    """A file or folder on an fsspec filesystem, with the pathlib operations the store uses
    (`/`, `name`, `stem`, `parent`, `exists`, `is_dir`, `is_file`, `rglob`, `read_bytes`, `open`,
    `unlink`). Its text is the URL, so messages and hints name it as the user gave it."""

    def __init__(self, scheme: str, path: str, fs):
        self.scheme, self.path, self.fs = scheme, path.rstrip("/"), fs

    @classmethod
    def of(cls, scheme: str, path: str) -> "Remote":
        if not path.strip("/"):
            raise UserError(f"{scheme}:// names no bucket or folder; expected e.g. {scheme}://bucket/prefix")
        return cls(scheme, path, _filesystem(scheme))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.path}"

    def __repr__(self) -> str:
        return f"Remote({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Remote) and (self.scheme, self.path) == (other.scheme, other.path)

    def __hash__(self) -> int:
        return hash((self.scheme, self.path))

    def __lt__(self, other: "Remote") -> bool:
        return self.path < other.path

    def __truediv__(self, part: str) -> "Remote":
        return Remote(self.scheme, f"{self.path}/{part}", self.fs)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name[1:] else self.name

    @property
    def parent(self) -> "Remote":
        return Remote(self.scheme, self.path.rsplit("/", 1)[0], self.fs) if "/" in self.path else self

    def exists(self) -> bool:
        return self.fs.exists(self.path)

    def is_dir(self) -> bool:
        return self.fs.isdir(self.path)

    def is_file(self) -> bool:
        return self.fs.isfile(self.path)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Object stores have no folders: a key's prefix exists once an object is under it."""

    def rglob(self, pattern: str) -> list["Remote"]:
        """Files under this folder, at any depth, whose name matches `pattern`."""
        try:
            found = self.fs.find(self.path)
        except FileNotFoundError:
            return []
        return [Remote(self.scheme, p, self.fs) for p in sorted(found) if fnmatch(p.rsplit("/", 1)[-1], pattern)]

    def glob(self, pattern: str) -> list["Remote"]:
        """Files directly in this folder whose name matches `pattern`."""
        return [p for p in self.rglob(pattern) if p.parent == self]

    def read_bytes(self) -> bytes:
        return self.fs.cat_file(self.path)

    def open(self, mode: str = "rb"):
        return self.fs.open(self.path, mode)

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.rm_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def put(self, local: Path) -> None:
        """Replace this object with the local file's bytes, whole (one upload: the store gives a
        reader the old object or the new one). For objects that are copies, such as a journal."""
        self.fs.put_file(str(local), self.path)

    def create(self, local: Path) -> str | None:
        """Upload the local file here unless an object is here already (FileExistsError); its ETag
        where the store writes conditionally (`conditional`: one request, If-None-Match), else None
        (fsspec's look first, then write: not safe against a writer doing the same at once)."""
        if self.conditional() is None:
            return self.create_object(Path(local).read_bytes())
        try:
            self.fs.pipe_file(self.path, Path(local).read_bytes(), mode="create")
            return None
        except TypeError:  # a backend without create mode
            pass
        if self.exists():
            raise FileExistsError(str(self))
        self.put(local)
        return None

    def conditional(self) -> str | None:
        """None where this store creates an object only if absent and replaces one only if
        unchanged, else why not. S3 (s3fs) has both (If-None-Match, If-Match), but an
        S3-compatible server may ignore them, so each bucket is probed once per process; other
        stores are not wired in (GCS would use generation match: ifGenerationMatch)."""
        if not hasattr(self.fs, "call_s3"):
            return f"{self.scheme}:// has no conditional write mpsuite uses (S3's If-None-Match and If-Match)"
        bucket = self.fs.split_path(self.path)[0]
        if (id(self.fs), bucket) not in _PROBED:
            _PROBED[id(self.fs), bucket] = _probe(self.parent / f".mpsuite-probe.{os.getpid()}.{secrets.token_hex(4)}")
        return _PROBED[id(self.fs), bucket]

    def _s3(self, method: str, **kwargs) -> dict:
        bucket, key, _ = self.fs.split_path(self.path)
        try:
            return self.fs.call_s3(method, Bucket=bucket, Key=key, **kwargs)
        except OSError as err:
            if _precondition_failed(err):
                raise (FileExistsError if "IfNoneMatch" in kwargs else Changed)(f"{self}: {err}") from None
            raise

    def create_object(self, data: bytes) -> str:
        """Write `data` here only if no object is here (FileExistsError), in one request; its ETag."""
        return self._s3("put_object", Body=data, IfNoneMatch="*")["ETag"]

    def replace_object(self, data: bytes, etag: str) -> str:
        """Replace the object here only if it is still the one with `etag` (else `Changed`); the new ETag."""
        try:
            return self._s3("put_object", Body=data, IfMatch=etag)["ETag"]
        except FileNotFoundError:
            raise Changed(f"{self}: gone") from None

    def delete_object(self, etag: str) -> None:
        """Delete the object here only if it is still the one with `etag` (else `Changed`)."""
        self._s3("delete_object", IfMatch=etag)

    def read_object(self) -> tuple[bytes, str]:
        """The object's bytes and their ETag, read as one (FileNotFoundError if there is none)."""
        with self.fs.open(self.path, "rb") as f:  # s3fs reads with If-Match on the ETag it opened
            return f.read(), f.details["ETag"]

    def publish(self, write: Callable[[Path], object]) -> "Remote":
        """Call write(local_tmp) and make that the object here, which must not exist
        (FileExistsError): no partial object under the final name whatever fails, and no object
        overwritten. Where the store writes conditionally, one create (an S3 upload is whole or
        nothing, and If-None-Match refuses a key another writer took, however late); else the
        local file goes to a unique hidden key beside this one, then is copied here if nothing is
        here yet (a look first: not safe against a writer doing the same at once)."""
        with tempfile.TemporaryDirectory(prefix="mpsuite-") as folder:
            local = Path(folder) / self.name
            write(local)
            if self.conditional() is None:
                try:
                    self.fs.put_file(str(local), self.path, mode="create")
                except OSError as err:
                    if isinstance(err, FileExistsError) or _precondition_failed(err):
                        raise FileExistsError(f"{self} exists already; results are never overwritten") from None
                    raise
                return self
            self._copy_in(local)
        return self

    def _copy_in(self, local: Path) -> None:
        tmp = self.parent / f".{self.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            tmp.put(local)
            if self.fs.size(tmp.path) != local.stat().st_size:
                raise OSError(f"{tmp}: uploaded {self.fs.size(tmp.path)} bytes of {local.stat().st_size}")
            if self.exists():
                raise FileExistsError(f"{self} exists already; results are never overwritten")
            self.fs.copy(tmp.path, self.path)
        finally:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass  # a hidden key: readers skip it


class Changed(OSError):
    """A conditional replace or delete found the object changed or gone: another writer's now."""


# (filesystem, bucket) -> None or why it cannot write conditionally (`Remote.conditional`)
_PROBED: dict[tuple[int, str], str | None] = {}


def _precondition_failed(err: BaseException) -> bool:
    """Whether a store's error says a condition did not hold (HTTP 412), or another conditional
    write to the key was in flight (409, S3's ConditionalRequestConflict)."""
    response = getattr(err.__cause__, "response", None) or {}
    code = (response.get("Error") or {}).get("Code")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412)


def _answered(err: BaseException) -> bool:
    """Whether the server answered the request (with an error), rather than the request failing."""
    return any(getattr(e, "response", None) for e in (err, err.__cause__))


def _probe(key: Remote) -> str | None:
    """Create `key` twice and replace it under a wrong ETag: a store that lets either through
    ignores the conditions (an older S3-compatible server), one that errs on them refuses them.
    The key is deleted either way; a store that cannot be written at all raises (asked again later)."""
    key.create_object(b"mpsuite: does this store honour If-None-Match and If-Match?")  # an error: no answer yet
    try:
        for condition, attempt in (("If-None-Match", lambda: key.create_object(b"again")),
                                   ("If-Match", lambda: key.replace_object(b"again", f'"{"0" * 32}"'))):
            try:
                attempt()
            except (FileExistsError, Changed):
                continue
            except Exception as err:
                if not _answered(err):
                    raise  # no answer (a network error): not a property of the store
                return f"{key.parent} refuses conditional writes ({condition}: {err})"
            return f"{key.parent} ignores conditional writes ({condition})"
        return None
    finally:
        try:
            key.unlink(missing_ok=True)
        except Exception:
            pass  # a hidden key: readers skip it


# Packages whose exceptions say the storage service could not be used (unreachable endpoint, no
# credentials, a refused request): the user's to fix, so a one-line error rather than a traceback.
_BACKENDS = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "google", "adlfs", "azure", "fsspec")


def is_storage_error(err: BaseException) -> bool:
    return any(cls.__module__.split(".")[0] in _BACKENDS for cls in type(err).__mro__[:-1])


def upload_folder(local: Path, remote: Remote, removable: Callable[[str], bool] = lambda name: True) -> list[Remote]:
    """Make `remote` hold the files of the local folder (a rendered report): each file uploaded
    whole, pages (.md, .html) last so that a page never names a plot not uploaded yet, then the
    objects the new set lacks deleted, those `removable` (given the path under `remote`) allows only.
    Not one step as a set (an object store cannot swap a prefix): while it runs a reader may see new
    plots beside the old page."""
    files = sorted((p for p in local.rglob("*") if p.is_file()), key=lambda p: (p.suffix in (".md", ".html"), str(p)))
    kept = []
    for f in files:
        target = remote / f.relative_to(local).as_posix()
        target.put(f)
        kept.append(target)
    for old in remote.rglob("*"):
        if old not in kept and removable(old.path[len(remote.path) + 1:]):
            old.unlink(missing_ok=True)
    return kept


def spool(remote: Remote) -> Path:
    """The local file where the journal whose uploaded copy is `remote` is appended while its run
    goes: `$MPSUITE_SPOOL`, else `~/.cache/mpsuite/spool`, one folder per journals folder URL."""
    base = Path(os.environ.get("MPSUITE_SPOOL") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "mpsuite" / "spool")
    text = str(remote.parent)
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60].lstrip(".")
    return base / f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:8]}" / remote.name
