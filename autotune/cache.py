"""The tuned-kernel cache: an SQLite database mapping (workload, concrete shapes, target) to the
best schedule trace, its median seconds and the compiled object code, so a later process neither
tunes nor compiles (docs/architecture.md §4).

Location: ``$TENSORLANG_CACHE/kernels.sqlite`` (default ``~/.cache/tensorlang/``). The key is the
SHA-256 of (cache format version, workload key, sizes, input shapes and dtypes, target: triple,
CPU name, LLVM feature string, LLVM version, threads, and the tensorlang version) — a kernel is
never reused on another CPU, LLVM or tensorlang. Each row is stored with the SHA-256 of all of it
(``entry_checksum``: what it computes, the trace, the seconds, the call signature and the object
code), so a change to any byte — a signature that would call the code with the wrong arguments
as much as damaged code — makes the row corrupt, never run. Rows of another ``CACHE_VERSION``
are left alone (unreachable by key, skipped by listings).

Safety: SQLite in WAL mode, every write one ``BEGIN IMMEDIATE`` transaction that keeps the faster
of the stored and the new schedule, so two tuners sharing a cache lose nothing. A row whose
checksum, JSON or object code is bad is reported once (``CacheWarning``), deleted and rebuilt by
the caller; a file that is not an SQLite database is moved aside (``kernels.sqlite.corrupt-<t>``)
and a new one started. No cache problem raises into a user's program from ``lookup``.
See also: TVM MetaSchedule's database (keyed without the target — the mistake avoided here),
Triton's cache directory, ccache.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
import warnings
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator

from .identity import TargetId, WorkloadId

#: 2: the checksum covers the whole row (1: the object code only)
CACHE_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels (
    key TEXT PRIMARY KEY,
    cache_version INTEGER NOT NULL,
    workload_key TEXT NOT NULL,
    workload_name TEXT NOT NULL,
    sizes TEXT NOT NULL,
    shapes TEXT NOT NULL,
    dtypes TEXT NOT NULL,
    target TEXT NOT NULL,
    trace TEXT NOT NULL,
    seconds REAL NOT NULL,
    signature TEXT,
    object_code BLOB,
    checksum TEXT,
    source TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS kernels_workload ON kernels (workload_key);
"""


class CacheWarning(UserWarning):
    """A cache entry or file was bad and is being rebuilt (reported once per entry), or the cache
    can only be read."""


class CacheUnavailable(OSError):
    """The cache location cannot hold a cache (a file where the directory should be, no
    permission to create it); the message names the path and the fix."""


def cache_dir() -> str:
    """``$TENSORLANG_CACHE`` or ``~/.cache/tensorlang``."""
    return os.environ.get("TENSORLANG_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tensorlang")


@dataclass
class CacheEntry:
    """One tuned kernel: what it computes (a ``WorkloadId``: workload key, name, sizes, input
    shapes, dtypes), where it runs (a ``TargetId``), the schedule trace (JSON), its median
    seconds, the object code and call signature (None until compiled) and where it came from
    (``tune``, ``import``, ``compile``, ``nearest``)."""

    workload: WorkloadId
    target: TargetId
    trace: str
    seconds: float
    signature: dict[str, Any] | None = None
    object_code: bytes | None = field(default=None, repr=False)
    source: str = "tune"
    created: float = field(default_factory=time.time)

    @property
    def key(self) -> str:
        return entry_key(self.workload, self.target)

    @property
    def sizes(self) -> dict[str, int]:
        return self.workload.sizes


def entry_key(workload: WorkloadId, target: TargetId) -> str:
    """The cache key (SHA-256 hex) of a workload at concrete shapes on a target (its
    ``TargetId.CACHE_FIELDS``)."""
    data = {"cache": CACHE_VERSION, "workload": workload.key,
            "sizes": {k: int(v) for k, v in sorted(workload.sizes.items())},
            "shapes": {k: list(v) for k, v in sorted(workload.shapes.items())},
            "dtypes": dict(sorted(workload.dtypes.items())),
            "target": target.cache_fields()}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def entry_checksum(entry: CacheEntry) -> str:
    """SHA-256 (hex) of every stored field of ``entry`` (the object code by its own SHA-256)."""
    data = {"key": entry.key, "workload": entry.workload.to_dict(),
            "target": entry.target.to_dict(), "trace": entry.trace,
            "seconds": repr(float(entry.seconds)), "signature": entry.signature,
            "object_code": None if entry.object_code is None
            else hashlib.sha256(entry.object_code).hexdigest(),
            "source": entry.source, "created": repr(float(entry.created))}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


_REPORTED: set[str] = set()


