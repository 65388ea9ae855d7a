"""What a tuning run produces: one ``TrialRecord`` per proposal and the ``TuningResult``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tensorlang.func import Func
from tensorlang.schedule.schedule import Schedule


@dataclass
class TrialRecord:
    """One proposal: its Optuna trial number, trace, state (``measured``, ``pruned``,
    ``failed``), median seconds (``inf`` unless measured), all timed runs, compile seconds, error
    text, wall-clock time, the cost model's predicted seconds (None: no prediction) and the
    feature vector (``features.FEATURE_NAMES``; None for pruned proposals)."""

    number: int
    trace: str
    state: str
    seconds: float = float("inf")
    times: list[float] = field(default_factory=list)
    compile_seconds: float = 0.0
    error: str | None = None
    timestamp: float = field(default_factory=time.time)
    predicted: float | None = None
    features: list[float] | None = None
    #: the interleaved comparison that decided whether it became the best (``confirm``):
    #: every timed run per label (``candidate``, ``best``, ``rule-based``) and ``won``
    confirm: dict[str, Any] | None = None


@dataclass
class TuningResult:
    """The best schedule found, its median seconds, and every proposal in order."""

    output: Func
    best_trace: str | None
    best_seconds: float
    history: list[TrialRecord]
    #: the search stopped on Ctrl-C (every record up to then is kept)
    interrupted: bool = False
    #: measured trials of earlier runs of a resumed study (counted against ``trials``)
    resumed: int = 0
    #: the tuned-kernel cache entry of the best kernel, and whether it changed the cache
    cache_entry: Any = None
    cache_updated: bool = False
    #: median seconds of the heuristic schedule measured before the search (``inf``: not
    #: measured, ``heuristic="off"`` or a resumed study, or it failed)
    heuristic_seconds: float = float("inf")
    #: the best schedule beat the rule-based schedule in an interleaved comparison (or is it,
    #: or there was none to compare with); the cache is written only when True
    confirmed: bool = False
    #: the best came from another worker of a shared study (``storage=``): its Optuna trial
    #: number, screening seconds and worker (``host:pid``); verified here, not re-timed
    adopted: dict[str, Any] | None = None

    @property
    def best_schedule(self) -> Schedule | None:
        return None if self.best_trace is None else Schedule.from_json(self.output,
                                                                        self.best_trace)

    @property
    def pruned(self) -> int:
        return sum(1 for r in self.history if r.state == "pruned")

    @property
    def failed(self) -> int:
        return sum(1 for r in self.history if r.state == "failed")

    def best_so_far(self) -> list[float]:
        """Median seconds of the accepted best after each proposal (``inf`` until one is): the
        rule-based seed, or a candidate that won its interleaved confirmation."""
        out, best = [], float("inf")
        for r in self.history:
            if r.state == "measured" and (r.number < 0 or (r.confirm or {}).get("won")):
                best = r.seconds
            out.append(best)
        return out
