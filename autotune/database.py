"""The tuning run's database: where its results go and what an earlier run left.

Two stores, as TVM MetaSchedule's database: the JSON Lines tuning log (``records.py``: one
record per proposal, append-only) and the tuned-kernel cache (``cache.py``: the best kernel per
workload, shapes and target, with its object code). A resumed Optuna study reads its earlier
measured trials back from the log.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import numpy as np

from .cache import CacheEntry, CacheUnavailable, CacheWarning, KernelCache
from .identity import TargetId, WorkloadId
from .records import RecordWriter, TuningRecord, read_records
from .results import TrialRecord


class TuningDatabase:
    """The records of one tuning run of a workload on a target.

    Args:
        workload: the output at the tuned sizes. target: where the backend that measures runs.
        log: the JSON Lines file to append records to (None: no log).
        storage: the Optuna storage URL (None: an in-memory study, nothing to resume).
        study_name: the study's name (default ``workload.study_base()``).

    Attributes:
        earlier: the records of this study, workload and sizes already in ``log`` when the
            study is resumed (``storage`` given), oldest first.
    """

    def __init__(self, workload: WorkloadId, target: TargetId,
                 log: str | os.PathLike | None, storage: str | None,
                 study_name: str | None) -> None:
        self.workload, self.target, self.storage = workload, target, storage
        self.study_name = study_name or workload.study_base()
        self.earlier: list[TuningRecord] = []
        if storage is not None and log is not None and os.path.exists(log):
            self.earlier = [r for r in read_records(log) if r.study == self.study_name
                            and r.workload.key == workload.key
                            and r.workload.sizes == workload.sizes]
        self._writer = RecordWriter(log) if log is not None else None

    def commit(self, rec: TrialRecord) -> None:
        """Append ``rec`` to the log as a tuning record (no-op without a log)."""
        if self._writer is None:
            return
        self._writer.write(TuningRecord(
            workload=self.workload, target=self.target, schedule=json.loads(rec.trace),
            state=rec.state, seconds=rec.seconds if np.isfinite(rec.seconds) else None,
            times=[float(t) for t in rec.times], predicted=rec.predicted, trial=rec.number,
            compile_seconds=rec.compile_seconds, timestamp=rec.timestamp, error=rec.error,
            study=self.study_name if self.storage is not None else None,
            extra={k: v for k, v in (("features", rec.features), ("confirm", rec.confirm))
                   if v is not None}))

    def save_best(self, cache: Any, trace: str, seconds: float,
                  measured: Any) -> tuple[Any, bool]:
        """Store the best kernel in the tuned-kernel cache: ``cache`` is True (the default
        ``KernelCache``) or a ``KernelCache``; ``measured`` is its ``MeasureResult`` (object
        code and signature; None: the trace only). Returns (the entry, whether the cache
        changed)."""
        entry = CacheEntry(self.workload, self.target, trace, float(seconds),
                           None if measured is None else measured.signature,
                           None if measured is None else measured.object_code)
        try:
            kc = KernelCache() if cache is True else cache
        except CacheUnavailable as exc:  # the tuning result stands; only storing it failed
            warnings.warn(f"{exc}; the best kernel was not stored", CacheWarning, stacklevel=3)
            return entry, False
        try:
            return entry, kc.put(entry)
        finally:
            if kc is not cache:
                kc.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
