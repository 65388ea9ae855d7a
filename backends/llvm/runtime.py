"""Native runtime pieces kernels link against: the OpenMP thread pool (libgomp) and settings.

Parallel loops call ``GOMP_parallel(fn, closure, num_threads, 0)`` from the generated code: libgomp
keeps one pool of threads per process and reuses it, so a parallel region costs microseconds
and threads are started and joined in native code, never from Python.
The thread count comes from ``TENSORLANG_NUM_THREADS`` (default: every CPU), read when a kernel is
compiled.

Wait policy: libgomp's own (idle pool threads spin a while, then sleep). On a machine other
processes keep busy, ``GOMP_SPINCOUNT=1000`` (set before the first kernel is compiled or
loaded) makes idle threads sleep almost at once, so a busy core no longer stalls every
region by a scheduler quantum; on an idle machine it costs wake-ups and thread placement
(``docs/measurement.md`` has both measurements), hence not the default.
"""

from __future__ import annotations

import ctypes.util
import functools
import os

import llvmlite.binding as llvm

from tensorlang.errors import CompileError

from .target import init_llvm


def num_threads() -> int:
    """Threads a parallel loop uses: ``TENSORLANG_NUM_THREADS`` or the CPU count.

    Raises:
        CompileError: the variable is set but is not a positive integer.
    """
    raw = os.environ.get("TENSORLANG_NUM_THREADS", "").strip()
    if not raw:
        return os.cpu_count() or 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise CompileError(f"TENSORLANG_NUM_THREADS={raw!r} must be a positive integer")
    return n


@functools.cache
def load_libgomp() -> str:
    """Make libgomp's symbols resolvable by JIT-compiled code; returns the library path.

    Raises:
        CompileError: libgomp is not installed (Debian/Ubuntu: ``apt-get install libgomp1``).
    """
    init_llvm()
    candidates = [ctypes.util.find_library("gomp"), "libgomp.so.1", "libgomp.dylib"]
    for name in candidates:
        if not name:
            continue
        try:
            llvm.load_library_permanently(name)
            return name
        except RuntimeError:
            continue
    raise CompileError("parallel loops need the OpenMP runtime libgomp, which was not found; "
                       "install it (Debian/Ubuntu: apt-get install libgomp1) or remove "
                       "parallel() from the schedule")
