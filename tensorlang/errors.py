"""The user-facing error hierarchy of tensorlang.

Every error a user can cause derives from :class:`TensorlangError`; anything else that escapes is an
internal error (a bug in tensorlang). Messages name the Func, the index or loop, and the fix; a
schedule's errors start with "In schedule for F:" (``ScheduleError.in_schedule``).
"""

from __future__ import annotations


class TensorlangError(Exception):
    """Base class of every error caused by user input."""


class DefinitionError(TensorlangError):
    """A badly formed algorithm definition, raised when the definition is written."""


class ScheduleError(TensorlangError):
    """A schedule primitive applied to something it cannot apply to (stale handle, unknown loop),
    or a schedule that cannot be realized.

    Attributes:
        stage: the stage id the error is about (``"F"``, ``"F.update(0)"``), when known.
        loop: the loop it is about, when known.
    """

    stage: str | None = None
    loop: str | None = None

    @classmethod
    def in_schedule(cls, func: str, message: str, step: object = None,
                    loop: str | None = None) -> ScheduleError:
        """The error for stage ``func`` of a schedule, in the one format every schedule error
        uses: ``In schedule for F: <step>: message`` (``step``: the primitive application, a
        ``Step`` or its text; left out when None; ``loop``: the loop it is about). Works for
        subclasses: ``IllegalScheduleError.in_schedule(...)``."""
        err = cls(schedule_message(func, message, step))
        err.stage, err.loop = func, loop
        return err


class IllegalScheduleError(ScheduleError):
    """A schedule that would change what the algorithm computes (a dependence would be violated)."""


class CompileError(TensorlangError):
    """Lowering or native code generation failed for a well-formed algorithm and schedule."""


class ShapeError(TensorlangError):
    """Arrays passed to a kernel or to the reference evaluator do not fit the algorithm."""


class DeviceError(TensorlangError, RuntimeError):
    """A kernel cannot run here: for a GPU, no usable GPU or driver (``pip install
    'tensorlang[cuda]'``) or a CUDA driver call failed (its error name in the message); for a
    CPU, the kernel was compiled for a ``Target`` whose instructions this CPU lacks (the message
    names the missing features)."""


class TuningError(TensorlangError):
    """Tuning cannot start (the shapes need more memory than the machine has) or no candidate
    schedule could be measured (the message gives the most common failure)."""


class SerialKernelWarning(UserWarning):
    """A stage compiled for a GPU with none of its loops mapped to blocks or threads runs as a
    kernel of one thread: correct, but its loops run one iteration at a time (TVM refuses such
    a kernel, "did you forget to bind?"; Halide runs the stage on the host)."""


def schedule_message(func: str, message: str, step: object = None) -> str:
    """``In schedule for F: <step>: message`` (see :meth:`ScheduleError.in_schedule`)."""
    return f"In schedule for {func}: {'' if step is None else f'{step}: '}{message}"
