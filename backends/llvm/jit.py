"""LLVM IR text -> optimised machine code in this process (MCJIT), behind one lock.

Three roles, as numba's ``codegen.py``: the per-process target (``target.py``), the per-kernel
library built here (parse, verify, optimise with the new pass manager at O3, verify again, emit
machine code, look up the entry point), and symbol resolution (libc and libm resolve from the
process). LLVM contexts are not thread-safe, so compilation is serialised with a lock; calling
compiled kernels concurrently is fine.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import llvmlite.binding as llvm

from tensorlang.errors import CompileError

from .target import Target, init_llvm

_LOCK = threading.Lock()


@dataclass
class CompiledModule:
    """A finalised execution engine and what was built. Keep it alive while ``address`` is used."""

    engine: llvm.ExecutionEngine
    address: int
    ir: str
    optimized_ir: str
    target: Target
    object_code: bytes | None = None

    def assembly(self) -> str:
        """Host assembly of the optimised module (built on demand with a fresh target machine).

        Raises:
            CompileError: the module was loaded from object code (a cache hit) and has no IR.
        """
        if not self.optimized_ir:
            raise CompileError("this kernel was loaded from cached object code and has no IR; "
                               "compile it with tl.compile(F, schedule) to see its assembly")
        with _LOCK:
            mod = llvm.parse_assembly(self.optimized_ir)
            return self.target.create_target_machine().emit_assembly(mod)


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, opt: int) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pto.loop_vectorization = opt >= 2
    pto.slp_vectorization = opt >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


#: How many modules this process compiled with LLVM and how many it loaded from object code
#: (the tuned-kernel cache's tests assert that a cache hit compiles nothing).
STATS = {"llvm_compiles": 0, "object_loads": 0, "memo_hits": 0}

#: How many compiled modules this process keeps for reuse, least recently used first out: the
#: same IR text compiled again for the same target, entry and levels (a kernel built twice, as
#: a tuner re-measuring its best or a notebook re-running a cell does) is optimised once
MEMO_SIZE = 32
_MEMO: OrderedDict[tuple, CompiledModule] = OrderedDict()


def compile_ir(ir_text: str, entry: str, target: Target, opt: int = 3,
               what: str = "kernel", emit_object: bool = False,
               counted: bool = True, codegen_opt: int = 3) -> CompiledModule:
    """Compile LLVM IR text and return the address of function ``entry``.

    ``opt`` is the level of LLVM's IR pass pipeline (0-3; vectorizers from 2), ``codegen_opt``
    the code generator's (0 selects instructions with FastISel and allocates registers fast:
    for code that only has to be right, not fast, such as emulated GPU kernels).

    With ``emit_object=True`` the optimised module is emitted as a relocatable object file, kept
    as ``object_code``, and the entry point is loaded from it (one code generation, not two), so
    the bytes can be cached and reloaded in another process with ``load_object``.
    ``counted=False`` leaves ``STATS`` alone (runtime support code, not a kernel). The module
    of an identical earlier call still in the process's memo (``MEMO_SIZE``) is returned
    without compiling (``STATS["memo_hits"]``): machine code is immutable, so kernels share it.

    Raises:
        CompileError: LLVM rejected the IR (a tensorlang bug, reported with the failing IR line)
            or the entry point is missing; the llvmlite exception is kept as ``__cause__``.
    """
    init_llvm()
    key = (ir_text, entry, target, opt, codegen_opt, emit_object)
    with _LOCK:
        if key in _MEMO:
            _MEMO.move_to_end(key)
            STATS["memo_hits"] += counted
            return _MEMO[key]
        try:
            mod = llvm.parse_assembly(ir_text)
            mod.verify()
            tm = target.create_target_machine(opt=codegen_opt)
            mod.triple = target.triple
            _optimize(mod, tm, opt)
            mod.verify()
            optimized = str(mod)
            obj = None
            if emit_object:
                obj = bytes(tm.emit_object(mod))
                engine, address = _load(obj, entry, target)
            else:
                engine = llvm.create_mcjit_compiler(mod, tm)
                engine.finalize_object()
                address = engine.get_function_address(entry)
            STATS["llvm_compiles"] += counted
        except RuntimeError as exc:
            raise CompileError(
                f"LLVM could not compile {what}: {str(exc).strip()}\n"
                f"(this is a tensorlang bug; please report it with the loop nest)") from exc
    if not address:
        raise CompileError(f"compiled {what} has no entry point {entry!r}")
    compiled = CompiledModule(engine, address, ir_text, optimized, target, obj)
    with _LOCK:
        _MEMO[key] = compiled
        while len(_MEMO) > MEMO_SIZE:
            _MEMO.popitem(last=False)
    return compiled


def _load(obj: bytes, entry: str, target: Target) -> tuple[llvm.ExecutionEngine, int]:
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target.create_target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine, engine.get_function_address(entry)


def load_object(obj: bytes, entry: str, target: Target, what: str = "kernel") -> CompiledModule:
    """Load object code emitted by ``compile_ir(..., emit_object=True)``: no LLVM optimisation or
    code generation. External symbols (libm, libgomp) resolve now, so load
    libgomp first when the kernel has parallel loops.

    Raises:
        CompileError: the bytes are not a loadable object file or lack ``entry``.
    """
    init_llvm()
    with _LOCK:
        try:
            engine, address = _load(obj, entry, target)
        except (RuntimeError, ValueError) as exc:
            raise CompileError(f"could not load the object code of {what}: {exc}") from exc
        STATS["object_loads"] += 1
    if not address:
        raise CompileError(f"the object code of {what} has no entry point {entry!r}")
    return CompiledModule(engine, address, "", "", target, obj)
