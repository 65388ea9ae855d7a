"""``tl.Schedule``: how to compute an algorithm, as a replayable trace of primitives.

``s = tl.Schedule(C)``; ``s[C]`` is C's stage; stage methods check their arguments, record a
:class:`~schedule.primitives.Step` and apply its rewrite, so the trace is the single source of truth:
``Schedule.from_json(C, s.to_json())`` replays it into the identical loop nest.

Loop order convention: ``reorder(*loops)`` lists loops **outermost first**, as the loop nest prints
(TVM's order; Halide lists innermost first).

See also: Halide ``Func`` scheduling (``src/Func.h``), "Halide: A Language and Compiler for
Optimizing Parallelism, Locality, and Recomputation in Image Processing Pipelines" (PLDI 2013);
TVM ``te.Schedule`` and ``tir.Schedule`` traces.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Union

from tensorlang.errors import IllegalScheduleError, ScheduleError, TensorlangError
from tensorlang.expr import Access, Var, walk
from tensorlang.func import Definition, Func, Input
from tensorlang.pipeline import Pipeline

from .ir import ForKind
from .loops import (
    INLINE,
    ROOT,
    Fuse,
    Location,
    Split,
    StageState,
    apply_fuse,
    apply_reorder,
    apply_split,
    default_states,
)
from .primitives import LoopRef, Step, TailStrategy
from .view import AlgorithmView

LoopLike = Union[LoopRef, Var, str]
FORMAT_VERSION = 1


def _tail(tail: Any) -> TailStrategy:
    if isinstance(tail, TailStrategy):
        return tail
    try:
        return TailStrategy(tail)
    except ValueError:
        raise ScheduleError(f"unknown tail strategy {tail!r}; use one of "
                            f"{', '.join(t.value for t in TailStrategy)}") from None


class Schedule:
    """A schedule for the pipeline computing ``output``; ``s[F]`` gives F's :class:`Stage`.

    Raises:
        DefinitionError: ``output`` is not a defined Func.
    """

    def __init__(self, output: Func) -> None:
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
            raise ScheduleError(f"{name} is not a Func of the pipeline of {self.output.name} "
                                f"(its Funcs: {', '.join(self.states)})")
        return Stage(self, name)

    # -- replay ---------------------------------------------------------------------------------
    def apply(self, step: Step) -> Any:
        """Apply one recorded step (what every stage method does) and append it to the trace.

        Atomic: a step that raises leaves the schedule exactly as it was."""
        st = self._state(step)
        saved = copy.deepcopy(st)
        try:
            return self._apply(step, st)
        except TensorlangError:
            self.states[step.func] = saved
            raise

    def _apply(self, step: Step, st: StageState) -> Any:
        what = str(step)
        result: Any = None
        if step.op in ("split", "tile") and st.update is not None and \
                _tail(step.get("tail")) is TailStrategy.ShiftInwards:
            loop = step.get("loop") or step.get("x")
            f = step.get("factor") or step.get("fx")
            raise IllegalScheduleError(
                f"In schedule for {st.func}: {what}: ShiftInwards recomputes some points, and "
                f"running an update twice on a point changes its result (witness: with {loop} "
                f"of extent {f + 1}, iterations ({loop}.o=0, {loop}.i=1) and ({loop}.o=1, "
                f"{loop}.i=0) both run {loop}=1); use GuardWithIf")
        if step.op in ("compute_root", "compute_inline", "compute_at", "store_at", "cache_write") \
                and (st.update is not None or self.view.func(st.func).updates):
            self._refuse_placement(st, step, what)
        if step.op in ("compute_at", "store_at", "cache_read"):
            target = step.get("consumer", st.func) if step.op != "cache_read" else st.func
            if target in self.states and self.states[target].update is not None:
                raise ScheduleError(f"{what}: an update stage cannot host other stages yet; "
                                    f"compute the producer at root")
        if step.op == "split":
            result = apply_split(st, step.get("loop"), step.get("factor"), _tail(step.get("tail")),
                                 what)
        elif step.op == "tile":
            x, y = step.get("x"), step.get("y")
            tail = _tail(step.get("tail"))
            xo, xi = apply_split(st, x, step.get("fx"), tail, what)
            yo, yi = apply_split(st, y, step.get("fy"), tail, what)
            apply_reorder(st, [xo, yo, xi, yi], what)
            result = (xo, yo, xi, yi)
        elif step.op == "fuse":
            result = apply_fuse(st, step.get("outer"), step.get("inner"), what)
        elif step.op == "reorder":
            apply_reorder(st, list(step.get("loops")), what)
        elif step.op in ("unroll", "vectorize", "parallel"):
            loop = st.resolve(step.get("loop"), what)
            factor = step.get("factor")
            if factor is not None:
                outer, inner = apply_split(st, loop, factor, _tail(step.get("tail")), what)
                loop = outer if step.op == "parallel" else inner
                result = loop
            kind = {"unroll": ForKind.UNROLLED, "vectorize": ForKind.VECTORIZED,
                    "parallel": ForKind.PARALLEL}[step.op]
            st.kinds[loop] = kind
        elif step.op == "compute_root":
            st.compute, st.store = ROOT, None
        elif step.op == "compute_inline":
            self._check_inline(st, what)
            st.compute, st.store = INLINE, None
        elif step.op == "cache_read":
            result = self._cache_read(st, step.get("tensor"), step.get("loop"), what,
                                      step.get("index"), step.get("layout"))
        elif step.op == "cache_write":
            result = self._cache_write(st, step.get("loop"), what)
        elif step.op in ("compute_at", "store_at"):
            loc = self._check_at(st, step.get("consumer"), step.get("loop"), what)
            if step.op == "compute_at":
                st.compute = loc
            else:
                st.store = loc
        else:
            raise ScheduleError(f"unknown schedule primitive {step.op!r} in {what}")
        self.steps.append(step)
        return result

    def _refuse_placement(self, st: StageState, step: Step, what: str) -> None:
        """A Func with update definitions is computed at root: recomputing it in pieces (at a
        consumer loop, or inlined) would cut the recurrences its updates carry."""
        from .legality.check import recurrence_witness

        base = st.func.split(".update(")[0]
        msg = (f"{what}: {base} has update definitions; it is computed at root (its definitions "
               f"run in order over its whole domain), and its update stages have no placement of "
               f"their own")
        if step.op in ("compute_at", "store_at", "compute_inline") and st.update is None:
            wit = recurrence_witness(self.view.func(base), tuple(self.pipeline.sizes),
                                     self.pipeline.workload_key())
            if wit is not None:
                loop = step.get("loop")
                where = f"at {step.get('consumer')}.{loop}" if loop else "inline"
                raise IllegalScheduleError(
                    f"In schedule for {base}: {what}: computing {base} {where} recomputes it in "
                    f"pieces, but its recurrence carries values across them: {wit}, which a "
                    f"piece that starts at the later iteration would not have computed; "
                    f"compute {base} at root")
        raise ScheduleError(msg)

    def _state(self, step: Step) -> StageState:
        if step.func not in self.states:
            raise ScheduleError(f"{step}: {step.func} is not a Func of this pipeline")
        return self.states[step.func]

    def _check_inline(self, st: StageState, what: str) -> None:
        f = self.view.func(st.func)
        if f is self.output:
            raise ScheduleError(f"{what}: {st.func} is the output; it cannot be inlined")
        if st.rvars:
            raise ScheduleError(f"{what}: {st.func} is a reduction; only pointwise Funcs can be "
                                f"inlined (compute it at root or at a consumer loop instead)")

    def _check_at(self, st: StageState, consumer: str, loop: str, what: str) -> Location:
        if consumer not in self.states:
            raise ScheduleError(f"{what}: {consumer} is not a Func of this pipeline")
        if self.view.func(st.func) is self.output:
            raise ScheduleError(f"{what}: {st.func} is the output; it is always computed at root")
        self.states[consumer].resolve(loop, what)
        readers = self.view.readers(st.func)
        if consumer not in self._transitive_readers(st.func):
            raise ScheduleError(f"{what}: {consumer} does not read {st.func}, directly or "
                                f"through other Funcs (its readers: {', '.join(readers)})")
        return Location("at", consumer, loop)

    def _transitive_readers(self, func: str) -> set[str]:
        out: set[str] = set()
        frontier = {func}
        while frontier:
            nxt = {f.name for f in self.view.funcs
                   if any(p in frontier for p in self.view.reads(f.name))} - out
            out |= nxt
            frontier = nxt
        return out

    def _cache_read(self, st: StageState, tensor: str, loop: str, what: str,
                    index: int | None = None, layout: tuple[int, ...] | None = None) -> str:
        st.resolve(loop, what)
        if tensor not in self.view.reads(st.func):
            raise ScheduleError(f"{what}: {st.func} does not read {tensor} (it reads "
                                f"{', '.join(self.view.reads(st.func))})")
        src = self.view.producer(tensor)
        rank = len(src.bounds)
        reads = [a for a in walk(self.view.definition(st.func).value)
                 if isinstance(a, Access) and a.name == tensor]
        if index is not None and not 0 <= index < len(reads):
            raise ScheduleError(f"{what}: {st.func} reads {tensor} {len(reads)} time(s); index "
                                f"must be in 0..{len(reads) - 1}")
        if layout is not None:
            layout = tuple(layout)
            if sorted(layout) != list(range(rank)):
                raise ScheduleError(f"{what}: layout {layout} is not a permutation of "
                                    f"{tensor}'s {rank} dimensions (0..{rank - 1})")
            copied = reads if index is None else [reads[index]]
            if any(a.boundary is not None for a in copied):
                raise ScheduleError(f"{what}: {st.func} reads {tensor} through a boundary "
                                    f"condition; a copy with another layout would move it off "
                                    f"{tensor}'s dimensions (use layout=None)")
            if layout == tuple(range(rank)):
                layout = None
        name = self.view.unique_name(f"{tensor}_local")
        idx = tuple(Var(f"{name}_d{d}") for d in range(rank))
        src_idx = idx if layout is None else tuple(idx[layout.index(d)] for d in range(rank))
        copy_f = Func(name, shape=None, dtype=src.dtype)
        copy_f[idx] = src[src_idx]
        self.view.add_before(copy_f, st.func)
        self.view.redirect(st.func, tensor, copy_f, index, layout)
        new = StageState.initial(copy_f)
        new.compute = Location("at", st.func, loop)
        self.states[name] = new
        return name

    def _cache_write(self, st: StageState, loop: str, what: str) -> str:
        st.resolve(loop, what)
        f = self.view.func(st.func)
        d = self.view.definition(st.func)
        if st.compute.kind == "inline":
            raise ScheduleError(f"{what}: {st.func} is inlined; it has no loops to cache at")
        if st.is_reduction_loop(loop):
            raise ScheduleError(f"{what}: {loop} iterates a reduction; cache at a pure loop")
        touched = {n for rel in st.relations for n in _rel_names(rel)}
        if any(r in touched for r in st.rvars):
            raise ScheduleError(
                f"{what}: the reduction loops of {st.func} were already scheduled; call "
                f"cache_write before scheduling them, then schedule them on the new stage")
        name = self.view.unique_name(f"{st.func}_local")
        local = Func.from_definition(name, f, dataclasses.replace(d, func=name))
        self.view.add_before(local, st.func)
        pure_ranges = tuple(r for r in d.ranges if r[0] in st.pure)
        args = tuple(d.args)
        self.view.replace_definition(st.func, Definition(
            st.func, args, local[args], None, (), pure_ranges))
        for r in st.rvars:
            st.loops.remove(r)
            st.kinds.pop(r)
            st.origin.pop(r)
        st.rvars = ()
        new = StageState.initial(local)
        new.compute = Location("at", st.func, loop)
        self.states[name] = new
        return name

    # -- formats --------------------------------------------------------------------------------
    def check(self):
        """Prove this schedule legal with isl (see ``schedule.legality``): a ``LegalityReport``
        with, for each refuted property, the primitive that introduced it."""
        from .legality import check_schedule

        report = check_schedule(self)
        for prob in report.problems:
            prob.primitive = self._blame(prob)
        blamed = {p.primitive for p in report.problems}
        if report.problems and None in blamed:
            blamed.add(str(self.steps[-1]) if self.steps else None)
        report.primitives = [(str(st), "refuted" if str(st) in blamed else "proven")
                             for st in self.steps]
        return report

    def _blame(self, prob) -> str | None:
        """The first step after which ``prob``'s stage fails the same way (replaying the trace)."""
        from .legality.check import MODEL_ERRORS, check_stage
        from .legality.model import model_for

        if prob.kind == "placement":  # not a property of one stage's loop order
            return None

        f = self.view.func(prob.stage.split(".update(")[0])
        number = int(prob.stage.split(".update(")[1].rstrip(")")) if ".update(" in \
            prob.stage else -1
        model = model_for(self.pipeline.workload_key(), f, number, tuple(self.pipeline.sizes))
        replay = Schedule(self.output)
        for step in self.steps:
            replay.apply(step)
            st = replay.states.get(prob.stage)
            if st is None or step.func != prob.stage:
                continue
            try:
                found = model is not None and any(p.kind == prob.kind
                                                  for p in check_stage(model, st))
            except MODEL_ERRORS:  # the step that made the stage unmodellable
                found = prob.kind == "unproven"
            if found:
                return str(step)
        return None

    def to_json(self) -> str:
        """The trace as JSON: ``{"version": 1, "output": name, "steps": [...]}``."""
        return json.dumps({"version": FORMAT_VERSION, "output": self.output.name,
                           "steps": [s.to_dict() for s in self.steps]})

    @staticmethod
    def from_json(output: Func, text: str | dict | list) -> Schedule:
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
                   index: int | None = None, layout: tuple[int, ...] | None = None) -> Stage:
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

        Raises:
            ScheduleError: ``consumer`` does not read ``tensor``, the loop is not its loop,
                ``index`` is out of range, ``layout`` is not a permutation of ``tensor``'s
                dimensions, or a permuted read goes through a boundary condition.
        See also: TVM ``cache_read``, Halide ``Func::in``.
        """
        name = tensor if isinstance(tensor, str) else tensor.name
        if not isinstance(consumer, Stage):
            raise ScheduleError("cache_read expects the consumer's stage: s[consumer]")
        params: list[tuple[str, Any]] = [
            ("tensor", name), ("loop", _name(loop, consumer.func, "cache_read"))]
        if index is not None:
            params.append(("index", int(index)))
        if layout is not None:
            params.append(("layout", tuple(int(d) for d in layout)))
        new = self.apply(Step("cache_read", consumer.func, tuple(params)))
        return Stage(self, new)

    def cache_write(self, f: Func | str, loop: LoopLike) -> Stage:
        """Compute ``f``'s tile for one iteration of its ``loop`` into a local buffer (registers
        when small and constant), then write the tile out.

        ``f``'s definition moves to a new stage ``<f>_local`` (returned, with its own loops to
        schedule: reorder its reduction loops, unroll and vectorize its tile) computed at
        ``loop``; ``f`` becomes the copy ``f[...] = f_local[...]`` over the loops it had, minus
        its reduction loops. Call it before scheduling ``f``'s reduction loops.

        Raises:
            ScheduleError: ``loop`` is a reduction loop, or ``f``'s reduction loops were
                already split or fused.
        See also: TVM ``cache_write``.
        """
        name = f if isinstance(f, str) else f.name
        new = self.apply(Step("cache_write", name, (("loop", _name(loop, name, "cache_write")),)))
        return Stage(self, new)


def _rel_names(rel: Split | Fuse) -> tuple[str, ...]:
    if isinstance(rel, Split):
        return (rel.parent, rel.outer, rel.inner)
    return (rel.outer, rel.inner, rel.fused)


def _name(loop: LoopLike, func: str, primitive: str) -> str:
    if isinstance(loop, LoopRef):
        if loop.func != func:
            raise ScheduleError(f"In schedule for {func}: {primitive} got loop {loop.name} of "
                                f"{loop.func}; use a loop of {func}")
        return loop.name
    if isinstance(loop, Var):
        return loop.name
    if isinstance(loop, str):
        return loop
    raise ScheduleError(f"In schedule for {func}: {primitive} expects a loop (a Var, a loop "
                        f"handle or a loop name), got {type(loop).__name__}")


def _factor(factor: Any, func: str, primitive: str) -> int:
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ScheduleError(f"In schedule for {func}: {primitive} factor must be a positive "
                            f"int, got {factor!r}")
    return factor


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
        name = f"{self.func}.update({number})"
        if name not in self.schedule.states:
            n = sum(1 for k in self.schedule.states if k.startswith(f"{self.func}.update("))
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
        o, i = self._do("split", loop=name, factor=_factor(factor, self.func, "split"),
                        tail=_tail(tail).value)
        return self._ref(o), self._ref(i)

    def tile(self, x: LoopLike, y: LoopLike, fx: int, fy: int,
             tail: TailStrategy | str = TailStrategy.GuardWithIf
             ) -> tuple[LoopRef, LoopRef, LoopRef, LoopRef]:
        """Split ``x`` by ``fx`` and ``y`` by ``fy`` and order ``x.o, y.o, x.i, y.i`` (outermost
        first) in the positions the four loops take. Returns ``(x.o, y.o, x.i, y.i)``.

        See also: Halide ``Func::tile``, TVM ``tile``.
        """
        xs, ys = _name(x, self.func, "tile"), _name(y, self.func, "tile")
        res = self._do("tile", x=xs, y=ys, fx=_factor(fx, self.func, "tile"),
                       fy=_factor(fy, self.func, "tile"), tail=_tail(tail).value)
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
            params["factor"] = _factor(factor, self.func, op)
            params["tail"] = _tail(tail).value
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

    def __repr__(self) -> str:
        return f"<Stage {self.func}: loops {', '.join(self.schedule.states[self.func].loops)}>"


def steps_to_python(steps: Any, schedule_name: str = "s") -> str:
    """Trace steps (``Step`` objects, or the ``steps`` of a JSON trace) as paste-able Python;
    needs no algorithm, so a tuning log can be shown without the code that defined it."""
    steps = [st if isinstance(st, Step) else Step.from_dict(st) for st in steps]
    lines = []
    for step in steps:
        st = f'{schedule_name}["{step.func}"]'
        if ".update(" in step.func:
            base, num = step.func.split(".update(")
            st = f'{schedule_name}["{base}"].update({num.rstrip(")")})'
        p = dict(step.params)
        if step.op in ("split", "unroll", "vectorize", "parallel"):
            args = [repr(p["loop"])]
            if p.get("factor") is not None:
                args.append(repr(p["factor"]))
            if p.get("tail", "GuardWithIf") != "GuardWithIf":
                args.append(f"tail={p['tail']!r}")
        elif step.op == "tile":
            args = [repr(p["x"]), repr(p["y"]), repr(p["fx"]), repr(p["fy"])]
            if p.get("tail", "GuardWithIf") != "GuardWithIf":
                args.append(f"tail={p['tail']!r}")
        elif step.op == "fuse":
            args = [repr(p["outer"]), repr(p["inner"])]
        elif step.op == "reorder":
            args = [repr(x) for x in p["loops"]]
        elif step.op in ("compute_at", "store_at"):
            args = [f'{schedule_name}["{p["consumer"]}"]', repr(p["loop"])]
        elif step.op == "cache_read":
            extra = "".join(f", {k}={tuple(p[k]) if k == 'layout' else p[k]!r}"
                            for k in ("index", "layout") if p.get(k) is not None)
            lines.append(f'{schedule_name}.cache_read({p["tensor"]!r}, {st}, '
                         f'{p["loop"]!r}{extra})')
            continue
        elif step.op == "cache_write":
            lines.append(f'{schedule_name}.cache_write({step.func!r}, {p["loop"]!r})')
            continue
        else:
            args = []
        lines.append(f"{st}.{step.op}({', '.join(args)})")
    return "\n".join(lines)
