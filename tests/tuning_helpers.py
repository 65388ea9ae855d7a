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
