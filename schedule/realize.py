"""Lowering pass ``realize``: the loop nest of every Func where its schedule puts it.

- ``compute_inline`` Funcs are substituted into their readers (boundary conditions become clamped
  indices or selects);
- ``compute_root`` Funcs (the default) get a ``produce F:`` nest over their whole domain, in
  producer-first order, and internal ones are allocated around the pipeline;
- ``compute_at(C, L)`` Funcs are produced at the top of loop ``L`` of C's nest over the region one
  iteration of ``L`` reads (bounds inference, ``schedule/bounds.py``) and allocated there, or at
  their ``store_at`` loop, sized for what one iteration of that loop reads;
- each stage's own loops come from ``schedule/nest.py``.

Reads through boundary conditions become clamped loads (``clamp_edge``) or a select between a clamped
load and the constant (``constant_exterior``), so a load never leaves its buffer.
"""

from __future__ import annotations

import numpy as np

from tensorlang.affine import const_value, sadd, sconst, ssub
from tensorlang.dtypes import DType, int64
from tensorlang.errors import IllegalScheduleError, ScheduleError
from tensorlang.expr import (
    Access,
    BinOp,
    Cmp,
    Const,
    Expr,
    Select,
    map_children,
    substitute,
    walk,
)
from tensorlang.func import Func
from tensorlang.pipeline import Pipeline

from .bounds import required_region, unclipped_extent
from .ir import (
    Allocate,
    Block,
    Buffer,
    ForKind,
    IfThenElse,
    Load,
    LoweredFunc,
    ProducerConsumer,
    Stmt,
    Store,
)
from .loops import StageState
from .nest import Leaf, build_stage_nest, emit_nest


def identity(op: str, dtype: DType) -> Const:
    """The identity of reducer ``op`` in ``dtype`` (max: -inf or the type's minimum, ...)."""
    if op == "sum":
        v: bool | int | float = 0
    elif op == "prod":
        v = 1
    elif dtype.is_float:
        v = float("-inf") if op == "max" else float("inf")
    else:
        info = np.iinfo(dtype.numpy)
        v = int(info.min) if op == "max" else int(info.max)
    return Const(float(v) if dtype.is_float else int(v), dtype)


def _domain_buffer(name: str, dtype: DType, bounds, kind: str) -> Buffer:
    return Buffer(name, dtype, tuple(lo for lo, _ in bounds), tuple(e for _, e in bounds), kind)


def _clamp_and_inside(indices, mins, extents):
    clamped, inside = [], None
    for ix, lo, ext in zip(indices, mins, extents):
        hi = ssub(sadd(lo, ext), sconst(1))
        clamped.append(BinOp("max", BinOp("min", ix, hi, int64), lo, int64))
        c = BinOp("and", Cmp("ge", ix, lo), Cmp("le", ix, hi), DType.bool_)
        inside = c if inside is None else BinOp("and", inside, c, DType.bool_)
    return tuple(clamped), inside


def lower_reads(e: Expr, domains: dict[str, Buffer]) -> Expr:
    """Replace every Access by a Load, applying boundary conditions as clamps and selects
    (clamped to the producer's whole domain, ``domains``)."""

    def go(n: Expr) -> Expr:
        n = map_children(n, go)
        if not isinstance(n, Access):
            return n
        if n.boundary is None:
            return Load(n.name, n.indices, n.dtype)
        dom = domains[n.name]
        clamped, inside = _clamp_and_inside(n.indices, dom.mins, dom.extents)
        load = Load(n.name, clamped, n.dtype)
        if n.boundary.kind == "clamp_edge" or inside is None:
            return load
        assert n.boundary.value is not None
        return Select(inside, load, n.boundary.value, n.dtype)

    return go(e)


