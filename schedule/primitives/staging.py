"""Staging primitives: cache_read, cache_write, rfactor — they add a stage to the pipeline.

``cache_read`` copies the tile of a tensor that one iteration of a consumer loop reads into a
buffer computed at that loop (optionally with another dimension order: BLIS's packing);
``cache_write`` moves a Func's definition to a local stage computed at one of its loops and
leaves the Func a copy of it. The new stage is computed at a loop, so their legality obligation
is "placement"; ``cache_write`` also rewrites the stage's own loops (its reduction loops move to
the new stage), so it is obliged to everything a loop rewrite is. ``rfactor`` splits a reduction
in two: a new stage ``<f>_rf`` keeps one reduction loop as a pure dimension (free to run in
parallel or as vector lanes), and ``f`` reduces it.

See also: TVM ``cache_read/cache_write`` (``src/s_tir/schedule/primitive/cache_read_write.cc``),
TVM ``rfactor`` and Halide ``Func::rfactor`` (Suriana, Adams and Kamil, "Parallel Associative
Reductions in Halide", CGO 2017);
Halide ``Func::in`` + ``reorder_storage``; Van Zee and van de Geijn, "BLIS: A Framework for
Rapidly Instantiating BLAS Functionality" (TOMS 2015) for packing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tensorlang.affine import const_value, sadd, sceildiv, sconst, smul, ssub
from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, BinOp, Cmp, Expr, Var, substitute, walk
from tensorlang.func import Definition, Func, Update, constant_exterior, parse_stage_id
from tensorlang.rdom import RVar

from ..ir import ForKind
from ..loops import Fuse, Location, Split, StageState
from ..realize import identity
from ..trace import Step
from .base import OBLIGATIONS, Param, Primitive, stage_expr
from .placement import refuse_func_with_updates, refuse_update_host
from .registry import register


def _rel_names(rel: Split | Fuse) -> tuple[str, ...]:
    if isinstance(rel, Split):
        return (rel.parent, rel.outer, rel.inner)
    return (rel.outer, rel.inner, rel.fused)


@register
class CacheRead(Primitive):
    """``s.cache_read(tensor, s[consumer], loop, index=None, layout=None, scope=None,
    panel=None, readers=None)``; the step's ``func`` is the consumer."""

    name, family = "cache_read", "staging"
    params = (Param("tensor", "tensor"), Param("loop", "loop"),
              Param("index", "index", required=False, keyword=True),
              Param("layout", "layout", required=False, keyword=True),
              Param("scope", "scope", required=False, keyword=True),
              Param("panel", "panel", required=False, keyword=True),
              Param("readers", "funcs", required=False, keyword=True))
    obligations = frozenset({"placement"})

    def check(self, sched, st: StageState, step: Step) -> None:
        refuse_update_host(sched, st.func, step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        what, tensor, loop = str(step), step.get("tensor"), step.get("loop")
        index, layout = step.get("index"), step.get("layout")
        st.resolve(loop, what)
        reads_of = sched.view.reads(st.func)
        if tensor not in reads_of and not step.get("readers"):
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} does not read {tensor} (it reads {', '.join(reads_of)})",
                step)
        src = sched.view.producer(tensor)
        rank = len(src.bounds)
        reads = [a for a in walk(sched.view.definition(st.func).value)
                 if isinstance(a, Access) and a.name == tensor]
        if index is not None and not 0 <= index < len(reads):
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} reads {tensor} {len(reads)} time(s); index must be in "
                f"0..{len(reads) - 1}", step)
        copied = reads if index is None else [reads[index]]
        if layout is not None:
            layout = tuple(layout)
            if sorted(layout) != list(range(rank)):
                raise ScheduleError.in_schedule(
                    st.func, f"layout {layout} is not a permutation of {tensor}'s {rank} "
                    f"dimensions (0..{rank - 1})", step)
            if any(a.boundary is not None for a in copied):
                raise ScheduleError.in_schedule(
                    st.func, f"{st.func} reads {tensor} through a boundary condition; a copy "
                    f"with another layout would move it off {tensor}'s dimensions (use "
                    f"layout=None)", step)
            if layout == tuple(range(rank)):
                layout = None
        panel = step.get("panel")
        if panel is not None:
            _check_panel(st.func, tensor, src, tuple(panel), copied, step)
            if panel[1] == 1:
                panel = None
        scope = step.get("scope")
        name = sched.view.unique_name(f"{tensor}_{scope or 'local'}")
        order = layout or tuple(range(rank))  # the copy's dimension d is tensor's order[d]
        idx = tuple(Var(f"{name}_d{d}") for d in range(rank + (panel is not None)))
        src_idx = [idx[order.index(d)] for d in range(rank)]
        if panel is None:
            copy_f = Func(name, shape=None, dtype=src.dtype)
            copy_f[idx] = src[tuple(src_idx)]
        else:  # whole panels: zeros past the extent of the panelled dimension
            dim, size = panel
            src_idx[dim] = src_idx[dim] * size + idx[rank]
            shape = [src.bounds[order[d]][1] for d in range(rank)] + [size]
            shape[order.index(dim)] = sceildiv(shape[order.index(dim)], size)
            copy_f = Func(name, shape=tuple(shape), dtype=src.dtype)
            copy_f[idx] = constant_exterior(src, 0)[tuple(src_idx)]
        others = _other_readers(sched, st.func, tensor, loop, step, index, layout, panel)
        first = min((st.func, *others), key=lambda n: sched.view.funcs.index(
            sched.view.func(n)))
        sched.view.add_before(copy_f, first)
        sched.view.redirect(st.func, tensor, copy_f, index, layout, panel)
        for other in others:
            sched.view.redirect(other, tensor, copy_f)
        new = StageState.initial(copy_f)
        new.compute = Location("at", st.func, loop)
        new.memory = scope
        sched.states[name] = new
        return name

    def to_python(self, step: Step, schedule_name: str = "s") -> str:
        tensor, *rest = self.python_args(step, schedule_name)
        return (f"{schedule_name}.cache_read({tensor}, {stage_expr(step.func, schedule_name)}, "
                f"{', '.join(rest)})")


