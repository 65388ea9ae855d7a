"""A second backend for the tests: it "compiles" a schedule to NumPy evaluation of the algorithm
(``tl.reference``), which ignores the loop nest. It exists to prove the ``Backend`` interface
carries everything the compiler entry point, the autotuner's worker processes and the
tuned-kernel cache need from a backend: registered here, it is compiled, tuned, cached and
loaded without any code of theirs naming it. ``docs/architecture.md`` ("Adding a backend")
walks through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorlang.arguments import collect_arrays
from tensorlang.backends.base import Backend, Signature
from tensorlang.errors import CompileError
from tensorlang.reference import reference
from tensorlang.version import __version__


@dataclass(frozen=True)
class ReferenceTarget:
    """Where reference kernels run: any machine with NumPy."""

    triple: str = "numpy-reference"


class ReferenceKernel:
    """A kernel that evaluates ``output`` with ``tl.reference`` (the ``Backend`` contract)."""

    def __init__(self, pipeline: Any, signature: Signature, schedule: Any,
                 object_code: bytes | None, schedule_source: str) -> None:
        self.pipeline = pipeline
        self.signature = signature
        self.schedule = schedule
        self.object_code = object_code
        self.schedule_source = schedule_source
        self.calls = 0

    def __call__(self, *args: np.ndarray, out: np.ndarray | None = None,
                 **kwargs: Any) -> np.ndarray:
        arrays, sizes = collect_arrays(self.pipeline, args, kwargs)
        self.calls += 1
        result = reference(self.pipeline.output, **arrays, **sizes)
        if out is None:
            return result
        out[...] = result
        return out


class ReferenceBackend(Backend):
    """NumPy evaluation behind the Backend interface; its "object code" is the schedule trace
    it was built from (UTF-8 JSON), so a loaded kernel knows what it stands for."""

    name = "numpy-reference"
    object_format = "trace-json"

    def host_target(self) -> ReferenceTarget:
        return ReferenceTarget()

    def workers(self) -> int:
        return 1

    def target_info(self, workers: int | None = None) -> dict[str, Any]:
        return {"backend": self.name, "triple": self.host_target().triple, "cpu": "any",
                "features": "", "llvm": "", "tensorlang": __version__,
                "threads": int(workers or 1)}

    def build(self, lowered, pipeline, schedule, *, target=None, opt_level=3,
              emit_object=False):
        trace = schedule.to_json() if schedule is not None else "[]"
        signature = Signature.of(lowered, False, 1)
        return ReferenceKernel(pipeline, signature, schedule,
                               trace.encode() if emit_object else None,
                               "default" if schedule is None else "user")

    def load(self, output, schedule, object_code, signature, *, target=None,
             schedule_source="cache"):
        from tensorlang.pipeline import Pipeline

        pipeline = schedule.pipeline if schedule is not None else Pipeline(output)
        try:
            object_code.decode()
        except UnicodeDecodeError as exc:
            raise CompileError(f"not the object code of a {self.name} kernel: {exc}") from exc
        return ReferenceKernel(pipeline, signature, schedule, object_code, schedule_source)
