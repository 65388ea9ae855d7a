"""Compiling candidates in a pool of processes and timing them in another, so a crash, a hang or a
runaway kernel becomes a failed measurement (time ``inf``, error kept) instead of ending the tuner.

Processes are fresh interpreters (``python -m tensorlang.autotuner.worker``: no fork after
OpenMP threads exist, no re-import of the user's script). *Compile workers* (``jobs`` of them)
turn schedule traces into relocatable object code — the legality check included — in parallel;
then the one *run worker* loads each object (no LLVM) and times it on the user's arrays
or on seeded random inputs, one candidate at a time so measurements never share the CPU with
compilation: a warm-up run, then
repeats until ``min_seconds`` of timed work (at least ``repeats`` runs); the median is the
candidate's time. Every run writes into one output array per worker whose pages were touched
when the worker started, so no run (the warm-up included) pays the output's first-touch page
faults. A candidate whose warm-up run already exceeds ``budget`` seconds is not repeated
(it cannot win; its one time is kept). A worker that dies or exceeds the per-candidate timeout is
killed and replaced. ``verify`` compares a candidate's output with the expected output on those
inputs (``oracle.py``: ``tl.reference``, or for long update definitions the default schedule
compiled), computed once per worker. ``compare`` times several loaded kernels against each other
in interleaved blocks (``timing.py``): how the tuner confirms a new best. See also: TVM's
builder pool + RPC runner (LocalBuilder / LocalRunner), Triton's do_bench.
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

from tensorlang.backends.base import DEFAULT_BACKEND, Signature, get_backend, register_backend
from tensorlang.errors import TensorlangError
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.schedule import Schedule

from .oracle import expected_output
from .protocol import recv, send
from .timing import interleaved
from .workloads import free_sizes


@dataclass
class MeasureResult:
    """Seconds of every timed run (empty on failure), the compile time, the error if any, whether
    the output matched the reference (``None``: not checked), and the object code measured."""

    times: list[float] = field(default_factory=list)
    compile_seconds: float = 0.0
    error: str | None = None
    verified: bool | None = None
    object_code: bytes | None = field(default=None, repr=False)
    signature: dict | None = field(default=None, repr=False)

    @property
    def seconds(self) -> float:
        """Median seconds, ``inf`` for a failed candidate."""
        return statistics.median(self.times) if self.times and self.error is None else float("inf")


def median_seconds(fn: Callable[[], object], repeats: int = 7, min_seconds: float = 0.3,
                   max_runs: int = 200) -> float:
    """Median wall time of ``fn()`` in seconds, in this process: one warm-up, then at least
    ``repeats`` runs and at least ``min_seconds`` in all (capped at ``max_runs``)."""
    fn()
    times: list[float] = []
    while (len(times) < repeats or sum(times) < min_seconds) and len(times) < max_runs:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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


def aligned_copy(backend: Any, a: np.ndarray) -> np.ndarray:
    """``a`` copied into memory ``backend.empty`` placed (see ``docs/measurement.md``)."""
    out = backend.empty(a.shape, a.dtype)
    out[...] = a
    return out


def _error(exc: BaseException) -> str:
    if isinstance(exc, TensorlangError):  # a refused or uncompilable candidate
        return f"{type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"


def serve(receive: Callable[[], Any], reply: Callable[[Any], None]) -> None:
    """A worker's loop (see ``autotune/worker.py``): a setup message naming the role, then one
    answer per request until ``None``."""
    role, backend, output, shapes, sizes, hook, given = receive()
    register_backend(backend)  # the parent's object: a backend the user registered works too
    clock = backend.clock()
    pipeline = Pipeline(output)
    reply("ready")  # imports done: time limits start counting from here
    if role == "compile":
        while (trace := receive()) is not None:
            res = MeasureResult()
            try:
                t0 = time.perf_counter()
                kern = backend.compile(output, Schedule.from_json(output, trace),
                                       emit_object=True)
                res.compile_seconds = time.perf_counter() - t0
                res.object_code, res.signature = kern.object_code, kern.signature.to_dict()
            except Exception as exc:  # noqa: BLE001 - the worker reports, the tuner decides
                res.error = _error(exc)
            reply(res)
        return
    host = given if given is not None else random_inputs(pipeline, shapes)
    # the arrays the kernels run on, placed by the backend (on a GPU: in its memory); the
    # reference evaluator reads the host arrays
    arrays = {name: aligned_copy(backend, a) for name, a in host.items()}
    extra = free_sizes(output, sizes)
    out = _output_array(backend, pipeline, arrays, extra)
    expected: Any = None  # the expected output, computed at the first verification
    while (msg := receive()) is not None:
        if msg[0] == "compare":
            reply(_compare(msg, backend, output, arrays, extra, out))
            continue
        _, trace, obj, sig, repeats, min_seconds, verify, budget = msg
        res = MeasureResult()
        try:
            kern = backend.load(output, None, obj, Signature.from_dict(sig))
            if hook is not None:  # (once loaded: what a hook disturbs is the runs)
                hook(trace)
            t0 = clock()
            out = kern(**arrays, **extra, out=out)
            warm = clock() - t0
            hopeless = budget is not None and warm > budget
            if hopeless:
                res.times = [warm]  # it cannot win: one (warm-up) time is enough to rank it
            total = 0.0
            while not hopeless and (len(res.times) < repeats or total < min_seconds):
                t0 = clock()
                kern(**arrays, **extra, out=out)
                dt = clock() - t0
                res.times.append(dt)
                total += dt
                if len(res.times) >= 1000:
                    break
            if verify:  # after timing: the reference's BLAS must not disturb the timed runs
                # a fresh run into NaNs: a point the candidate never writes must not pass on
                # what an earlier candidate left in the shared output array
                _poison(out)
                kern(**arrays, **extra, out=out)
                if expected is None:
                    expected = expected_output(output, host, extra)
                res.verified = _allclose(out, expected)
        except Exception as exc:  # noqa: BLE001
            res.times = []
            res.error = _error(exc)
        reply(res)


@dataclass
class CompareResult:
    """Times of an interleaved comparison (``Measurer.compare``): every timed run per label
    (seconds), or the error that stopped it."""

    times: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None

    def median(self, label: str) -> float:
        """Median seconds of ``label``; ``inf`` when it has no times or the comparison failed."""
        ts = self.times.get(label)
        return statistics.median(ts) if ts and self.error is None else float("inf")


def _compare(msg: tuple, backend: Any, output: Any, arrays: dict, extra: dict,
             out: Any) -> CompareResult:
    """The run worker's side of ``Measurer.compare``: load every kernel, then time them in
    interleaved blocks (``timing.interleaved``) into the worker's one output array."""
    _, kernels, rounds, runs = msg
    res = CompareResult()
    try:
        loaded = {label: backend.load(output, None, obj, Signature.from_dict(sig))
                  for label, obj, sig in kernels}
        calls = {label: (lambda k=k: k(**arrays, **extra, out=out)) for label, k in loaded.items()}
        res.times = interleaved(calls, rounds=rounds, runs=runs, clock=backend.clock())
    except Exception as exc:  # noqa: BLE001 - reported, the tuner decides
        res.times = {}
        res.error = _error(exc)
    return res