def _other_readers(sched, consumer: str, tensor: str, loop: str, step: Step,
                   index: int | None, layout, panel) -> tuple[str, ...]:
    """``cache_read``'s ``readers``: the other stages whose reads of ``tensor`` go to the copy
    too (TVM's ``readers``). Each must read ``tensor`` and be computed inside ``consumer``'s
    ``loop`` (at it, or at a loop of a stage computed there), where the copy exists.

    Raises:
        ScheduleError: a reader that does not read ``tensor``, is ``consumer`` itself, or is
            computed elsewhere; ``readers`` with ``index``, ``layout`` or ``panel`` (made for one
            stage's reads: their boundary conditions are checked for those alone).
    """
    others = tuple(step.get("readers") or ())
    if not others:
        return ()
    if index is not None or layout is not None or panel is not None:
        raise ScheduleError.in_schedule(
            consumer, "cache_read's readers take every read of the tensor as it is: not "
                      "with index, layout or panel", step)
    for other in others:
        if other == consumer or other not in sched.states:
            raise ScheduleError.in_schedule(
                consumer, f"readers must name other stages of the pipeline; {other!r} is "
                f"{'the consumer itself' if other == consumer else 'not one'}", step)
        if tensor not in sched.view.reads(other):
            raise ScheduleError.in_schedule(
                consumer, f"reader {other} does not read {tensor}", step)
        if not _inside(sched, other, consumer, loop, set()):
            raise ScheduleError.in_schedule(
                consumer, f"reader {other} is not computed inside {consumer}'s loop {loop}, "
                f"where the copy of {tensor} is: compute_at it there first", step)
    return others


