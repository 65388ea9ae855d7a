"""Placement primitives: compute_root, compute_inline, compute_at, store_at, compute_with — where
a Func is computed and stored, not how its loops run; and storage_align and reorder_storage, how
its buffer is laid out.

Their argument checks run here (the consumer reads the Func, the loop is the consumer's); whether
the placements of a whole schedule can be realized (every reader inside the compute loop,
storage outside it, no buffer shared by a parallel loop) is one function,
``schedule/placement.py``'s ``plan_placements`` (with ``fusion_error`` for compute_with), which
both ``tl.check`` and lowering call: their legality obligation is "placement".

A Func with update definitions is computed at root: its updates run in order over its whole
domain, and recomputing it in pieces would cut the recurrences they carry.

``storage_align`` pads a dimension of a Func's buffer so that the stride of the dimension outside
it is ``factor * n + offset`` elements: the rows of a tile that a warp's threads write down its
columns (a transposed copy in GPU shared memory) then fall in different banks. It changes no
value and no order: no legality obligation. Nor does ``reorder_storage``, which stores a
Func's dimensions in another order (a partial result per block of rows stored row by row).

See also: Halide ``Func::compute_root/compute_inline/compute_at/store_at/compute_with``,
``align_storage`` and ``reorder_storage``; TVM ``compute_at/compute_inline``
(``src/s_tir/schedule/primitive/compute_at.cc``) and ``storage_align``
(``src/s_tir/schedule/primitive/block_annotate.cc``).
"""

from __future__ import annotations

from typing import Any

from tensorlang.errors import IllegalScheduleError, ScheduleError
from tensorlang.func import parse_stage_id

from ..legality.check import recurrence_witness
from ..loops import INLINE, ROOT, Location, StageState
from ..placement import fused_loops_mismatch
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


def refuse_fused(sched, st: StageState, step: Step) -> None:
    """A stage in a compute_with fusion (fused or hosting) stays at root.

    Raises:
        ScheduleError: ``st`` is computed with another stage, or another is computed with it.
    """
    guests = [n for n, o in sched.states.items() if o.fused is not None and o.fused.func == st.func]
    if st.fused is not None or guests:
        other = st.fused.func if st.fused is not None else guests[0]
        raise ScheduleError.in_schedule(
            st.func, f"{st.func} shares its loops with {other} (compute_with); a fused stage "
            f"is computed at root", step)


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
        refuse_fused(sched, st, step)
        if sched.pipeline.is_output(st.func):
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} is an output; it cannot be inlined", step)
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
        refuse_fused(sched, st, step)
        consumer, loop = step.get("consumer"), step.get("loop")
        refuse_update_host(sched, consumer, step)
        if consumer not in sched.states:
            raise ScheduleError.in_schedule(
                st.func, f"{consumer} is not a Func of this pipeline", step)
        if sched.pipeline.is_output(st.func):
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} is an output; it is always computed at root", step)
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


