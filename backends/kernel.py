"""``Kernel``: a compiled pipeline called on NumPy arrays.

Per call: arguments are matched to Inputs, dtypes checked (never converted silently), sizes bound
from the shapes, and every read proven in bounds for those sizes — the last two are cached per
distinct shape, so a repeated call costs a dict lookup plus one native call.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensorlang.schedule.ir import LoweredFunc, print_stmt
from tensorlang.arguments import collect_arrays
from tensorlang.errors import ShapeError
from tensorlang.pipeline import Pipeline

from .base import Signature
from .llvm.jit import CompiledModule


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
    one. Inputs must have exactly the declared dtype (``ShapeError`` otherwise; convert with
    ``astype``). A non-C-contiguous input is copied to a contiguous temporary first (one extra pass
    over it). ``out`` must be C-contiguous with the output's shape and dtype; when it overlaps an
    input the kernel computes into a temporary and copies (the kernel's ``noalias`` facts hold).

    Returns (from ``__call__``):
        A C-contiguous ``numpy.ndarray`` of the output's dtype whose shape is the output Func's
        domain extents (``out`` itself when given).

    Raises:
        ShapeError: wrong arrays (count, name, dtype, rank, inconsistent sizes, reads that would
            leave an array for these shapes), or a bad ``out``.
        MemoryError: an internal buffer could not be allocated.
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
        argtypes = [ctypes.c_void_p] * (signature.n_inputs + 1) + [ctypes.c_int64] * len(
            signature.sizes)
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(compiled.address)
        self._out_dtype = pipeline.output.dtype.numpy
        self._names = tuple(i.name for i in pipeline.inputs)
        self._dtypes = tuple(i.dtype.numpy for i in pipeline.inputs)
        self._cache: dict[tuple, tuple[tuple[int, ...], tuple[int, ...]]] = {}

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

    def __call__(self, *args: np.ndarray, out: np.ndarray | None = None,
                 **kwargs: Any) -> np.ndarray:
        if not kwargs and len(args) == len(self._dtypes) and all(
                type(a) is np.ndarray and a.dtype == d and a.flags.c_contiguous
                for a, d in zip(args, self._dtypes)):
            arrays = dict(zip(self._names, args))  # fast path: exactly what the kernel takes
            sizes: dict[str, int] = {}
        else:
            arrays, sizes = collect_arrays(self.pipeline, args, kwargs)
        key = (tuple(a.shape for a in arrays.values()), tuple(sizes.items()),
               None if out is None else out.shape)
        plan = self._cache.get(key)
        if plan is None:
            plan = self._plan(arrays, sizes, out)
            self._cache[key] = plan
        out_shape, size_args = plan
        target = out
        if out is None:
            target = np.empty(out_shape, dtype=self._out_dtype)
        else:
            self._check_out(out, out_shape)
            if any(np.may_share_memory(out, a) for a in arrays.values()):
                target = np.empty(out_shape, dtype=self._out_dtype)
        rc = self._fn(*[_address(a) for a in arrays.values()], _address(target), *size_args)
        if rc != 0:
            raise MemoryError(f"kernel {self.name}: an internal buffer could not be allocated")
        if out is not None and target is not out:
            np.copyto(out, target)
            return out
        return target

    def _plan(self, arrays: dict[str, np.ndarray], sizes: dict[str, int],
              out: np.ndarray | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
        b = self.pipeline.bind({k: v.shape for k, v in arrays.items()}, sizes,
                               None if out is None else out.shape)
        out_shape = tuple(ext for _, ext in b.bounds[self.pipeline.output.name])
        return out_shape, tuple(b.sizes[s] for s in self.signature.sizes)

    def _check_out(self, out: np.ndarray, shape: tuple[int, ...]) -> None:
        name = self.pipeline.output.name
        if not isinstance(out, np.ndarray):
            raise ShapeError(f"out= must be a numpy.ndarray, got {type(out).__name__}")
        if out.shape != shape:
            raise ShapeError(f"out= has shape {out.shape} but {name} has shape {shape} for "
                             f"these inputs")
        if out.dtype != self._out_dtype:
            raise ShapeError(f"out= has dtype {out.dtype} but {name} is {self._out_dtype}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ShapeError(f"out= must be a writeable C-contiguous array (np.empty({shape}, "
                             f"dtype=np.{self._out_dtype}))")

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
