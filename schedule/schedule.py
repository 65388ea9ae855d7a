"""``tl.Schedule``: how to compute an algorithm, as a replayable trace of primitives.

``s = tl.Schedule(C)``; ``s[C]`` is C's stage; a stage method records a
:class:`~tensorlang.schedule.trace.Step` and applies it through its primitive
(``schedule/primitives``: argument checks, preconditions, rewrite), so the trace is the single
source of truth: ``Schedule.from_json(C, s.to_json())`` replays it into the identical loop nest.

Loop order convention: ``reorder(*loops)`` lists loops **outermost first**, as the loop nest prints
(TVM's order; Halide lists innermost first).

See also: Halide ``Func`` scheduling (``src/Func.h``), "Halide: A Language and Compiler for
Optimizing Parallelism, Locality, and Recomputation in Image Processing Pipelines" (PLDI 2013);
TVM ``te.Schedule`` and ``tir.Schedule`` traces.
"""

from __future__ import annotations

import copy
import json
import operator
from typing import Any, Sequence, Union

from tensorlang.errors import ScheduleError, TensorlangError
from tensorlang.expr import Var
from tensorlang.func import Func, Input, parse_stage_id, stage_id
from tensorlang.pipeline import Pipeline

from .legality import Problem, check_schedule
from .legality.check import MODEL_ERRORS, check_stage
from .legality.model import model_for
from .loops import StageState, default_states
from .lower import lower
from .primitives import PRIMITIVES, lookup
from .trace import LoopRef, Step, TailStrategy
from .view import AlgorithmView

LoopLike = Union[LoopRef, Var, str]
FORMAT_VERSION = 1


def _tail(tail: TailStrategy | str) -> str:
    """A tail strategy as stored in a step (its value; the split primitives check it)."""
    return tail.value if isinstance(tail, TailStrategy) else tail


def _int(value: Any) -> Any:
    """``value`` as a Python int when it is an integer of any kind (NumPy's too); else as given,
    for the primitive's parameter check to name."""
    try:
        return value if isinstance(value, bool) else operator.index(value)
    except TypeError:
        return value


