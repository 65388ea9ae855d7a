"""Timing protocols that survive a shared machine: summary statistics of raw times, and
interleaved A/B rounds that compare several kernels under the same conditions.

Why interleave: on a machine other processes use, a kernel's time depends on when it ran -- a
parallel kernel whose pool thread is descheduled mid-chunk waits a whole scheduler quantum, and
a VM can run much slower for minutes (``docs/measurement.md``). Two kernels timed one after the
other can swap ranks; the same two timed in alternating blocks see the same conditions, so their
*ratio* holds even when their times do not. The tuner confirms every new best this way against
the current best and the rule-based schedule before it accepts it (``tuner.py``), and
``tensorlang bench`` / the tuning summary time tensorlang and NumPy this way. See also: Chen and
Revels, "Robust benchmarking in noisy environments" (arXiv:1608.04295, 2016), Triton's
``do_bench``.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterable

#: seconds to pause between a contender with a thread pool of its own and the others: NumPy's
#: OpenBLAS pool busy-waits after each call and slows a parallel kernel timed right after it,
#: and libgomp's pool (tensorlang's parallel loops) does the same to OpenBLAS
#: (``docs/performance.md``, "Measurements behind code choices")
SETTLE_SECONDS = 0.2
#: seconds of warm-up calls, at least, for the first block after such a pause: the cores of an
#: idle VM come back slowly (``docs/performance.md``, "Level-2 kernels")
WAKE_SECONDS = 0.05
#: seconds a timed run lasts at least where a benchmark asks for it (``interleaved``'s
#: ``min_run_seconds``): a run of a few microseconds timed alone reads its first call after other
#: code up to 1.6x slow (``docs/measurement.md``, "Kernels of microseconds")
MIN_RUN_SECONDS = 1e-3
#: most calls one timed run repeats
MAX_CALLS_PER_RUN = 10_000


@dataclass(frozen=True)
class Stats:
    """Summary of raw times in seconds: count, median, quartiles (IQR = ``q3 - q1``), extremes.

    ``Stats.of([])`` has ``n == 0`` and every statistic ``inf``."""

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float

    @classmethod
    def of(cls, times: Iterable[float]) -> Stats:
        ts = sorted(float(t) for t in times)
        if not ts:
            inf = float("inf")
            return cls(0, inf, inf, inf, inf, inf)
        if len(ts) == 1:
            return cls(1, ts[0], ts[0], ts[0], ts[0], ts[0])
        q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
        return cls(len(ts), statistics.median(ts), q1, q3, ts[0], ts[-1])

    @property
    def iqr(self) -> float:
        """Interquartile range in seconds."""
        return self.q3 - self.q1

    def spread(self) -> str:
        """``"IQR a-b ms, min-max c-d ms"`` for tables (milliseconds)."""
        if self.n == 0:
            return "-"
        return (f"IQR {self.q1 * 1e3:.3f}-{self.q3 * 1e3:.3f} ms, "
                f"min-max {self.min * 1e3:.3f}-{self.max * 1e3:.3f} ms")

    def to_dict(self) -> dict[str, float | int]:
        return {"n": self.n, "median": self.median, "q1": self.q1, "q3": self.q3,
                "min": self.min, "max": self.max}


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int = 5,
                runs: int = 3, warmup: int = 1, settle: Iterable[str] = (),
                settle_seconds: float = SETTLE_SECONDS, wake_seconds: float = WAKE_SECONDS,
                clock: Callable[[], float] = time.perf_counter,
                min_run_seconds: float = 0.0) -> dict[str, list[float]]:
    """Time several callables in alternating blocks; returns every timed run per label (seconds
    per call).

    Each of ``rounds`` rounds runs one block per contender, in an order rotated by one each
    round (so no contender always follows the same other); a block is ``warmup`` untimed runs
    (caches and pool threads warm again after the other contenders) and ``runs`` timed runs.
    Labels in ``settle`` are contenders with a thread pool of their own (NumPy's BLAS): after a
    block of one, and before a block of one that follows another label's block, the protocol
    sleeps ``settle_seconds``, so that threads still spinning from the previous block (OpenBLAS's
    after NumPy, libgomp's after a parallel kernel) do not share the CPU with the next; the
    block after a pause warms up for at least ``wake_seconds`` (its ``warmup`` calls, then more
    until that much time has passed since the pause), as the cores of an idle machine wake
    slowly.

    Args:
        contenders: label -> a callable running one call of the kernel (its result is ignored).
        rounds, runs, warmup: the protocol's shape; ``rounds * runs`` timed runs per label.
        min_run_seconds: with a value above 0, a timed run repeats the call as often as makes it
            last that long (from one timed call before the rounds, at most
            ``MAX_CALLS_PER_RUN``) and counts the run's time divided by its calls, as
            ``timeit``'s autorange does: a single call of a few microseconds timed alone carries
            the timer's and the interpreter's cost of getting there, which depends on the code
            that ran before it (``benchmarks/`` pass ``MIN_RUN_SECONDS``).

    Raises:
        ValueError: no contenders, or ``rounds`` / ``runs`` below 1.
    """
    if not contenders:
        raise ValueError("interleaved() needs at least one contender")
    if rounds < 1 or runs < 1:
        raise ValueError(f"rounds and runs must be >= 1, got rounds={rounds}, runs={runs}")
    labels = list(contenders)
    settle = set(settle)
    times: dict[str, list[float]] = {k: [] for k in labels}
    calls = {k: _calls_per_run(fn, min_run_seconds, clock) for k, fn in contenders.items()}
    previous = None
    paused = False
    for r in range(rounds):
        k0 = r % len(labels)
        for label in labels[k0:] + labels[:k0]:
            if label in settle and previous is not None and previous not in settle:
                time.sleep(settle_seconds)  # the other pool's threads stop spinning first
                paused = True
            previous = label
            fn = contenders[label]
            # after a pause, warm up for a while (the cores wake slowly): the warm-up calls
            # count towards it, so a slow kernel's one warm-up call is enough
            end = clock() + wake_seconds if paused and warmup and settle_seconds > 0 else None
            for _ in range(warmup):
                fn()
            while end is not None and clock() < end:
                fn()
            paused = False
            n = calls[label]
            for _ in range(runs):
                t0 = clock()
                for _ in range(n):
                    fn()
                times[label].append((clock() - t0) / n)
            if label in settle and len(labels) > 1:
                time.sleep(settle_seconds)
                paused = True
    return times


def _calls_per_run(fn: Callable[[], object], min_run_seconds: float,
                   clock: Callable[[], float]) -> int:
    """Calls one timed run of ``fn`` repeats so that it lasts ``min_run_seconds`` (1 when that
    is 0): from the second of two calls, the first untimed."""
    if not min_run_seconds > 0:
        return 1
    fn()
    t0 = clock()
    fn()
    seconds = clock() - t0
    if not seconds > 0:
        return MAX_CALLS_PER_RUN
    return max(1, min(MAX_CALLS_PER_RUN, math.ceil(min_run_seconds / seconds)))


def block_runs(seconds: float, block_seconds: float = 0.01, cap: int = 50) -> int:
    """Timed runs per block so that a block lasts about ``block_seconds`` (at least 2 runs, at
    most ``cap``) for a kernel of ``seconds`` per call."""
    if not seconds > 0 or seconds == float("inf"):
        return 2
    return max(2, min(cap, int(block_seconds / seconds + 0.999)))
