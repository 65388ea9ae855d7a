"""Run a CUDA schedule's kernels on the CPU, one block and one thread at a time.

``emulate(output, schedule)`` compiles the same host program and device kernels the CUDA
backend generates (``codegen.py``), but for the host CPU: block and thread ids are arguments
and the host program loops over every block and thread in order. The mapped loops carry no
dependence (``tl.check`` proves it), so this order computes what the GPU computes; the result is
a ``tl.Kernel`` called on NumPy arrays. It is how the test suite checks the code generator and
the launch dimensions against NumPy on machines without a GPU. It is slow (no parallelism, no
vector units, LLVM's ``-O1``, an unrolled loop emitted as a loop: what it checks is the program,
not its speed): a tool for checking, not for speed.
"""

from __future__ import annotations

from typing import Sequence

from tensorlang.func import Func
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule

from ..base import Signature
from ..kernel import Kernel
from ..llvm.codegen import module_text
from ..llvm.jit import CompiledModule, compile_ir
from ..llvm.runtime import load_libgomp
from ..llvm.target import host_target
from .codegen import host_module
from .launches import DeviceProgram, plan
from .private import double_buffered, private_buffers, pure_stages, shared_copies

#: LLVM's optimisation level for emulated kernels: -O1 keeps their meaning and compiles in a
#: fraction of the time of -O3 (their unrolled loops stay loops: ``codegen.py``)
EMULATE_OPT = 1
#: The code generator's level for them: 0 (FastISel, fast register allocation) emits
#: slower code in a fraction of the time, and an emulated kernel runs on a test's small sizes
EMULATE_CODEGEN_OPT = 0


def emulated_launches(program: DeviceProgram) -> tuple[CompiledModule, dict[str, int]]:
    """The launches of ``program`` compiled for this CPU, each a function
    ``i32 <kernel>.run(buffers..., sizes..., scalars...)`` (the arguments the CUDA kernel takes)
    that runs every block and thread of it: what a stand-in for the CUDA driver
    (``tests/fake_cuda.py``) calls to run the real host program without a GPU. Returns the
    compiled module (keep it alive) and each function's address by kernel name."""
    if any(lc.cooperative for lc in program.launches):
        load_libgomp()
    target = host_target()
    text = module_text(host_module(program, target, emulate=True, launchers=True))
    compiled = compile_ir(text, program.lowered.name, target, opt=EMULATE_OPT,
                          codegen_opt=EMULATE_CODEGEN_OPT,
                          what=f"emulated launches of {program.lowered.name}")
    addresses = {lc.name: compiled.engine.get_function_address(f"{lc.name}.run")
                 for lc in program.launches}
    return compiled, addresses


def emulate(output: Func | Sequence[Func], schedule: Schedule | None = None, *,
            check: bool = True) -> Kernel:
    """A CPU ``Kernel`` running the CUDA kernels of ``output`` under ``schedule`` thread by
    thread (see the module docstring).

    Raises:
        IllegalScheduleError, ScheduleError: the schedule is refused (as by ``tl.compile``).
        CompileError: the schedule cannot run on a GPU (``launches.plan``, ``codegen.py``).
    """
    if check and schedule is not None:
        err = schedule.check().error()
        if err is not None:
            raise err
    pipeline = schedule.pipeline if schedule is not None else Pipeline(output)
    lowered = lower(output if schedule is not None else pipeline, schedule)
    program = plan(lowered, private_buffers(schedule), shared_copies(schedule),
                   pure_stages(schedule), double_buffered(schedule))
    if any(lc.cooperative for lc in program.launches):
        load_libgomp()  # a block's threads run as an OpenMP team (barriers)
    target = host_target()
    text = module_text(host_module(program, target, emulate=True))
    compiled = compile_ir(text, lowered.name, target, opt=EMULATE_OPT,
                          codegen_opt=EMULATE_CODEGEN_OPT, what=f"emulated kernel {lowered.name}")
    return Kernel(pipeline, compiled, Signature.of(lowered, False, 1), lowered=lowered,
                  schedule=schedule, schedule_source="default" if schedule is None else "user")