class Schedule:
    """A schedule for the pipeline computing ``output`` (a Func, or a list of output Funcs);
    ``s[F]`` gives F's :class:`Stage`.

    Raises:
        DefinitionError: ``output`` is not a defined Func (or list of them).
    """

    def __init__(self, output: Func | Sequence[Func]) -> None:
        self.pipeline = Pipeline(output)
        self.view = AlgorithmView(self.pipeline)
        self.output = output
        self.steps: list[Step] = []
        self.states: dict[str, StageState] = default_states(list(self.pipeline.funcs))

    def copy(self) -> Schedule:
        """An independent copy: the same trace, stage states and view (copied: a cache_read on the
        copy leaves this schedule as it was), sharing the pipeline.
        Equivalent to ``Schedule.from_json(output, s.to_json())`` without replaying the trace."""
        t = Schedule.__new__(Schedule)
        t.pipeline, t.view, t.output = self.pipeline, self.view.copy(), self.output
        t.steps = list(self.steps)
        t.states = copy.deepcopy(self.states)
        return t

    def __getitem__(self, f: Func | str) -> Stage:
        name = f.name if isinstance(f, Func) else f
        if name not in self.states:
            raise ScheduleError(f"{name} is not a Func of the pipeline of {self.pipeline.name} "
                                f"(its Funcs: {', '.join(self.states)})")
        return Stage(self, name)

    # -- replay ---------------------------------------------------------------------------------
    def apply(self, step: Step) -> Any:
        """Apply one recorded step (what every stage method does) and append it to the trace.

        The step's primitive (``schedule/primitives``, by ``step.op``) checks its parameters and
        preconditions, then rewrites the stage. Atomic: a step that raises leaves the schedule
        exactly as it was.

        Raises:
            ScheduleError: unknown primitive, bad parameters, or a precondition that fails.
            IllegalScheduleError: the step alone would change what is computed (a ShiftInwards
                split of an update, a Func with a recurrence computed in pieces).
        """
        prim = lookup(step.op, step.func, step)
        prim.check_params(step)
        st = self._state(step)
        saved = copy.deepcopy(st)
        try:
            prim.check(self, st, step)
            result = prim.rewrite(self, st, step)
        except TensorlangError:
            self.states[step.func] = saved
            raise
        self.steps.append(step)
        return result

    def _state(self, step: Step) -> StageState:
        if step.func not in self.states:
            raise ScheduleError.in_schedule(step.func, f"{step.func} is not a Func of this "
                                            f"pipeline", step)
        return self.states[step.func]

    # -- formats --------------------------------------------------------------------------------
    def check(self, realize: bool = True):
        """Prove this schedule legal with isl (see ``schedule.legality``) and realizable: a
        ``LegalityReport`` with, for each refuted property, the primitive that introduced it.
        It is the verdict ``tl.compile`` applies: a legal schedule is also lowered (bounds
        inference sizes every loop; the loop nest is kept for the compile that follows), and
        what lowering refuses — an unrolled loop without a constant extent — is a problem of
        kind ``realize``. ``realize=False`` skips that lowering (for a caller that lowers the
        schedule itself afterwards, as the rule-based schedule does once for many variants)."""
        report = check_schedule(self)
        if report.ok and realize:
            try:
                lower(self.output, self)
            except ScheduleError as exc:
                stage = exc.stage or self.pipeline.outputs[-1].name
                report.stages[stage] = "refuted"
                report.problems.append(Problem(stage, "realize", exc.loop, str(exc), {}, {}))
        for prob in report.problems:
            prob.primitive = self._blame(prob)
        blamed = {p.primitive for p in report.problems}
        if report.problems and None in blamed:
            blamed.add(str(self.steps[-1]) if self.steps else None)
        report.primitives = [(str(st), "refuted" if str(st) in blamed else "proven")
                             for st in self.steps]
        return report

    def _blame(self, prob) -> str | None:
        """The first step after which ``prob``'s stage fails the same way (replaying the trace;
        only steps of that stage whose primitive is obliged to that kind of problem)."""
        if prob.kind == "placement":  # not a property of one stage's loop order
            return None
        if prob.kind == "realize":  # the last step that made the loop what lowering refuses
            steps = [st for st in self.steps if st.func == prob.stage
                     and "realize" in PRIMITIVES[st.op].obligations
                     and (prob.loop is None or st.get("loop") == prob.loop)]
            return str(steps[-1]) if steps else None

        base, number = parse_stage_id(prob.stage)
        number = -1 if number is None else number
        replay = Schedule(self.output)
        for step in self.steps:
            replay.apply(step)
            st = replay.states.get(prob.stage)
            if st is None or step.func != prob.stage or \
                    prob.kind not in PRIMITIVES[step.op].obligations:
                continue
            # the stage's definition at this step (rfactor and cache_write rewrite it)
            model = model_for(self.pipeline.workload_key(), replay.view.func(base), number,
                              tuple(self.pipeline.sizes), replay.view.definition(base))
            try:
                found = model is not None and any(p.kind == prob.kind
                                                  for p in check_stage(model, st))
            except MODEL_ERRORS:  # the step that made the stage unmodellable
                found = prob.kind == "unproven"
            if found:
                return str(step)
        return None

    def to_json(self) -> str:
        """The trace as JSON: ``{"version": 1, "output": name, "steps": [...]}`` (``output``:
        the output's name, or a list of names for several outputs; informative only)."""
        outs = [o.name for o in self.pipeline.outputs]
        return json.dumps({"version": FORMAT_VERSION,
                           "output": outs[0] if len(outs) == 1 else outs,
                           "steps": [s.to_dict() for s in self.steps]})

    @staticmethod
    def from_json(output: Func | Sequence[Func], text: str | dict | list) -> Schedule:
        """Replay a trace (as written by :meth:`to_json`, or its list of steps) on ``output``.

        Raises:
            ScheduleError: malformed JSON, a newer format version, or a step that does not apply.
        """
        try:
            data = json.loads(text) if isinstance(text, str) else text
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"schedule JSON is malformed: {exc}") from exc
        steps = data["steps"] if isinstance(data, dict) else data
        if isinstance(data, dict) and data.get("version", 1) > FORMAT_VERSION:
            raise ScheduleError(f"schedule format version {data['version']} is newer than this "
                                f"tensorlang understands ({FORMAT_VERSION}); upgrade tensorlang")
        s = Schedule(output)
        for d in steps:
            s.apply(Step.from_dict(d))
        return s

    def to_python(self, schedule_name: str = "s") -> str:
        """The schedule as paste-able Python (Funcs and loops referred to by name)."""
        return steps_to_python(self.steps, schedule_name)

    def __str__(self) -> str:
        return self.to_python()

    # -- staging primitives (they add a stage) ---------------------------------------------------
    def cache_read(self, tensor: Input | Func | str, consumer: Stage, loop: LoopLike,
                   index: int | None = None, layout: tuple[int, ...] | None = None,
                   scope: str | None = None, panel: tuple[int, int] | None = None,
                   readers: Sequence[Func | Stage | str] | None = None) -> Stage:
        """Copy the tile of ``tensor`` that one iteration of ``consumer``'s ``loop`` reads into a
        local buffer computed at that loop, and make ``consumer`` read the copy.

        The copy is a new stage ``<tensor>_local`` (returned, to be scheduled: vectorize its
        inner loop); bounds inference sizes it. Before/after, for ``cache_read(B, s[C], "k.o")``::

            for k.o:                        for k.o:
              for i, j, k.i:                  B_local[k.o*8 .. +8, 0 .. N) = B[...]
                C += A[i, k] * B[k, j]        for i, j, k.i:  C += A[i, k] * B_local[k, j]

        Args:
            index: copy only the consumer's ``index``-th read of ``tensor`` (0-based, in the
                order the definition is written; default: every read, and the buffer holds the
                union of their tiles). ``covariance[i, j] = sum(d[k, i] * d[k, j])`` packs its
                column panel with ``index=1``.
            layout: the copy's dimension order: its dimension ``n`` is ``tensor``'s dimension
                ``layout[n]`` (default: the same order). ``layout=(1, 0)`` stores a transposed
                copy, so that ``C[i, j] += A[i, k] * A[j, k]`` reads ``A_local[k, j]`` with
                ``j`` innermost: BLIS's packing of a transposed operand (Van Zee and van de
                Geijn, TOMS 2015), Halide's ``Func::in`` + ``reorder_storage``.
            panel: ``(dim, size)``: store ``tensor``'s dimension ``dim`` in panels of
                ``size``: the copy's element at ``x`` of that dimension is at ``x // size``
                there, and ``x % size`` is the copy's last dimension.
                ``cache_read(A, s[C], "k.o", panel=(0, 8))`` stores each 8-row sliver
                of ``A[i, k]`` with the 8 rows of each ``k`` adjacent: BLIS's micro-panels of A
                (Van Zee and van de Geijn, TOMS 2015), which a register tile of 8 rows reads
                one cache line per ``k`` step from. Reads past ``tensor``'s extent in the last
                panel (the extent not a multiple of ``size``) copy zeros.
            readers: other stages computed inside ``loop`` (at it, or inside a stage computed
                there) whose reads of ``tensor`` also go to the copy (TVM's ``readers``): a
                softmax row staged once for its max, its sum and its output, all computed at
                the row's block loop.
            scope: on a GPU (``target="cuda"``), where the copy lives: ``"shared"`` (the copy
                is ``<tensor>_shared``, computed at a loop of the block outside its thread
                loops and staged by the block's threads: map its loops with ``gpu_threads``) or
                ``"local"`` (one thread's, computed inside the thread loops). The CUDA backend
                refuses a copy its compute level puts elsewhere; the CPU ignores the scope.

        Raises:
            ScheduleError: ``consumer`` does not read ``tensor``, the loop is not its loop,
                ``index`` is out of range, ``layout`` is not a permutation of ``tensor``'s
                dimensions, ``panel`` names no dimension or a size below 1 or a dimension
                not starting at 0, or a permuted or panelled read goes through a boundary
                condition; a reader does not read ``tensor`` or is not computed inside
                ``loop``.
        See also: TVM ``cache_read``, Halide ``Func::in``.
        """
        name = tensor if isinstance(tensor, str) else tensor.name
        if not isinstance(consumer, Stage):
            raise ScheduleError("cache_read expects the consumer's stage: s[consumer]")
        params: list[tuple[str, Any]] = [
            ("tensor", name), ("loop", _name(loop, consumer.func, "cache_read"))]
        if index is not None:
            params.append(("index", _int(index)))
        if layout is not None:
            params.append(("layout", tuple(_int(d) for d in layout)
                           if isinstance(layout, (tuple, list)) else layout))
        if scope is not None:
            params.append(("scope", scope))
        if panel is not None:
            params.append(("panel", tuple(_int(d) for d in panel)
                           if isinstance(panel, (tuple, list)) else panel))
        if readers is not None:
            params.append(("readers", tuple(
                r.func if isinstance(r, Stage) else r if isinstance(r, str) else r.name
                for r in readers)))
        new = self.apply(Step("cache_read", consumer.func, tuple(params)))
        return Stage(self, new)

    def cache_write(self, f: Func | str, loop: LoopLike, scope: str | None = None) -> Stage:
        """Compute ``f``'s tile for one iteration of its ``loop`` into a local buffer (registers
        when small and constant), then write the tile out.

        ``f``'s definition moves to a new stage ``<f>_local`` (returned, with its own loops to
        schedule: reorder its reduction loops, unroll and vectorize its tile) computed at
        ``loop``; ``f`` becomes the copy ``f[...] = f_local[...]`` over the loops it had, minus
        its reduction loops. Call it before scheduling ``f``'s reduction loops.

        Args:
            scope: on a GPU (``target="cuda"``), where the tile lives when ``loop`` is a loop of
                the block outside its thread loops: ``"shared"`` (the default there: the
                block's threads share it) or ``"local"`` (each thread keeps the elements it
                computes in its own memory, registers where the indices are constant, across
                the block's serial loops: a GEMM's accumulators over the ``k`` blocks whose
                operands the threads stage in shared memory; ``backends/cuda/private.py``).
                The CPU ignores it.

        Raises:
            ScheduleError: ``loop`` is a reduction loop, ``f``'s reduction loops were
                already split or fused, or ``scope`` is not ``"shared"`` or ``"local"``.
        See also: TVM ``cache_write(..., "local")``; Halide's register allocations lifted out of
            the thread loops (``FuseGPUThreadLoops``).
        """
        name = f if isinstance(f, str) else f.name
        args: tuple = (("loop", _name(loop, name, "cache_write")),)
        if scope is not None:
            args += (("scope", scope),)
        new = self.apply(Step("cache_write", name, args))
        return Stage(self, new)


    def rfactor(self, f: Func | str | Stage, loop: LoopLike) -> Stage:
        """Factor ``f``'s reduction over ``loop`` out into a new stage ``<f>_rf`` (returned) in
        which ``loop`` is a pure dimension, so it may run in parallel or as vector lanes; ``f``
        then reduces ``<f>_rf`` over that dimension. For ``C[i] = sum_k A[i, k]`` split by 8::

            ko, ki = s[C].split(k, 8); rf = s.rfactor(C, ki)
            C_rf[i, ki] = sum_ko A[i, 8 * ko + ki]      (ko < ceil(K / 8), 8 * ko + ki < K)
            C[i] = sum_r C_rf[i, r]                     (r < 8)

        then ``rf.vectorize(ki)``: eight partial sums per row as vector lanes (TVM's argument
        order, Halide's meaning). Reassociates the reduction (the reduction policy of
        ``docs/architecture.md``): float sums change by rounding.

        An update definition ``F[idx] = F[idx] op value`` (op one of + * max min, ``value`` not
        reading F; ``idx`` may be data-dependent: a histogram) is factored the same way when
        ``f`` is its stage (``s[F].update(0)``): ``F_rf`` gets ``loop`` as its first dimension
        (each part a contiguous copy of F), then F's domain, starts at op's identity and runs
        the update over the rest of the RDom into its own part; F's update becomes
        ``F[v] = F[v] op F_rf[r, v]``. The stage
        returned is then ``F_rf``'s update, where the work is (Halide's
        ``f.update(0).rfactor``)::

            ro, ri = s[H].update(0).split(r.y, 64); rf = s.rfactor(s[H].update(0), ro)
            rf.parallel(rf.loops[0])       # one partial histogram per chunk of 64 rows

        Args:
            f: the Func (its pure definition), or the Stage of one of its update definitions.
            loop: an RVar of that definition, or the inner or outer loop of its one split; its
                other reduction loops must be unscheduled.

        Raises:
            ScheduleError: ``loop`` is not a reduction loop of ``f``, ``f`` (a pure definition)
                has update definitions, an update is not of the form above or has an
                ``RDom.where``, or its reduction loops were scheduled otherwise.
        See also: Suriana, Adams and Kamil, "Parallel Associative Reductions in Halide" (CGO
        2017); TVM ``te.Schedule.rfactor``.
        """
        name = f if isinstance(f, str) else f.func if isinstance(f, Stage) else f.name
        new = self.apply(Step("rfactor", name, (("loop", _name(loop, name, "rfactor")),)))
        return Stage(self, new)