def inline_funcs(p: Pipeline, inline: set[str]) -> dict[str, Expr]:
    """Each Func's right side with reads of ``inline`` Funcs replaced by their definitions."""
    values: dict[str, Expr] = {}
    for f in p.funcs:
        d = f.definition
        assert d is not None

        def go(n: Expr) -> Expr:
            n = map_children(n, go)
            if not isinstance(n, Access) or n.name not in inline:
                return n
            g = p.func(n.name)
            gd = g.definition
            assert gd is not None
            idx = n.indices
            inside = None
            if n.boundary is not None:
                idx, inside = _clamp_and_inside(idx, [lo for lo, _ in g.bounds],
                                                [e for _, e in g.bounds])
            body = substitute(values[g.name], {a.name: ix for a, ix in zip(gd.args, idx)})
            if n.boundary is not None and n.boundary.kind == "constant_exterior":
                assert n.boundary.value is not None and inside is not None
                body = Select(inside, body, n.boundary.value, n.dtype)
            return body

        values[f.name] = go(d.value)
    return values


class _Realizer:
    def __init__(self, p: Pipeline, states: dict[str, StageState], shift_ok: bool) -> None:
        self.p = p
        self.states = states
        self.shift_ok = shift_ok
        self.versions: list[Expr] = []
        inline = {n for n, st in states.items() if st.compute.kind == "inline"}
        self.values = inline_funcs(p, inline)
        self.live = [f for f in p.funcs if f.name not in inline]
        self.domains: dict[str, Buffer] = {}
        for inp in p.inputs:
            self.domains[inp.name] = _domain_buffer(inp.name, inp.dtype, inp.bounds, "input")
        for f in p.funcs:
            assert f.dtype is not None
            kind = "output" if f is p.output else "internal"
            self.domains[f.name] = _domain_buffer(f.name, f.dtype, f.bounds, kind)
        self.buffers: dict[str, Buffer] = {i.name: self.domains[i.name] for i in p.inputs}
        self.buffers[p.output.name] = self.domains[p.output.name]
        readers: dict[str, list[str]] = {f.name: [] for f in self.live}
        for c in self.live:
            for a in walk(self.values[c.name]):
                if isinstance(a, Access) and a.name in readers and c.name not in readers[a.name]:
                    readers[a.name].append(c.name)
        self.computed_at: dict[tuple[str, str], list[Func]] = {}
        self.stored_at: dict[tuple[str, str], list[Func]] = {}
        for f in self.live:
            st = states[f.name]
            if st.compute.kind != "at":
                if st.store is not None:
                    raise ScheduleError(f"In schedule for {f.name}: store_at needs compute_at "
                                        f"(a Func computed at root is stored at root)")
                continue
            if readers[f.name] != [st.compute.func]:
                raise ScheduleError(
                    f"In schedule for {f.name}: compute_at({st.compute.func}, "
                    f"{st.compute.loop}) needs {st.compute.func} to be the only reader of "
                    f"{f.name}, but {', '.join(readers[f.name])} read it; compute it at root "
                    f"or inline the other readers")
            key = (st.compute.func, st.compute.loop)
            self.computed_at.setdefault(key, []).append(f)
            store = st.store or st.compute
            if store.func != st.compute.func:
                raise ScheduleError(f"In schedule for {f.name}: store_at and compute_at must "
                                    f"name the same consumer")
            cst = states[store.func]
            if cst.loops.index(store.loop) > cst.loops.index(st.compute.loop):
                raise ScheduleError(
                    f"In schedule for {f.name}: store_at loop {store.loop} is inside compute_at "
                    f"loop {st.compute.loop}; storage must be at or outside the compute level")
            between = cst.loops[cst.loops.index(store.loop) + 1: cst.loops.index(
                st.compute.loop) + 1]
            par = [lp for lp in between if cst.kinds[lp] is ForKind.PARALLEL]
            if par:
                raise IllegalScheduleError(
                    f"In schedule for {f.name}: stored at {store.loop} but computed inside the "
                    f"parallel loop {par[0]} of {store.func}: threads would share one buffer; "
                    f"store it inside {par[0]}")
            self.stored_at.setdefault((store.func, store.loop), []).append(f)

    def produce(self, f: Func, region: tuple[tuple[Expr, Expr], ...], scope: set[str]) -> Stmt:
        d = f.definition
        assert d is not None and f.dtype is not None
        st = self.states[f.name]
        reg = {a.name: r for a, r in zip(d.args, region)}
        for r in d.rvars:
            reg[r.name] = d.range_of(r.name)
        shift = self.shift_ok and st.compute.kind == "root"
        nest = build_stage_nest(st, reg, scope, shift)
        self.versions.extend(nest.versions)
        value = substitute(self.values[f.name], nest.values)
        idx = tuple(nest.values[a.name] for a in d.args)
        update = Store(f.name, idx, lower_reads(value, self.domains), d.reduce_op)
        init = None if d.reduce_op is None else Store(f.name, idx, identity(d.reduce_op, f.dtype))

        def before(lf: Leaf) -> list[Stmt]:
            out = []
            k = nest.position(lf.name)
            for g in self.computed_at.get((f.name, lf.name), []):
                rng = nest.leaf_ranges(k + 1)
                greg = required_region(g.name, [value], rng, g.bounds)
                inner_scope = scope | {x.var for x in nest.leaves[: k + 1]}
                out.append(self.produce(g, greg, inner_scope))
            return out

        def wrap(lf: Leaf, body: Stmt) -> Stmt:
            k = nest.position(lf.name)
            for g in reversed(self.stored_at.get((f.name, lf.name), [])):
                rng = nest.leaf_ranges(k + 1)
                greg = required_region(g.name, [value], rng, g.bounds)
                loose = nest.leaf_ranges(k + 1, loose=True)
                exts = []
                for dim, (lo, ext) in enumerate(greg):
                    full = unclipped_extent(g.name, [value], loose, dim)
                    exts.append(full if full is not None and const_value(full) is not None
                                else ext)
                assert g.dtype is not None
                buf = Buffer(g.name, g.dtype, tuple(lo for lo, _ in greg), tuple(exts),
                             "internal")
                self.buffers[g.name] = buf
                body = Allocate(buf, body)
            return body

        return ProducerConsumer(f.name, emit_nest(nest, update, init, before, wrap))

    def run(self) -> Stmt:
        stages: list[Stmt] = []
        roots = [f for f in self.live if self.states[f.name].compute.kind == "root"]
        for f in roots:
            stages.append(self.produce(f, f.bounds, set()))
        stmt: Stmt = Block(tuple(stages)) if len(stages) > 1 else stages[0]
        for f in reversed(roots):
            if f is not self.p.output:
                self.buffers[f.name] = self.domains[f.name]
                stmt = Allocate(self.domains[f.name], stmt)
        return stmt


