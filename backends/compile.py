"""The LLVM CPU backend's compile: algorithm + schedule -> loop nest -> LLVM -> a callable
``Kernel``. ``tl.compile`` (the public entry point, ``tensorlang/__init__.py``) calls it, and
resolves ``schedule="auto"`` through the autotuner first: this layer never imports the tuner."""

from __future__ import annotations

from tensorlang.errors import DefinitionError
from tensorlang.func import Func
from tensorlang.pipeline import Pipeline

from .kernel import Kernel, Signature
from .llvm.codegen import generate
from .llvm.jit import compile_ir, load_object
from .llvm.runtime import load_libgomp, num_threads
from .llvm.target import Target, host_target


def compile(output: Func, schedule: object = None, *, target: Target | None = None,  # noqa: A001
            opt_level: int = 3, check: bool = True, emit_object: bool = False) -> Kernel:
    """Compile ``output`` under ``schedule`` (a ``tl.Schedule``, or None: the default schedule)
    to a native kernel for ``target`` (default: the host CPU). Arguments, result and errors are
    ``tl.compile``'s (``tensorlang/__init__.py``, which documents them), less ``schedule="auto"``,
    which ``tl.compile`` resolves before calling this.
    """
    from tensorlang.schedule.lower import lower
    from tensorlang.schedule.schedule import Schedule

    if schedule is not None and not isinstance(schedule, Schedule):
        raise DefinitionError(f"schedule must be a tl.Schedule or \"auto\", got "
                              f"{type(schedule).__name__} (\"auto\" goes through tl.compile)")
    if not isinstance(output, Func):
        raise DefinitionError(f"tl.compile expects the output Func, got {type(output).__name__}")
    if check and schedule is not None:
        err = schedule.check().error()
        if err is not None:
            raise err
    p = schedule.pipeline if schedule is not None else Pipeline(output)
    lowered = lower(output if schedule is not None else p, schedule)
    tgt = target or host_target()
    text, parallel = generate(lowered, tgt, num_threads())
    if parallel:
        load_libgomp()
    compiled = compile_ir(text, lowered.name, tgt, opt=opt_level, what=f"kernel {lowered.name}",
                          emit_object=emit_object)
    return Kernel(p, compiled, Signature.of(lowered, parallel, num_threads()), lowered=lowered,
                  schedule=schedule, schedule_source="default" if schedule is None else "user")


def load_kernel(output: Func, schedule: object, object_code: bytes, signature: Signature, *,
                target: Target | None = None, schedule_source: str = "cache") -> Kernel:
    """A Kernel from object code made by ``compile(..., emit_object=True)``: no lowering, no LLVM.

    The caller vouches that the object code was compiled from ``schedule`` of ``output`` for
    ``target`` (the tuned-kernel cache keys on all three and checksums the bytes).

    Raises:
        CompileError: the bytes do not load.
    """
    if signature.parallel:
        load_libgomp()
    compiled = load_object(object_code, signature.name, target or host_target(),
                           what=f"kernel {signature.name}")
    p = schedule.pipeline if schedule is not None else Pipeline(output)  # type: ignore[attr-defined]
    return Kernel(p, compiled, signature, schedule=schedule, schedule_source=schedule_source)
