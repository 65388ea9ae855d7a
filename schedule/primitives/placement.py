"""Placement primitives: compute_root, compute_inline, compute_at, store_at — where a Func is
computed and stored, not how its loops run.

Their argument checks run here (the consumer reads the Func, the loop is the consumer's); whether
the placements of a whole schedule can be realized (every reader inside the compute loop,
storage outside it, no buffer shared by a parallel loop) is one function,
``schedule/placement.py``'s ``plan_placements``, which both ``tl.check`` and lowering call: their
legality obligation is "placement".

A Func with update definitions is computed at root: its updates run in order over its whole
domain, and recomputing it in pieces would cut the recurrences they carry.

See also: Halide ``Func::compute_root/compute_inline/compute_at/store_at``; TVM
``compute_at/compute_inline`` (``src/s_tir/schedule/primitive/compute_at.cc``).
"""

from __future__ import annotations

from typing import Any

from tensorlang.errors import IllegalScheduleError, ScheduleError
from tensorlang.func import parse_stage_id

from ..legality.check import recurrence_witness
from ..loops import INLINE, ROOT, Location, StageState
from ..trace import Step
from .base import Param, Primitive
from .registry import register


def refuse_func_with_updates(sched, st: StageState, step: Step) -> None:
    """A Func with update definitions (or one of its update stages) keeps its placement at root.

    Raises:
        IllegalScheduleError: computing it at a loop or inline would cut a recurrence (with the
            witness pair).
        ScheduleError: otherwise (its update stages have no placement of their own).
    """
    base, _ = parse_stage_id(st.func)
    if st.update is None and not sched.view.func(st.func).updates:
        return
    if step.op in ("compute_at", "store_at", "compute_inline") and st.update is None:
        wit = recurrence_witness(sched.view.func(base), tuple(sched.pipeline.sizes),
                                 sched.pipeline.workload_key())
        if wit is not None:
            loop = step.get("loop")
            where = f"at {step.get('consumer')}.{loop}" if loop else "inline"
            raise IllegalScheduleError.in_schedule(
                base, f"computing {base} {where} recomputes it in pieces, but its recurrence "
                f"carries values across them: {wit}, which a piece that starts at the later "
                f"iteration would not have computed; compute {base} at root", step)
    raise ScheduleError.in_schedule(
        st.func, f"{base} has update definitions; it is computed at root (its definitions run in "
        f"order over its whole domain), and its update stages have no placement of their own",
        step)


def refuse_update_host(sched, host: str, step: Step) -> None:
    """Only a pure definition's stage hosts other stages at its loops.

    Raises:
        ScheduleError: ``host`` is an update stage.
    """
    if host in sched.states and sched.states[host].update is not None:
        raise ScheduleError.in_schedule(
            step.func, "an update stage cannot host other stages yet; compute the producer at "
            "root", step)


def transitive_readers(sched, func: str) -> set[str]:
    """Every Func that reads ``func``, directly or through other Funcs."""
    out: set[str] = set()
    frontier = {func}
    while frontier:
        nxt = {f.name for f in sched.view.funcs
               if any(p in frontier for p in sched.view.reads(f.name))} - out
        out |= nxt
        frontier = nxt
    return out


@register
class ComputeRoot(Primitive):
    """``compute_root()``: the whole Func, before its consumers (the default)."""

    name, family = "compute_root", "placement"
    obligations = frozenset({"placement"})

    def check(self, sched, st: StageState, step: Step) -> None:
        refuse_func_with_updates(sched, st, step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.compute, st.store = ROOT, None
        return None


@register
class ComputeInline(Primitive):
    """``compute_inline()``: substitute the (pointwise) definition into every read."""

    name, family = "compute_inline", "placement"
    obligations = frozenset({"placement"})

    def check(self, sched, st: StageState, step: Step) -> None:
        refuse_func_with_updates(sched, st, step)
        if sched.view.func(st.func) is sched.output:
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} is the output; it cannot be inlined", step)
        if st.rvars:
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} is a reduction; only pointwise Funcs can be inlined "
                f"(compute it at root or at a consumer loop instead)", step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.compute, st.store = INLINE, None
        return None


class _At(Primitive):
    family = "placement"
    params = (Param("consumer", "func"), Param("loop", "loop"))
    obligations = frozenset({"placement"})

    def check(self, sched, st: StageState, step: Step) -> None:
        refuse_func_with_updates(sched, st, step)
        consumer, loop = step.get("consumer"), step.get("loop")
        refuse_update_host(sched, consumer, step)
        if consumer not in sched.states:
            raise ScheduleError.in_schedule(
                st.func, f"{consumer} is not a Func of this pipeline", step)
        if sched.view.func(st.func) is sched.output:
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} is the output; it is always computed at root", step)
        sched.states[consumer].resolve(loop, str(step))
        if consumer not in transitive_readers(sched, st.func):
            raise ScheduleError.in_schedule(
                st.func, f"{consumer} does not read {st.func}, directly or through other Funcs "
                f"(its readers: {', '.join(sched.view.readers(st.func))})", step)

    def python_args(self, step: Step, schedule_name: str) -> list[str]:
        return [f'{schedule_name}["{step.get("consumer")}"]', repr(step.get("loop"))]


@register
class ComputeAt(_At):
    """``compute_at(consumer, loop)``: the region one iteration of the loop reads, inside it."""

    name = "compute_at"

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.compute = Location("at", step.get("consumer"), step.get("loop"))
        return None


@register
class StoreAt(_At):
    """``store_at(consumer, loop)``: the buffer, allocated at the loop (outside compute_at's)."""

    name = "store_at"

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.store = Location("at", step.get("consumer"), step.get("loop"))
        return None