def _inside(sched, name: str, consumer: str, loop: str, seen: set[str]) -> bool:
    """Whether stage ``name`` is computed inside ``consumer``'s ``loop``: at it or at a loop of
    ``consumer`` inside it, at a loop of a stage computed inside it, or inlined into stages that
    all are (or into ``consumer``)."""
    if name == consumer or name in seen:
        return name == consumer
    seen.add(name)
    where = sched.states[name].compute
    if where.kind == "inline":
        users = sched.view.readers(name)
        return bool(users) and all(_inside(sched, u, consumer, loop, seen) for u in users)
    if where.kind != "at":
        return False
    if where.func == consumer:  # (consumer's loops, outermost first)
        loops = sched.states[consumer].loops
        return where.loop in loops and loops.index(where.loop) >= loops.index(loop)
    return _inside(sched, where.func, consumer, loop, seen)


def _check_panel(consumer: str, tensor: str, src, panel: tuple[int, int], copied, step) -> None:
    """Refuse ``cache_read``'s ``panel`` where it names no dimension of ``tensor``, a size below
    1, a dimension whose domain does not start at 0, or a read through a boundary condition."""
    dim, size = panel
    rank = len(src.bounds)
    if dim >= rank or size < 1:
        raise ScheduleError.in_schedule(
            consumer, f"panel {panel} must be (dimension of {tensor} in 0..{rank - 1}, size >= "
            f"1)", step)
    if any(const_value(lo) != 0 for lo, _ in src.bounds):
        raise ScheduleError.in_schedule(
            consumer, f"panel: {tensor}'s domain does not start at 0 in every dimension; "
            f"give it a shape=(...) or copy it without panels", step)
    if any(a.boundary is not None for a in copied):
        raise ScheduleError.in_schedule(
            consumer, f"{consumer} reads {tensor} through a boundary condition; a copy in "
            f"panels would move it off {tensor}'s dimensions (use panel=None)", step)