def _name(loop: LoopLike, func: str, primitive: str) -> str:
    if isinstance(loop, LoopRef):
        if loop.func != func:
            raise ScheduleError.in_schedule(
                func, f"{primitive} got loop {loop.name} of {loop.func}; use a loop of {func}")
        return loop.name
    if isinstance(loop, Var):
        return loop.name
    if isinstance(loop, str):
        return loop
    raise ScheduleError.in_schedule(
        func, f"{primitive} expects a loop (a Var, a loop handle or a loop name), got "
        f"{type(loop).__name__}")


class Stage:
    """The scheduling handle of one Func. Methods return the stage (to chain) or loop handles."""

    def __init__(self, schedule: Schedule, func: str) -> None:
        self.schedule = schedule
        self.func = func

    def _ref(self, name: str) -> LoopRef:
        return LoopRef(self.func, name)

    def _do(self, op: str, **params: Any) -> Any:
        return self.schedule.apply(Step(op, self.func, tuple(params.items())))

    def update(self, number: int = 0) -> Stage:
        """The stage of update definition ``number`` of this Func (Halide's ``F.update(i)``):
        its own loops, pure Vars outermost then the RDom's (first dimension innermost).

        Raises:
            ScheduleError: the Func has no such update.
        """
        name = stage_id(self.func, number)
        if name not in self.schedule.states:
            n = sum(1 for k in self.schedule.states if parse_stage_id(k)[0] == self.func and
                    parse_stage_id(k)[1] is not None)
            raise ScheduleError(f"{self.func} has {n} update definition{'s' if n != 1 else ''}; "
                                f"there is no update({number})")
        return Stage(self.schedule, name)

    @property
    def loops(self) -> list[LoopRef]:
        """The current loops of this stage, outermost first."""
        return [self._ref(n) for n in self.schedule.states[self.func].loops]

    def split(self, loop: LoopLike, factor: int,
              tail: TailStrategy | str = TailStrategy.GuardWithIf) -> tuple[LoopRef, LoopRef]:
        """Split ``loop`` into ``loop.o`` (outer) and ``loop.i`` (inner, ``factor`` iterations).

        Contract: ``loop == loop.min + loop.o * factor + loop.i``, ``0 <= loop.i < factor``,
        ``loop.o`` in ``[0, ceil(extent / factor))``; ``tail`` says what the last, partial tile
        does (see ``TailStrategy``). Before/after::

            for k in [0, K):            for k.o in [0, (K + 7) // 8):
              C[i] += A[i, k]     ->       for k.i in [0, min(8, K - k.o * 8)):
                                             C[i] += A[i, k.o * 8 + k.i]

        Raises:
            ScheduleError: unknown or consumed loop, factor not a positive int.
        See also: Halide ``Func::split``, TVM ``split``.
        """
        name = _name(loop, self.func, "split")
        o, i = self._do("split", loop=name, factor=_int(factor), tail=_tail(tail))
        return self._ref(o), self._ref(i)

    def tile(self, x: LoopLike, y: LoopLike, fx: int, fy: int,
             tail: TailStrategy | str = TailStrategy.GuardWithIf
             ) -> tuple[LoopRef, LoopRef, LoopRef, LoopRef]:
        """Split ``x`` by ``fx`` and ``y`` by ``fy`` and order ``x.o, y.o, x.i, y.i`` (outermost
        first) in the positions the four loops take. Returns ``(x.o, y.o, x.i, y.i)``.

        See also: Halide ``Func::tile``, TVM ``tile``.
        """
        xs, ys = _name(x, self.func, "tile"), _name(y, self.func, "tile")
        res = self._do("tile", x=xs, y=ys, fx=_int(fx), fy=_int(fy), tail=_tail(tail))
        return tuple(self._ref(n) for n in res)  # type: ignore[return-value]

    def fuse(self, outer: LoopLike, inner: LoopLike) -> LoopRef:
        """Fuse ``inner`` (directly inside ``outer``) into one loop ``outer.inner.fused`` of
        extent ``extent(outer) * extent(inner)``; ``outer == fused // extent(inner)``.

        Raises:
            ScheduleError: loops not adjacent, or one pure and one reduction loop.
        See also: Halide ``Func::fuse``, TVM ``fuse``.
        """
        o, i = _name(outer, self.func, "fuse"), _name(inner, self.func, "fuse")
        return self._ref(self._do("fuse", outer=o, inner=i))

    def reorder(self, *loops: LoopLike) -> Stage:
        """Order ``loops`` outermost first, in the positions they occupy together.

        See also: Halide ``Func::reorder`` (which lists innermost first), TVM ``reorder``.
        """
        names = [_name(lp, self.func, "reorder") for lp in loops]
        self._do("reorder", loops=tuple(names))
        return self

    def _kind(self, op: str, loop: LoopLike, factor: int | None,
              tail: TailStrategy | str) -> Stage:
        name = _name(loop, self.func, op)
        params: dict[str, Any] = {"loop": name}
        if factor is not None:
            params["factor"] = _int(factor)
            params["tail"] = _tail(tail)
        self._do(op, **params)
        return self

    def unroll(self, loop: LoopLike, factor: int | None = None,
               tail: TailStrategy | str = TailStrategy.GuardWithIf) -> Stage:
        """Replicate the body of ``loop`` (its extent must be a constant); with ``factor``, split
        by it first and unroll the inner loop. Always legal. See also: Halide ``unroll``."""
        return self._kind("unroll", loop, factor, tail)

    def vectorize(self, loop: LoopLike, width: int | None = None,
                  tail: TailStrategy | str = TailStrategy.GuardWithIf) -> Stage:
        """Run ``loop`` as SIMD lanes (width ``width``, or the whole loop when it is not given:
        with ``width`` the loop is split by it first). Legal only on a pure loop.

        Raises:
            IllegalScheduleError: the loop iterates a reduction variable.
        See also: Halide ``vectorize``, TVM ``vectorize``."""
        return self._kind("vectorize", loop, width, tail)

    def parallel(self, loop: LoopLike, factor: int | None = None,
                 tail: TailStrategy | str = TailStrategy.GuardWithIf) -> Stage:
        """Run the iterations of ``loop`` on the thread pool (``TENSORLANG_NUM_THREADS``,
        default all CPUs). Legal only on a pure loop.

        Raises:
            IllegalScheduleError: the loop iterates a reduction variable.
        See also: Halide ``parallel``, TVM ``parallel``."""
        return self._kind("parallel", loop, factor, tail)

    def gpu_blocks(self, *loops: LoopLike) -> Stage:
        """Run the iterations of ``loops`` (one to three pure loops, outermost first; the last
        is ``blockIdx.x``) as the blocks of a GPU grid: one kernel launch per loop nest, for
        ``target="cuda"``. Legal only on loops that carry no dependence.

        Raises:
            ScheduleError: more than three loops, or a loop named twice.
            IllegalScheduleError: (``tl.check``) a loop carries a dependence.
        See also: Halide ``gpu_blocks``, TVM ``bind(loop, "blockIdx.x")``."""
        self._do("gpu_blocks", loops=tuple(_name(lp, self.func, "gpu_blocks") for lp in loops))
        return self

    def gpu_threads(self, *loops: LoopLike) -> Stage:
        """Run the iterations of ``loops`` (one to three pure loops directly inside the
        ``gpu_blocks`` loops, outermost first; the last is ``threadIdx.x``) as the threads of
        one block (at most 1024 together). Legal only on loops that carry no dependence.

        Raises:
            ScheduleError: more than three loops, or a loop named twice.
            IllegalScheduleError: (``tl.check``) a loop carries a dependence.
        See also: Halide ``gpu_threads``, TVM ``bind(loop, "threadIdx.x")``."""
        self._do("gpu_threads",
                 loops=tuple(_name(lp, self.func, "gpu_threads") for lp in loops))
        return self

    def gpu_tile(self, x: LoopLike, *args: Any,
                 tail: TailStrategy | str = TailStrategy.GuardWithIf) -> tuple[LoopRef, ...]:
        """``gpu_tile(x, y, fx, fy)``: split ``x`` by ``fx`` and ``y`` by ``fy``, order
        ``x.o, y.o, x.i, y.i`` and map the outer two to GPU blocks and the inner two to threads
        (blocks of ``fx * fy`` threads). Returns ``(x.o, y.o, x.i, y.i)``. ``gpu_tile(x, fx)``
        does the same in one dimension and returns ``(x.o, x.i)``.

        Raises:
            ScheduleError: other arguments than ``(x, fx)`` or ``(x, y, fx, fy)``.
        See also: Halide ``gpu_tile``."""
        xs = _name(x, self.func, "gpu_tile")
        if len(args) == 1:
            res = self._do("gpu_tile", x=xs, fx=_int(args[0]), tail=_tail(tail))
        elif len(args) == 3:
            y, fx, fy = args
            res = self._do("gpu_tile", x=xs, fx=_int(fx), y=_name(y, self.func, "gpu_tile"),
                           fy=_int(fy), tail=_tail(tail))
        else:
            raise ScheduleError(f"gpu_tile takes (x, fx) or (x, y, fx, fy), got {1 + len(args)} "
                                f"arguments")
        return tuple(self._ref(n) for n in res)

    def serial(self, loop: LoopLike) -> Stage:
        """Run ``loop`` in order on one thread: the default kind, undoing ``parallel``,
        ``vectorize`` or ``unroll`` on it (say, on a loop of the rule-based schedule).
        Always legal. See also: Halide ``serial``."""
        self._do("serial", loop=_name(loop, self.func, "serial"))
        return self

    def atomic(self) -> Stage:
        """Let this update stage's accumulation into a cell be reassociated, as a reduction's
        (Halide ``Stage::atomic``): an innermost loop that accumulates ``C = C op value`` (op
        ``+ - * max min``) into one cell ``C`` that ``value`` provably never reads — after
        splitting the loop where a ``tl.where`` condition on its variable changes (cholesky's
        ``k < j``) — keeps ``C`` in a register and runs as a SIMD reduction
        (``schedule/cell_reduction.py``). Results change only by the rounding of the
        reassociated sum. Always legal.

        Raises:
            ScheduleError: the stage is a pure definition's."""
        self._do("atomic")
        return self

    def compute_root(self) -> Stage:
        """Compute this Func entirely before its consumers, into a buffer over its whole
        domain (the default). See also: Halide ``compute_root``."""
        self._do("compute_root")
        return self

    def compute_inline(self) -> Stage:
        """Substitute this (pointwise) Func's definition into every read of it.

        Raises:
            ScheduleError: it is the output or a reduction.
        See also: Halide ``compute_inline``, TVM ``compute_inline``."""
        self._do("compute_inline")
        return self

    def compute_at(self, consumer: Stage, loop: LoopLike) -> Stage:
        """Compute the region of this Func that one iteration of ``consumer``'s ``loop`` reads,
        inside that loop, just before the consumer uses it (bounds inference sizes the region).

        Raises:
            ScheduleError: ``consumer`` does not read this Func, or the loop is not its loop.
        See also: Halide ``compute_at``, TVM ``compute_at``."""
        if not isinstance(consumer, Stage):
            raise ScheduleError("compute_at expects a stage: s[consumer]")
        self._do("compute_at", consumer=consumer.func, loop=_name(loop, consumer.func,
                                                                  "compute_at"))
        return self

    def store_at(self, consumer: Stage, loop: LoopLike) -> Stage:
        """Allocate this Func's buffer at ``consumer``'s ``loop`` (outside its compute level),
        sized for the region one iteration of that loop reads. See also: Halide ``store_at``."""
        if not isinstance(consumer, Stage):
            raise ScheduleError("store_at expects a stage: s[consumer]")
        self._do("store_at", consumer=consumer.func, loop=_name(loop, consumer.func, "store_at"))
        return self

    def double_buffer(self) -> Stage:
        """Give this GPU copy in shared memory (``cache_read(..., scope="shared")``, computed
        at a serial loop of a block: a GEMM's reduction blocks) two buffers, so that the copy
        of the loop's next step is issued before the current step's tile is used: its loads
        from GPU memory overlap the current step's arithmetic, and the step needs one barrier
        instead of two. Where the copy's tile varies in size (a partial tile's kernel) it
        stays single-buffered; twice the shared memory otherwise. Changes no value: always
        legal; the CPU ignores it.
        See also: TVM ``double_buffer``; CUTLASS's multistage mainloop.

        Raises:
            ScheduleError: this stage is not a copy in shared memory.
        """
        self._do("double_buffer")
        return self

    def storage_align(self, dim: int, factor: int, offset: int = 0) -> Stage:
        """Lay this Func's buffer out so that the stride of its storage dimension ``dim`` (0:
        the outermost; its arguments in order, a ``cache_read`` copy's in its ``layout``) is
        ``factor * n + offset`` elements, by padding the dimension inside it (the padding is
        never read). A tile that a warp's threads write down its columns in GPU shared memory
        (a transposed copy of ``A``'s tile in a GEMM), its rows ``factor * n + offset`` apart
        instead of a multiple of 32 words, spreads over the banks (``factor=32, offset=4`` for
        float32 keeps rows 16-byte aligned for vector reads). Changes no value: always legal.
        See also: TVM ``storage_align(axis, factor, offset)``; Halide ``align_storage``
        (a multiple only).

        Raises:
            ScheduleError: this is an update stage or an output, ``dim`` is the innermost
                dimension (its stride is 1) or past it, a value is not a non-negative int
                (``factor`` positive) or ``offset`` is not below ``factor``;
                when lowering, where the dimensions inside ``dim`` are not of constant extent
                and do not make its stride alone.
        """
        self._do("storage_align", dim=dim, factor=factor, offset=offset)
        return self

    def reorder_storage(self, *dims: Var | str) -> Stage:
        """Store this Func's buffer with its dimensions in this order, outermost first (each of
        its pure Vars once; the last one has unit stride). An ``rfactor`` stage of one partial
        result per block of rows, ``s_rf[j, b]``, stored ``reorder_storage(b, j)`` keeps each
        block's partial row contiguous, so vectors along ``j`` write it (and the final sum reads
        it) in whole cache lines. Changes no value and no order: always legal.
        See also: Halide ``Func::reorder_storage``.

        Raises:
            ScheduleError: this is an update stage or an output (its storage is the caller's
                array), ``dims`` is not a permutation of the pure Vars, or the Func has a
                ``storage_align`` (not supported together).
        """
        names = tuple(d if isinstance(d, str) else d.name for d in dims)
        self._do("reorder_storage", vars=names)
        return self

    def prefetch(self, tensor: Input | Func | str, loop: LoopLike, offset: int = 1) -> Stage:
        """At the top of each iteration of ``loop``, bring into the cache the box of ``tensor``
        that iteration ``loop + offset`` of this stage reads (or, for this stage's own Func,
        writes): the data then arrives while the current iteration computes. The box comes
        from bounds inference, clipped to ``tensor``'s domain, fetched one cache line (64
        bytes) at a time; past the loop's last iteration nothing is fetched. A GEMM's register
        tile prefetches the next tile's rows of ``C`` (``s[C].prefetch(C, "i.o.i")``), whose
        first loads would otherwise stall its multiply-adds. Changes no value and no order:
        always legal; the GPU ignores it.
        See also: Halide ``Func::prefetch`` (its ``GuardWithIf`` bound strategy); TVM
        ``Schedule.prefetch``.

        Args:
            tensor: an Input or Func (or its name) this stage reads, or this stage's own Func;
                stored whole (an input, an output or a Func at root), checked when lowering.
            loop: the loop at whose top the prefetches go.
            offset: how many iterations ahead (a non-negative int; 0: this iteration's own
                box, for data it first uses late).

        Raises:
            ScheduleError: the stage neither reads nor writes ``tensor``, ``loop`` is not its
                loop, ``offset`` is not a non-negative int; when lowering, ``tensor`` is a Func
                computed inside a loop nest or inline, its index inside the loop is a gather,
                or a later primitive consumed ``loop``.
        """
        name = tensor if isinstance(tensor, str) else tensor.name
        self._do("prefetch", tensor=name, loop=_name(loop, self.func, "prefetch"),
                 offset=_int(offset))
        return self

    def compute_with(self, host: Stage, loop: LoopLike) -> Stage:
        """Run this stage inside ``host``'s loop nest: the loops from the outermost down to
        ``host``'s ``loop`` are shared (each iteration runs the host's body, then this stage's
        inner loops), so two Funcs over the same domain are computed in one pass (two outputs
        reading the same input window touch it once). Both must be pure definitions at root
        that do not read each other, and the shared loops must be alike in both (names, splits,
        kinds; bounds, checked when lowering).

        Raises:
            ScheduleError: any of those conditions fails (the message names which).
        See also: Halide ``compute_with``."""
        if not isinstance(host, Stage):
            raise ScheduleError("compute_with expects a stage: s[host]")
        self._do("compute_with", host=host.func, loop=_name(loop, host.func, "compute_with"))
        return self

    def __repr__(self) -> str:
        return f"<Stage {self.func}: loops {', '.join(self.schedule.states[self.func].loops)}>"


def steps_to_python(steps: Any, schedule_name: str = "s") -> str:
    """Trace steps (``Step`` objects, or the ``steps`` of a JSON trace) as paste-able Python;
    needs no algorithm, so a tuning log can be shown without the code that defined it.
    Each primitive writes its own line (``Primitive.to_python``).

    Raises:
        ScheduleError: a step names no known primitive.
    """
    steps = [st if isinstance(st, Step) else Step.from_dict(st) for st in steps]
    return "\n".join(lookup(step.op, step.func, step).to_python(step, schedule_name)
                     for step in steps)
