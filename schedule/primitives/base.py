"""What a schedule primitive is: its parameters, argument checks, rewrite, legality obligation and
its Python form, in one object (the shape of Exo's and TVM's primitive definitions).

A primitive never sees user handles: stage methods (``schedule.py``) turn loop handles and Vars
into names and record a :class:`~tensorlang.schedule.trace.Step`; replaying a trace (JSON) goes
through the same :meth:`Primitive.check_params`, so a hand-edited trace gets the errors the
Python API gives. ``docs/architecture.md`` ("Adding a primitive") walks through adding one.

See also: TVM ``src/s_tir/schedule/primitive/`` (one file per family, each primitive with its
checks and its ``UnpackedInstTraits::AsPython``); Exo's ``API_scheduling.py`` (argument processors
per parameter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from tensorlang.errors import IllegalScheduleError, ScheduleError
from tensorlang.func import parse_stage_id

from ..loops import StageState
from ..trace import Step, TailStrategy

if TYPE_CHECKING:  # the Schedule is the context a primitive rewrites (no import cycle at run time)
    from ..schedule import Schedule

#: Kinds of ``Problem`` (``schedule/legality/check.py``) a primitive can introduce.
OBLIGATIONS = ("order", "parallel", "vectorize", "recompute", "unproven", "placement",
               "realize")


@dataclass(frozen=True)
class Param:
    """One parameter of a primitive, as stored in a ``Step``: its name, its kind (which fixes
    the check: ``loop`` a loop name, ``loops`` a non-empty tuple of them, ``funcs`` a non-empty
    tuple of Func names, ``factor`` a positive
    int, ``tail`` a ``TailStrategy`` value, ``func`` a Func name, ``tensor`` an Input or Func
    name, ``index`` a non-negative int, ``layout`` a tuple of ints, ``panel`` a pair of
    non-negative ints, ``scope`` a GPU memory: ``"shared"`` or ``"local"``), whether it is
    needed, its default, and whether the stage method takes it by keyword."""

    name: str
    kind: str
    required: bool = True
    default: Any = None
    keyword: bool = False


def _check_value(kind: str, value: Any) -> str | None:
    """Why ``value`` is not a valid ``kind`` parameter (None: it is)."""
    if kind in ("loop", "func", "tensor"):
        return None if isinstance(value, str) and value else "a name (a non-empty str)"
    if kind == "loops":
        ok = isinstance(value, tuple) and value and all(isinstance(v, str) for v in value)
        return None if ok else "a non-empty tuple of loop names"
    if kind == "funcs":
        ok = isinstance(value, tuple) and value and all(isinstance(v, str) and v for v in value)
        return None if ok else "a non-empty tuple of Func (stage) names"
    if kind == "factor":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return None if ok else "a positive int"
    if kind == "index":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "a non-negative int"
    if kind == "tail":
        ok = value in {t.value for t in TailStrategy}
        return None if ok else f"one of {', '.join(t.value for t in TailStrategy)}"
    if kind == "scope":
        return None if value in ("shared", "local") else '"shared" or "local"'
    if kind == "panel":
        ok = isinstance(value, tuple) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        return None if ok else "a (dimension, size) pair of non-negative ints"
    if kind == "layout":
        ok = isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool)
                                              for v in value)
        return None if ok else "a tuple of dimension numbers"
    raise AssertionError(f"unknown parameter kind {kind!r}")


class Primitive:
    """A schedule primitive. Subclasses set the class attributes and override :meth:`rewrite`
    (and :meth:`check` where the primitive has preconditions beyond its parameters' types).

    Attributes:
        name: the primitive's name, the ``op`` of its ``Step`` and its stage method's name.
        family: the module that holds it (``loops``, ``loop kinds``, ``placement``, ``staging``).
        params: its parameters, in the order its stage method takes them.
        obligations: the kinds of legality problem a step of it can introduce, i.e. what
            ``tl.check`` must prove again after it (a subset of :data:`OBLIGATIONS`); the
            legality report blames a refuted property only on a primitive obliged to it.
    """

    name: ClassVar[str]
    family: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = ()
    obligations: ClassVar[frozenset[str]] = frozenset()

    # -- the parts ------------------------------------------------------------------------------
    def check_params(self, step: Step) -> None:
        """Every required parameter present, none unknown, each of its kind.

        Raises:
            ScheduleError: naming the parameter and what it must be.
        """
        known = {p.name for p in self.params}
        for k, _ in step.params:
            if k not in known:
                raise ScheduleError.in_schedule(
                    step.func, f"{self.name} has no parameter {k!r} (its parameters: "
                    f"{', '.join(known) or 'none'})", step)
        for p in self.params:
            value = step.get(p.name)
            if value is None:
                if p.required:
                    raise ScheduleError.in_schedule(
                        step.func, f"{self.name} needs its parameter {p.name!r}", step)
                continue
            why = _check_value(p.kind, value)
            if why is not None and p.kind == "tail":
                raise ScheduleError.in_schedule(
                    step.func, f"unknown tail strategy {value!r}; use {why}", step)
            if why is not None:
                raise ScheduleError.in_schedule(
                    step.func, f"{self.name} {p.name} must be {why}, got {value!r}", step)

    def check(self, sched: Schedule, st: StageState, step: Step) -> None:
        """Preconditions on the schedule's state, checked before the rewrite changes anything
        (the rewrite checks what depends on its own progress)."""

    def rewrite(self, sched: Schedule, st: StageState, step: Step) -> Any:
        """Apply the step to ``st`` (and, for staging primitives, to ``sched``'s view and
        states); return what the stage method returns (new loop or stage names, or None)."""
        raise NotImplementedError

    def python_args(self, step: Step, schedule_name: str) -> list[str]:
        """The arguments of the stage-method call, as Python source; parameters at their
        default are left out."""
        out = []
        for p in self.params:
            value = step.get(p.name)
            if value is None or (not p.required and value == p.default):
                continue
            text = repr(tuple(value) if isinstance(value, (tuple, list)) else value)
            out.append(f"{p.name}={text}" if p.keyword else text)
        return out

    def to_python(self, step: Step, schedule_name: str = "s") -> str:
        """The step as the line of Python that records it."""
        return f"{stage_expr(step.func, schedule_name)}.{self.name}(" \
               f"{', '.join(self.python_args(step, schedule_name))})"


def stage_expr(stage: str, schedule_name: str) -> str:
    """``s["F"]`` or ``s["F"].update(0)``: the Python expression of a stage."""
    func, number = parse_stage_id(stage)
    expr = f'{schedule_name}["{func}"]'
    return expr if number is None else f"{expr}.update({number})"


def tail_of(step: Step) -> TailStrategy:
    return TailStrategy(step.get("tail") or TailStrategy.GuardWithIf.value)


def refuse_shift_on_update(st: StageState, step: Step, loop: str, factor: int) -> None:
    """A ShiftInwards split of an update stage runs the update twice on some points.

    Raises:
        ScheduleError: ``loop`` is not a loop of the stage (checked first: no witness is made up
            for a loop that does not exist).
        IllegalScheduleError: with the witness pair, when ``step`` splits an update stage with
            ``ShiftInwards``.
    """
    if st.update is None or tail_of(step) is not TailStrategy.ShiftInwards:
        return
    st.resolve(loop, str(step))
    raise IllegalScheduleError.in_schedule(
        st.func, f"ShiftInwards recomputes some points, and running an update twice on a point "
        f"changes its result (witness: with {loop} of extent {factor + 1}, iterations "
        f"({loop}.o=0, {loop}.i=1) and ({loop}.o=1, {loop}.i=0) both run {loop}=1); use "
        f"GuardWithIf", step)