@register
class CacheWrite(Primitive):
    """``s.cache_write(f, loop, scope=None)``: ``f``'s definition moves to ``<f>_local``,
    computed at ``loop``; ``f`` becomes the copy."""

    name, family = "cache_write", "staging"
    params = (Param("loop", "loop"), Param("scope", "scope", required=False, keyword=True))
    obligations = frozenset(OBLIGATIONS)

    def check(self, sched, st: StageState, step: Step) -> None:
        refuse_func_with_updates(sched, st, step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        what, loop = str(step), step.get("loop")
        st.resolve(loop, what)
        f = sched.view.func(st.func)
        d = sched.view.definition(st.func)
        if st.compute.kind == "inline":
            raise ScheduleError.in_schedule(
                st.func, f"{st.func} is inlined; it has no loops to cache at", step)
        if st.is_reduction_loop(loop):
            raise ScheduleError.in_schedule(
                st.func, f"{loop} iterates a reduction; cache at a pure loop", step)
        touched = {n for rel in st.relations for n in _rel_names(rel)}
        if any(r in touched for r in st.rvars):
            raise ScheduleError.in_schedule(
                st.func, f"the reduction loops of {st.func} were already scheduled; call "
                f"cache_write before scheduling them, then schedule them on the new stage", step)
        name = sched.view.unique_name(f"{st.func}_local")
        local = Func.from_definition(name, f, dataclasses.replace(d, func=name))
        sched.view.add_before(local, st.func)
        pure_ranges = tuple(r for r in d.ranges if r[0] in st.pure)
        args = tuple(d.args)
        sched.view.replace_definition(st.func, Definition(
            st.func, args, local[args], None, (), pure_ranges))
        _replace_reduction_loops(st, ())
        new = StageState.initial(local)
        new.compute = Location("at", st.func, loop)
        new.memory = step.get("scope")
        sched.states[name] = new
        return name

    def to_python(self, step: Step, schedule_name: str = "s") -> str:
        return f"{schedule_name}.cache_write({step.func!r}, " \
               f"{', '.join(self.python_args(step, schedule_name))})"


@register
class RFactor(Primitive):
    """``s.rfactor(f, loop)``: ``f``'s reduction over ``loop`` — an RVar, or the outer or inner
    loop of its one split — becomes ``f_rf``, with ``loop`` a pure dimension (its last) and the
    rest of the reduction; ``f`` reduces ``f_rf`` over that dimension. Returns ``f_rf``'s name.
    """

    name, family = "rfactor", "staging"
    params = (Param("loop", "loop"),)
    obligations = frozenset(OBLIGATIONS)

    def check(self, sched, st: StageState, step: Step) -> None:
        if st.update is None:
            refuse_func_with_updates(sched, st, step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        what, loop = str(step), step.get("loop")
        st.resolve(loop, what)
        if st.update is not None:
            return _rfactor_update(sched, st, step)
        f = sched.view.func(st.func)
        d = sched.view.definition(st.func)
        if d.reduce_op is None or not st.is_reduction_loop(loop):
            raise ScheduleError.in_schedule(
                st.func, f"{loop} is not a reduction loop of {st.func} (rfactor factors a "
                f"reduction: its reduction loops are "
                f"{', '.join(n for n in st.loops if st.is_reduction_loop(n)) or 'none'})", step)
        if d.predicate:
            raise ScheduleError.in_schedule(
                st.func, "rfactor of a reduction over a restricted RDom (RDom.where) is not "
                "supported; restrict the values with tl.where instead", step)
        rv, rels = _factored_rvar(st, loop, step)
        kmin, ext = d.range_of(rv)
        base = sched.view.unique_name(f"{st.func}_rf")
        kv = Var(f"{base}_{loop.replace('.', '_')}")
        others = [r for r in d.rvars if r.name != rv]
        k, kv_ext, new_rvars, pred = _factor(rv, kmin, ext, rels, loop, kv, base, others)
        value = substitute(d.value, {rv: k})
        outer_ext = kv_ext
        args = (*d.args, kv)
        pure_ranges = tuple(r for r in d.ranges if r[0] in st.pure)
        rranges = tuple((r.name, *(d.range_of(r.name) if r.name in
                                   {o.name for o in others} else (r.min, r.extent)))
                        for r in new_rvars)
        rf = Func(base, dtype=f.dtype)
        op = d.reduce_op if new_rvars else None
        rf.definition = Definition(base, args, value, op, tuple(new_rvars),
                                   (*pure_ranges, (kv.name, sconst(0), kv_ext), *rranges),
                                   tuple(pred))
        rf._bounds = (*f.bounds, (sconst(0), kv_ext))
        sched.view.add_before(rf, st.func)
        kr = RVar(f"{base}_r", sconst(0), outer_ext, 0)
        sched.view.replace_definition(st.func, Definition(
            st.func, tuple(d.args), rf[(*d.args, kr)], d.reduce_op, (kr,),
            (*pure_ranges, (kr.name, sconst(0), outer_ext))))
        st.relations = [r for r in st.relations if r not in rels]
        _replace_reduction_loops(st, (kr.name,), consumed_by=what)
        sched.states[base] = StageState.initial(rf)
        return base

    def to_python(self, step: Step, schedule_name: str = "s") -> str:
        return f"{schedule_name}.rfactor({step.func!r}, {step.get('loop')!r})"


def _factored_rvar(st: StageState, loop: str, step: Step) -> tuple[str, list]:
    """The RVar ``loop`` comes from, and the one split of it (or none).

    Raises:
        ScheduleError: ``loop`` is not an RVar or a loop of its one split, or other reduction
            loops were scheduled."""
    rv = next(iter(st.origin[loop]))
    rels = [r for r in st.relations if set(_rel_names(r)) & _derived(st, st.rvars)]
    if any(isinstance(r, Fuse) for r in rels) or len(rels) > 1 or \
            (rels and (rels[0].parent != rv or loop not in (rels[0].outer, rels[0].inner))):
        raise ScheduleError.in_schedule(
            st.func, f"rfactor needs {loop} to be a reduction variable or a loop of its one "
            f"split, and the other reduction loops unscheduled (here: "
            f"{', '.join(str(r) for r in rels)}); call rfactor right after that split", step)
    return rv, rels


def _factor(rv: str, kmin, ext, rels: list, loop: str, kv: Var, base: str, others: list):
    """How RVar ``rv`` over ``[kmin, kmin + ext)`` is computed once ``loop`` (the RVar itself,
    or the inner or outer loop of its split ``rels[0]``) becomes the pure Var ``kv`` of
    ``base``: (``rv``'s expression, ``kv``'s extent, the RVars left to reduce, conditions for a
    last partial tile)."""
    if not rels:  # the whole RVar becomes the pure dimension
        return sadd(kmin, kv), ext, list(others), []
    fct = rels[0].factor
    nout = sceildiv(ext, fct)
    if loop == rels[0].inner:  # f_rf[..., k.i] reduces k.o
        other = RVar(f"{base}_{rv}_o", sconst(0), nout, 0)
        k = sadd(kmin, sadd(smul(other, fct), kv))
        kv_ext = sconst(fct)
    else:  # f_rf[..., k.o] reduces k.i
        other = RVar(f"{base}_{rv}_i", sconst(0), sconst(fct), 0)
        k = sadd(kmin, sadd(smul(kv, fct), other))
        kv_ext = nout
    c = const_value(ext)
    pred = [Cmp("lt", ssub(k, kmin), ext)] if c is None or c % fct else []
    return k, kv_ext, [other, *others], pred


#: the update forms rfactor factors: ``F[idx] = F[idx] op value`` (either operand order)
_ASSOCIATIVE = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}


def _rfactor_update(sched, st: StageState, step: Step) -> str:
    """rfactor of an update definition ``F[idx] = F[idx] op value`` (op associative and
    commutative: + * max min; ``value`` not reading F; ``idx`` may be data-dependent, a
    histogram's scatter): ``F_rf`` has the factored loop as its first dimension, then F's
    domain, starts at op's identity, and runs the update over the rest of the RDom into its own
    part (``F_rf[k, idx] = F_rf[k, idx] op value``, a dependence through F_rf only within one
    ``k``); F's update becomes ``F[v] = F[v] op F_rf[r, v]`` over the new dimension. Returns the
    name of F_rf's update stage (where the work is). Halide: ``f.update(n).rfactor(r, u)``."""
    what, loop = str(step), step.get("loop")
    base_name, number = parse_stage_id(st.func)
    assert number is not None
    f = sched.view.func(base_name)
    u = f.updates[number]
    if not st.is_reduction_loop(loop):
        raise ScheduleError.in_schedule(
            st.func, f"{loop} is not a reduction loop of {st.func} (its RDom loops are "
            f"{', '.join(n for n in st.loops if st.is_reduction_loop(n)) or 'none'})", step)
    if u.predicate:
        raise ScheduleError.in_schedule(
            st.func, "rfactor of an update over a restricted RDom (RDom.where) is not "
            "supported; restrict the values with tl.where instead", step)
    form = associative_update(f, u)
    if form is None:
        raise ScheduleError.in_schedule(
            st.func, f"rfactor needs the update to be {f.name}[idx] = {f.name}[idx] op value "
            f"with op one of + * max min and value not reading {f.name}; {u} is not", step)
    op, value = form
    rv, rels = _factored_rvar(st, loop, step)
    r_obj = next(r for r in u.rvars if r.name == rv)
    base = sched.view.unique_name(f"{f.name}_rf")
    kv = Var(f"{base}_{loop.replace('.', '_')}")
    others = [r for r in u.rvars if r.name != rv]
    k, kv_ext, new_rvars, pred = _factor(rv, r_obj.min, r_obj.extent, rels, loop, kv, base,
                                         others)
    d = f.definition
    assert d is not None and f.dtype is not None
    reduce_op = _ASSOCIATIVE[op]
    init = identity(reduce_op, f.dtype)
    pure_ranges = tuple(r for r in d.ranges if r[0] in {a.name for a in d.args})
    rf = Func(base, dtype=f.dtype)
    # the new dimension outermost: each part is a contiguous copy of F (threads updating
    # their own parts never share a cache line, as they would with it innermost)
    args = (kv, *d.args)
    rf.definition = Definition(base, args, init, None, (),
                               ((kv.name, sconst(0), kv_ext), *pure_ranges))
    rf._bounds = ((sconst(0), kv_ext), *f.bounds)
    index = (kv, *(substitute(i, {rv: k}) for i in u.index))
    acc = Access(base, index, f.dtype, None, rf)
    rf.updates = [Update(base, 0, index, BinOp(op, acc, substitute(value, {rv: k}), f.dtype),
                         (kv.name, *u.pure), tuple(new_rvars), tuple(pred))]
    sched.view.add_before(rf, base_name)
    kr = RVar(f"{base}_r", sconst(0), kv_ext, 0)
    whole = tuple(d.args)
    sched.view.replace_update(base_name, Update(
        base_name, number, whole,
        BinOp(op, Access(base_name, whole, f.dtype, None, f),
              Access(base, (kr, *whole), f.dtype, None, rf), f.dtype),
        tuple(a.name for a in whole), (kr,)))
    # F's update: every pure Var (outermost, in order), then the new reduction loop
    st.relations = [r for r in st.relations if r not in rels]
    _replace_reduction_loops(st, (kr.name,), consumed_by=what)
    missing = [a.name for a in whole if a.name not in st.loops]
    st.loops[:0] = missing
    for n in missing:
        st.kinds[n] = ForKind.SERIAL
        st.origin[n] = frozenset([n])
    st.pure = tuple(a.name for a in whole)
    sched.states[base] = StageState.initial(rf)
    sched.states[f"{base}.update(0)"] = StageState.initial_update(rf, 0)
    return f"{base}.update(0)"


def associative_update(f: Func, u: Update) -> tuple[str, Expr] | None:
    """``(op, value)`` when update ``u`` is ``f[idx] = f[idx] op value`` (or ``value op
    f[idx]``) with ``value`` not reading ``f``; else None. A cast of the whole right side (the
    update's dtype conversion) is looked through only when it changes nothing."""
    e = u.value
    if not isinstance(e, BinOp) or e.op not in _ASSOCIATIVE:
        return None
    for own, other in ((e.a, e.b), (e.b, e.a)):
        if isinstance(own, Access) and own.name == f.name and own.boundary is None and \
                tuple(i.key for i in own.indices) == tuple(i.key for i in u.index) and \
                not any(isinstance(n, Access) and n.name == f.name for n in walk(other)):
            return e.op, other
    return None


def _replace_reduction_loops(st: StageState, rvars: tuple[str, ...],
                             consumed_by: str | None = None) -> None:
    """Remove every reduction loop of ``st`` (another stage now runs them) and append the new
    reduction variables ``rvars`` as serial loops, innermost."""
    for n in [n for n in st.loops if st.is_reduction_loop(n)]:
        st.loops.remove(n)
        st.kinds.pop(n)
        st.origin.pop(n)
        if consumed_by is not None:
            st.consumed[n] = consumed_by
    st.rvars = rvars
    for n in rvars:
        st.loops.append(n)
        st.kinds[n] = ForKind.SERIAL
        st.origin[n] = frozenset([n])


def _derived(st: StageState, names) -> set[str]:
    """Every loop split or fused from ``names`` (transitively)."""
    out = set(names)
    changed = True
    while changed:
        changed = False
        for rel in st.relations:
            parents = (rel.parent,) if isinstance(rel, Split) else (rel.outer, rel.inner)
            kids = (rel.outer, rel.inner) if isinstance(rel, Split) else (rel.fused,)
            if any(p in out for p in parents) and not all(k in out for k in kids):
                out.update(kids)
                changed = True
    return out


@register
class DoubleBuffer(Primitive):
    """``double_buffer()``: a ``cache_read(..., scope="shared")`` copy computed at a serial loop
    of a GPU block gets two slots in shared memory, the copy of the loop's next step issued
    before the current step's use (``backends/cuda/double_buffer.py``). Changes no value and
    no order of what reads it: no legality obligation."""

    name, family = "double_buffer", "staging"

    def check(self, sched, st: StageState, step: Step) -> None:
        if st.memory != "shared":
            raise ScheduleError.in_schedule(
                st.func, f"double_buffer applies to a copy in GPU shared memory "
                f"(s.cache_read(..., scope=\"shared\")); {st.func} is not one", step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.double_buffer = True
        return None