def _output_array(backend: Any, pipeline: Any, arrays: dict[str, np.ndarray],
                  extra: dict[str, int]) -> Any:
    """The output array every run of this worker writes into (a tuple of them for several
    outputs, the kernel's ``out=``), its pages touched now: a fresh output's first-touch page
    faults can cost more than a fast candidate's whole run, which made warm-ups look "hopeless"
    at random (``docs/performance.md``, "Measurements behind code choices"). None if the shapes
    do not bind (the candidate's run reports why)."""
    try:
        binding = pipeline.bind({k: v.shape for k, v in arrays.items()}, extra)
    except Exception:  # noqa: BLE001 - the kernel call raises the user-facing error
        return None
    outs = tuple(backend.empty(tuple(ext for _, ext in binding.bounds[o.name]), o.dtype.numpy)
                 for o in pipeline.outputs)
    _poison(outs)
    return outs[0] if len(outs) == 1 else outs


def _poison(out: Any) -> None:
    """Fill ``out`` (an array or a tuple of them) with values no correct kernel leaves (NaN;
    the lowest integer), so a point a candidate never writes fails verification instead of
    passing on an earlier candidate's result."""
    for o in (out if isinstance(out, tuple) else (out,)):
        o.fill(np.nan if np.issubdtype(o.dtype, np.inexact)
               else np.iinfo(o.dtype).min if np.issubdtype(o.dtype, np.integer) else 0)


