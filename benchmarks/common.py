"""Timing helpers shared by the benchmarks: medians of repeated runs after warm-up."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def median_seconds(fn: Callable[[], object], repeats: int = 7, min_total: float = 0.3,
                   max_runs: int = 200) -> float:
    """Median wall time of ``fn()`` in seconds: one warm-up, then at least ``repeats`` runs and at
    least ``min_total`` seconds in all (capped at ``max_runs``)."""
    fn()
    times: list[float] = []
    while (len(times) < repeats or sum(times) < min_total) and len(times) < max_runs:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def table(rows: list[tuple], head: tuple[str, ...]) -> str:
    """A plain-text table."""
    cols = list(zip(head, *rows))
    widths = [max(len(str(c)) for c in col) for col in cols]
    line = "  ".join(str(h).rjust(w) if k else str(h).ljust(w) for k, (h, w) in
                     enumerate(zip(head, widths)))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(c).rjust(w) if k else str(c).ljust(w) for k, (c, w) in
                             enumerate(zip(r, widths))))
    return "\n".join(out)
