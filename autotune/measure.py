"""Measuring candidates in a separate process, so a crash, a hang or a runaway kernel becomes a
failed measurement (time ``inf``, error kept) instead of ending the tuner.

One worker process (``python -m autotune.worker``: a fresh interpreter, so no fork after OpenMP
threads exist and no re-import of the user's script) receives the algorithm once, then
candidates as schedule traces; for each it compiles (the legality check included), runs on seeded
random inputs — one warm-up, then repeats until ``min_seconds`` in total (at least ``repeats``) —
and answers the median and all times in seconds. A worker that dies or exceeds its per-candidate
timeout is killed and replaced. ``verify=True`` also compares the result with the NumPy reference
(``tl.reference``) on those inputs. See also: TVM's RPC runner / LocalRunner, Triton's do_bench.
"""

from __future__ import annotations

import os
import pickle
import select
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .worker import recv, send


@dataclass
class MeasureResult:
    """Seconds of every timed run (empty on failure), the compile time, and the error if any."""

    times: list[float] = field(default_factory=list)
    compile_seconds: float = 0.0
    error: str | None = None
    verified: bool | None = None

    @property
    def seconds(self) -> float:
        """Median seconds, ``inf`` for a failed candidate."""
        return statistics.median(self.times) if self.times and self.error is None else float("inf")


def random_inputs(pipeline: Any, shapes: dict[str, tuple[int, ...]], seed: int = 0
                  ) -> dict[str, np.ndarray]:
    """Seeded inputs: floats in [-1, 1), integers in [-8, 8), bools at random."""
    rng = np.random.default_rng(seed)
    out = {}
    for inp in pipeline.inputs:
        shape = shapes[inp.name]
        d = inp.dtype.numpy
        if d.kind == "f":
            out[inp.name] = (rng.random(shape) * 2 - 1).astype(d)
        elif d.kind == "b":
            out[inp.name] = rng.random(shape) < 0.5
        else:
            out[inp.name] = rng.integers(-8, 8, shape).astype(d)
    return out


def serve(receive: Callable[[], Any], reply: Callable[[Any], None]) -> None:
    """The worker's loop (see ``autotune/worker.py``): setup, then one result per candidate."""
    import tensorlang as tl
    from tensorlang.pipeline import Pipeline

    output, shapes, sizes, hook = receive()

    pipeline = Pipeline(output)
    arrays = random_inputs(pipeline, shapes)
    extra = {k: v for k, v in sizes.items() if k in pipeline.sizes}
    extra = {k: v for k, v in extra.items() if all(
        k not in [getattr(s, "name", None) for s in i.shape] for i in pipeline.inputs)}
    while True:
        msg = receive()
        if msg is None:
            return
        trace, repeats, min_seconds, verify = msg
        res = MeasureResult()
        try:
            if hook is not None:
                hook(trace)
            t0 = time.perf_counter()
            s = tl.Schedule.from_json(output, trace)
            kern = tl.compile(output, s)
            res.compile_seconds = time.perf_counter() - t0
            out = kern(**arrays, **extra)
            if verify:
                ref = tl.reference(output, **arrays, **extra)
                res.verified = bool(np.allclose(out, ref, rtol=1e-3, atol=1e-4, equal_nan=True))
            total = 0.0
            while len(res.times) < repeats or total < min_seconds:
                t0 = time.perf_counter()
                kern(**arrays, **extra, out=out)
                dt = time.perf_counter() - t0
                res.times.append(dt)
                total += dt
                if len(res.times) >= 1000:
                    break
        except tl.TensorlangError as exc:  # a refused or uncompilable candidate
            res.times = []
            res.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - the worker reports, the tuner decides
            res.times = []
            res.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        reply(res)


class Measurer:
    """Compiles and times schedule traces of ``output`` at concrete ``sizes`` in a worker.

    Args:
        output: the output Func. sizes: concrete size values by name (``{"M": 1024, ...}``).
        repeats: at least this many timed runs. min_seconds: at least this much timed work.
        timeout: seconds a candidate may take (compile + runs) before it is killed.
        hook: optional picklable callable run in the worker on each trace before compiling it
            (instrumentation; tests use it to crash a worker on purpose).
    """

    def __init__(self, output: Any, sizes: dict[str, int], shapes: dict[str, tuple[int, ...]],
                 repeats: int = 5, min_seconds: float = 0.05, timeout: float = 60.0,
                 hook: Callable | None = None) -> None:
        self.output = output
        self.sizes = dict(sizes)
        self.shapes = dict(shapes)
        self.repeats = repeats
        self.min_seconds = min_seconds
        self.timeout = timeout
        self.hook = hook
        self._proc: subprocess.Popen | None = None
        self.restarts = 0

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self._proc = subprocess.Popen([sys.executable, "-m", "autotune.worker"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        send(self._proc.stdin, (self.output, self.shapes, self.sizes, self.hook))

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(5)
        self._proc = None
        self.restarts += 1

    def measure(self, trace: str, verify: bool = False, timeout: float | None = None
                ) -> MeasureResult:
        """Compile and time one schedule trace (JSON); never raises for a bad candidate."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        assert self._proc is not None
        limit = self.timeout if timeout is None else timeout
        try:
            send(self._proc.stdin, (trace, self.repeats, self.min_seconds, verify))
            ready, _, _ = select.select([self._proc.stdout], [], [], limit)
            if ready:
                return recv(self._proc.stdout)
            self._kill()
            return MeasureResult(error=f"timeout: no result within {limit:.1f} s")
        except (EOFError, BrokenPipeError, ConnectionResetError, pickle.UnpicklingError):
            self._proc.wait(5)
            code = self._proc.returncode
            self._kill()
            return MeasureResult(error=f"the measuring process died (exit code {code})")

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                send(self._proc.stdin, None)
                self._proc.wait(5)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait(5)
        self._proc = None

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
