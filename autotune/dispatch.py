"""``tl.compile(F, "auto")`` without shapes: one kernel for every shape, choosing per call.

Every tensorlang kernel runs every shape; what differs between shapes is the schedule that is
fastest for them. A ``DispatchKernel`` picks one per call from the sizes the arrays bind:

- a shape seen before: the kernel it used (a dict lookup on the arrays' shapes; the
  reads are checked against a shape once, by the first call with it);
- a new shape with a tuned kernel in the cache (exact hit): that kernel, loaded
  (``compile_auto``);
- else the kernel already compiled for its *shape bucket* — every size rounded up to a power of
  two — so a stream of nearby shapes compiles once;
- else ``compile_auto`` for this shape: the nearest tuned shape's schedule (re-proven legal),
  else the rule-based one; it becomes the bucket's kernel.

Compilation is lazy (the first call of a bucket pays it) and memoized for the dispatcher's
lifetime; ``variants()`` lists what it holds. See also: TVM's dynamic-shape dispatch by
buckets (Relax ``dispatch_sort``/Nimble, Shen et al., MLSys 2021), Triton's per-key
autotuner cache.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from tensorlang.arguments import collect_arrays
from tensorlang.func import Func
from tensorlang.pipeline import Pipeline

from .records import target_info, workload_info


def shape_bucket(sizes: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """Each size rounded up to a power of two (0 and 1 stay): the bucket of a shape."""
    return tuple((k, v if v <= 1 else 1 << math.ceil(math.log2(v))) for k, v in sizes.items())


class DispatchKernel:
    """A kernel for every shape of ``output``'s algorithm (see the module docstring); called
    like a ``tl.Kernel`` (arrays positionally or by name, sizes by name, ``out=``).

    Raises (from ``__call__``):
        ShapeError: the arrays do not fit the algorithm.
    """

    def __init__(self, output: Func | Sequence[Func], compile_for: Callable[..., Any],
                 cache: Any = None, workload_name: str | None = None,
                 backend: str | None = None) -> None:
        """``compile_for(output, sizes, cache=, workload_name=, backend=)``: the kernel for
        these sizes (``compile_auto``)."""
        self.output = output
        self._compile_for = compile_for
        self.pipeline = Pipeline(output)
        self._cache, self._name, self._backend = cache, workload_name, backend
        self._by_sizes: dict[tuple, Any] = {}
        self._inputs = tuple(i.name for i in self.pipeline.inputs)
        #: the kernel of the last call: a call that matches its native entry's published plan
        #: (that call's shapes, or an earlier one's dispatched to it) runs there directly
        self._last: Any = None
        #: the kernel per (input shapes, sizes given, output shapes) of a call seen before
        self._by_shapes: dict[tuple, Any] = {}
        self._by_bucket: dict[tuple, Any] = {}
        #: per kernel held: how it was chosen and the shapes it served
        self._variants: list[dict[str, Any]] = []

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.pipeline.inputs)

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        last = self._last
        if last is not None:
            # the shapes of the last kernel's published plan: the kernel they were dispatched to
            done = last.call_published(args, out, kwargs)
            if done is not None:
                return done
        if not kwargs and len(args) == len(self._inputs) and all(
                type(a) is np.ndarray for a in args):
            # fast path: the inputs positionally, a shape seen before (the key of the general
            # path below, built from the same arrays); the kernel checks dtypes and layout
            kern = self._by_shapes.get((tuple(a.shape for a in args), (), None if out is None
                                        else self._out_shapes(out)))
            if kern is not None:
                return kern(*args, out=out)
        arrays, sizes = collect_arrays(self.pipeline, args, kwargs)
        outs = None if out is None else dict(zip((o.name for o in self.pipeline.outputs),
                                                 out if isinstance(out, (tuple, list))
                                                 and len(self.pipeline.outputs) > 1 else (out,)))
        # the arrays' shapes decide the kernel: bind (which checks every read) once per shape
        shapes = (tuple(arrays[n].shape for n in self._inputs), tuple(sorted(sizes.items())),
                  None if out is None else self._out_shapes(out))
        kern = self._by_shapes.get(shapes)
        if kern is None:
            b = self.pipeline.bind({k: v.shape for k, v in arrays.items()}, sizes,
                                   {k: np.shape(v) for k, v in (outs or {}).items()})
            key = tuple(sorted(b.sizes.items()))
            kern = self._by_sizes.get(key)
            if kern is None:
                kern = self._choose(dict(b.sizes))
                self._by_sizes[key] = kern
                next(v for v in self._variants if v["kernel"] is kern)["shapes"].append(
                    dict(key))
            self._by_shapes[shapes] = kern
        # positionally, in Input order: the kernel's fast path for exactly what it takes
        result = kern(*(arrays[n] for n in self._inputs), **sizes, out=out)
        if hasattr(kern, "call_published"):  # (a CPU kernel: its plan is this call's shapes)
            self._last = kern
        return result

    def _out_shapes(self, out: Any) -> tuple:
        """The shapes of ``out=`` (one array, or one per output), part of a call's key."""
        several = isinstance(out, (tuple, list)) and len(self.pipeline.outputs) > 1
        return tuple(np.shape(v) for v in (out if several else (out,)))

    def _choose(self, sizes: dict[str, int]) -> Any:
        bucket = shape_bucket(sizes)
        exact = self._has_exact(sizes)
        if not exact and bucket in self._by_bucket:
            return self._by_bucket[bucket]
        with warnings.catch_warnings():
            if bucket in self._by_bucket:  # (an exact hit: silent anyway)
                warnings.simplefilter("ignore")
            kern = self._compile_for(self.output, sizes, cache=self._cache,
                                     workload_name=self._name, backend=self._backend)
        self._variants.append({"kernel": kern, "source": kern.schedule_source,
                               "compiled_for": dict(sizes), "bucket": dict(bucket),
                               "shapes": []})
        if not exact:
            self._by_bucket[bucket] = kern
        return kern

    def _has_exact(self, sizes: dict[str, int]) -> bool:
        """Whether the cache holds a tuned kernel for exactly these sizes."""
        from tensorlang.backends.base import get_backend

        from .cache import KernelCache

        try:
            if self._cache is None:
                self._cache = KernelCache()
            work = workload_info(self.output, sizes, self._name)
            target = target_info(backend=get_backend(self._backend).name)
            return self._cache.get(work, target) is not None
        except Exception:  # noqa: BLE001 - an unusable cache: compile_auto reports it
            return False

    def variants(self) -> list[dict[str, Any]]:
        """The kernels held, in the order they were made: ``source`` (``"cache"``,
        ``"nearest"``, ``"heuristic"``), ``compiled_for`` (the sizes it was chosen at),
        ``bucket`` (its shape bucket; a tuned kernel serves only its exact sizes) and
        ``shapes`` (the sizes of every call it served, first call first)."""
        return [{k: v for k, v in d.items() if k != "kernel"} for d in self._variants]

    def __repr__(self) -> str:
        return (f"<DispatchKernel {self.pipeline.name}({', '.join(self.input_names)}): "
                f"{len(self._variants)} variants>")
