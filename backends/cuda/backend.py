"""The CUDA backend: a lowered loop nest -> device kernels in PTX (LLVM's NVPTX back end,
``codegen.DeviceGen``) and a host program in machine code for this CPU (``codegen.HostGen``)
-> a ``CUDAKernel`` that runs them through the CUDA driver (``driver.py``).

``tl.compile(F, s, target="cuda")`` (or ``backend="cuda"``) selects it. Compiling needs no GPU:
the PTX is generated on any machine (``kernel.ptx()``) and the test suite checks it with
``ptxas``; only calling the kernel needs a GPU and ``tensorlang[cuda]``. The object code the
tuned-kernel cache keeps is a bundle of the PTX and the host program's ELF object, so a cache
hit reloads both without LLVM.

See also: ``backends/base.py`` (the interface), ``docs/gpu.md`` (the user's guide).
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any, Sequence

from tensorlang.affine import const_value
from tensorlang.errors import CompileError, SerialKernelWarning
from tensorlang.func import Func
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.ir import For, LoweredFunc, Store, walk_stmts
from tensorlang.schedule.prefetch import without_prefetches
from tensorlang.schedule.schedule import Schedule
from tensorlang.version import __version__

from ..base import Backend, Signature
from ..llvm.codegen import module_text
from ..llvm.jit import compile_ir, load_object
from ..llvm.target import host_target as cpu_target
from .codegen import device_module, host_module
from .kernel import CUDAKernel
from .launches import DeviceProgram, plan
from .private import double_buffered, private_buffers, pure_stages, shared_copies
from .ptx import compile_ptx
from .target import TRIPLE, CUDATarget, parse_target

_MAGIC = b"TLCUDA1\n"


def bundle(ptx: str, host_object: bytes, launches: tuple[tuple[str, int], ...]) -> bytes:
    """The cached object code of a CUDA kernel: a header line, a JSON line (sizes, launches),
    the PTX, the host program's ELF object."""
    head = json.dumps({"ptx": len(ptx.encode()), "host": len(host_object),
                       "launches": [list(x) for x in launches]}).encode()
    return _MAGIC + head + b"\n" + ptx.encode() + host_object


def unbundle(data: bytes) -> tuple[str, bytes, tuple[tuple[str, int], ...]]:
    """The PTX, host object and launches of :func:`bundle`'s bytes.

    Raises:
        CompileError: the bytes are not such a bundle.
    """
    try:
        if not data.startswith(_MAGIC):
            raise ValueError("no CUDA bundle header")
        rest = data[len(_MAGIC):]
        line, _, body = rest.partition(b"\n")
        head = json.loads(line)
        n_ptx, n_host = int(head["ptx"]), int(head["host"])
        if len(body) != n_ptx + n_host:
            raise ValueError("truncated")
        launches = tuple((str(n), int(k)) for n, k in head["launches"])
        return body[:n_ptx].decode(), body[n_ptx:], launches
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CompileError(f"the cached object code is not a CUDA kernel bundle ({exc})") from exc


def check_scopes(schedule: Schedule, program) -> None:
    """Every ``cache_read(..., scope=)`` copy lives where its scope says.

    Raises:
        CompileError: a ``"shared"`` copy is not computed at a loop of the block outside its
            thread loops, or a ``"local"`` one is.
    """
    shared = {b for lc in program.launches for b in lc.shared} | {
        lc.dynamic[0] for lc in program.launches if lc.dynamic is not None}
    for name, st in schedule.states.items():
        if st.memory == "shared" and name not in shared:
            raise CompileError(
                f"{name} was asked for in shared memory (cache_read(..., scope=\"shared\")) "
                f"but is not computed at a loop of a GPU block outside its thread loops; "
                f"compute_at a gpu_blocks loop (or a serial loop inside them) of its consumer "
                f"and map its loops with gpu_threads")
        if st.memory == "local" and name in shared:
            raise CompileError(
                f"{name} was asked for in one thread's memory (scope=\"local\") but is "
                f"computed outside the thread loops, where a block's threads share it; compute "
                f"it at a gpu_threads loop of its consumer, or use scope=\"shared\"")


