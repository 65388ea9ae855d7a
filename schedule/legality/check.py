"""Legality of a schedule, proven with isl, and refusals explained with a witness pair.

For every stage with dependences between its own iterations (see ``model.py``):

- **order**: every strict dependence (flow, anti, output) of an update definition must go forward in
  time under the schedule: ``dep ∩ {(a, b) : T(a) >=lex T(b)}`` is empty (the legality condition
  of schedule transformations, Feautrier 1992; isl manual "Dependence Analysis");
- **parallel / vectorized loops**: no dependence, strict or reduction, may be *carried* by the loop:
  no dependent pair agrees on every outer loop and differs on this one.

Reduction dependences (``C[i, j] += ...`` over ``k``) never constrain the order (the reduction
policy: reductions are associative, so reordering and tiling reduction loops only changes rounding)
but forbid running two of their iterations at once. Witnesses are sampled with the sizes fixed to
small example values (isl ``lexmin`` + ``sample_point``) only after a failure.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import islpy as isl

from tensorlang.errors import IllegalScheduleError, ScheduleError, schedule_message

from ..ir import CONCURRENT, ForKind
from ..loops import Split, StageState
from ..nest import check_shift_inwards, shift_witness
from ..placement import plan_placements
from ..trace import TailStrategy
from .isl_text import Unrepresentable
from .model import StageModel, model_for
from .time_map import carried_at, time_map

EXAMPLE_SIZES = (16, 64, 5)
#: What building or checking a model may raise for a schedule isl cannot state (not a bug).
MODEL_ERRORS = (Unrepresentable, isl.Error)


@dataclass
class Problem:
    """One refuted property of a stage: ``kind`` is ``order``, ``parallel``/``vectorize``,
    ``recompute`` (a ShiftInwards split that runs points twice), ``unproven`` (not modellable)
    ``placement`` (a compute_at / store_at that lowering cannot realize: ``placement.py``) or
    ``realize`` (a loop nest lowering refuses, ``Schedule.check``)."""

    stage: str
    kind: str
    loop: str | None
    dependence: str
    source: dict[str, int]
    sink: dict[str, int]
    primitive: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)  # the example sizes of the witness
    #: for a ``parallel`` problem of a GPU loop: ``gpu_blocks`` or ``gpu_threads``
    loop_kind: str = ""

    def message(self) -> str:
        src = ", ".join(f"{k}={v}" for k, v in self.source.items())
        snk = ", ".join(f"{k}={v}" for k, v in self.sink.items())
        if self.kind in ("recompute", "placement", "realize"):  # the text lowering raises
            plain = schedule_message(self.stage, "")
            if self.primitive and self.dependence.startswith(plain):
                return schedule_message(self.stage, self.dependence[len(plain):], self.primitive)
            return self.dependence
        if self.kind == "unproven":
            text = f"cannot prove this stage's loop order legal: {self.dependence}"
        elif self.kind == "order":
            text = (f"the {self.dependence} dependence from iteration ({src}) to ({snk}) would "
                    f"run backwards — ({src}) must run before ({snk}), but the loop order puts "
                    f"it after (first at loop {self.loop}); keep the loops of this recurrence in "
                    f"an order that runs it forwards")
        else:
            what = "reduction" if self.dependence == "reduction" else self.dependence
            fix = ("make it a pure dimension of a new stage with s.rfactor(f, loop), or "
                   "parallelize a pure loop instead" if what == "reduction" else
                   f"{self.loop_kind or self.kind} a loop that carries no dependence (one of the "
                   f"independent pure loops)")
            action = (f"run {self.loop} as {self.loop_kind}" if self.loop_kind else
                      f"{self.kind} {self.loop}")
            text = (f"cannot {action}: the {what} dependence between iterations "
                    f"({src}) and ({snk}) is carried by {self.loop} — they would run at the same "
                    f"time; {fix}")
        return schedule_message(self.stage, text, self.primitive)


@dataclass
class LegalityReport:
    """Per stage: ``proven`` (every dependence respected) or the problems found."""

    stages: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    #: Each primitive of the trace, in order, with ``proven`` or ``refuted`` (it introduced a
    #: problem); filled by ``Schedule.check``.
    primitives: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def error(self) -> ScheduleError | None:
        """The error ``tl.compile`` raises for this report (None: the schedule is accepted):
        ``IllegalScheduleError`` when the schedule would change the result, ``ScheduleError``
        when it cannot be realized (``realize``)."""
        if not self.problems:
            return None
        first = self.problems[0]
        cls = ScheduleError if first.kind == "realize" else IllegalScheduleError
        return cls(first.message())

    def __str__(self) -> str:
        lines = [f"{step}: {status}" for step, status in self.primitives]
        lines += [f"{name}: {status}" for name, status in self.stages.items()]
        lines += [p.message() for p in self.problems]
        return "\n".join(lines)


def _witness(model: StageModel, rel: isl.Map
             ) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """A concrete dependent pair (source, sink) and the sizes it needs (small examples first)."""
    for val in EXAMPLE_SIZES:
        m = rel
        for k, p in enumerate(model.params):
            if not p.startswith("lo_"):
                m = m.fix_val(isl.dim_type.param, k, val)
        for k, p in enumerate(model.params):
            if p.startswith("lo_"):
                at0 = m.fix_val(isl.dim_type.param, k, 0)
                m = at0 if not at0.is_empty() else m
        if m.is_empty():
            continue
        pt = m.wrap().lexmin().sample_point()
        return _coords(model, pt)
    return _coords(model, rel.wrap().sample_point())


def _coords(model: StageModel, pt: isl.Point
            ) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    n = len(model.vars)
    coords = [pt.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(2 * n)]
    sizes = {p: pt.get_coordinate_val(isl.dim_type.param, k).to_python()
             for k, p in enumerate(model.params)}
    return dict(zip(model.vars, coords[:n])), dict(zip(model.vars, coords[n:])), sizes


#: how the primitives name the GPU loop kinds
GPU_LOOP_NAMES = {ForKind.GPU_BLOCK: "gpu_blocks", ForKind.GPU_THREAD: "gpu_threads"}


#: stage verdicts kept per process, by (model, loop structure): the rule-based schedule and the
#: tuner check many schedules that leave most stages' loops as they were
CHECKED_STAGES = 4096
_CHECKED: OrderedDict[tuple, tuple[StageModel, list[Problem]]] = OrderedDict()
_CHECKED_LOCK = threading.Lock()  # (schedules checked from several threads share it)


def check_stage(model: StageModel, st: StageState) -> list[Problem]:
    """The problems of stage ``st`` under its current loops (empty: proven legal). The verdict
    depends only on the model and the stage's loops (their order, kinds and the splits and
    fuses that made them): an earlier verdict on the same is returned (copies of its
    problems, which a report annotates)."""
    key = (id(model), st.func, tuple(st.relations), tuple(st.loops),
           tuple(st.kinds[leaf] for leaf in st.loops))
    with _CHECKED_LOCK:
        hit = _CHECKED.get(key)
        if hit is not None and hit[0] is model:
            _CHECKED.move_to_end(key)
            return [copy.copy(p) for p in hit[1]]
    problems = _check_stage(model, st)
    with _CHECKED_LOCK:
        _CHECKED[key] = (model, problems)  # (the model kept alive: its id stays its own)
        if len(_CHECKED) > CHECKED_STAGES:
            _CHECKED.popitem(last=False)
    return [copy.copy(p) for p in problems]


def _check_stage(model: StageModel, st: StageState) -> list[Problem]:
    T, where = time_map(model, st)
    problems: list[Problem] = []
    n_dims = T.dim(isl.dim_type.out)
    for kind, dep in model.strict.items():
        bad = dep.intersect(T.lex_ge_map(T))
        if not bad.is_empty():
            src, snk, sizes = _witness(model, bad)
            loop = _first_broken(T, where, src, snk, sizes, model)
            problems.append(Problem(st.func, "order", loop, kind, src, snk, sizes=sizes))
            break
    deps = list(model.strict.items())
    if model.reduction is not None:
        deps.append(("reduction", model.reduction))
    for leaf in st.loops:
        kind = st.kinds[leaf]
        if kind not in CONCURRENT and kind is not ForKind.VECTORIZED:
            continue
        sep = T.apply_range(carried_at(n_dims, where[leaf])).apply_range(T.reverse())
        for name, dep in deps:
            hit = dep.intersect(sep)
            if not hit.is_empty():
                src, snk, sizes = _witness(model, hit)
                word = "vectorize" if kind is ForKind.VECTORIZED else "parallel"
                problems.append(Problem(st.func, word, leaf, name, src, snk, sizes=sizes,
                                        loop_kind=GPU_LOOP_NAMES.get(kind, "")))
                break
    return problems


def _first_broken(T: isl.Map, where: dict[str, list[int]], src: dict[str, int],
                  snk: dict[str, int], sizes: dict[str, int], model: StageModel) -> str | None:
    """The outermost loop at which the two instances' times differ."""
    times = []
    for inst in (src, snk):
        m = T
        for k, p in enumerate(model.params):
            m = m.fix_val(isl.dim_type.param, k, sizes.get(p, 0))
        for k, v in enumerate(model.vars):
            m = m.fix_val(isl.dim_type.in_, k, inst[v])
        pt = m.range().sample_point()
        n = T.dim(isl.dim_type.out)
        times.append([pt.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(n)])
    for leaf, dims in where.items():
        if any(times[0][d] != times[1][d] for d in dims):
            return leaf
    return next((leaf for leaf, dims in where.items() if dims), None)


