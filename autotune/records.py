"""Tuning records: one JSON object per line (JSON Lines), append-only, in ``tuning_logs/`` by
default (docs/architecture.md §4).

A record holds the format version, the workload (name, workload key, sizes, input shapes and
dtypes), the target (backend, triple, CPU name, LLVM feature string, LLVM / llvmlite / tensorlang
versions, threads), the schedule trace, the state (``measured``, ``pruned``, ``failed``), every
measured time in seconds (raw, as timed) and their median, the cost model's prediction
(seconds; null when the model abstained or was off), the trial number, compile seconds, a
wall-clock timestamp (Unix seconds), the error text of a pruned or failed candidate, the Optuna
study name (null without study storage) and, as extra fields, the candidate's feature vector
(``features.FEATURE_NAMES``: what transfer learning needs) and, for a candidate that screened
faster than the best, ``confirm``: its interleaved comparison with the best and the rule-based
schedule (every timed run per label, their medians, ``won``, ``beats_rule``; format 1.1).

Writing: each record is one ``write`` of one whole line to a file opened with ``O_APPEND``, then
``fsync`` — a crash or Ctrl-C loses at most the line being written, and concurrent writers never
interleave inside a line. Reading is tolerant: a torn (unterminated, unparsable) last line is
skipped with a warning; a corrupt line elsewhere is skipped with a warning naming its line;
fields this version does not know are kept (``TuningRecord.extra``) and written back unchanged;
records of an unknown *major* version are skipped with one warning per log naming the version
and the tensorlang that wrote them (a newer log in the log folder never stops tuning); a record
whose seconds are not a positive number is a corrupt line; a file with no record at all is
reported once as not a tuning log. See also: TVM's ``tvm.autotvm.record`` / MetaSchedule JSON
database (whose format changes stranded users' logs — hence the explicit version).
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator

from tensorlang.backends.base import get_backend
from tensorlang.errors import TensorlangError

from .identity import TargetId, WorkloadId

#: ``major.minor``: a reader accepts any minor of its major (newer minors only add fields).
FORMAT_VERSION = "1.1"
MAJOR = int(FORMAT_VERSION.split(".")[0])

_FIELDS = ("version", "workload", "target", "schedule", "state", "seconds", "times",
           "predicted", "trial", "compile_seconds", "timestamp", "error", "study")


class RecordError(TensorlangError):
    """A tuning log cannot be read (a record of an unknown major format version)."""


class RecordWarning(UserWarning):
    """A tuning log line was skipped (torn or corrupt)."""


def target_info(num_threads: int | None = None, backend: str | None = None) -> TargetId:
    """This machine's target as stored in records and cache keys (``Backend.target_info`` of
    ``backend``, default the LLVM CPU backend)."""
    return TargetId.from_dict(get_backend(backend).target_info(num_threads))


def workload_info(output: Any, sizes: dict[str, int], name: str | None = None) -> WorkloadId:
    """The workload as stored in records (``WorkloadId.of``).

    Raises:
        ShapeError: the sizes do not fit the algorithm.
    """
    return WorkloadId.of(output, sizes, name)


@dataclass
class TuningRecord:
    """One line of a tuning log (see the module docstring for the fields and their units)."""

    workload: WorkloadId
    target: TargetId
    schedule: Any
    state: str
    seconds: float | None = None
    times: list[float] = field(default_factory=list)
    predicted: float | None = None
    trial: int = 0
    compile_seconds: float = 0.0
    timestamp: float = field(default_factory=time.time)
    error: str | None = None
    study: str | None = None
    version: str = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def trace(self) -> str:
        """The schedule trace as JSON text (``tl.Schedule.from_json`` input)."""
        return json.dumps(self.schedule)

    @property
    def ok(self) -> bool:
        return self.state == "measured" and self.seconds is not None

    @property
    def accepted(self) -> bool:
        """The tuner took this schedule as its best when it was measured: the rule-based seed
        (trial -1), or a candidate that won its interleaved confirmation (``confirm.won``).
        Records of format 1.0 predate confirmation: every measured one counts."""
        if not self.ok:
            return False
        if self.version == "1.0":
            return True
        return self.trial < 0 or bool((self.extra.get("confirm") or {}).get("won"))

    @property
    def beats_rule(self) -> bool:
        """An accepted record that is, or was confirmed no slower than, the rule-based
        schedule (what the tuned-kernel cache may store)."""
        if not self.accepted or self.version == "1.0" or self.trial < 0:
            return self.accepted
        return bool((self.extra.get("confirm") or {}).get("beats_rule"))

    def to_json(self) -> str:
        d = {k: getattr(self, k) for k in _FIELDS}
        d["workload"], d["target"] = self.workload.to_dict(), self.target.to_dict()
        d.update(self.extra)
        return json.dumps(d, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> TuningRecord:
        """Raises: RecordError for an unknown major version; KeyError, TypeError or ValueError
        if malformed."""
        version = str(d.get("version", ""))
        major = version.split(".")[0]
        if not major.isdigit() or int(major) != MAJOR:
            by = d.get("target", {}).get("tensorlang", "an unknown version") \
                if isinstance(d.get("target"), dict) else "an unknown version"
            raise RecordError(
                f"{where}tuning record format version {version or '(none)'} was written by "
                f"tensorlang {by}; this tensorlang reads format {MAJOR}.x only. Upgrade "
                f"tensorlang to read this log (nothing in it was changed)")
        extra = {k: v for k, v in d.items() if k not in _FIELDS}
        seconds = None if d.get("seconds") is None else float(d["seconds"])
        times = [float(t) for t in d.get("times") or []]
        if seconds is not None and not 0 < seconds < math.inf:
            raise ValueError(f"seconds must be a positive number of seconds, got {seconds}")
        if any(not 0 <= t < math.inf for t in times):
            raise ValueError("times must be non-negative numbers of seconds")
        return cls(workload=WorkloadId.from_dict(d["workload"]),
                   target=TargetId.from_dict(d["target"]),
                   schedule=d["schedule"], state=str(d["state"]),
                   seconds=seconds, times=times,
                   predicted=None if d.get("predicted") is None else float(d["predicted"]),
                   trial=int(d.get("trial", 0)),
                   compile_seconds=float(d.get("compile_seconds") or 0.0),
                   timestamp=float(d.get("timestamp") or 0.0), error=d.get("error"),
                   study=d.get("study"), version=version, extra=extra)


class RecordWriter:
    """Appends records to a JSON Lines log, one ``write`` + ``fsync`` per record.

    Raises:
        OSError: the log cannot be created or written.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._repair_torn_tail()

    def _repair_torn_tail(self) -> None:
        """A line torn by a crash must not swallow the next record: start on a fresh line."""
        size = os.fstat(self._fd).st_size
        if size:
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    def write(self, record: TuningRecord) -> None:
        data = (record.to_json() + "\n").encode()
        os.write(self._fd, data)
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: corrupt lines of one log reported one by one (the rest are counted in one warning)
MAX_LINE_WARNINGS = 5


