"""LLVM IR text -> optimised machine code in this process (MCJIT), behind one lock.

Three roles, as numba's ``codegen.py``: the per-process target (``target.py``), the per-kernel
library built here (parse, verify, optimise with the new pass manager at O3, verify again, emit
machine code, look up the entry point), and symbol resolution (libc and libm resolve from the
process). LLVM contexts are not thread-safe, so compilation is serialised with a lock; calling
compiled kernels concurrently is fine.
"""

from __future__ import annotations

import threading
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

    def assembly(self) -> str:
        """Host assembly of the optimised module (built on demand with a fresh target machine)."""
        with _LOCK:
            mod = llvm.parse_assembly(self.optimized_ir)
            return self.target.create_target_machine().emit_assembly(mod)


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, opt: int) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pto.loop_vectorization = opt >= 2
    pto.slp_vectorization = opt >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def compile_ir(ir_text: str, entry: str, target: Target, opt: int = 3,
               what: str = "kernel") -> CompiledModule:
    """Compile LLVM IR text and return the address of function ``entry``.

    Raises:
        CompileError: LLVM rejected the IR (a tensorlang bug, reported with the failing IR line)
            or the entry point is missing; the llvmlite exception is kept as ``__cause__``.
    """
    init_llvm()
    with _LOCK:
        try:
            mod = llvm.parse_assembly(ir_text)
            mod.verify()
            tm = target.create_target_machine(opt=3)
            mod.triple = target.triple
            _optimize(mod, tm, opt)
            mod.verify()
            optimized = str(mod)
            engine = llvm.create_mcjit_compiler(mod, tm)
            engine.finalize_object()
            address = engine.get_function_address(entry)
        except RuntimeError as exc:
            raise CompileError(
                f"LLVM could not compile {what}: {str(exc).strip()}\n"
                f"(this is a tensorlang bug; please report it with the loop nest)") from exc
    if not address:
        raise CompileError(f"compiled {what} has no entry point {entry!r}")
    return CompiledModule(engine, address, ir_text, optimized, target)