#: ``verify``'s tolerance: ``|got - ref| <= ATOL * scale + RTOL * |ref|`` elementwise, ``scale``
#: the reference's root mean square (at least 1)
RTOL, ATOL = 1e-3, 1e-4


def _allclose(got: Any, ref: Any) -> bool:
    """Whether a kernel's result (an array or a tuple of them) matches the reference's, within
    ``RTOL`` and an absolute tolerance that grows with the reference's root mean square: a
    float32 sum of ``K`` terms in another order is off by about ``sqrt(K) * eps`` times the
    partial sums, which no fixed tolerance allows near the outputs that cancel to about zero
    (a 4096-long GEMM reduction of inputs in [-1, 1): outputs of RMS 21, errors of 2e-4),
    where a wrong result is off by the outputs' own size."""
    if not isinstance(got, tuple):
        got, ref = (got,), (ref,)
    for g, r in zip(got, ref):
        r = np.asarray(r)
        finite = r[np.isfinite(r)].astype(np.float64) if r.dtype.kind in "fc" else \
            r.astype(np.float64)
        scale = max(1.0, float(np.sqrt(np.mean(np.abs(finite) ** 2)))) if finite.size else 1.0
        if not np.allclose(g, r, rtol=RTOL, atol=ATOL * scale, equal_nan=True):
            return False
    return True


STARTUP_SECONDS = 300


