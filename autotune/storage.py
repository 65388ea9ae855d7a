"""The Optuna study storage a tuning run shares with other workers, and its schedule claims.

Several tuners — processes on one machine or on many — join one study by giving the same
storage URL and study name (Optuna's distributed optimization: each worker's sampler sees every
worker's finished trials). ``storage_url`` turns a plain ``postgresql://`` URL into SQLAlchemy's
psycopg 3 dialect (``postgresql+psycopg://``; SQLAlchemy would otherwise load psycopg2) and
names the extra to install when the driver is missing.

``ScheduleClaims`` makes "never measure the same schedule twice" hold across workers: before a
worker compiles a candidate it inserts the schedule's SHA-256 into the table
``tensorlang_schedule_claims`` beside Optuna's tables, whose primary key is (study, schedule).
The database grants each key to exactly one insert, so of two workers that propose the same
schedule at the same moment one measures it and the other skips it. A claim is released when
its candidate is not measured after all (the trial budget ran out); the claim of a worker that
was killed while measuring stays, so that schedule is not measured in the study again.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from typing import Any

from tensorlang.errors import TuningError

__all__ = ["ScheduleClaims", "confirmed_trials", "storage_url", "redacted"]

#: the claims table (created on first use, next to Optuna's tables)
CLAIMS_TABLE = "tensorlang_schedule_claims"


def storage_url(url: str) -> str:
    """The SQLAlchemy URL of an Optuna storage URL: ``postgresql://`` and ``postgres://``
    become ``postgresql+psycopg://`` (psycopg 3, the ``tensorlang[postgres]`` extra); any other
    URL (``sqlite:///``, ``mysql+pymysql://``, an explicit ``postgresql+psycopg2://``) is
    returned unchanged.

    Raises:
        TuningError: a PostgreSQL URL without psycopg 3 installed (names the extra).
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
        return url
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise TuningError(f"the storage {redacted(url)} needs the PostgreSQL driver psycopg 3: "
                          f"pip install 'tensorlang[postgres]'") from None
    return f"postgresql+psycopg://{rest}"


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and printed output)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"


def schedule_key(trace: str) -> str:
    """The claim key of a schedule trace (64 hex digits)."""
    return hashlib.sha256(trace.encode()).hexdigest()


class ScheduleClaims:
    """The schedules claimed for measurement in one study, shared by every worker.

    Args:
        url: the SQLAlchemy URL of the study's storage (``storage_url``).
        study_name: the Optuna study. worker: this worker's name (default ``host:pid``).

    Raises:
        TuningError: the database cannot be reached or the table cannot be created.
    """

    def __init__(self, url: str, study_name: str, worker: str | None = None) -> None:
        import sqlalchemy as sa

        self.study_name = study_name
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 60}  # several processes share one file
        meta = sa.MetaData()
        self._table = sa.Table(
            CLAIMS_TABLE, meta,
            sa.Column("study_name", sa.String(512), primary_key=True),
            sa.Column("schedule_sha256", sa.String(64), primary_key=True),
            sa.Column("proposal", sa.Integer, nullable=False),
            sa.Column("worker", sa.String(256), nullable=False),
            sa.Column("claimed_at", sa.Float, nullable=False))
        self._sa = sa
        try:
            self._engine = sa.create_engine(url, **kwargs)
            try:
                meta.create_all(self._engine)
            except sa.exc.SQLAlchemyError:
                # another worker created it between the check and the CREATE
                if not sa.inspect(self._engine).has_table(CLAIMS_TABLE):
                    raise
        except sa.exc.SQLAlchemyError as exc:
            raise TuningError(f"cannot use the tuning storage {redacted(url)} for schedule "
                              f"claims: {_first_line(exc)}") from None

    def claim(self, trace: str, proposal: int) -> str | None:
        """Claim ``trace`` for this worker's proposal number ``proposal`` (informative only).
        Returns None when this worker now holds it, else who does (``"proposal 12 of
        host:pid"``)."""
        sa, t = self._sa, self._table
        key = schedule_key(trace)
        try:
            with self._engine.begin() as conn:
                conn.execute(sa.insert(t).values(
                    study_name=self.study_name, schedule_sha256=key, proposal=int(proposal),
                    worker=self.worker, claimed_at=time.time()))
            return None
        except sa.exc.IntegrityError:
            pass
        return self.owner(trace) or "another worker"

    def owner(self, trace: str) -> str | None:
        """Who holds ``trace`` (``"proposal 12 of host:pid"``), or None when nobody does."""
        sa, t = self._sa, self._table
        with self._engine.connect() as conn:
            row = conn.execute(sa.select(t.c.proposal, t.c.worker).where(
                t.c.study_name == self.study_name,
                t.c.schedule_sha256 == schedule_key(trace))).first()
        return None if row is None else f"proposal {row[0]} of {row[1]}"

    def release(self, trace: str) -> None:
        """Give back this worker's claim of ``trace`` (it was not measured)."""
        sa, t = self._sa, self._table
        with self._engine.begin() as conn:
            conn.execute(sa.delete(t).where(
                t.c.study_name == self.study_name, t.c.schedule_sha256 == schedule_key(trace),
                t.c.worker == self.worker))

    def count(self) -> int:
        """How many schedules of the study are claimed (by every worker)."""
        sa, t = self._sa, self._table
        with self._engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(t).where(
                t.c.study_name == self.study_name)).scalar_one())

    def close(self) -> None:
        self._engine.dispose()


def confirmed_trials(study: Any, target: Any) -> tuple[list[Any], int]:
    """The study's trials a worker may adopt: complete, with a schedule trace, and confirmed
    (``confirmed``: won an interleaved comparison and beat the rule-based schedule) on a
    machine like ``target`` (``TargetId.same_machine``), fastest first; and how many confirmed
    trials came from another kind of machine."""
    import optuna

    from .identity import TargetId

    same, foreign = [], 0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        a = t.user_attrs
        if not a.get("confirmed") or not isinstance(a.get("trace"), str) or t.value is None:
            continue
        try:
            like = TargetId.from_dict(a.get("target")).same_machine(target)
        except (TypeError, ValueError):
            continue
        if like:
            same.append(t)
        else:
            foreign += 1
    return sorted(same, key=lambda t: t.value), foreign


def _first_line(exc: BaseException) -> str:
    return (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0]
