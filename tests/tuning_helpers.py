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


def _all_threads_on(cpus: set[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that just ended
            pass


def _pinned_hog() -> None:
    os.sched_setaffinity(0, {0})


def hog_during_rule_based(trace: str) -> None:
    """Inject a CPU hog into the rule-based schedule's screening measurement: for the trace
    ``"heuristic"`` every thread of the measuring process is moved onto CPU 0 beside three
    busy-looping processes (its parallel kernel then waits whole scheduler quanta); the next
    candidate ends the hogs and gives the process every CPU back. Linux only."""
    import subprocess
    import sys

    for p in _HOGS:
        p.kill()
        p.wait()
    if _HOGS:
        _HOGS.clear()
        _all_threads_on(set(range(os.cpu_count() or 1)))
    if trace == "heuristic":
        _all_threads_on({0})
        _HOGS.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                      preexec_fn=_pinned_hog) for _ in range(3))
        time.sleep(0.2)


class SerialRuleSpace:
    """A search space of one schedule: the rule-based schedule without its parallel loop (a
    dummy choice makes each proposal a trial). On >= 2 CPUs it is truly slower than the
    rule-based schedule, by about the CPU count."""

    def __init__(self, output, sizes, shapes) -> None:
        import json

        from autotune.heuristic import heuristic_schedule

        self.output, self.shapes = output, shapes
        trace = json.loads(heuristic_schedule(output, sizes).to_json())
        trace["steps"] = [st for st in trace["steps"] if st["op"] != "parallel"]
        self.trace = json.dumps(trace)

    def sample(self, trial):
        import tensorlang as tl

        trial.suggest_categorical("dummy", [0, 1, 2])
        return tl.Schedule.from_json(self.output, self.trace)
