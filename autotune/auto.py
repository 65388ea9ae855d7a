"""``tl.compile(F, schedule="auto", shapes=...)``: the tuned kernel from the cache, else the best
tuning record of the nearest shape, else a heuristic schedule — and the kernel says which
(``kernel.schedule_source``: ``"cache"``, ``"nearest"``, ``"heuristic"``).

- exact hit (same workload key, shapes, dtypes, target, tensorlang version): the stored object
  code is loaded (no LLVM); an entry imported from a log without object code is compiled
  once and its object code stored;
- no exact hit: the fastest entry of the same workload at the nearest sizes, re-proven legal by
  ``tl.compile``'s check, with a ``TuningWarning`` naming both shapes; the kernel is cached for
  these shapes as ``source="nearest"`` (still reported as ``"nearest"``, with the warning, and
  replaced as soon as this shape is tuned);
- nothing: ``heuristic.heuristic_schedule`` with a ``TuningWarning`` saying how to tune.

Without shapes or arrays it returns a ``DispatchKernel`` that makes this choice at each call for
the call's shapes, per shape bucket (``autotune/dispatch.py``).

A broken cache never breaks the program: a corrupt entry is reported and rebuilt (``cache.py``);
an unusable cache file is moved aside.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from tensorlang.backends.base import Signature, get_backend
from tensorlang.errors import CompileError, ScheduleError
from tensorlang.func import Func
from tensorlang.schedule.schedule import Schedule

from .cache import CacheEntry, KernelCache
from .dispatch import DispatchKernel
from .heuristic import heuristic_schedule
from .records import target_info, workload_info
from .workloads import bind_sizes, format_shape


class TuningWarning(UserWarning):
    """``schedule="auto"`` found no tuned kernel for these exact shapes (a miss is never silent)."""


#: cache problems already reported by ``compile_auto`` (each is reported once per process)
_UNUSABLE: set[str] = set()


def compile_auto(output: Func | Sequence[Func], shapes: dict[str, int] | None = None,
                 arrays: dict[str, np.ndarray] | None = None, cache: Any = None,
                 workload_name: str | None = None, backend: str | None = None) -> Any:
    """The kernel ``schedule="auto"`` gives for these sizes (see the module docstring).

    Args:
        output: the output Func (or a list of output Funcs). shapes: the sizes by name, or
            arrays: example inputs by name; neither: a ``DispatchKernel`` choosing per call
            (``autotune/dispatch.py``).
        cache: a ``KernelCache`` (default: the one at ``TENSORLANG_CACHE``).
        backend: the backend that compiles and loads the kernel (default: the LLVM CPU one).

    Raises:
        ShapeError: the sizes or arrays do not fit the algorithm.
    """
    if shapes is None and arrays is None:  # one kernel for every shape, chosen per call
        return DispatchKernel(output, compile_auto, cache, workload_name, backend)
    sizes = bind_sizes(output, shapes, arrays)
    work = workload_info(output, sizes, workload_name)
    builder = get_backend(backend)
    target = target_info(backend=builder.name)
    cmd = f"tensorlang tune FILE.py:FUNC --shape {format_shape(work.sizes)}"
    try:
        cache = cache if cache is not None else KernelCache()
        entry = cache.get(work, target)
    except Exception as exc:  # noqa: BLE001 - a cache must never break the program
        if str(exc) not in _UNUSABLE:  # once per problem, not once per kernel
            _UNUSABLE.add(str(exc))
            warnings.warn(f"tensorlang cache unusable ({exc}); compiling without it",
                          TuningWarning, stacklevel=3)
        entry, cache = None, None
    if entry is not None:
        try:
            s = Schedule.from_json(output, entry.trace)
        except ScheduleError as exc:
            warnings.warn(f"the cached schedule of {work.name} does not replay on this "
                          f"definition ({exc}); ignoring it", TuningWarning, stacklevel=3)
            s = None
        if s is not None:
            source = "nearest" if entry.source == "nearest" else "cache"
            if source == "nearest":
                warnings.warn(f"no tuned kernel of {work.name} for "
                              f"{format_shape(work.sizes)} on this machine; using the cached "
                              f"kernel compiled from the schedule of the nearest tuned shape. "
                              f"Tune this shape: {cmd}",
                              TuningWarning, stacklevel=3)
            if entry.object_code is not None and entry.signature is not None:
                try:
                    sig = Signature.from_dict(entry.signature)
                    problem = sig.mismatch(s.pipeline)
                    if problem is not None:
                        raise CompileError(f"its call signature does not fit: {problem}")
                    return builder.load(output, s, entry.object_code, sig,
                                       schedule_source=source)
                except (CompileError, KeyError, TypeError, ValueError) as exc:
                    warnings.warn(f"cached object code of {work.name} did not load ({exc}); "
                                  f"recompiling it", TuningWarning, stacklevel=3)
            try:
                kern = builder.compile(output, s, emit_object=True)
            except ScheduleError as exc:  # (IllegalScheduleError too) a trace never to trust
                warnings.warn(f"the cached schedule of {work.name} is refused ({exc}); "
                              f"ignoring it", TuningWarning, stacklevel=3)
                kern = None
            if kern is not None:
                kern.schedule_source = source
                if cache is not None and kern.object_code is not None:
                    cache.add_object_code(entry, kern.object_code, kern.signature.to_dict())
                return kern
    near = None
    if cache is not None:
        try:
            near = cache.nearest(work, target, skip=() if entry is None else (entry.key,))
        except Exception:  # noqa: BLE001
            near = None
    if near is not None:
        try:
            s = Schedule.from_json(output, near.trace)
            kern = builder.compile(output, s, emit_object=True)  # proves it legal again
            kern.schedule_source = "nearest"
            warnings.warn(f"no tuned kernel of {work.name} for "
                          f"{format_shape(work.sizes)} on this machine; using the schedule "
                          f"tuned for {format_shape(near.sizes)} ({near.seconds * 1e3:.3f} ms "
                          f"there). Tune this shape: {cmd}",
                          TuningWarning, stacklevel=3)
            if cache is not None:
                cache.put(CacheEntry(work, target, near.trace, float("inf"),
                                     kern.signature.to_dict(), kern.object_code,
                                     source="nearest"))
            return kern
        except (ScheduleError, CompileError) as exc:
            warnings.warn(f"the schedule tuned for {format_shape(near.sizes)} does not apply to "
                          f"{format_shape(work.sizes)} ({exc})", TuningWarning, stacklevel=3)
    s = builder.rule_based_schedule(output, sizes)
    if s is None:
        s = heuristic_schedule(output, sizes)
    kern = builder.compile(output, s)
    kern.schedule_source = "heuristic"
    warnings.warn(f"no tuning record for {work.name} (workload {work.key[:12]}) on this "
                  f"machine; using a heuristic schedule. Tune it: {cmd}", TuningWarning,
                  stacklevel=3)
    return kern