def _warn_once(what: str, message: str) -> None:
    if what not in _REPORTED:
        _REPORTED.add(what)
        warnings.warn(message, CacheWarning, stacklevel=3)


class KernelCache:
    """The tuned-kernel cache at ``path`` (default ``cache_dir()/kernels.sqlite``).

    A cache in a directory this process cannot write (or a database file it cannot write) is
    opened read-only: lookups work, writes are skipped with one ``CacheWarning``
    (``read_only``).

    Raises:
        CacheUnavailable: the cache directory cannot be created (a file is in the way, or no
            permission).
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = os.fspath(path) if path is not None else os.path.join(cache_dir(),
                                                                          "kernels.sqlite")
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise CacheUnavailable(
                f"tensorlang cache directory {folder} cannot be created ({exc.strerror or exc}); "
                f"set TENSORLANG_CACHE to a directory this user may write") from None
        self._db: sqlite3.Connection | None = None
        #: the cache can only be read (its file or directory is not writable)
        self.read_only = False

    # -- connection ------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        for attempt in range(2):
            try:
                db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
                db.execute("PRAGMA busy_timeout = 60000")
                db.execute("PRAGMA journal_mode = WAL")
                db.executescript(_SCHEMA)
                db.execute("SELECT count(*) FROM kernels").fetchone()
                self._db = db
                return db
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc):
                    raise
                return self._connect_read_only(exc)
            except sqlite3.DatabaseError as exc:
                if attempt:
                    raise
                aside = f"{self.path}.corrupt-{int(time.time())}"
                _warn_once(self.path, f"tensorlang cache {self.path} is not a readable SQLite "
                                      f"database ({exc}); moved it to {aside} and started a new "
                                      f"one")
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(self.path + suffix):
                        os.replace(self.path + suffix, aside + suffix)
        raise AssertionError("unreachable")

    def _connect_read_only(self, exc: sqlite3.OperationalError) -> sqlite3.Connection:
        """The database opened read-only (its directory or file is not writable: SQLite could
        not create its journal), or ``CacheUnavailable`` when there is none to read."""
        if not os.path.isfile(self.path):
            raise CacheUnavailable(f"tensorlang cache {self.path} cannot be created ({exc}); set "
                                   f"TENSORLANG_CACHE to a directory this user may write")
        try:
            db = sqlite3.connect(f"file:{os.path.abspath(self.path)}?immutable=1", uri=True,
                                 isolation_level=None)
            db.execute("SELECT count(*) FROM kernels").fetchone()
        except sqlite3.DatabaseError as exc2:
            raise CacheUnavailable(f"tensorlang cache {self.path} cannot be read ({exc2})") \
                from None
        _warn_once(self.path + ":ro", f"tensorlang cache {self.path} is not writable ({exc}); "
                                      f"reading it, storing nothing")
        self.read_only = True
        self._db = db
        return db

    def _refuse_write(self) -> bool:
        """Whether a write is skipped (a read-only cache; warned once)."""
        self._connect()
        if self.read_only:
            _warn_once(self.path + ":write", f"tensorlang cache {self.path} is read-only; "
                                             f"a tuned kernel was not stored")
        return self.read_only

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> KernelCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- rows ------------------------------------------------------------------------------------
    _COLUMNS = ("key, workload_key, workload_name, sizes, shapes, dtypes, target, trace, seconds, "
                "signature, object_code, checksum, source, created")
    #: the rows this version reads (older formats are skipped, not reported corrupt)
    _CURRENT = f"cache_version = {CACHE_VERSION}"

    def _entry(self, row: tuple) -> CacheEntry | None:
        """A row as an entry; a bad row is reported once, deleted, and None returned."""
        key = row[0]
        try:
            entry = CacheEntry(
                workload=WorkloadId.from_dict({
                    "key": row[1], "name": row[2], "sizes": json.loads(row[3]),
                    "shapes": json.loads(row[4]), "dtypes": json.loads(row[5])}),
                target=TargetId.from_dict(json.loads(row[6])), trace=row[7], seconds=float(row[8]),
                signature=None if row[9] is None else json.loads(row[9]),
                object_code=None if row[10] is None else bytes(row[10]), source=row[12],
                created=float(row[13]))
            json.loads(entry.trace)
            if entry_checksum(entry) != row[11]:
                raise ValueError("checksum mismatch: a stored field changed")
            if (entry.object_code is None) != (entry.signature is None):
                raise ValueError("object code without a call signature, or the reverse")
            if entry.key != key:
                raise ValueError("the key does not match the entry (a foreign row)")
        except (ValueError, TypeError, KeyError, AttributeError, json.JSONDecodeError) as exc:
            _warn_once(f"{self.path}:{key}", f"tensorlang cache {self.path}: entry {key[:12]} is "
                                              f"corrupt ({exc}); it is removed and will be rebuilt")
            if not self.read_only:
                self._connect().execute("DELETE FROM kernels WHERE key = ?", (key,))
            return None
        return entry

    def get(self, workload: WorkloadId, target: TargetId) -> CacheEntry | None:
        """The entry for exactly this workload (sizes, shapes, dtypes) and target, or None."""
        key = entry_key(workload, target)
        row = self._connect().execute(f"SELECT {self._COLUMNS} FROM kernels WHERE key = ? AND "
                                      f"{self._CURRENT}", (key,)).fetchone()
        return None if row is None else self._entry(row)

    def entries(self, workload_key: str | None = None) -> Iterator[CacheEntry]:
        """Every valid entry (of one workload key, when given)."""
        db = self._connect()
        rows = db.execute(f"SELECT {self._COLUMNS} FROM kernels WHERE {self._CURRENT} "
                          f"ORDER BY workload_name, created").fetchall() \
            if workload_key is None else db.execute(
                f"SELECT {self._COLUMNS} FROM kernels WHERE workload_key = ? AND "
                f"{self._CURRENT} ORDER BY created", (workload_key,)).fetchall()
        for row in rows:
            e = self._entry(row)
            if e is not None:
                yield e

    def nearest(self, workload: WorkloadId, target: TargetId,
                skip: tuple[str, ...] = ()) -> CacheEntry | None:
        """The entry of the same workload key, dtypes and target whose sizes are nearest (sum
        of ``|log(a/b)|`` over the sizes), or None; entries whose key is in ``skip`` are not
        considered (one the caller already refused)."""
        best, dist, sizes = None, float("inf"), workload.sizes
        for e in self.entries(workload.key):
            if e.key in skip or e.workload.dtypes != workload.dtypes or \
                    e.target.cache_fields() != target.cache_fields():
                continue
            if set(e.sizes) != set(sizes):
                continue
            d = sum(abs(math.log(e.sizes[k] / sizes[k])) for k in sizes)
            if d < dist:
                best, dist = e, d
        return best

    def put(self, entry: CacheEntry) -> bool:
        """Store ``entry`` unless an entry at least as fast is stored (object code is added to
        an equally fast entry that lacks it). Returns whether the cache changed."""
        if not entry.seconds > 0:  # (inf: a nearest-shape entry, never preferred)
            raise ValueError(f"a cache entry's seconds must be positive, got {entry.seconds}")
        if self._refuse_write():
            return False
        db = self._connect()
        key, w = entry.key, entry.workload.to_dict()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT seconds, object_code IS NOT NULL FROM kernels WHERE key = ?",
                             (key,)).fetchone()
            if row is not None and (row[0] < entry.seconds or (
                    row[0] == entry.seconds and (row[1] or entry.object_code is None))):
                db.execute("COMMIT")
                return False
            db.execute(
                f"INSERT OR REPLACE INTO kernels (cache_version, {self._COLUMNS}) VALUES "
                f"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (CACHE_VERSION, key, w["key"], w["name"], json.dumps(w["sizes"]),
                 json.dumps(w["shapes"]), json.dumps(w["dtypes"]),
                 json.dumps(entry.target.to_dict()), entry.trace, float(entry.seconds),
                 None if entry.signature is None else json.dumps(entry.signature),
                 entry.object_code, entry_checksum(entry), entry.source, entry.created))
            db.execute("COMMIT")
            return True
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def add_object_code(self, entry: CacheEntry, object_code: bytes,
                        signature: dict[str, Any]) -> None:
        """Attach compiled object code to a stored entry that has none (or a bad one): the
        entry's row, if it still holds ``entry``'s trace, with the code, the signature and the
        checksum of the whole row."""
        if self._refuse_write():
            return
        db = self._connect()
        new = dataclasses.replace(entry, object_code=object_code, signature=signature)
        db.execute("UPDATE kernels SET object_code = ?, checksum = ?, signature = ? "
                   "WHERE key = ? AND trace = ? AND seconds = ? AND created = ?",
                   (object_code, entry_checksum(new), json.dumps(signature), entry.key,
                    entry.trace, float(entry.seconds), float(entry.created)))

    def clear(self) -> int:
        """Delete every entry; returns how many there were.

        Raises:
            CacheUnavailable: the cache is read-only."""
        db = self._connect()
        if self.read_only:
            raise CacheUnavailable(f"tensorlang cache {self.path} is read-only; nothing removed")
        n = db.execute("SELECT count(*) FROM kernels").fetchone()[0]
        db.execute("DELETE FROM kernels")
        return int(n)
