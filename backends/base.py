"""The ``Backend`` interface: what the compiler entry point and the autotuner need from a way of
running loop nests — and the only thing they know about it.

A backend takes a lowered loop nest (``tensorlang.schedule.lower``) to a callable ``Kernel``:
**lower → compile (code generation + machine code) → load → run**, and describes where the code
runs (its ``Target``), the format of the object code the tuned-kernel cache stores, and how to
time a kernel honestly on it. The LLVM CPU backend (``backends/llvm/backend.py``) is the first
implementation; a GPU backend adds a module beside it and registers itself, and the tuner
(``autotune/``), which reaches backends only through :func:`get_backend`, is not touched.
``docs/architecture.md`` ("Adding a backend") walks through one.

See also: TVM's ``Target`` + ``tvm.build`` per-target codegen and MetaSchedule's
``Builder``/``Runner``; Halide's ``Target`` and ``CodeGen_*`` classes.
"""

from __future__ import annotations

import abc
import importlib
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

import numpy as np

from tensorlang.errors import CompileError, DefinitionError
from tensorlang.func import Func
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule

if TYPE_CHECKING:
    from tensorlang.schedule.ir import LoweredFunc

    from .kernel import Kernel


@dataclass(frozen=True)
class Signature:
    """How to call a compiled entry point: its symbol name, the number of input buffers (then
    ``n_outputs`` output buffers), the size parameters in order, and the parallel settings baked
    into the code. Stored next to cached object code so a cache hit needs no lowering to call the
    kernel; a backend without threads stores ``parallel=False, num_threads=1``."""

    name: str
    n_inputs: int
    sizes: tuple[str, ...]
    parallel: bool
    num_threads: int
    n_outputs: int = 1

    @classmethod
    def of(cls, lowered: LoweredFunc, parallel: bool, num_threads: int) -> Signature:
        return cls(lowered.name, len(lowered.inputs), tuple(lowered.sizes), parallel,
                   num_threads, len(lowered.outputs))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def mismatch(self, pipeline: Pipeline) -> str | None:
        """Why code with this signature cannot be the kernel of ``pipeline`` (None: it can):
        its buffer counts and size parameters must be the pipeline's, in order (a kernel called
        with the wrong arguments reads and writes the wrong memory)."""
        want = (len(pipeline.inputs), len(pipeline.outputs), tuple(pipeline.sizes))
        got = (self.n_inputs, self.n_outputs, tuple(self.sizes))
        if got == want:
            return None
        return (f"it takes {got[0]} inputs, {got[1]} outputs and sizes ({', '.join(got[2])}); "
                f"the algorithm has {want[0]}, {want[1]} and ({', '.join(want[2])})")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Signature:
        return cls(str(d["name"]), int(d["n_inputs"]), tuple(map(str, d["sizes"])),
                   bool(d["parallel"]), int(d["num_threads"]), int(d.get("n_outputs", 1)))


