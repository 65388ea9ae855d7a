"""Lowering pass ``realize``: the loop nest of every Func where its schedule puts it.

- ``compute_inline`` Funcs are substituted into their readers (boundary conditions become clamped
  indices or selects);
- ``compute_root`` Funcs (the default) get a ``produce F:`` nest over their whole domain, in
  producer-first order, and internal ones are allocated around the pipeline;
- ``compute_at(C, L)`` Funcs are produced at the top of loop ``L`` of C's nest over the region one
  iteration of ``L`` reads (bounds inference, ``schedule/bounds.py``) and allocated there, or at
  their ``store_at`` loop, sized for what one iteration of that loop reads;
- ``compute_with(H, L)`` Funcs run their own inner loops at the end of each iteration of loop
  ``L`` of H's nest, whose outer loops they share (root stages are ordered so that every
  producer of the fused pair runs before it);
- each stage's own loops come from ``schedule/nest.py``.

Reads through boundary conditions become clamped loads (``clamp_edge``) or a select between a
clamped load and the constant (``constant_exterior``), so a load never leaves its buffer.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from tensorlang.affine import const_value, sadd, sceildiv, sconst, smax, smin, smul, ssub
from tensorlang.dtypes import DType, int64
from tensorlang.expr import (
    Access,
    BinOp,
    Cmp,
    Const,
    Expr,
    Select,
    Var,
    map_children,
    substitute,
    walk,
)
from tensorlang.errors import ScheduleError
from tensorlang.func import FOLDING_BOUNDARIES, Func, parse_stage_id
from tensorlang.pipeline import Pipeline

from .bound_proofs import index_within
from .bounds import Box, box_extents, clip_box, interval, read_box, simplify_in_ranges, union_box
from .ir import (
    Allocate,
    Block,
    Buffer,
    IfThenElse,
    Load,
    LoweredFunc,
    ProducerConsumer,
    Stmt,
    Store,
)
from .legality.coverage import verify_coverage
from .loops import Split, StageState, default_states
from .storage_order import reorder_storage, storage_permutation
from .nest import (Leaf, build_stage_nest, conjunction, emit_nest, extent_divides, nest_switches,
                   peel_keeps_init)
from .parallel_pieces import merge_pieces, piece_switches
from .placement import live_funcs, live_readers, plan_placements
from .fold_init import fold_conditions
from .prefetch import prefetch_at
from .trace import TailStrategy
from .view import AlgorithmView


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


def fold_index(kind: str, ix: Expr, lo: Expr, ext: Expr) -> Expr:
    """Index ``ix`` of a read through a folding boundary condition (``FOLDING_BOUNDARIES``),
    mapped into ``[lo, lo + ext)``: periodic (``repeat_image``) or reflected with period
    ``2 ext`` (``mirror_image``) or ``2 ext - 2`` (``mirror_interior``). Integer ``mod`` is floor
    modulo with 0 for a zero divisor, so ``mirror_interior`` of extent 1 reads its one element."""
    t = BinOp("sub", ix, lo, int64)
    if kind == "repeat_image":
        return BinOp("add", lo, BinOp("mod", t, ext, int64), int64)
    two = BinOp("mul", Const(2, int64), ext, int64)
    period = two if kind == "mirror_image" else BinOp("sub", two, Const(2, int64), int64)
    t = BinOp("mod", t, period, int64)
    back = BinOp("sub", BinOp("sub", period, Const(1 if kind == "mirror_image" else 0, int64),
                              int64), t, int64)
    return BinOp("add", lo, Select(Cmp("ge", t, ext), back, t, int64), int64)


def _boundary_indices(a: Access, mins, extents, inside_dims: frozenset[int] = frozenset()
                      ) -> tuple[tuple[Expr, ...], Expr | None]:
    """The indices a boundary read loads at (inside the domain), and the condition under which
    the raw indices are inside (None: the load is the value everywhere); the dimensions of
    ``inside_dims`` are known to stay inside (their index as it is, no condition)."""
    assert a.boundary is not None
    kind = a.boundary.kind
    if kind in FOLDING_BOUNDARIES:
        return tuple(ix if k in inside_dims else fold_index(kind, ix, lo, ext)
                     for k, (ix, lo, ext) in enumerate(zip(a.indices, mins, extents))), None
    rest = [k for k in range(len(a.indices)) if k not in inside_dims]
    clamped, inside = _clamp_and_inside([a.indices[k] for k in rest], [mins[k] for k in rest],
                                        [extents[k] for k in rest])
    out = list(a.indices)
    for k, ix in zip(rest, clamped):
        out[k] = ix
    return tuple(out), (inside if kind == "constant_exterior" else None)


def lower_reads(e: Expr, domains: dict[str, Buffer],
                within: Callable[[Expr, Expr, Expr], bool] | None = None) -> Expr:
    """Replace every Access by a Load, applying boundary conditions as clamps and selects
    (clamped to the producer's whole domain, ``domains``), except along the dimensions where
    ``within(index, min, extent)`` says the index stays inside the domain (``BOUNDARY_PROOFS``:
    the loops around the read cannot leave it there)."""

    def go(n: Expr) -> Expr:
        n = map_children(n, go)
        if not isinstance(n, Access):
            return n
        if n.boundary is None:
            return Load(n.name, n.indices, n.dtype)
        dom = domains[n.name]
        inside_dims = frozenset() if within is None or not BOUNDARY_PROOFS else frozenset(
            k for k, (ix, lo, ext) in enumerate(zip(n.indices, dom.mins, dom.extents))
            if within(ix, lo, ext))
        if len(inside_dims) == len(n.indices):
            return Load(n.name, n.indices, n.dtype)
        indices, inside = _boundary_indices(n, dom.mins, dom.extents, inside_dims)
        load = Load(n.name, indices, n.dtype)
        if inside is None:
            return load
        assert n.boundary.value is not None
        return Select(inside, load, n.boundary.value, n.dtype)

    return go(e)


def inliner(p: AlgorithmView, inline: set[str], values: dict[str, Expr]
            ) -> Callable[[Expr], Expr]:
    """A function replacing the reads of ``inline`` Funcs in an expression by their definitions
    (``values``: their right sides, already inlined, filled in pipeline order)."""

    def go(n: Expr) -> Expr:
        n = map_children(n, go)
        if not isinstance(n, Access) or n.name not in inline:
            return n
        g = p.func(n.name)
        gd = p.definition(g.name)
        idx = n.indices
        inside = None
        if n.boundary is not None:
            idx, inside = _boundary_indices(n, [lo for lo, _ in g.bounds],
                                            [e for _, e in g.bounds])
        body = substitute(values[g.name], {a.name: ix for a, ix in zip(gd.args, idx)})
        if inside is not None:
            assert n.boundary is not None and n.boundary.value is not None
            body = Select(inside, body, n.boundary.value, n.dtype)
        return body

    return go


def inline_funcs(p: AlgorithmView, inline: set[str]) -> dict[str, Expr]:
    """Each Func's right side with reads of ``inline`` Funcs replaced by their definitions; update
    definitions' right sides under the keys ``F.update(k)``."""
    values: dict[str, Expr] = {}
    go = inliner(p, inline, values)
    for f in p.funcs:
        values[f.name] = go(p.definition(f.name).value)
        for u in f.updates:
            values[f"{f.name}.update({u.number})"] = go(u.value)
    return values


#: compute_at placements of one nest left unproven (isl could not state or decide their
#: coverage) after which the rest are trusted to bounds inference without a proof
MAX_UNPROVEN = 4

#: whether a remainder that a piece of its own would run with some producer computed whole
#: again runs inside its full tiles' loops instead, peeled off the tile loop
#: (``_Realizer._peeled_in_shared_loops``); 0: always a piece of its own, as before. An int,
#: for ``benchmarks/gemm_packed.py``'s ``auto:tensorlang.schedule.realize.PEEL_SHARED=0``
PEEL_SHARED = 1

#: whether a compute_with stage whose own pure Var (one its host's loops do not iterate) is
#: split by a factor that may not divide its extent runs as two pieces inside the shared loops,
#: the full tiles in the fast version and the remainder guarded, as ``produce_partitioned``
#: does for a root stage; 0: one piece, whose tail sends the whole fused nest to its guarded
#: version (``_Realizer._guest_regions``)
GUEST_PIECES = 1

#: whether a producer computed at a reduction loop of a stage keeps the stage whole along a Var
#: unless it is a copy or the stage reads it at indices of that Var (its region shrinks with a
#: piece): atax's row sums at its column sums' row blocks, read at the row only, would be
#: computed whole again by the columns' remainder piece, the matrix read twice
#: (``_Realizer._pieces_keep_producers``); 0: every producer at a reduction loop let through
SHRINKING_PRODUCERS = 1


#: whether a boundary read's dimension whose index the loops around it keep inside the domain
#: loads without the clamp and the condition (``bound_proofs.index_within``): a packed panel's
#: copy in BLIS's order clamped every column and tested it (``llvm.masked.gather``, element by
#: element). 0: every boundary read clamped, as before (for ``--against``)
BOUNDARY_PROOFS = 1


def lowering_switches() -> tuple[int, ...]:
    """This module's switches, ``nest``'s and ``parallel_pieces``' now (part of ``lower``'s cache
    key: a benchmark flips them)."""
    return (PEEL_SHARED, GUEST_PIECES, BOUNDARY_PROOFS, SHRINKING_PRODUCERS, *nest_switches(),
            *piece_switches())


class _Realizer:
    def __init__(self, p: AlgorithmView, states: dict[str, StageState]) -> None:
        self.p = p
        self.states = states
        self.proven = 0  # compute_at placements whose coverage isl proved
        self.unproven = 0  # ... that isl could not state (bounds inference trusted)
        inline = {n for n, st in states.items() if st.compute.kind == "inline"}
        self.values = inline_funcs(p, inline)
        #: inlines an expression other than a right side: an update's index (a histogram's bin
        #: computed by an inlined Func; an RDom.where condition reads no Func)
        self.inline = inliner(p, inline, self.values)
        self.live = live_funcs(p, states)
        self.domains: dict[str, Buffer] = {}
        for inp in p.inputs:
            self.domains[inp.name] = _domain_buffer(inp.name, inp.dtype, inp.bounds, "input")
        for f in p.funcs:
            assert f.dtype is not None
            kind = "output" if p.pipeline.is_output(f) else "internal"
            self.domains[f.name] = _domain_buffer(f.name, f.dtype, f.bounds, kind)
        self.buffers: dict[str, Buffer] = {i.name: self.domains[i.name] for i in p.inputs}
        for o in p.pipeline.outputs:
            self.buffers[o.name] = self.domains[o.name]
        self.computed_at, self.stored_at = plan_placements(p, states)
        #: compute_with: host stage -> the stages sharing its loops (in pipeline order)
        self.guests: dict[str, list[Func]] = {}
        for f in self.live:
            fused = states[f.name].fused
            if fused is not None:
                self.guests.setdefault(fused.func, []).append(f)

    def produce(self, f: Func, region: tuple[tuple[Expr, Expr], ...], scope: set[str],
                scope_ranges: dict[str, tuple[Expr, Expr]] | None = None,
                full_extents: tuple[Expr | None, ...] | None = None,
                guarded_only: bool = False, narrow: frozenset[str] = frozenset()) -> Stmt:
        d = self.p.definition(f.name)
        assert f.dtype is not None
        st = self.states[f.name]
        reg = {a.name: r for a, r in zip(d.args, region)}
        for r in d.rvars:
            reg[r.name] = d.range_of(r.name)
        if guarded_only:  # a partition's remainder (narrower than a tile along the Vars in
            # ``narrow``): the fast version could never run
            return self._emit(f, build_stage_nest(st, reg, scope, False, d.predicate,
                                                  narrow=narrow),
                              reg, scope, scope_ranges, fast=False)
        # full tiles: a region extent that is a constant except at the domain's edge
        fast_reg = dict(reg)
        conds: list[Expr] = []
        for a, full in zip(d.args, full_extents or ()):
            lo, ext = reg[a.name]
            c = None if full is None else const_value(full)
            if c is not None and const_value(ext) is None:
                fast_reg[a.name] = (lo, sconst(c))
                conds.append(Cmp("eq", ext, sconst(c)))
        nest = build_stage_nest(st, fast_reg, scope, True, d.predicate, self._tail_vars(f))
        versions = conds + nest.versions
        for g in self.guests.get(f.name, ()):  # the fused nest is fast where each stage's is
            versions += self._guest_nest(g, self._guest_regions(g, reg)[0], True).versions
        if not versions:
            return self._emit(f, nest, reg, scope, scope_ranges, fast=True)
        # loop versioning, per stage instance: the fast nest (no tails, ShiftInwards bases, full
        # tiles) runs when its conditions hold for this region, else the always-valid guarded one
        fast = self._emit(f, nest, fast_reg, scope, scope_ranges, fast=True)
        safe = self._emit(f, build_stage_nest(st, reg, scope, False, d.predicate), reg, scope,
                          scope_ranges, fast=False)
        return IfThenElse(conjunction(versions), fast, safe)

    def _tail_vars(self, f: Func) -> frozenset[str]:
        """The original Vars of ``f`` whose GuardWithIf tails may stay in its fast version as
        bounds of serial loops (``build_stage_nest``'s ``tail_vars``): those ``f`` reads no
        producer computed or stored at one of its loops with. Such a producer's region follows
        the loops inside its placement: a tail there would make its extents (a staged copy's,
        an allocation's) vary, where the fast version has them constant. None where a producer
        placed at ``f``'s loops is read through another one, or ``f`` hosts compute_with
        stages."""
        placed = {g.name for (stage, _), gs in [*self.computed_at.items(),
                                                 *self.stored_at.items()]
                  if stage == f.name for g in gs}
        reads = [a for a in walk(self.values[f.name]) if isinstance(a, Access)]
        if placed - {a.name for a in reads} or self.guests.get(f.name):
            return frozenset()
        varying = {n.name for a in reads if a.name in placed for i in a.indices
                   for n in walk(i) if isinstance(n, Var)}
        d = self.p.definition(f.name)
        return frozenset({v.name for v in d.args} | {r.name for r in d.rvars}) - varying

    def _reads(self, reader: Func, producer: Func) -> bool:
        """Whether ``reader``'s (inlined) right side reads ``producer``."""
        return any(isinstance(a, Access) and a.name == producer.name
                   for a in walk(self.values[reader.name]))

    def _verify(self, g: Func, region, k: int, group: list[Func], regions, nest,
                outer_ranges, consumer_view) -> None:
        """Prove with isl that ``region`` covers what this loop iteration reads of ``g``; after
        ``MAX_UNPROVEN`` placements of one nest left unproven, the rest are not attempted (each
        may spend isl's whole operation budget: ``legality.coverage.MAX_OPERATIONS``)."""
        if self.unproven >= MAX_UNPROVEN:
            self.unproven += 1
            return
        view, rng = consumer_view(k)
        readers = [(view, rng)]
        for r in group:
            if r.name in regions and r is not g and self._reads(r, g):
                rd = self.p.definition(r.name)
                rr = {a.name: (lo, ssub(sadd(lo, ext), sconst(1)))
                      for a, (lo, ext) in zip(rd.args, regions[r.name])}
                for rv in rd.rvars:
                    lo, ext = rd.range_of(rv.name)
                    rr[rv.name] = (lo, ssub(sadd(lo, ext), sconst(1)))
                readers.append((self.values[r.name], rr))
        context = dict(outer_ranges)
        context.update({lf.var: rg for lf, rg in zip(
            nest.leaves[: k + 1], nest.leaf_ranges(0, loose=True).values())})
        if verify_coverage(g.name, g.bounds, region, readers, context,
                           f"{g.name} computed at {nest.func}.{nest.leaves[k].name}"):
            self.proven += 1
        else:
            self.unproven += 1

    def produce_update(self, f: Func, u) -> Stmt:
        """The nest of update ``u`` of root Func ``f``: its pure Vars over f's domain, its RVars
        over their RDom, in the order its stage gives (Halide's rules keep it legal)."""
        name = f"{f.name}.update({u.number})"
        st = self.states[name]
        dom = dict(zip([a.name for a in self.p.definition(f.name).args], f.bounds))
        reg = {v: dom[v] for v in u.pure}
        for r in u.rvars:
            reg[r.name] = (r.min, r.extent)

        def emit(nest) -> Stmt:
            value = substitute(self.values[name], nest.values)
            index = tuple(lower_reads(substitute(self.inline(i), nest.values), self.domains)
                          for i in u.index)  # (a scatter's index reads data)
            store = Store(f.name, index, lower_reads(value, self.domains),
                          reassociable=st.atomic)
            target = Access(f.name, tuple(substitute(i, nest.values) for i in u.index),
                            f.dtype)  # type: ignore[arg-type]
            return emit_nest(nest, store, None, lambda lf: [], lambda lf, body: body,
                             partition=True, plain=lambda lf: True,
                             prefetch=self._prefetcher(name, nest, value, target))

        nest = build_stage_nest(st, reg, set(), True, u.predicate)
        if not nest.versions:
            return ProducerConsumer(name, emit(nest))
        safe = build_stage_nest(st, reg, set(), False, u.predicate)
        return ProducerConsumer(name, IfThenElse(conjunction(nest.versions), emit(nest),
                                                 emit(safe)))

    def _emit(self, f: Func, nest, reg, scope: set[str],
              scope_ranges: dict[str, tuple[Expr, Expr]] | None, shared: int = 0,
              fast: bool = False) -> Stmt:
        """The stage's statement over ``nest`` (``fast``: its fast version, so the stages
        computed with it take theirs); ``shared``: emit only its loops from that position inward
        (a compute_with stage: the outer ones are its host's)."""
        d = self.p.definition(f.name)
        assert f.dtype is not None
        value = substitute(self.values[f.name], nest.values)
        idx = tuple(nest.values[a.name] for a in d.args)
        ranges = dict(scope_ranges or {})
        ranges.update(nest.leaf_ranges(0))
        update = Store(f.name, idx, lower_reads(
            value, self.domains, lambda ix, lo, ext: index_within(ix, lo, ext, ranges)),
            d.reduce_op)
        init = None if d.reduce_op is None else Store(f.name, idx, identity(d.reduce_op, f.dtype))
        init_guard = None
        folded = None if init is None or shared else fold_conditions(
            nest, [reg[r.name][1] for r in d.rvars], self.states[f.name].kinds.values(),
            bool(d.predicate))
        if folded is not None:  # the initialisation pass only for an empty reduction
            update = dataclasses.replace(update, initial=(folded[0], init.value))
            init_guard = folded[1]

        regions: dict[str, tuple[tuple[Expr, Expr], ...]] = {}
        allocs: dict[str, tuple[Expr, ...]] = {}

        outer_ranges = dict(scope_ranges or {})
        all_vars = [a.name for a in d.args] + [r.name for r in d.rvars]

        def consumer_view(k: int, clip: bool = True
                          ) -> tuple[Expr, dict[str, tuple[Expr, Expr]]]:
            """This stage's right side with its Vars bounded for one iteration of leaf ``k``:
            a Var whose loops are all outside is a point (its loop expression); one whose loops
            are all inside ranges over its region; a mixed one over its tile, clipped."""
            inner = {x.var for x in nest.leaves[k + 1:]}
            loose = nest.leaf_ranges(k + 1, loose=True)
            points: dict[str, Expr] = {}
            ranges: dict[str, tuple[Expr, Expr]] = {}
            for v in all_vars:
                e = nest.values[v]
                used = {n.name for n in walk(e) if isinstance(n, Var)} & inner
                vlo, vext = reg[v]
                vhi = ssub(sadd(vlo, vext), sconst(1))
                if not used:
                    points[v] = e
                elif not any(isinstance(n, Var) and n.name not in inner
                             and n.name in nest.values_leaves for n in walk(e)):
                    ranges[v] = (vlo, vhi)
                else:
                    lo, hi = interval(e, loose)
                    ranges[v] = (smax(lo, vlo), smin(hi, vhi)) if clip else (lo, hi)
            return substitute(self.values[f.name], points), ranges

        def tidy(e: Expr, k: int) -> Expr:
            known = dict(outer_ranges)
            known.update(nest.leaf_ranges(0, loose=True))
            for x in nest.leaves[k + 1:]:
                known.pop(x.var, None)
            return simplify_in_ranges(e, known)

        def boxes_at(lf: Leaf, group: list[Func], clip: bool = True) -> dict[str, Box]:
            """The box of each Func of ``group`` read within one iteration of ``lf``: by this
            stage's loops inside it, and by the other Funcs of the group (consumers first).
            ``clip=False``: whole tiles even at the region's edge (for allocation sizes)."""
            k = nest.position(lf.name)
            view, rng = consumer_view(k, clip)
            out: dict[str, Box] = {}
            for g in reversed(group):
                box = read_box(g.name, [view], rng, len(g.bounds), g.bounds)
                for r in group:
                    if r.name in out and self._reads(r, g):
                        rd = self.p.definition(r.name)
                        rr = {a.name: b for a, b in zip(rd.args, _bounds_of(out[r.name],
                                                                            r.bounds))}
                        for rv in rd.rvars:
                            lo, ext = rd.range_of(rv.name)
                            rr[rv.name] = (lo, ssub(sadd(lo, ext), sconst(1)))
                        box = union_box(box, read_box(g.name, [self.values[r.name]], rr,
                                                      len(g.bounds), g.bounds))
                out[g.name] = [None if b is None else (tidy(b[0], k), tidy(b[1], k))
                               for b in box]
            return out

        def before(lf: Leaf) -> list[Stmt]:
            group = self.computed_at.get((f.name, lf.name), [])
            if not group:
                return []
            k = nest.position(lf.name)
            boxes = boxes_at(lf, group)
            full_boxes = boxes_at(lf, group, clip=False)
            inner_scope = scope | {x.var for x in nest.leaves[: k + 1]}
            out = []
            inner_ranges = dict(outer_ranges)
            inner_ranges.update(nest.leaf_ranges(0, loose=True))
            for x in nest.leaves[k + 1:]:
                inner_ranges.pop(x.var, None)
            for g in group:
                regions[g.name] = tuple((tidy(lo, k), tidy(ext, k))
                                        for lo, ext in clip_box(boxes[g.name], g.bounds))
                self._verify(g, regions[g.name], k, group, regions, nest, outer_ranges,
                             consumer_view)
                if self.states[g.name].store is None:
                    allocs[g.name] = _alloc_extents(regions[g.name], full_boxes[g.name])
                out.append(self.produce(g, regions[g.name], inner_scope, inner_ranges,
                                        tuple(box_extents(full_boxes[g.name]))))
            return out

        def wrap(lf: Leaf, body: Stmt) -> Stmt:
            placed = [g for g in self.computed_at.get((f.name, lf.name), [])
                      if self.states[g.name].store is None]
            stored = self.stored_at.get((f.name, lf.name), [])
            for g in stored:
                if g in placed:
                    continue
                box = boxes_at(lf, [g])[g.name]
                full_box = boxes_at(lf, [g], clip=False)[g.name]
                kk = nest.position(lf.name)
                region = tuple((tidy(lo, kk), tidy(ext, kk))
                               for lo, ext in clip_box(box, g.bounds))
                regions[g.name + "@store"] = region
                allocs[g.name] = _alloc_extents(region, full_box)
            for g in reversed(placed + [g for g in stored if g not in placed]):
                assert g.dtype is not None
                mins = regions.get(g.name + "@store", regions.get(g.name))
                assert mins is not None
                buf = Buffer(g.name, g.dtype, tuple(lo for lo, _ in mins),
                             aligned_extents(g.name, allocs[g.name], self.states[g.name].align),
                             "internal")
                self.buffers[g.name] = buf
                body = Allocate(buf, body)
            return body

        def after(lf: Leaf) -> list[Stmt]:
            return [self._guest(g, nest, lf, reg, fast) for g in self.guests.get(f.name, ())
                    if self.states[g.name].fused.loop == lf.name]  # type: ignore[union-attr]

        def plain(lf: Leaf) -> bool:
            return (not self.computed_at.get((f.name, lf.name))
                    and not self.stored_at.get((f.name, lf.name))
                    and not any(self.states[g.name].fused.loop == lf.name  # type: ignore
                                for g in self.guests.get(f.name, ())))

        pf = self._prefetcher(f.name, nest, value, Access(f.name, idx, f.dtype))
        if shared:
            inner = dataclasses.replace(
                nest, leaves=nest.leaves[shared:], partitions={},
                first_reduction=None if nest.first_reduction is None
                else nest.first_reduction - shared)
            return ProducerConsumer(f.name, emit_nest(inner, update, init, before, wrap,
                                                      plain=plain, prefetch=pf))
        return ProducerConsumer(f.name, emit_nest(nest, update, init, before, wrap,
                                                  after=after, plain=plain, prefetch=pf,
                                                  init_guard=init_guard))

    def _prefetcher(self, stage: str, nest, value: Expr, target: Access
                    ) -> Callable[[Leaf], list[Stmt]] | None:
        """``emit_nest``'s ``prefetch`` for ``stage``'s ``prefetch`` steps (None: it has none);
        ``value`` and ``target`` are its right side and its store over ``nest``'s loops.

        Raises:
            ScheduleError: a step's loop no longer exists, or its tensor is not stored whole
                (a Func computed at a loop, inline or with a store_at).
        """
        specs = self.states[stage].prefetches
        if not specs:
            return None
        leaves = {lf.name for lf in nest.leaves}
        for tensor, loop, _ in specs:
            what = f"prefetch({tensor!r}, {loop!r})"
            if loop not in leaves:
                self.states[stage].resolve(loop, what)  # (names the primitive that consumed it)
            st = self.states.get(tensor)
            if st is not None and (st.compute.kind != "root" or st.store is not None):
                raise ScheduleError.in_schedule(
                    stage, f"{what}: {tensor} is computed {st.compute.kind}, not stored whole; "
                    f"prefetch an input, an output or a Func at root", what)

        def at(lf: Leaf) -> list[Stmt]:
            return prefetch_at(stage, specs, nest, lf, value, target, self.domains)

        return at

    def _guest_regions(self, g: Func, host_reg: dict[str, tuple[Expr, Expr]]
                       ) -> list[dict[str, tuple[Expr, Expr]]]:
        """The regions stage ``g``, computed with a host over ``host_reg``, runs over in each
        iteration of the shared loops: its domain, narrowed to the host's region along each Var
        of the same name and the same bounds (the piece of a partitioned host) where the shared
        loops have the same names in both; with ``GUEST_PIECES``, partitioned along its first
        own pure Var split by a GuardWithIf factor that may not divide the extent: the full
        tiles first (their nest has no tail there), then the remainder (guarded), where the
        shared loops are its unsplit pure Vars."""
        d = self.p.definition(g.name)
        host = self.p.func(self.states[g.name].fused.func)  # type: ignore[union-attr]
        same = self._same_bound_vars(host, g)
        reg = {a.name: host_reg[a.name] if a.name in same else b
               for a, b in zip(d.args, g.bounds)}
        for r in d.rvars:
            reg[r.name] = d.range_of(r.name)
        st = self.states[g.name]
        shared = set(self._shared_loops(g))
        # (only where the shared loops are whole pure Vars of ``g``: its remainder's guarded
        # nest then has the same shared loops as its fast one, which the host's match)
        whole = GUEST_PIECES and shared <= set(st.pure)
        for rel in st.relations if whole else ():
            if not (isinstance(rel, Split) and rel.tail is TailStrategy.GuardWithIf
                    and rel.parent in st.pure and rel.parent not in shared):
                continue
            lo, ext = reg[rel.parent]
            c = const_value(ext)
            if extent_divides(ext, rel.factor) or (c is not None and c < rel.factor):
                continue
            fc = Const(rel.factor, int64)
            main = BinOp("mul", BinOp("floordiv", ext, fc, int64), fc, int64)
            return [{**reg, rel.parent: (lo, main)},
                    {**reg, rel.parent: (sadd(lo, main), ssub(ext, main))}]
        return [reg]

    def _guest_nest(self, g: Func, reg: dict[str, tuple[Expr, Expr]], fast: bool):
        """Nest of stage ``g`` over ``reg`` (one of ``_guest_regions``), its shared loops the
        host's loop variables, matched by position (``_shared_loops``); ``fast``: the fast
        version (``build_stage_nest``)."""
        bind = self._shared_loops(g)
        return build_stage_nest(self.states[g.name], reg, set(bind.values()), fast,
                                self.p.definition(g.name).predicate, bind=bind)

    def _shared_loops(self, g: Func) -> dict[str, str]:
        """Guest ``g``'s loops shared with its host (compute_with), each mapped to the host's
        loop at the same position (a root stage's loop variable is its loop name)."""
        fused = self.states[g.name].fused
        assert fused is not None
        host_loops = self.states[fused.func].loops
        k = host_loops.index(fused.loop) + 1
        return dict(zip(self.states[g.name].loops[:k], host_loops[:k]))

    def _same_bound_vars(self, f: Func, g: Func) -> set[str]:
        """The pure Vars ``f`` and ``g`` both have, with the same domain bounds; none where
        ``g`` is computed with ``f`` over loops of other names (matched by position: a Var of
        the same name need not be iterated by the same loop)."""
        fused = self.states[g.name].fused
        if fused is not None and fused.func == f.name and any(
                a != b for a, b in self._shared_loops(g).items()):
            return set()
        gb = {a.name: b for a, b in zip(self.p.definition(g.name).args, g.bounds)}
        return {a.name for a, (lo, ext) in zip(self.p.definition(f.name).args, f.bounds)
                if a.name in gb and gb[a.name][0].key == lo.key and gb[a.name][1].key == ext.key}

    def _guest(self, g: Func, host_nest, lf: Leaf, host_reg, fast: bool) -> Stmt:
        """Stage ``g`` (computed with the host of ``host_nest``) inside the host's loop ``lf``:
        its nest in the host's version (fast or guarded; a remainder piece of
        ``_guest_regions`` guarded), the loops down to ``lf`` being the host's, which must match
        them (bounds, guards) for these sizes' expressions.

        Raises:
            ScheduleError: a shared loop's bounds differ between the two stages."""
        k = host_nest.position(lf.name) + 1
        out = []
        for n, reg in enumerate(self._guest_regions(g, host_reg)):
            version = fast and n == 0
            nest = self._guest_nest(g, reg, version)
            for mine, theirs in zip(nest.leaves[:k], host_nest.leaves[:k]):
                same = (mine.var == theirs.var and mine.min.key == theirs.min.key
                        and mine.extent.key == theirs.extent.key
                        and [c.key for c in mine.guards] == [c.key for c in theirs.guards])
                if not same:
                    raise ScheduleError.in_schedule(
                        g.name, f"compute_with({host_nest.func}, {lf.name}): the shared loop "
                        f"{mine.name} runs over [{mine.min}, {mine.min} + {mine.extent}) in "
                        f"{g.name} but {theirs.name} over [{theirs.min}, {theirs.min} + "
                        f"{theirs.extent}) in {host_nest.func} (with its tail guards); fused "
                        f"loops need the same bounds (the two Funcs' domains must agree along "
                        f"them)")
            out.append(self._emit(g, nest, reg, set(), None, shared=k, fast=version))
        return out[0] if len(out) == 1 else Block(tuple(out))

    def produce_partitioned(self, f: Func, region: tuple[tuple[Expr, Expr], ...],
                            depth: int = 2, remainder: bool = False,
                            narrow: frozenset[str] = frozenset()) -> Stmt:
        """A root stage, with each pure Var split by a GuardWithIf factor that may not divide
        its extent partitioned (up to ``depth`` Vars): the full tiles ``[lo, lo + e // f * f)``
        run as one stage instance, whose nest has no tail (so its fast version, with register
        tiles, always runs), then the remainder as another (Halide's loop partitioning, done
        on the stage's region). Without it one guarded tail sent the whole stage to the slow
        version (``docs/performance.md``, "Measurements behind code choices"). Each point of a
        definition is computed independently of the others (only update definitions read other
        points of their own Func, and they are not partitioned), so the pieces' order is free. A
        remainder piece is emitted in its guarded version only; a main piece's extent ``e // f * f``
        divides its factor, so it is not partitioned again along that Var. Producers computed
        inside the stage's loops are computed by each piece for its own region; a Var is not
        partitioned when a piece would recompute one whole (``_pieces_keep_producers``), nor is a
        stage with a ``store_at`` buffer outside its compute loop. Two pieces whose parallel loop
        iterates the partitioned Var run as one parallel loop, the remainder as its last
        iterations (``parallel_pieces.merge_pieces``). ``narrow``: the Vars along which
        ``region`` is already such a remainder."""
        st = self.states[f.name]
        args = [a.name for a in self.p.definition(f.name).args]
        if remainder or any(key[0] == f.name and self.states[g.name].store is not None
                            for key, gs in self.stored_at.items() for g in gs):
            depth = 0  # (a store_at buffer outside its compute loop is kept whole, not per piece)
        # a compute_with host is partitioned only along Vars its guests share, with the same
        # bounds (each piece then computes the same piece of every guest)
        shared_vars = set(args)
        for g in self.guests.get(f.name, ()):
            shared_vars &= self._same_bound_vars(f, g)
        for rel in st.relations if depth > 0 else ():
            if not (isinstance(rel, Split) and rel.tail is TailStrategy.GuardWithIf
                    and rel.parent in shared_vars):
                continue
            if not self._pieces_keep_producers(f, rel.parent):
                continue
            k = args.index(rel.parent)
            lo, ext = region[k]
            c = const_value(ext)
            if extent_divides(ext, rel.factor) or (c is not None and c < rel.factor):
                continue
            if PEEL_SHARED and self._peeled_in_shared_loops(f, rel, dict(zip(args, region))):
                continue
            fc = Const(rel.factor, int64)
            main = BinOp("mul", BinOp("floordiv", ext, fc, int64), fc, int64)
            rest = ssub(ext, main)
            pieces = []
            for start, extent, tail, thin in ((lo, main, remainder, narrow),
                                              (sadd(lo, main), rest, True,
                                               narrow | {rel.parent})):
                sub = region[:k] + ((start, extent),) + region[k + 1:]
                pieces.append((Cmp("gt", extent, sconst(0)),
                               self.produce_partitioned(f, sub, depth - 1, tail, thin)))
            merged = merge_pieces(*pieces, frozenset(
                n for n in st.loops if rel.parent in st.origin[n]))
            if merged is not None:
                return merged
            return Block(tuple(IfThenElse(c, s, None) for c, s in pieces))
        return self.produce(f, region, set(), guarded_only=remainder, narrow=narrow)

    def _pieces_keep_producers(self, f: Func, var: str) -> bool:
        """Whether partitioning ``f``'s stage along pure Var ``var`` keeps the work of the
        producers computed inside its loops: each one is computed at a loop at or inside the
        outermost loop over ``var`` (its region shrinks with the piece), or at a reduction loop
        (a panel per reduction block, such as a packed operand, which the reduction's work over
        it outweighs) where it is a copy or read at indices of ``var`` (``SHRINKING_PRODUCERS``:
        atax's row sums at its column sums' row blocks are neither), or it is a copy
        (``cache_read``'s: one read, no arithmetic) feeding a reduction (a packed row block of A
        at its row block loop, outside the column panels: each piece copies it again, once per
        ``k`` of work on it per element). A producer computed further out would be computed
        whole by each piece (softmax's row sum at its row loop, partitioned along the columns:
        twice)."""
        st = self.states[f.name]
        over = [n for n, loop in enumerate(st.loops) if var in st.origin[loop]]
        for (stage, loop), gs in self.computed_at.items():
            if stage != f.name or loop not in st.loops:
                continue
            if over and st.loops.index(loop) >= over[0]:
                continue
            if st.is_reduction_loop(loop) and (not SHRINKING_PRODUCERS or all(
                    self._is_copy(g) or self._read_along(f, g.name, var) for g in gs)):
                continue
            if not (st.rvars and all(self._is_copy(g) for g in gs)):
                return False
        return True

    def _peeled_in_shared_loops(self, f: Func, rel: Split,
                                region: dict[str, tuple[Expr, Expr]]) -> bool:
        """Whether ``f``'s remainder along ``rel`` (a GuardWithIf split of a pure Var) runs
        better inside its full tiles' loops than as a piece of its own: some producer computed
        outside the Var's loops is read by ``f`` at indices that do not mention the Var (B's
        packed panels at the reduction block loop of BLIS's order, for a split of the rows), so
        a piece would compute it whole again, and the guarded nest peels the remainder off the
        innermost loop the split's outer loop became, with nothing computed at or inside that
        loop (``StageNest.tail_peels``: the whole tiles run without the guard, the last ones
        with it, within the same iterations of the loops outside)."""
        st = self.states[f.name]
        var = rel.parent
        over = [n for n, loop in enumerate(st.loops) if var in st.origin[loop]]
        if not over:
            return False
        outside = {g.name for (stage, loop), gs in self.computed_at.items()
                   if stage == f.name and loop in st.loops and st.loops.index(loop) < over[0]
                   for g in gs}
        reads = [a for a in walk(self.values[f.name])
                 if isinstance(a, Access) and a.name in outside]
        varying = {a.name for a in reads
                   if any(isinstance(n, Var) and n.name == var for i in a.indices for n in walk(i))}
        if not {a.name for a in reads} - varying:  # (every such producer shrinks with a piece)
            return False
        d = self.p.definition(f.name)
        reg = dict(region)
        for r in d.rvars:
            reg[r.name] = d.range_of(r.name)
        nest = build_stage_nest(st, reg, set(), False, d.predicate)
        for outer, (_, inner, _) in nest.tail_peels.items():
            if inner != rel.inner:
                continue
            k = next(n for n, lf in enumerate(nest.leaves) if lf.var == outer)
            busy = {loop for (stage, loop) in [*self.computed_at, *self.stored_at]
                    if stage == f.name}
            busy |= {self.states[g.name].fused.loop  # type: ignore[union-attr]
                     for g in self.guests.get(f.name, ())}
            # as ``emit_nest`` peels: nothing at or inside the loop, a reduction's
            # initialisation where a peel keeps it, no RDom peel of the same loop
            return (not any(lf.name in busy for lf in nest.leaves[k:])
                    and peel_keeps_init(nest, k, d.reduce_op is not None)
                    and (nest.peel is None or nest.peel.loop != outer))
        return False

    def _read_along(self, f: Func, name: str, var: str) -> bool:
        """Whether every read of ``name`` in ``f``'s value has an index mentioning ``var`` (true
        where ``f`` reads none: a producer's producer, decided by the producer it feeds)."""
        reads = [a for a in walk(self.values[f.name]) if isinstance(a, Access) and a.name == name]
        return all(any(isinstance(n, Var) and n.name == var for i in a.indices for n in walk(i))
                   for a in reads)

    def _is_copy(self, g: Func) -> bool:
        """Whether ``g``'s definition is a copy: one read of a tensor, no reduction."""
        d = self.p.definition(g.name)
        return not d.rvars and not g.updates and isinstance(d.value, Access)

    def run(self) -> Stmt:
        stages: list[Stmt] = []
        roots = [f for f in self.live if self.states[f.name].compute.kind == "root"]
        for f in self._root_order(roots):
            stages.append(self.produce_partitioned(f, tuple(f.bounds)))
            for g in [f, *self.guests.get(f.name, ())]:
                for u in g.updates:
                    stages.append(self.produce_update(g, u))
        stmt: Stmt = Block(tuple(stages)) if len(stages) > 1 else stages[0]
        for f in reversed(roots):
            if not self.p.pipeline.is_output(f):
                dom = self.domains[f.name]
                buf = dataclasses.replace(dom, extents=aligned_extents(
                    f.name, dom.extents, self.states[f.name].align))
                self.buffers[f.name] = buf
                stmt = Allocate(buf, stmt)
        return stmt

    def _root_order(self, roots: list[Func]) -> list[Func]:
        """The root stages in pipeline order, a compute_with host moved after every producer of
        its guests (which no longer run on their own); the stable topological order of the
        root stages with each fused group as one node (the group reads no stage that reads it:
        compute_with fuses independent stages)."""
        if not self.guests:
            return roots
        node = {f.name: f.name for f in roots}
        for host, guests in self.guests.items():
            for g in guests:
                node[g.name] = host
        readers = live_readers(self.p, self.states)

        def root_of(stage: str) -> str:
            name = parse_stage_id(stage)[0]
            while self.states[name].compute.kind == "at":
                name = self.states[name].compute.func  # type: ignore[assignment]
                name = parse_stage_id(name)[0]
            return node.get(name, name)

        after: dict[str, set[str]] = {n: set() for n in node.values()}
        for f in self.live:
            for r in readers.get(f.name, ()):
                a, b = root_of(f.name), root_of(r)
                if a != b:
                    after[b].add(a)
        order: list[Func] = []
        done: set[str] = set()
        pending = [f for f in roots if node[f.name] == f.name]
        while pending:
            f = next((f for f in pending if after[f.name] <= done), None)
            if f is None:  # (compute_with refuses dependent stages; kept as a safe stop)
                raise ScheduleError("internal: compute_with stages depend on each other")
            pending.remove(f)
            order.append(f)
            done.add(f.name)
        return order


def _alloc_extents(region, full_box: Box) -> tuple[Expr, ...]:
    """Allocation extents of a region: the whole tile's extent where it is a constant (a stack
    buffer that fits every iteration, tails included), else the region's own extent."""
    out = []
    for (_, ext), full in zip(region, box_extents(full_box)):
        out.append(full if full is not None and const_value(full) is not None else ext)
    return tuple(out)


def aligned_extents(name: str, extents: tuple[Expr, ...],
                    align: dict[int, tuple[int, int]]) -> tuple[Expr, ...]:
    """``extents`` of buffer ``name`` padded so that, row-major, the stride of each dimension
    ``d`` in ``align`` (``storage_align``) is ``factor * n + offset`` elements: the dimension
    inside it padded, the innermost first (TVM's storage flattening with ``storage_align``).
    A stride of a last-but-one dimension may be symbolic; others need constant extents.

    >>> from tensorlang.affine import sconst
    >>> [int(e.value) for e in aligned_extents("T", (sconst(8), sconst(128)), {0: (32, 4)})]
    [8, 132]

    Raises:
        ScheduleError: a stride to align is not constant and not the extent of the innermost
            dimension, or no padding below ``factor`` gives it.
    """
    out = list(extents)
    for d in sorted(align, reverse=True):
        factor, offset = align[d]
        inner = [const_value(e) for e in out[d + 2:]]
        if d + 2 == len(out) and const_value(out[d + 1]) is None:
            # the innermost extent E is the stride: the least E' >= E with E' = offset (mod f)
            out[d + 1] = sadd(smul(sceildiv(ssub(out[d + 1], sconst(offset)), factor), factor),
                              sconst(offset))
            continue
        extent = const_value(out[d + 1])
        if extent is None or any(c is None for c in inner):
            raise ScheduleError(
                f"storage_align of {name}'s dimension {d}: the dimensions inside it have no "
                f"constant extents ({', '.join(map(str, out[d + 1:]))}), so its stride cannot "
                f"be padded; align a dimension whose inner extent is the stride (the "
                f"last-but-one), or compute {name} where its region has a constant size")
        below = int(np.prod([int(c) for c in inner], dtype=np.int64))
        pad = next((p for p in range(factor)
                    if ((int(extent) + p) * below - offset) % factor == 0), None)
        if pad is None:
            raise ScheduleError(
                f"storage_align of {name}'s dimension {d}: its stride is a multiple of "
                f"{below} elements (the dimensions inside the padded one), which no padding "
                f"makes {offset} modulo {factor}; align a dimension further in, or take a factor "
                f"and offset that {below} allows")
        out[d + 1] = sconst(int(extent) + pad)
    return tuple(out)


def _bounds_of(box: Box, domain) -> list[tuple[Expr, Expr]]:
    return [(lo, ssub(sadd(lo, ext), sconst(1))) for lo, ext in clip_box(box, domain)]


def realize(p: Pipeline | AlgorithmView,
            states: dict[str, StageState] | None = None) -> LoweredFunc:
    """Build the loop nest of pipeline ``p`` under the schedule ``states`` (default: every Func
    at root, loops in definition order).

    When a stage splits a loop whose extent is not known to be a multiple of the factor, the
    stage has two versions of its nest (loop versioning, decided per instance of the stage): a
    fast one without tails, taken when every GuardWithIf extent is a multiple of its factor and
    every ShiftInwards extent is at least its factor, and the always-valid guarded one (a
    GuardWithIf tail that bounds a serial loop with a serial loop inside stays in the fast one:
    ``nest.SERIAL_TAILS``, ``_tail_vars``). A root
    stage is first partitioned along its GuardWithIf-split pure Vars (``produce_partitioned``):
    the full tiles take the fast version whatever the extent, only the remainder is guarded.

    Raises:
        ScheduleError / IllegalScheduleError: a compute/store location that cannot be realized.
    """
    if isinstance(p, Pipeline):
        p = AlgorithmView(p)
    if states is None:
        states = default_states(p.funcs)
    r = _Realizer(p, states)
    body = r.run()
    lowered = LoweredFunc(p.pipeline.outputs[-1].name,
                          tuple(r.buffers[i.name] for i in p.inputs),
                          tuple(r.buffers[o.name] for o in p.pipeline.outputs), p.sizes,
                          r.buffers, body)
    return reorder_storage(lowered, {
        f.name: storage_permutation(tuple(a.name for a in p.definition(f.name).args),
                                    states[f.name].storage_order)  # type: ignore[arg-type]
        for f in r.live if states[f.name].storage_order is not None})
