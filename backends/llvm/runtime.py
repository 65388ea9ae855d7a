"""Native runtime pieces kernels link against: the OpenMP thread pool (libgomp) and settings.

Parallel loops call ``GOMP_parallel(fn, closure, 0, 0)`` from the generated code: libgomp
keeps one pool of threads per process and reuses it, so a parallel region costs microseconds
and threads are started and joined in native code, never from Python.
The thread count is read at every call of a parallel kernel (``num_threads``):
``TENSORLANG_NUM_THREADS``, else ``OMP_NUM_THREADS``, else the CPUs this process may run on (its
affinity mask: ``taskset``, cgroup cpusets), and handed to libgomp as the calling thread's
``omp_set_num_threads`` when it changed (``apply_num_threads``); the generated code asks libgomp
for the count (``0``) and its chunking adapts (``omp_get_num_threads``). The count at compile
time only informs the schedule (how many chunks a rule-based rfactor makes) and the tuned-kernel
cache key.

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
import threading
import time

import llvmlite.binding as llvm

from tensorlang.errors import CompileError

from .target import init_llvm


def num_threads() -> int:
    """Threads a parallel loop uses now: ``TENSORLANG_NUM_THREADS``, else ``OMP_NUM_THREADS``
    (its first entry), else the number of CPUs in this process's affinity mask.

    Raises:
        CompileError: a variable is set but is not a positive integer.
    """
    for var in ("TENSORLANG_NUM_THREADS", "OMP_NUM_THREADS"):
        raw = _getenv(var).strip()
        if not raw:
            continue
        try:
            n = int(raw.split(",")[0])
        except ValueError:
            n = 0
        if n < 1:
            raise CompileError(f"{var}={raw!r} must be a positive integer")
        return n
    now = time.monotonic()
    if now - _AFFINITY[0] > AFFINITY_SECONDS:  # a syscall: re-read at most this often
        try:
            _AFFINITY[:] = [now, len(os.sched_getaffinity(0)) or 1]
        except (AttributeError, OSError):  # (no affinity masks on this OS)
            _AFFINITY[:] = [now, os.cpu_count() or 1]
    return int(_AFFINITY[1])


#: how long a read of the affinity mask is reused (seconds): a kernel call must stay cheap
AFFINITY_SECONDS = 0.05
_AFFINITY: list[float] = [-1.0, 1.0]  # [when read, CPUs]


def _getenv(name: str) -> str:
    """``os.environ.get(name, "")`` without its per-call encoding (about 1.8 µs of each
    parallel kernel call): the POSIX environment's raw bytes mapping when there is one."""
    if _RAW_ENV is not None:
        v = _RAW_ENV.get(_ENV_KEYS.get(name) or name.encode())
        return "" if v is None else v.decode(errors="replace")
    return os.environ.get(name, "")


_RAW_ENV = os.environ._data if os.name == "posix" and isinstance(  # type: ignore[attr-defined]
    getattr(os.environ, "_data", None), dict) else None
_ENV_KEYS = {n: n.encode() for n in ("TENSORLANG_NUM_THREADS", "OMP_NUM_THREADS")}


_APPLIED = threading.local()  # the count this Python thread last gave libgomp


def apply_num_threads() -> int:
    """Give libgomp the current ``num_threads()`` as this thread's count for the next parallel
    region (``omp_set_num_threads``, only when it changed); returns it.

    Raises:
        CompileError: a thread-count variable is not a positive integer."""
    n = num_threads()
    if getattr(_APPLIED, "n", None) != n:
        _omp_set_num_threads()(n)
        _APPLIED.n = n
    return n


@functools.cache
def _omp_set_num_threads():
    lib = ctypes.CDLL(load_libgomp())
    fn = lib.omp_set_num_threads
    fn.argtypes, fn.restype = [ctypes.c_int], None
    return fn


def omp_max_threads() -> int:
    """libgomp's ``omp_get_max_threads()`` for this thread: the count its next parallel region
    gets."""
    fn = ctypes.CDLL(load_libgomp()).omp_get_max_threads
    fn.restype = ctypes.c_int
    return int(fn())


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
