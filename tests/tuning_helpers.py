"""Module-level (picklable) helpers for autotuner tests."""

from __future__ import annotations

import os
import time


def crash_on_parallel(trace: str) -> None:
    """Kill the measuring process for any candidate with a parallel loop (a stand-in for a kernel
    that segfaults)."""
    if '"parallel"' in trace:
        os.abort()


def hang_on_unroll(trace: str) -> None:
    if '"unroll"' in trace:
        time.sleep(60)


_HOGS: list = []
#: how long a hog busy-loops at most, under the tuner's 60 s limit for one measurement: a
#: measurement starved past it is killed and its process replaced (two hogs per CPU and the
#: other test worker busy took it there on a 2-core machine), and the new process knows
#: nothing of its predecessor's hogs, which spun on for the rest of the test run
HOG_SECONDS = 45


def _all_threads(policy: int) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), policy, os.sched_param(0))
        except OSError:  # a thread that just ended
            pass


def hog_during_rule_based(trace: str) -> None:
    """Inject a CPU hog into the rule-based schedule's screening measurement: for the trace
    ``"heuristic"`` a busy-looping process per CPU starts (for ``HOG_SECONDS`` at most) and
    every thread of the measuring process is put in the SCHED_IDLE class (it runs only when no
    hog wants the CPU), so that measurement is inflated many times over; the next candidate ends
    the hogs and puts the threads back in SCHED_OTHER. Linux only."""
    import subprocess
    import sys

    for p in _HOGS:
        p.kill()
        p.wait()
        p.stdout.close()
    if _HOGS:
        _HOGS.clear()
        _all_threads(os.SCHED_OTHER)
    if trace == "heuristic":
        spin = f"import time\nend = time.monotonic() + {HOG_SECONDS}\nprint(flush=True)\n" \
               "while time.monotonic() < end: pass"
        _HOGS.extend(subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE)
                     for _ in range(len(os.sched_getaffinity(0))))
        # each hog says when it spins: a fixed wait was too short for an interpreter to start
        # under the suite's other worker (the measurement then ran before the hogs did)
        for p in _HOGS:
            p.stdout.readline()
        time.sleep(0.05)
        _all_threads(os.SCHED_IDLE)


class NaiveSpace:
    """A search space of one schedule, the default (naive) loop nest: a dummy choice makes each
    proposal a trial. It is several times slower than the rule-based schedule."""

    def __init__(self, output, sizes, shapes) -> None:
        self.output, self.shapes = output, shapes

    def sample(self, trial):
        import tensorlang as tl

        trial.suggest_categorical("dummy", [0, 1, 2])
        return tl.Schedule(self.output)


def crash_always(trace: str) -> None:
    """Kill the measuring process for every candidate (nothing can be measured)."""
    os.abort()
