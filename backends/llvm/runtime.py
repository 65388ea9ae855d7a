"""Native runtime pieces kernels link against: the OpenMP thread pool (libgomp) and settings.

Parallel loops call ``GOMP_parallel(fn, closure, num_threads, 0)`` from the generated code: libgomp
keeps one pool of threads per process and reuses it, so a parallel region costs microseconds
(measured ~2 us here, notes B2) and threads are started and joined in native code, never from Python.
The thread count comes from ``TENSORLANG_NUM_THREADS`` (default: every CPU), read when a kernel is
compiled.

Wait policy: a pool thread with no work spins ``SPIN_COUNT`` pause instructions (tens of
microseconds), then sleeps on a futex -- libgomp's own policy when it knows the CPUs are
oversubscribed, set here through ``GOMP_SPINCOUNT`` before libgomp loads unless the user set
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``. libgomp's default (spin ~300,000 times) keeps every
pool thread runnable between regions: when another process wants a core, a pool thread is
descheduled while it holds a share of the next region and the region waits a whole scheduler
quantum. The short spin costs a futex wake when calls are further apart than the spin
(``docs/measurement.md`` has the measured trade-off); ``GOMP_SPINCOUNT=300000`` restores
libgomp's default for a machine of one's own.
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


#: pause instructions a libgomp pool thread spins before it sleeps (``GOMP_SPINCOUNT``)
SPIN_COUNT = 1000


def set_wait_policy() -> None:
    """Set ``GOMP_SPINCOUNT=SPIN_COUNT`` in this process's environment unless the user chose a
    policy (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``); libgomp reads it when it loads, and
    processes started from this one inherit it."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


@functools.cache
def load_libgomp() -> str:
    """Make libgomp's symbols resolvable by JIT-compiled code; returns the library path.

    Raises:
        CompileError: libgomp is not installed (Debian/Ubuntu: ``apt-get install libgomp1``).
    """
    init_llvm()
    set_wait_policy()
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