class CUDABackend(Backend):
    """NVIDIA GPUs through PTX and the CUDA driver (see the module docstring)."""

    name = "cuda"
    object_format = "ptx+elf"

    def host_target(self) -> CUDATarget:
        return parse_target(None)

    def workers(self) -> int:
        return 1

    def target_info(self, workers: int | None = None) -> dict[str, Any]:
        from .driver import DeviceError, device

        t = self.host_target()
        info: dict[str, Any] = {"backend": self.name, "triple": TRIPLE, "cpu": t.arch,
                                "features": "", "llvm": t.llvm_version,
                                "llvmlite": t.llvmlite_version, "tensorlang": __version__,
                                "threads": 1}
        try:  # kernels tuned on one GPU and driver are not taken for another's
            d = device().info
            info["features"] = f"gpu={d.name};driver={d.driver}"
        except DeviceError:
            pass
        return info

    def build(self, lowered: LoweredFunc, pipeline: Pipeline, schedule: Schedule | None, *,
              target: Any = None, opt_level: int = 3, emit_object: bool = False) -> CUDAKernel:
        tgt = parse_target(target)
        lowered = without_prefetches(lowered)  # (CPU cache hints: Stage.prefetch)
        program = plan(lowered, private_buffers(schedule), shared_copies(schedule),
                   pure_stages(schedule), double_buffered(schedule))
        if schedule is not None:
            check_scopes(schedule, program)
        warn_serial(program)
        ptx = compile_ptx(module_text(device_module(program, tgt)), tgt, opt=opt_level,
                          what=f"kernel {lowered.name}")
        host = compile_ir(module_text(host_module(program, cpu_target())), lowered.name,
                          cpu_target(), opt=opt_level, what=f"host program of {lowered.name}",
                          emit_object=emit_object)
        launches = tuple((lc.name, len(lc.buffers) + len(lowered.sizes) + len(lc.scalars))
                         for lc in program.launches)
        obj = bundle(ptx, host.object_code, launches) if emit_object else None
        return CUDAKernel(pipeline, ptx, host, Signature.of(lowered, False, 1), launches, tgt,
                          lowered=lowered, schedule=schedule,
                          schedule_source="default" if schedule is None else "user",
                          object_code=obj)

    def load(self, output: Func | Sequence[Func], schedule: Schedule | None, object_code: bytes,
             signature: Signature, *, target: Any = None,
             schedule_source: str = "cache") -> CUDAKernel:
        ptx, host_obj, launches = unbundle(object_code)
        host = load_object(host_obj, signature.name, cpu_target(),
                           what=f"host program of {signature.name}")
        p = schedule.pipeline if schedule is not None else Pipeline(output)
        return CUDAKernel(p, ptx, host, signature, launches, parse_target(target),
                          schedule=schedule, schedule_source=schedule_source,
                          object_code=object_code)

    def rule_based_schedule(self, output: Func | Sequence[Func],
                            sizes: dict[str, int]) -> Schedule:
        from .rules import gpu_schedule

        return gpu_schedule(output, sizes=sizes)

    def unavailable(self) -> str | None:
        from .driver import DeviceError, device

        try:
            device()
        except DeviceError as exc:
            return str(exc)
        return None

    def search_space(self, output: Func | Sequence[Func], sizes: dict[str, int]) -> Any:
        from .space import GPUSearchSpace

        return GPUSearchSpace(output, sizes)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """An uninitialised ``DeviceArray``: the tuner's measuring worker times kernels on
        arrays already on the GPU, so no copy is timed.

        Raises:
            DeviceError: no usable GPU.
        """
        from .arrays import DeviceArray

        return DeviceArray(shape, dtype)

    def clock(self):
        """A clock on the GPU's timeline, in seconds: each reading records a CUDA event on the
        stream, waits for it and returns its time since a first event; the difference of two
        readings is what ``cuEventElapsedTime`` measures between them (kernels launched in
        between have finished). The tuner's measuring worker times candidates with it.

        Raises:
            DeviceError: no usable GPU.
        """
        from .driver import device

        dev = device()
        base, mark = dev.event(), dev.event()
        dev.record(base)

        def now() -> float:
            dev.record(mark)
            return dev.elapsed(base, mark)

        return now


def warn_serial(program: DeviceProgram) -> None:
    """A ``SerialKernelWarning`` per kernel of one thread that runs a loop whose trip count is
    not a constant (it grows with the sizes): a stage left unmapped."""
    for lc in program.launches:
        if not lc.single_thread:
            continue
        loops = [n.var for n in walk_stmts(lc.body)
                 if isinstance(n, For) and const_value(n.extent) is None]
        if not loops:
            continue
        stages = sorted({n.buffer for n in walk_stmts(lc.body) if isinstance(n, Store)})
        warnings.warn(SerialKernelWarning(
            f"{', '.join(stages)} runs on the GPU in one thread (kernel {lc.name}: "
            f"no loop mapped to gpu_blocks or gpu_threads), its loops {', '.join(loops[:4])} "
            f"one iteration at a time; map its loops (s[F].gpu_tile(y, x, 8, 32), gpu_blocks, "
            f"gpu_threads), compute it at a block loop of its consumer, or compile with "
            f"schedule='auto'"), stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning raised by the caller of this function at the
    first frame outside tensorlang (the user's ``tl.compile`` call)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(
            "tensorlang"):
        frame, level = frame.f_back, level + 1
    return level
