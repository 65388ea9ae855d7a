"""The LLVM CPU backend: a lowered loop nest -> LLVM IR (``codegen.py``) -> machine code for the
host CPU in this process (``jit.py``, MCJIT) -> a ``Kernel`` called through ctypes on NumPy
arrays. Parallel loops run on libgomp's thread pool (``runtime.py``); the object code the
tuned-kernel cache stores is an ELF relocatable object file.

The first implementation of ``backends.base.Backend``; ``docs/architecture.md`` ("Adding a
backend") shows what a second one writes.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tensorlang.errors import CompileError
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.ir import LoweredFunc
from tensorlang.schedule.schedule import Schedule
from tensorlang.func import Func
from tensorlang.version import __version__

from ..base import Backend, Signature
from ..kernel import Kernel
from .codegen import generate
from .memory import HUGE_ALLOC_MIN, HUGE_PAGE_BYTES
from .jit import compile_ir, load_object
from .runtime import load_libgomp, num_threads
from .target import Target, host_target


class LLVMCPUBackend(Backend):
    """Native code for the CPU this process runs on, through llvmlite (LLVM's MCJIT).

    Targets are ``backends.llvm.target.Target`` (triple, CPU name, feature string, LLVM
    version); ``workers`` is ``TENSORLANG_NUM_THREADS`` or the CPU count.
    """

    name = "llvm-cpu"
    object_format = "elf"

    def host_target(self) -> Target:
        return host_target()

    def workers(self) -> int:
        return num_threads()

    def target_info(self, workers: int | None = None) -> dict[str, Any]:
        t = host_target()
        return {"backend": self.name, "triple": t.triple, "cpu": t.cpu, "features": t.features,
                "llvm": t.llvm_version, "llvmlite": t.llvmlite_version,
                "tensorlang": __version__,
                "threads": int(workers if workers is not None else num_threads())}

    def build(self, lowered: LoweredFunc, pipeline: Pipeline, schedule: Schedule | None, *,
              target: Target | None = None, opt_level: int = 3,
              emit_object: bool = False) -> Kernel:
        tgt = target or host_target()
        threads = num_threads()
        text, parallel = generate(lowered, tgt, threads)
        if parallel:
            load_libgomp()
        compiled = compile_ir(text, lowered.name, tgt, opt=opt_level,
                              what=f"kernel {lowered.name}", emit_object=emit_object)
        return Kernel(pipeline, compiled, Signature.of(lowered, parallel, threads),
                      lowered=lowered, schedule=schedule,
                      schedule_source="default" if schedule is None else "user")

    def load(self, output: Func | Sequence[Func], schedule: Schedule | None, object_code: bytes,
             signature: Signature, *, target: Target | None = None,
             schedule_source: str = "cache") -> Kernel:
        if signature.parallel != (b"GOMP_parallel" in object_code):
            raise CompileError(f"kernel {signature.name}: the signature says parallel="
                               f"{signature.parallel} but the object code "
                               f"{'calls' if not signature.parallel else 'does not call'} "
                               f"libgomp; refusing to run it")
        if signature.parallel:
            load_libgomp()
        compiled = load_object(object_code, signature.name, target or host_target(),
                               what=f"kernel {signature.name}")
        p = schedule.pipeline if schedule is not None else Pipeline(output)
        return Kernel(p, compiled, signature, schedule=schedule, schedule_source=schedule_source)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised C-contiguous array placed as the kernels place their own buffers
        (``codegen.py``'s allocation): its data starts on a 2 MB boundary when it has at least
        ``HUGE_ALLOC_MIN`` bytes, else on a 64-byte cache line. NumPy advises arrays of >= 4 MB
        onto transparent huge pages, but only the 2 MB-aligned part of an allocation can get
        them, and where ``mmap`` puts it varies from run to run: a kernel's time on plain
        arrays depends on where they landed (``docs/measurement.md`` has the measurement), so
        the measurement harness times on these."""
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        align = HUGE_PAGE_BYTES if n >= HUGE_ALLOC_MIN else 64
        raw = np.empty(n + align, np.uint8)
        start = (-raw.ctypes.data) % align
        return raw[start:start + n].view(dt).reshape(shape)
