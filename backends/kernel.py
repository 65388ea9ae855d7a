"""``Kernel``: a compiled pipeline called on NumPy arrays.

Per call: arguments are matched to Inputs, dtypes checked (never converted silently), sizes bound
from the shapes, and every read proven in bounds for those sizes — the last two are cached per
distinct shape (a *plan*). A call that repeats the last call's shapes with exactly the arrays
the kernel takes (C-contiguous ``ndarray`` inputs, positionally or by name, no sizes by keyword)
is checked and run by the native entry (``llvm/entry.py``) without ctypes; every other call
takes the general path here, which publishes its plan to the entry.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from tensorlang.schedule.ir import LoweredFunc, print_stmt
from tensorlang.arguments import collect_arrays
from tensorlang.errors import DeviceError, ShapeError
from tensorlang.expr import Size
from tensorlang.pipeline import Pipeline

from .base import Signature
from .llvm.entry import entry_enabled, make_entry
from .llvm.jit import CompiledModule
from .llvm.runtime import apply_num_threads
from .llvm.target import host_target


_BUILD = threading.Lock()


def _address(a: np.ndarray) -> int:
    """The data address of a C-contiguous array (``c_char.from_buffer`` is ~3x cheaper than
    ``a.ctypes.data``; read-only and empty arrays take the general path)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