def _recompute_problem(st: StageState) -> Problem | None:
    """ShiftInwards recomputes points; for a reduction or an update that changes the result
    unless the recomputation is complete and not concurrent (``nest.check_shift_inwards``)."""
    for rel in st.relations:
        if isinstance(rel, Split) and rel.tail is TailStrategy.ShiftInwards and (
                st.rvars or st.update is not None):
            try:
                if st.update is not None:
                    raise IllegalScheduleError.in_schedule(
                        st.func, f"ShiftInwards on {rel.parent} would run the "
                        f"update twice on some points, which changes their result "
                        f"{shift_witness(rel)}; use GuardWithIf")
                check_shift_inwards(st, rel)
            except IllegalScheduleError as exc:
                return Problem(st.func, "recompute", rel.outer, str(exc), {}, {})
    return None


def check_schedule(schedule) -> LegalityReport:
    """Check every stage of ``schedule`` (a ``tl.Schedule``) that has self-dependences."""
    report = LegalityReport()
    key = schedule.pipeline.workload_key()
    sizes = tuple(schedule.pipeline.sizes)
    for f in schedule.view.funcs:
        if f.definition is None:
            continue
        for number in range(-1, len(f.updates)):
            stage = f.name if number < 0 else f"{f.name}.update({number})"
            st = schedule.states.get(stage)
            if st is None or st.compute.kind == "inline":
                continue
            recompute = _recompute_problem(st)
            if recompute is not None:
                report.stages[stage] = "refuted"
                report.problems.append(recompute)
                continue
            model = model_for(key, f, number, sizes, schedule.view.definition(f.name))
            if model is None:
                report.stages[stage] = "no dependences between its iterations"
                continue
            try:
                probs = check_stage(model, st)
            except MODEL_ERRORS as exc:
                probs = [Problem(stage, "unproven", None, str(exc).strip().splitlines()[0], {},
                                 {})]
            report.stages[stage] = "proven" if not probs else "refuted"
            report.problems.extend(probs)
    # placements: the same function lowering calls, so tl.check refuses what tl.compile would
    errors: list = []
    plan_placements(schedule.view, schedule.states, errors)
    for name, exc in errors:
        report.stages[name] = "refuted"
        report.problems.append(Problem(name, "placement", None, str(exc), {}, {}))
    return report


def recurrence_witness(f, sizes: tuple[str, ...], workload: str) -> str | None:
    """A flow dependence of ``f``'s first update that carries across its RDom, as text:
    ``iteration (...) reads what (...) wrote`` (None if its updates have none)."""
    for u in f.updates:
        model = model_for(workload, f, u.number, sizes)
        if model is None or "flow" not in model.strict or model.strict["flow"].is_empty():
            continue
        src, snk, _ = _witness(model, model.strict["flow"])
        a = ", ".join(f"{k}={v}" for k, v in snk.items())
        b = ", ".join(f"{k}={v}" for k, v in src.items())
        return f"{f.name}.update({u.number}) iteration ({a}) reads what ({b}) wrote"
    return None