class Backend(abc.ABC):
    """One code generator and runtime. Subclasses set ``name`` and ``object_format`` and
    implement the abstract methods; :func:`register_backend` makes them reachable by name.

    What :meth:`build` and :meth:`load` return is a *kernel*: called as
    ``kernel(*arrays, out=None, **arrays_and_sizes) -> numpy.ndarray`` (``tl.Kernel``'s
    contract: dtypes checked, shapes bound, ``out`` written when given), with attributes
    ``signature`` (a :class:`Signature`), ``object_code`` (bytes in :attr:`object_format`, or
    None unless built with ``emit_object``), ``schedule`` and a settable ``schedule_source``.
    The LLVM CPU backend returns ``tl.Kernel``.

    The autotuner's measuring processes receive the backend object itself (pickled), so a
    backend's class must be importable by its module path (not defined in ``__main__``) and
    its instances picklable.

    Attributes:
        name: how users and tuning records name it (``"llvm-cpu"``); stored in every record's
            target (:meth:`target_info`).
        object_format: what ``build(..., emit_object=True)`` keeps in ``kernel.object_code``
            and :meth:`load` accepts (``"elf"`` for a relocatable object file; a CUDA backend
            would store ``"ptx"`` or ``"cubin"``).
    """

    name: ClassVar[str]
    object_format: ClassVar[str]

    # -- where code runs ------------------------------------------------------------------------
    @abc.abstractmethod
    def host_target(self) -> Any:
        """The target this process can run code on (for the LLVM CPU backend, a
        ``backends.llvm.target.Target``: triple, CPU name, features, LLVM version). Equal targets
        run each other's object code; the tuned-kernel cache keys on it."""

    @abc.abstractmethod
    def workers(self) -> int:
        """How many hardware threads a parallel kernel compiled now uses (baked into the code)."""

    @abc.abstractmethod
    def target_info(self, workers: int | None = None) -> dict[str, Any]:
        """The target as tuning records and the tuned-kernel cache store it: a JSON object with
        at least ``backend`` (:attr:`name`), ``triple`` (which alone tells backends apart in
        cache keys), ``cpu``, ``features``, ``llvm``, ``tensorlang`` and ``threads``
        (``workers``, default :meth:`workers`)."""

    # -- lower -> compile -> load -> run --------------------------------------------------------
    def lower(self, output: Func | Sequence[Func],
              schedule: Schedule | None = None) -> LoweredFunc:
        """The loop nest of ``output`` (a Func or a list of output Funcs) under ``schedule``
        (None: the default schedule), after the target-independent passes
        (``tensorlang.schedule.lower``). A backend may add its own passes by overriding this.

        Raises:
            ScheduleError: the schedule cannot be realized (see ``lower``).
        """
        return lower(output if schedule is not None else Pipeline(output), schedule)

    def compile(self, output: Func | Sequence[Func], schedule: Schedule | None = None, *,
                target: Any = None,
                opt_level: int = 3, check: bool = True, emit_object: bool = False) -> Kernel:
        """Prove ``schedule`` legal (unless ``check=False``: ``tl.compile`` says why that is
        unsafe), :meth:`lower` it and :meth:`build` the loop nest: a callable ``Kernel``. The
        arguments are ``tl.compile``'s; the legality verdict is the same for every backend
        (``Schedule.check``) and is applied here; a backend's own part is :meth:`build`.

        Raises:
            DefinitionError: ``output`` is not a Func (or a list of Funcs), ``schedule`` not a
                ``tl.Schedule``, or a schedule of another algorithm.
            IllegalScheduleError, ScheduleError: the schedule is refused.
            CompileError: code generation or machine-code compilation failed.
        """
        if schedule is not None and not isinstance(schedule, Schedule):
            raise DefinitionError(f"schedule must be a tl.Schedule or \"auto\", got "
                                  f"{type(schedule).__name__} (\"auto\" goes through "
                                  f"tl.compile)")
        if not isinstance(output, (Func, list, tuple)):
            raise DefinitionError(f"tl.compile expects the output Func (or a list of output "
                                  f"Funcs), got {type(output).__name__}")
        if check and schedule is not None:
            err = schedule.check().error()
            if err is not None:
                raise err
        pipeline = schedule.pipeline if schedule is not None else Pipeline(output)
        lowered = self.lower(output, schedule)
        return self.build(lowered, pipeline, schedule, target=target, opt_level=opt_level,
                          emit_object=emit_object)

    @abc.abstractmethod
    def build(self, lowered: LoweredFunc, pipeline: Pipeline, schedule: Schedule | None, *,
              target: Any = None, opt_level: int = 3, emit_object: bool = False) -> Kernel:
        """Generate code for a lowered loop nest for ``target`` (default :meth:`host_target`),
        compile it to machine code and load it: a callable ``Kernel`` whose ``schedule`` is
        ``schedule`` (None: the default schedule). ``emit_object``: keep the object code
        (``Kernel.object_code``, in :attr:`object_format`) for the tuned-kernel cache.

        Raises:
            CompileError: code generation or machine-code compilation failed.
        """

    @abc.abstractmethod
    def load(self, output: Func | Sequence[Func], schedule: Schedule | None, object_code: bytes,
             signature: Signature, *, target: Any = None,
             schedule_source: str = "cache") -> Kernel:
        """A Kernel from object code :meth:`build` emitted (no lowering, no code generation).
        The caller vouches that it was compiled from ``schedule`` of ``output`` for ``target``
        (the tuned-kernel cache keys on all three and checksums the bytes).

        Raises:
            CompileError: the object code does not load.
        """

    def rule_based_schedule(self, output: Func | Sequence[Func],
                            sizes: dict[str, int]) -> Schedule | None:
        """This backend's own rule-based schedule of ``output`` for ``sizes`` (what
        ``schedule="auto"`` compiles when no tuned kernel is cached), or None: the autotuner's
        CPU rule-based schedule (``autotune/heuristic.py``) applies."""
        return None

    def unavailable(self) -> str | None:
        """Why this backend's kernels cannot run in this process (no device, a missing
        package), or None when they can. ``tl.autotune`` asks before measuring anything."""
        return None

    def search_space(self, output: Func | Sequence[Func], sizes: dict[str, int]) -> Any:
        """The space of schedules ``tl.autotune`` searches for this backend (anything with
        ``sample(trial) -> Schedule`` and ``shapes``), or None: the autotuner's CPU space
        (``autotune/space.py``)."""
        return None

    # -- measurement ----------------------------------------------------------------------------
    def clock(self) -> Callable[[], float]:
        """A clock in seconds for timing kernel calls: reading it must wait until work started
        before it has finished (a CPU kernel call returns when done: ``time.perf_counter``; a
        GPU backend synchronizes its stream first)."""
        return time.perf_counter

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised array a kernel of this backend reads or writes, placed the way its
        kernels place their own buffers (the measurement harness times on such arrays)."""
        return np.empty(shape, dtype)


BACKENDS: dict[str, Backend] = {}
DEFAULT_BACKEND = "llvm-cpu"
#: the backends shipped with tensorlang, by name: ``module:class``, imported on first use (so
#: this interface does not import any implementation, and ``import tensorlang`` loads none)
BUILTIN_BACKENDS = {"llvm-cpu": "tensorlang.backends.llvm.backend:LLVMCPUBackend",
                    "cuda": "tensorlang.backends.cuda.backend:CUDABackend"}


def register_backend(backend: Backend) -> Backend:
    """Make ``backend`` reachable as ``get_backend(backend.name)``; returns it.

    Raises:
        CompileError: ``backend`` is not a ``Backend``.
    """
    if not isinstance(backend, Backend):
        raise CompileError(f"register_backend expects a Backend instance, got "
                           f"{type(backend).__name__}")
    BACKENDS[backend.name] = backend
    return backend


def get_backend(name: str | None = None) -> Backend:
    """The backend named ``name`` (default: the LLVM CPU backend); a built-in one is imported
    and registered on first use.

    Raises:
        CompileError: no backend has that name (names the registered and built-in ones).
    """
    key = name or DEFAULT_BACKEND
    if key not in BACKENDS and key in BUILTIN_BACKENDS:
        module, _, cls = BUILTIN_BACKENDS[key].partition(":")
        register_backend(getattr(importlib.import_module(module), cls)())
    try:
        return BACKENDS[key]
    except KeyError:
        known = sorted({*BACKENDS, *BUILTIN_BACKENDS})
        raise CompileError(f"no backend named {key!r}; the known backends are "
                           f"{', '.join(known)} (a new one is registered with "
                           f"tensorlang.backends.register_backend)") from None
