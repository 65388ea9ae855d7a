"""tensorlang: a Halide-style scheduling language and autotuner for Python.

The algorithm language lives here (``Var``, ``Input``, ``Func``, expressions, reducers, boundary
conditions, the NumPy reference evaluator) and imports NumPy only. This module is also the public
entry point, the one module that may reach every layer (``docs/architecture.md``): ``tl.compile``,
``tl.check``, ``tl.autotune``, ``tl.Schedule`` and ``tl.Kernel`` import their layers lazily, so
importing the language pulls in nothing else. The installed package is this one import name:
``tensorlang.schedule`` (the ``schedule/`` folder), ``tensorlang.backends`` (``backends/``) and
``tensorlang.autotuner`` (``autotune/``) are its subpackages.
"""

from __future__ import annotations

from typing import Any

from .language import (  # noqa: F401  (the language, re-exported)
    BoundaryView, CompileError, Definition, DefinitionError, DeviceError, DType, Expr, Func,
    IllegalScheduleError, Input, Pipeline, RDom, RVar, ScheduleError, ShapeError, TuningError, Size,
    TensorlangError, Update, Var, abs, binary, bool_, call, cast, clamp_edge, compare, const,
    constant_exterior, einsum, exp, float32, float64, int32, int64, log, max, maximum, min,
    minimum, prod, reference, sizes, sqrt, sum, vars, where, workload_key, floor, ceil, round,
    sin, cos, tanh, erf, pow, sigmoid, clamp, repeat_edge, repeat_image, mirror_image,
    mirror_interior, saturating_cast, int8, int16, uint8, uint16, float16, bfloat16,
)
from . import language as _language
from .version import __version__  # noqa: F401  (tensorlang.__version__)


def compile(output: Func | list[Func], schedule: Any = None, *, target: Any = None,  # noqa: A001
            opt_level: int = 3, check: bool = True, emit_object: bool = False,
            shapes: dict[str, int] | None = None, arrays: dict | None = None,
            backend: str | None = None) -> Any:
    """Compile the algorithm computing ``output`` to a native kernel (a ``tl.Kernel``) for the
    host CPU, through LLVM (or through another registered ``backend``).

    The default schedule computes every Func at root, loops in definition order (pure Vars
    outermost in left-side order, reduction Vars innermost); LLVM's O3 pipeline then vectorizes
    what it can for the host CPU (AVX-512 where present).

    Args:
        output: the output Func, or a list of output Funcs (Halide's Pipeline with several
            outputs: the kernel returns a tuple of arrays, in this order).
        schedule: a ``tl.Schedule`` of it (None: the default), or ``"auto"``: the tuned kernel
            for ``shapes`` (sizes by name) or example ``arrays`` from the tuned-kernel cache,
            else the nearest tuned shape's schedule, else the rule-based one — or, given
            neither, a dispatching kernel that makes that choice per call for the call's shapes
            (memoized per shape bucket; ``kernel.variants()`` lists what it holds)
            (``kernel.schedule_source`` says which; a miss warns with ``TuningWarning``). The
            kernel runs every shape; it is *tuned* for these.
        target: where the kernel runs: the CPU (a ``Target``; default: this machine; another
            CPU's ``Target`` gives its code, ``kernel.assembly()``, and a call on a CPU that
            lacks its instructions raises ``DeviceError``), or a CUDA GPU: ``"cuda"`` (the
            visible GPU's architecture, else ``sm_90``) or ``"cuda:sm_XY"`` (the CUDA backend,
            ``docs/gpu.md``: PTX is generated on any machine; calling the kernel needs a GPU
            and ``tensorlang[cuda]``).
            opt_level: LLVM speed level 0-3.
        check: prove the schedule legal with isl first (default). ``check=False`` is **unsafe**:
            an illegal schedule then silently computes wrong results (the autotuner never uses
            it); it only skips a few milliseconds.
        emit_object: keep the relocatable object code as ``kernel.object_code`` (for caches).
        backend: the name of a registered backend (``tensorlang.backends.get_backend``;
            default ``"llvm-cpu"``, the LLVM CPU backend).

    Returns:
        A ``Kernel``; ``kernel(A=a, B=b)`` returns a new ndarray (a tuple of them for a list
        of outputs).

    Raises:
        DefinitionError: ``output`` is not a defined Func (or list of them), or ``schedule``
            is neither a ``tl.Schedule`` nor ``"auto"``.
        IllegalScheduleError: the schedule would change the result (stage, primitive, loop,
            dependence and a witness pair of iterations in the message).
        CompileError: code generation failed (a tensorlang bug), or no backend has the name
            ``backend``.
    """
    # the entry point is the one module that may reach every layer: "auto" is the autotuner's
    # (its cache and rule-based schedule), an explicit schedule goes straight to the backend
    if backend is None and _is_cuda(target):
        backend = "cuda"
    if isinstance(schedule, str) and schedule == "auto":
        from tensorlang.autotuner.auto import compile_auto

        return compile_auto(output, shapes, arrays, backend=backend)
    from tensorlang.backends.compile import compile as backend_compile

    return backend_compile(output, schedule, backend=backend, target=target,
                           opt_level=opt_level, check=check, emit_object=emit_object)


def _is_cuda(target: Any) -> bool:
    """Whether ``target`` names a CUDA GPU (``"cuda"``, ``"cuda:sm_80"`` or a CUDATarget)."""
    if isinstance(target, str):
        return target == "cuda" or target.startswith("cuda:")
    return type(target).__name__ == "CUDATarget"


def _outputs(handle: Any) -> tuple[int, ...]:
    """The identity of an algorithm handle (a Func or a list of Funcs), for comparing two."""
    return tuple(map(id, handle)) if isinstance(handle, (list, tuple)) else (id(handle),)


def __getattr__(name: str) -> Any:
    # the entry point re-exports the other layers lazily (the language imports nothing of them)
    if name == "check":
        def check(output: Func | list[Func], schedule: Any) -> Any:
            """Prove ``schedule`` legal for ``output`` without compiling: a LegalityReport
            (``.ok``, ``.stages`` proven/refuted, ``.problems`` with witnesses)."""
            if _outputs(schedule.output) != _outputs(output):
                raise ScheduleError(f"the schedule was made for {schedule.pipeline.name}, "
                                    f"not {_language.Pipeline(output).name}")
            return schedule.check()

        return check
    if name == "autotune":
        from tensorlang.autotuner.tuner import autotune as _autotune

        return _autotune
    if name in ("Schedule", "TailStrategy"):
        import tensorlang.schedule as _schedule

        return getattr(_schedule, name)
    if name == "Kernel":
        from tensorlang.backends.kernel import Kernel

        return Kernel
    raise AttributeError(f"module 'tensorlang' has no attribute {name!r}")


__all__ = [*_language.__all__, "compile", "Schedule", "TailStrategy", "check", "autotune"]