def iter_records(path: str | os.PathLike) -> Iterator[TuningRecord]:
    """The records of a log, in file order (see the module docstring for what is skipped).
    Records of an unknown major format version are skipped with one ``RecordWarning`` per log
    naming the version that wrote them (nothing in the log is changed; other logs, and tuning,
    go on). Corrupt lines are reported after the log is read, each of the first
    ``MAX_LINE_WARNINGS`` by its line and the rest counted; a file with no record at all and
    several bad lines is not a tuning log: one warning says so.

    Raises:
        OSError: the file cannot be read.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    last = len(lines) - 1  # after the final newline: b"" for a complete log
    future: list[str] = []
    bad: list[str] = []  # "line: what", in file order
    found = 0
    for n, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            d = json.loads(raw)
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            record = TuningRecord.from_dict(d, where=f"{path}:{n + 1}: ")
        except RecordError as exc:
            if not future:
                first = str(exc)
            future.append(str(n + 1))
            continue
        except (ValueError, KeyError, TypeError) as exc:
            what = "a torn last line (an interrupted write)" if n == last \
                else f"a corrupt line ({type(exc).__name__}: {exc})"
            bad.append(f"{path}:{n + 1}: skipped {what}")
            continue
        found += 1
        yield record
    if not found and not future and len(bad) > 1:
        warnings.warn(f"{path} is not a tuning log: none of its {len(bad)} lines is a record "
                      f"(the first: {bad[0].split(': skipped ', 1)[1]}); skipped",
                      RecordWarning, stacklevel=2)
        bad = []
    for text in bad[:MAX_LINE_WARNINGS]:
        warnings.warn(text, RecordWarning, stacklevel=2)
    if len(bad) > MAX_LINE_WARNINGS:
        warnings.warn(f"{path}: skipped {len(bad) - MAX_LINE_WARNINGS} more corrupt lines",
                      RecordWarning, stacklevel=2)
    if future:
        warnings.warn(f"{path}: skipped {len(future)} record(s) of a newer format (line "
                      f"{', '.join(future[:5])}{', ...' if len(future) > 5 else ''}): {first}",
                      RecordWarning, stacklevel=2)


def read_records(*paths: str | os.PathLike) -> list[TuningRecord]:
    """All records of the given logs (see ``iter_records``)."""
    return [r for p in paths for r in iter_records(p)]