@register
class ComputeWith(Primitive):
    """``compute_with(host, loop)``: run this stage in ``host``'s loop nest, sharing its loops
    from the outermost to ``loop`` (after the host's body in each iteration of ``loop``), its
    own loops inside. Both stages are pure definitions computed at root, neither reads the other
    (directly or through other Funcs), and the shared loops must be the same in both: the same
    names (so the same Vars), splits, kinds and bounds (checked when lowering: the bounds depend
    on the sizes). See also: Halide ``Func::compute_with`` (its ``LoopAlignStrategy`` is not
    supported: the bounds must match)."""

    name, family = "compute_with", "placement"
    params = (Param("host", "func"), Param("loop", "loop"))
    obligations = frozenset({"placement"})

    def check(self, sched, st: StageState, step: Step) -> None:
        host, loop = step.get("host"), step.get("loop")
        if host not in sched.states:
            raise ScheduleError.in_schedule(st.func, f"{host} is not a Func of this pipeline",
                                            step)
        hst = sched.states[host]
        if host == st.func:
            raise ScheduleError.in_schedule(st.func, "a stage cannot be computed with itself",
                                            step)
        for s_ in (st, hst):
            if s_.update is not None:
                raise ScheduleError.in_schedule(
                    st.func, f"{s_.func} is an update stage; compute_with fuses pure "
                    f"definitions only", step)
            if s_.compute.kind != "root":
                raise ScheduleError.in_schedule(
                    st.func, f"{s_.func} is computed {s_.compute}; compute_with fuses stages "
                    f"computed at root", step)
        if st.fused is not None:
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} is already computed with {st.fused.func}", step)
        if hst.fused is not None:
            raise ScheduleError.in_schedule(
                st.func, f"{host} is itself computed with {hst.fused.func}; fuse {st.func} "
                f"with {hst.fused.func} instead", step)
        if any(o.fused is not None and o.fused.func == st.func for o in sched.states.values()):
            raise ScheduleError.in_schedule(
                st.func, f"other stages are computed with {st.func}; it cannot be fused into "
                f"another stage too", step)
        hst.resolve(loop, str(step))
        for a, b in ((st.func, host), (host, st.func)):
            if b in transitive_readers(sched, a):
                raise ScheduleError.in_schedule(
                    st.func, f"{b} reads {a} (directly or through other Funcs): fusing their "
                    f"loops would read values not computed yet; compute_with fuses independent "
                    f"stages only", step)
        problem = fused_loops_mismatch(st, hst, loop)
        if problem is not None:
            raise ScheduleError.in_schedule(st.func, problem, step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.fused = Location("with", step.get("host"), step.get("loop"))
        return None

    def python_args(self, step: Step, schedule_name: str) -> list[str]:
        return [f'{schedule_name}["{step.get("host")}"]', repr(step.get("loop"))]


@register
class ReorderStorage(Primitive):
    """``reorder_storage(*vars)``: the buffer stores its dimensions in this order, outermost
    first (all the Func's pure Vars, each once); applied after ``realize``
    (``schedule/storage_order.py``). Halide's ``Func::reorder_storage``."""

    name, family = "reorder_storage", "placement"
    params = (Param("vars", "loops"),)

    def check(self, sched, st: StageState, step: Step) -> None:
        base, _ = parse_stage_id(st.func)
        if st.update is not None:
            raise ScheduleError.in_schedule(
                st.func, f"reorder_storage lays out {base}'s buffer; call it on s[{base!r}]",
                step)
        if sched.pipeline.is_output(base):
            raise ScheduleError.in_schedule(
                base, f"{base} is an output; its storage is the caller's array (row-major in "
                f"its arguments' order)", step)
        order = tuple(step.get("vars"))
        if sorted(order) != sorted(st.pure) or len(set(order)) != len(order):
            raise ScheduleError.in_schedule(
                base, f"reorder_storage{order}: name each of {base}'s pure Vars "
                f"({', '.join(st.pure)}) once, the outermost stored first", step)
        if st.align:
            raise ScheduleError.in_schedule(
                base, f"{base} has a storage_align; reorder_storage with it is not supported "
                f"(its dimensions count in the arguments' order): use one of the two", step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.storage_order = tuple(step.get("vars"))
        return None

    def python_args(self, step: Step, schedule_name: str) -> list[str]:
        return [repr(v) for v in step.get("vars")]


@register
class StorageAlign(Primitive):
    """``storage_align(dim, factor, offset)``: the stride of the buffer's storage dimension
    ``dim`` (0: outermost; the Func's arguments in order) is ``factor * n + offset`` elements,
    by padding the dimension inside it."""

    name, family = "storage_align", "placement"
    params = (Param("dim", "index"), Param("factor", "factor"), Param("offset", "index"))

    def check(self, sched, st: StageState, step: Step) -> None:
        base, _ = parse_stage_id(st.func)
        if st.update is not None:
            raise ScheduleError.in_schedule(
                st.func, f"storage_align lays out {base}'s buffer; call it on s[{base!r}]", step)
        if sched.pipeline.is_output(base):
            raise ScheduleError.in_schedule(
                base, f"{base} is an output; its storage is the caller's array", step)
        dim, factor, offset = step.get("dim"), step.get("factor"), step.get("offset")
        rank = len(st.pure)
        if dim >= rank - 1:
            raise ScheduleError.in_schedule(
                base, f"storage_align dim {dim}: {base} is stored in {rank} dimension(s), and "
                f"only a dimension with one inside it (0 ... {rank - 2}) has a stride to align",
                step)
        if offset >= factor:
            raise ScheduleError.in_schedule(
                base, f"storage_align offset {offset} must be less than its factor {factor}",
                step)
        if st.storage_order is not None:
            raise ScheduleError.in_schedule(
                base, f"{base} has a reorder_storage; storage_align with it is not supported "
                f"(its dimensions count in the arguments' order): use one of the two", step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.align[step.get("dim")] = (step.get("factor"), step.get("offset"))
        return None