def realize(p: Pipeline, states: dict[str, StageState] | None = None) -> LoweredFunc:
    """Build the loop nest of pipeline ``p`` under the schedule ``states`` (default: every Func
    at root, loops in definition order).

    When a root stage splits a loop whose extent is not known to be a multiple of the factor,
    the kernel holds two versions of the nest (loop versioning): a fast one without tails, taken
    when every GuardWithIf extent is a multiple of its factor and every ShiftInwards extent is at
    least its factor, and the always-valid guarded one.

    Raises:
        ScheduleError / IllegalScheduleError: a compute/store location that cannot be realized.
    """
    if states is None:
        states = {f.name: StageState.initial(f) for f in p.funcs}
    r = _Realizer(p, states, shift_ok=True)
    body = r.run()
    if r.versions:
        safe = _Realizer(p, states, shift_ok=False)
        cond: Expr = r.versions[0]
        for c in r.versions[1:]:
            cond = BinOp("and", cond, c, DType.bool_)
        body = IfThenElse(cond, body, safe.run())
        r.buffers.update({k: v for k, v in safe.buffers.items() if k not in r.buffers})
    return LoweredFunc(p.output.name, tuple(r.buffers[i.name] for i in p.inputs),
                       r.buffers[p.output.name], p.sizes, r.buffers, body)
