"""Lowering pass ``hoist_update_reads``: an update's innermost loop that reads, at a cell fixed
over the loop, the buffer it stores to loads that cell once per range in which it cannot change.

PolyBench floyd-warshall's update ``path[i, j] = min(path[i, j], path[i, k] + path[k, j])`` runs
its loop over ``j`` with ``path[i, k]`` read on every iteration and written on one (``j == k``).
Kept as it is, that read lies inside the row the loop writes: LLVM's vectorizer guards its vector
loop with a run-time check that the cells read lie outside that row, which always fails. The
pass rewrites such a loop in steps that are all exact (the same operations in the same order,
so the results are bit-identical):

0. the loop is first cut where a comparison of ``x`` in its store or guard changes, each range
   with the comparison resolved (``cell_reduction.cut_piece``: lu's ``where(k == j, division,
   update)`` in the loop over ``j`` of its ``i, k, j`` order becomes the division alone, then
   the update);

1. **Index-set splitting** (Griebl, Feautrier and Lengauer, "Index Set Splitting", IJPP 2000):
   for each read of the stored buffer whose indices are free of the loop variable ``x`` and
   that every iteration evaluates (not inside a ``where``'s branch), the loop is cut around the
   iteration whose store reaches that cell — the solution of the index equations in ``x``, when
   one index of the store is ``x`` plus terms free of it (``j == k``) — into up to three ranges;
   ``MAX_READS`` reads at most;
2. **Scalar replacement** (Carr and Kennedy, "Scalar Replacement in the Presence of Conditional
   Control Flow", SPE 1994) in each range: a read whose cell isl proves the range's stores never
   reach (the index equations of store and read have no solution for ``x`` in the range, within
   the bounds of the enclosing loops and lets) is loaded once before the range's loop into a
   one-element register buffer, under ``if start < end`` so that an empty range loads nothing;
   a loop or range isl proves runs at most once is left as it is. A range whose store's index
   equations against every read of the buffer (and against itself) have no solution with two
   different iterations is marked ``independent``: codegen passes that proof on to LLVM
   (``llvm.loop.parallel_accesses``), whose vectorizer would otherwise check at run time that
   the rows it reads and writes do not overlap — a check it hoists out of the enclosing loops
   (``-hoist-runtime-checks``), where it spans every row and always fails.

Nothing else changes: a loop that is not serial, sits inside a vectorized loop or a GPU kernel,
whose body is not one store (under at most one guard free of ``x``), whose store is a reduction,
or whose reads cannot be proven apart from its stores in any range is left as it is.
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import sadd, sconst, smax, ssub
from tensorlang.expr import BinOp, Cmp, Expr, Select, Var, map_children, substitute, walk

from .cell_reduction import (MAX_CONDITIONS, LoopContext, Piece, cut_piece, cut_ranges,
                             expr_vars, rewrite_loops, unit_term)
from .ir import (Allocate, Block, Buffer, For, ForKind, IfThenElse, Load, LoweredFunc,
                 Stmt, Store, reads_memory)
from .legality.isl_text import Unrepresentable

#: the most reads one loop is cut for (each at most triples the ranges)
MAX_READS = 4


def _fixed_reads(value: Expr, buffer: str, x: str) -> list[Load]:
    """The distinct loads of ``buffer`` in ``value`` whose indices are free of ``x`` and read no
    memory, evaluated on every iteration: not inside a ``where``'s branches or the right operand
    of ``&`` / ``|``."""
    out: list[Load] = []

    def go(n: Expr) -> Expr:
        if isinstance(n, Select):
            go(n.cond)
            return n
        if isinstance(n, BinOp) and n.op in ("and", "or"):
            go(n.a)
            return n
        if isinstance(n, Load) and n.buffer == buffer and not any(
                x in expr_vars(i) or reads_memory(i) for i in n.indices):
            if not any(r.same_as(n) for r in out):
                out.append(n)
            return n
        return map_children(n, go)

    go(value)
    return out


def _meeting_point(store: Store, read: Load, x: str) -> Expr | None:
    """``e`` such that the store reaches ``read``'s cell only where ``x == e`` (an index of the
    store is ``x`` plus terms free of it, or minus), or None."""
    for s_idx, r_idx in zip(store.indices, read.indices):
        unit = unit_term(ssub(s_idx, r_idx), x)  # k x + rest == 0
        if unit is not None:
            k, rest = unit
            return ssub(sconst(0), rest) if k == 1 else rest
    return None


def _independent(store: Store, x: str, start: Expr, end: Expr, ctx: LoopContext) -> bool:
    """Whether no iteration of ``x`` in ``[start, end)`` reads or writes a cell of the stored
    buffer that another iteration writes: the store's index equations against every read of
    that buffer (and against itself) have no solution with two different iterations."""
    loads = [n for n in walk(store.value) if isinstance(n, Load) and n.buffer == store.buffer]
    others = [Load(store.buffer, store.indices, store.value.dtype), *loads]
    a, b = f"{x}.write", f"{x}.other"
    try:
        xa, xb = ctx.text(Var(a)), ctx.text(Var(b))
        lo, hi = ctx.text(start), ctx.text(end)
        bounds = [f"{lo} <= {xa} < {hi}", f"{lo} <= {xb} < {hi}"]
        for r in others:
            eqs = [f"{ctx.text(substitute(i, {x: Var(a)}))} = "
                   f"{ctx.text(substitute(j, {x: Var(b)}))}"
                   for i, j in zip(store.indices, r.indices)]
            for order in (f"{xa} < {xb}", f"{xb} < {xa}"):
                if not ctx.empty([xa, xb], [*bounds, *eqs, order]):
                    return False
    except Unrepresentable:
        return False
    return True


def _at_most_once(start: Expr, end: Expr, ctx: LoopContext) -> bool:
    """Whether the context proves ``[start, end)`` holds at most one iteration (nothing to gain
    from loading a read once)."""
    try:
        return ctx.holds(f"{ctx.text(end)} - {ctx.text(start)} <= 1")
    except Unrepresentable:
        return False


def _range(loop: For, p: Piece, buffers: dict[str, Buffer], counter: list[int],
           ctx: LoopContext) -> tuple[list[Stmt], bool]:
    """Piece ``p`` of ``loop`` (its store resolved for the range) cut around each meeting point
    of its fixed reads, each range with the reads it provably never writes loaded once: the
    statements, and whether any read was."""
    x, store = loop.var, p.store
    reads = [] if p.guard is not None and x in expr_vars(p.guard) else \
        _fixed_reads(store.value, store.buffer, x)[:MAX_READS]
    ranges = [(p.start, p.end)]
    if reads:
        try:
            for r in reads:
                e = _meeting_point(store, r, x)
                if e is not None:
                    ranges = [(a, b) for lo, hi in ranges
                              for a, b, _ in cut_ranges("eq", e, lo, hi, ctx)
                              if not a.same_as(b)]
        except Unrepresentable:
            ranges = [(p.start, p.end)]

    def guarded(s: Stmt) -> Stmt:
        return s if p.guard is None else IfThenElse(p.guard, s)

    written = Load(store.buffer, store.indices, buffers[store.buffer].dtype)
    out: list[Stmt] = []
    hoisted = False
    for start, end in ranges:
        extent = smax(sconst(0), ssub(end, start))
        fixed = [] if not reads or _at_most_once(start, end, ctx) else \
            [r for r in reads if ctx.disjoint([written], r, x, start, end)]
        if not fixed:
            out.append(dataclasses.replace(loop, min=start, extent=extent, body=guarded(store)))
            continue
        hoisted = True
        regs: list[tuple[Load, Buffer]] = []
        for r in fixed:
            counter[0] += 1
            buf = Buffer(f"{store.buffer}.fixed{counter[0]}", r.dtype, (sconst(0),),
                         (sconst(1),), "internal", register=True)
            buffers[buf.name] = buf
            regs.append((r, buf))

        def swap(n: Expr, regs=regs) -> Expr:
            for r, buf in regs:
                if n.same_as(r):
                    return Load(buf.name, (sconst(0),), r.dtype)
            return map_children(n, swap)

        st = dataclasses.replace(store, value=swap(store.value))
        independent = p.guard is None and _independent(st, x, start, end, ctx)
        nest: Stmt = Block((*(Store(buf.name, (sconst(0),), r) for r, buf in regs),
                            dataclasses.replace(loop, min=start, extent=extent, body=st,
                                                independent=independent)))
        for _, buf in reversed(regs):
            nest = Allocate(buf, nest)
        out.append(guarded(IfThenElse(Cmp("lt", start, end), nest)))
    return out, hoisted


def _try(loop: For, buffers: dict[str, Buffer], counter: list[int],
         context: tuple[Stmt, ...]) -> Stmt | None:
    body, guard = loop.body, None
    if isinstance(body, IfThenElse) and body.otherwise is None:
        body, guard = body.then, body.cond
    x = loop.var
    if loop.kind is not ForKind.SERIAL or not isinstance(body, Store) \
            or body.reduce_op is not None \
            or any(reads_memory(i) for i in body.indices) \
            or (guard is not None and reads_memory(guard)):
        return None
    if not any(isinstance(n, Load) and n.buffer == body.buffer for n in walk(body.value)):
        return None
    ctx = LoopContext(context)
    end = sadd(loop.min, loop.extent)
    if _at_most_once(loop.min, end, ctx):
        return None
    out: list[Stmt] = []
    hoisted = False
    for p in cut_piece(Piece(loop.min, end, guard, body), x, MAX_CONDITIONS, ctx):
        stmts, h = _range(loop, p, buffers, counter, ctx)
        out.extend(stmts)
        hoisted = hoisted or h
    return Block(tuple(out)) if hoisted else None


def hoist_update_reads(f: LoweredFunc) -> LoweredFunc:
    """Apply the rewrite to every qualifying innermost loop (module docstring)."""
    return rewrite_loops(f, _try)