class _Worker:
    """One worker process: setup on start, then request/answer with a deadline. With
    ``wait=False`` the process starts and its imports run while the caller starts others;
    ``ready()`` then waits for it."""

    def __init__(self, setup: tuple, wait: bool = True) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        # NumPy's BLAS (the reference check) must not keep a thread pool spinning beside the
        # kernel being timed: measured here, GEMM runs right after a multi-threaded reference
        # took 27-28 ms instead of 11 ms
        for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
            env[var] = "1"
        self.proc = subprocess.Popen([sys.executable, "-m", "tensorlang.autotuner.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        send(self.proc.stdin, setup)
        self.deadline = 0.0
        self.started = False  # (its "ready" received)
        if wait:
            self.ready()

    def ready(self) -> None:
        """Wait until the process has done its imports and setup.

        Raises:
            OSError: it did not answer within ``STARTUP_SECONDS`` (it is killed).
        """
        # wait for the imports (seconds on a loaded machine) so they never count against a
        # candidate's time limit
        try:
            ready, _, _ = select.select([self.proc.stdout], [], [], STARTUP_SECONDS)
            ok = bool(ready) and recv(self.proc.stdout) == "ready"
        except _DIED:
            ok = False
        except BaseException:  # Ctrl-C while it starts: no orphaned worker outlives the tuner
            self.kill()
            raise
        self.started = ok
        if not ok:
            self.kill()
            raise OSError(f"a measuring process (python -m tensorlang.autotuner.worker) did not "
                          f"start within {STARTUP_SECONDS} s (exit code {self.proc.returncode}); "
                          f"its error output above says why")

    def request(self, msg: Any, timeout: float) -> None:
        send(self.proc.stdin, msg)
        self.deadline = time.monotonic() + timeout

    def answer(self) -> MeasureResult:
        return recv(self.proc.stdout)

    def kill(self) -> None:
        """Kill the process (SIGKILL) and reap it. One that has not exited within 5 s is left
        to exit when it next runs (a measuring process at ``SCHED_IDLE`` while other processes
        take every CPU may wait long for its turn to run its exit); Python's subprocess module
        reaps it then. Never raises for that: the search goes on with a new process."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                send(self.proc.stdin, None)
                self.proc.wait(5)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


_DIED = (EOFError, BrokenPipeError, ConnectionResetError, pickle.UnpicklingError, OSError)


class Measurer:
    """Compiles (in ``jobs`` processes) and times (in one) schedule traces of ``output``.

    Args:
        output: the output Func. sizes: concrete size values by name (``{"M": 1024, ...}``).
        shapes: input shapes by Input name.
        repeats: at least this many timed runs. min_seconds: at least this much timed work.
        timeout: seconds a candidate's compilation, and then its runs, may each take before the
            worker is killed. jobs: compile processes (default: CPU count, at most 4).
        hook: optional picklable callable the run worker calls on each trace once it is
            loaded, before running it (instrumentation; tests use it to crash or hang the
            worker, or to load the CPU, on purpose).
        arrays: the inputs to time on (by Input name; default: seeded random inputs).
        backend: the name of the backend that compiles, loads and times the candidates
            (``backends.base.get_backend``; default: the LLVM CPU backend).
    """

    def __init__(self, output: Any, sizes: dict[str, int], shapes: dict[str, tuple[int, ...]],
                 repeats: int = 5, min_seconds: float = 0.05, timeout: float = 60.0,
                 hook: Callable | None = None, jobs: int | None = None,
                 arrays: dict[str, np.ndarray] | None = None,
                 backend: str = DEFAULT_BACKEND) -> None:
        self.backend = get_backend(backend)  # an unknown name fails here, not in a worker
        self.output = output
        self.arrays = None if arrays is None else {k: np.ascontiguousarray(v)
                                                   for k, v in arrays.items()}
        self.sizes = dict(sizes)
        self.shapes = dict(shapes)
        self.repeats = repeats
        self.min_seconds = min_seconds
        self.timeout = timeout
        self.hook = hook
        self.jobs = max(1, jobs if jobs is not None else min(os.cpu_count() or 1, 4))
        self._compilers: list[_Worker | None] = [None] * self.jobs
        self._runner: _Worker | None = None
        self.restarts = 0

    def _setup(self, role: str) -> tuple:
        arrays = self.arrays if role == "run" else None
        return (role, self.backend, self.output, self.shapes, self.sizes, self.hook, arrays)

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self.restarts += 1

    # -- compile ---------------------------------------------------------------------------------
    def compile_many(self, traces: list[str], timeout: float | None = None
                     ) -> list[MeasureResult]:
        """Compile traces to object code in the pool; results in input order (errors kept)."""
        limit = self.timeout if timeout is None else timeout
        results: list[MeasureResult | None] = [None] * len(traces)
        todo = list(range(len(traces)))[::-1]
        busy: dict[int, int] = {}  # worker slot -> trace index
        while todo or busy:
            # the processes this round needs start together (their imports overlap)
            starting = []
            for slot in [s for s in range(self.jobs) if s not in busy][:len(todo)]:
                w = self._compilers[slot]
                if w is None or w.proc.poll() is not None:
                    starting.append(slot)
                    self._compilers[slot] = _Worker(self._setup("compile"), wait=False)
            if self._runner is None:  # (its imports overlap the compiling too)
                self._runner = _Worker(self._setup("run"), wait=False)
            for n, slot in enumerate(starting):
                try:
                    self._compilers[slot].ready()  # type: ignore[union-attr]
                except BaseException:
                    for other in starting[n + 1:]:
                        self._compilers[other].kill()  # type: ignore[union-attr]
                        self._compilers[other] = None
                    self._compilers[slot] = None
                    raise
            for slot in range(self.jobs):
                if slot in busy or not todo:
                    continue
                w = self._compilers[slot]
                assert w is not None
                idx = todo.pop()
                try:
                    w.request(traces[idx], limit)
                    busy[slot] = idx
                except _DIED:
                    self._replace(w)
                    self._compilers[slot] = None
                    results[idx] = MeasureResult(error="the compiling process died")
            if not busy:
                continue
            streams = {self._compilers[s].proc.stdout: s for s in busy}  # type: ignore[union-attr]
            wait = max(0.0, min(self._compilers[s].deadline for s in busy)  # type: ignore[union-attr]
                       - time.monotonic())
            ready, _, _ = select.select(list(streams), [], [], wait)
            for stream in ready:
                slot = streams[stream]
                w = self._compilers[slot]
                assert w is not None
                idx = busy.pop(slot)
                try:
                    results[idx] = w.answer()
                except _DIED:
                    w.proc.wait(5)
                    code = w.proc.returncode
                    self._replace(w)
                    self._compilers[slot] = None
                    results[idx] = MeasureResult(
                        error=f"the compiling process died (exit code {code})")
            now = time.monotonic()
            for slot in [s for s in busy if self._compilers[s].deadline <= now]:  # type: ignore
                w = self._compilers[slot]
                assert w is not None
                self._replace(w)
                self._compilers[slot] = None
                results[busy.pop(slot)] = MeasureResult(
                    error=f"timeout: not compiled within {limit:.1f} s")
        return [r if r is not None else MeasureResult(error="not compiled") for r in results]

    # -- run -------------------------------------------------------------------------------------
    def _ask_runner(self, msg: tuple, limit: float) -> Any:
        """Send one request to the run worker and wait up to ``limit`` seconds for its answer;
        an error text instead when it timed out or died (the worker is then replaced). Nothing
        compiles meanwhile: ``compile_many`` returns only when the pool is idle, so a timed run
        never shares the CPU with compilation."""
        if self._runner is None or self._runner.proc.poll() is not None:
            self._runner = _Worker(self._setup("run"))
        elif not self._runner.started:  # (started beside the compiling)
            try:
                self._runner.ready()
            except BaseException:
                self._runner = None
                raise
        w = self._runner
        try:
            w.request(msg, limit)
            ready, _, _ = select.select([w.proc.stdout], [], [], limit)
            if ready:
                return w.answer()
            self._replace(w)
            self._runner = None
            return f"timeout: no result within {limit:.1f} s"
        except _DIED:
            w.proc.wait(5)
            code = w.proc.returncode
            self._replace(w)
            self._runner = None
            return f"the measuring process died (exit code {code})"

    def run(self, trace: str, compiled: MeasureResult, verify: bool = False,
            timeout: float | None = None, budget: float | None = None) -> MeasureResult:
        """Time compiled object code (from ``compile_many``); never raises for a bad candidate."""
        if compiled.error is not None:
            return compiled
        limit = self.timeout if timeout is None else timeout
        res = self._ask_runner(("run", trace, compiled.object_code, compiled.signature,
                                self.repeats, self.min_seconds, verify, budget), limit)
        if isinstance(res, str):
            res = MeasureResult(error=res)
        res.compile_seconds = compiled.compile_seconds
        res.object_code, res.signature = compiled.object_code, compiled.signature
        return res

    def compare(self, kernels: dict[str, MeasureResult], rounds: int = 5, runs: int = 3,
                timeout: float | None = None) -> CompareResult:
        """Time compiled kernels against each other in interleaved blocks in the run worker
        (``timing.interleaved``: ``rounds`` rounds of one warm-up and ``runs`` timed runs per
        kernel, the order rotated each round) on the same inputs and output array.

        Args:
            kernels: label -> a successful ``compile_many`` / ``run`` result (object code).
            timeout: seconds the whole comparison may take (default: the measurer's timeout).

        Returns:
            A ``CompareResult``; its ``error`` is set (and no times kept) when a kernel failed
            to load or run, or the worker died or timed out.
        """
        bad = [label for label, k in kernels.items() if k.object_code is None]
        if bad:
            return CompareResult(error=f"no object code for {', '.join(bad)}")
        msg = ("compare", [(label, k.object_code, k.signature) for label, k in kernels.items()],
               rounds, runs)
        res = self._ask_runner(msg, self.timeout if timeout is None else timeout)
        return CompareResult(error=res) if isinstance(res, str) else res

    def measure(self, trace: str, verify: bool = False, timeout: float | None = None,
                budget: float | None = None) -> MeasureResult:
        """Compile and time one schedule trace (JSON); never raises for a bad candidate."""
        (compiled,) = self.compile_many([trace], timeout)
        return self.run(trace, compiled, verify, timeout, budget)

    def close(self) -> None:
        for w in [*self._compilers, self._runner]:
            if w is not None:
                w.close()
        self._compilers = [None] * self.jobs
        self._runner = None

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