class Kernel:
    """A native kernel for one pipeline; one kernel runs every shape.

    Call it with the input arrays positionally (in ``kernel.input_names`` order) or by name, plus
    any size that no input fixes (``N=...``); ``out=`` writes into a given array instead of a new
    one (for a pipeline with several outputs, a tuple of arrays, one per output). Inputs must
    have exactly the declared dtype (``ShapeError`` otherwise; convert with ``astype``). A
    non-C-contiguous input is copied to a contiguous temporary first (one extra pass over it).
    ``out`` must be C-contiguous with the output's shape and dtype; when it overlaps an input (or
    another ``out`` array) the kernel computes into a temporary and copies (the kernel's
    ``noalias`` facts hold). A call that repeats the last shapes with exactly the arrays the
    kernel takes runs through its native entry (``llvm/entry.py``), the same checks made there.

    Returns (from ``__call__``):
        A C-contiguous ``numpy.ndarray`` of the output's dtype whose shape is the output Func's
        domain extents (``out`` itself when given); for several outputs, a tuple of them in the
        order the outputs were listed.

    Raises:
        ShapeError: wrong arrays (count, name, dtype, rank, inconsistent sizes, reads that would
            leave an array for these shapes), or a bad ``out``.
        MemoryError: an internal buffer could not be allocated.
        DeviceError: the kernel was compiled for a ``Target`` with instructions this CPU lacks
            (``tl.compile(..., target=...)`` of another CPU: its code is for ``object_code``,
            ``llvm-mca`` and caches, not for running here); an illegal instruction otherwise.
    """

    def __init__(self, pipeline: Pipeline, compiled: CompiledModule, signature: Signature, *,
                 lowered: LoweredFunc | None = None, schedule: Any = None,
                 schedule_source: str = "user") -> None:
        self.pipeline = pipeline
        self.signature = signature
        #: the schedule compiled (a ``tl.Schedule``; None for the default schedule)
        self.schedule = schedule
        #: where the schedule came from: ``"user"`` (given), ``"default"``, and for
        #: ``schedule="auto"``: ``"cache"`` (exact hit), ``"nearest"`` (the best tuning record of
        #: the nearest shape) or ``"heuristic"`` (no tuning record at all)
        self.schedule_source = schedule_source
        self._lowered = lowered
        self._compiled = compiled  # keeps the engine (and so the code) alive
        #: the features the kernel's code may use that this CPU lacks (checked before every
        #: call that is not the native entry's, which only a call that ran builds)
        self._missing = compiled.target.missing_features(host_target())
        n_out = len(pipeline.outputs)
        argtypes = [ctypes.c_void_p] * (signature.n_inputs + n_out) + [ctypes.c_int64] * len(
            signature.sizes)
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(compiled.address)
        self._out_dtypes = tuple(o.dtype.numpy for o in pipeline.outputs)
        self._out_names = tuple(o.name for o in pipeline.outputs)
        self._single = n_out == 1
        #: a parallel kernel sets libgomp's thread count per call (``runtime.apply_num_threads``)
        self._threads = apply_num_threads if signature.parallel else None
        self._names = tuple(i.name for i in pipeline.inputs)
        self._dtypes = tuple(i.dtype.numpy for i in pipeline.inputs)
        self._cache: dict[tuple, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        #: the native entry (``llvm.entry``): built at the first call that publishes a plan (the
        #: outputs' ranks are known then); None: not (yet) built, or none
        self._entry: Any = None
        self._native: Any = None  # its ``llvm.entry.Entry`` (descriptor and published plans)
        # (only where the inputs' shapes fix every size: a plan made with out= or N= given
        # must not run a call without them)
        fixed = {d.name for i in pipeline.inputs for d in i.shape if isinstance(d, Size)}
        self._entry_tried = not set(pipeline.sizes) <= fixed or not entry_enabled()
        #: the output shapes of the last published plan
        self._last_shapes: tuple[tuple[int, ...], ...] | None = None

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def lowered(self) -> LoweredFunc:
        """The lowered loop nest (lowered again on demand for a kernel loaded from the cache)."""
        if self._lowered is None:
            from tensorlang.schedule.lower import lower

            s = self.schedule
            self._lowered = lower(self.pipeline if s is None else s.output, s)
        return self._lowered

    @property
    def object_code(self) -> bytes | None:
        """The relocatable object file of the kernel, when it was compiled to be cached."""
        return self._compiled.object_code

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.pipeline.inputs)

    def __call__(self, *args: np.ndarray, out: Any = None,
                 **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        if self._entry is not None:  # a repeated shape: checked and run natively
            done = self.call_published(args, out, kwargs)
            if done is not None:
                return done
        if self._missing:
            raise DeviceError(
                f"kernel {self.name} was compiled for the CPU {self._compiled.target.cpu!r}, "
                f"whose instructions this CPU ({host_target().cpu!r}) lacks: "
                f"{', '.join(self._missing)}; compile it without target= (this machine) to "
                f"run it here")
        if self._threads is not None:
            self._threads()
        plain = not kwargs and len(args) == len(self._dtypes) and all(
            type(a) is np.ndarray and a.dtype == d and a.flags.c_contiguous
            for a, d in zip(args, self._dtypes))
        if plain:
            arrays = dict(zip(self._names, args))  # fast path: exactly what the kernel takes
            sizes: dict[str, int] = {}
        else:
            arrays, sizes = collect_arrays(self.pipeline, args, kwargs)
        if self._single:  # the common case, kept to the few operations it needs
            key = (tuple(a.shape for a in arrays.values()), tuple(sizes.items()),
                   None if out is None else (getattr(out, "shape", None),))
            plan = self._cache.get(key)
            if plan is None:
                plan = self._plan(arrays, sizes, None if out is None else (out,))
                self._cache[key] = plan
            (shape,), size_args = plan
            self._publish(arrays, plan[0], size_args)
            target = out
            if out is None:
                target = np.empty(shape, dtype=self._out_dtypes[0])
            else:
                self._check_out(0, out, shape)
                if any(np.may_share_memory(out, a) for a in arrays.values()):
                    target = np.empty(shape, dtype=self._out_dtypes[0])
            rc = self._fn(*[_address(a) for a in arrays.values()], _address(target), *size_args)
            if rc != 0:
                raise MemoryError(f"kernel {self.name}: an internal buffer could not be "
                                  f"allocated")
            if out is not None and target is not out:
                np.copyto(out, target)
                return out
            return target
        outs = self._outs(out)
        key = (tuple(a.shape for a in arrays.values()), tuple(sizes.items()),
               None if outs is None else tuple(getattr(o, "shape", None) for o in outs))
        plan = self._cache.get(key)
        if plan is None:
            plan = self._plan(arrays, sizes, outs)
            self._cache[key] = plan
        out_shapes, size_args = plan
        self._publish(arrays, out_shapes, size_args)
        if outs is None:
            targets = [np.empty(s, dtype=d) for s, d in zip(out_shapes, self._out_dtypes)]
        else:
            targets = []
            for k, (o, s) in enumerate(zip(outs, out_shapes)):
                self._check_out(k, o, s)
                shared = any(np.may_share_memory(o, a) for a in arrays.values()) or any(
                    np.may_share_memory(o, t) for t in targets)
                targets.append(np.empty(s, dtype=self._out_dtypes[k]) if shared else o)
        rc = self._fn(*[_address(a) for a in arrays.values()], *[_address(t) for t in targets],
                      *size_args)
        if rc != 0:
            raise MemoryError(f"kernel {self.name}: an internal buffer could not be allocated")
        if outs is not None:
            for o, t in zip(outs, targets):
                if t is not o:
                    np.copyto(o, t)
            targets = list(outs)
        return targets[0] if self._single else tuple(targets)

    def call_published(self, args: tuple[Any, ...], out: Any = None,
                       by_name: dict[str, Any] | None = None) -> Any:
        """Run ``self(*args, out=out, **by_name)`` through the native entry when the arrays
        (positionally, or all by name) match the last published plan exactly; returns what the
        call returns (the output array, or a tuple of them), or None when nothing ran (then
        call the kernel).

        Raises:
            MemoryError: the kernel ran and could not allocate an internal buffer.
        """
        entry = self._entry
        if entry is None:
            return None
        if by_name:
            if args or len(by_name) != len(self._names):  # (a size by keyword: not here)
                return None
            args = tuple([by_name.get(n) for n in self._names])
        if self._threads is not None:
            self._threads()
        if self._single:
            if out is None:
                if self._last_shapes is None:
                    return None
                out = np.empty(self._last_shapes[0], dtype=self._out_dtypes[0])
            r = entry(*args, out)
        else:
            if out is None:
                if self._last_shapes is None:
                    return None
                out = tuple([np.empty(sh, dtype=d)
                             for sh, d in zip(self._last_shapes, self._out_dtypes)])
            elif type(out) is list:
                out = tuple(out)
            elif type(out) is not tuple:
                return None
            r = entry(*args, *out)
        if r is None:
            return out
        if r:
            raise MemoryError(f"kernel {self.name}: an internal buffer could not be allocated")
        return None

    def _publish(self, arrays: dict[str, np.ndarray], shapes: tuple[tuple[int, ...], ...],
                 size_args: tuple[int, ...]) -> None:
        """Make this call's shapes (``shapes``: the outputs') the plan the native entry runs
        (building the entry first; nothing where the kernel has none)."""
        if not self._entry_tried:
            with _BUILD:  # (two threads' first calls build one entry)
                if not self._entry_tried:
                    ranks = [i.rank for i in self.pipeline.inputs] + [len(sh) for sh in shapes]
                    native = make_entry(self._compiled.address,
                                        [*self._dtypes, *self._out_dtypes], ranks,
                                        len(size_args), len(shapes))
                    self._native = native
                    self._entry = None if native is None else native.call
                    self._entry_tried = True
        if self._entry is not None:
            self._native.publish([*(a.shape for a in arrays.values()), *shapes], size_args)
            self._last_shapes = shapes

    def _outs(self, out: Any) -> tuple[Any, ...] | None:
        """``out=`` as one entry per output (None: none given)."""
        if out is None:
            return None
        if self._single:
            return (out,)
        if not isinstance(out, (tuple, list)) or len(out) != len(self._out_names):
            raise ShapeError(f"out= must be a tuple of {len(self._out_names)} arrays, one per "
                             f"output ({', '.join(self._out_names)}), got "
                             f"{type(out).__name__}" + (f" of {len(out)}" if isinstance(
                                 out, (tuple, list)) else ""))
        return tuple(out)

    def _plan(self, arrays: dict[str, np.ndarray], sizes: dict[str, int],
              outs: tuple[Any, ...] | None) -> tuple[tuple[tuple[int, ...], ...],
                                                     tuple[int, ...]]:
        given = None if outs is None else {
            n: o.shape for n, o in zip(self._out_names, outs) if isinstance(o, np.ndarray)}
        b = self.pipeline.bind({k: v.shape for k, v in arrays.items()}, sizes, given)
        out_shapes = tuple(tuple(ext for _, ext in b.bounds[n]) for n in self._out_names)
        return out_shapes, tuple(b.sizes[s] for s in self.signature.sizes)

    def _check_out(self, k: int, out: Any, shape: tuple[int, ...]) -> None:
        name, dtype = self._out_names[k], self._out_dtypes[k]
        what = "out=" if self._single else f"out[{k}] ({name})"
        if not isinstance(out, np.ndarray):
            raise ShapeError(f"{what} must be a numpy.ndarray, got {type(out).__name__}")
        if out.shape != shape:
            raise ShapeError(f"{what} has shape {out.shape} but {name} has shape {shape} for "
                             f"these inputs")
        if out.dtype != dtype:
            raise ShapeError(f"{what} has dtype {out.dtype} but {name} is {dtype}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ShapeError(f"{what} must be a writeable C-contiguous array (np.empty({shape}, "
                             f"dtype=np.{dtype}))")

    # -- inspection -------------------------------------------------------------------------------
    def loop_nest(self) -> str:
        """The lowered loop nest, Halide ``print_loop_nest`` style."""
        return print_stmt(self.lowered.body)

    def llvm_ir(self, optimized: bool = False) -> str:
        """The LLVM IR tensorlang generated (``optimized=True``: after LLVM's O3 pipeline)."""
        return self._compiled.optimized_ir if optimized else self._compiled.ir

    def assembly(self) -> str:
        """The host machine code, as assembly text."""
        return self._compiled.assembly()

    def __repr__(self) -> str:
        return f"<Kernel {self.name}({', '.join(self.input_names)})>"
