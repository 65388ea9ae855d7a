"""Lowering pass ``version_live_vectors``: a register tile's loop runs only its live vectors.

A register tile several native vectors wide (a packed GEMM tile: ``unrolled for x.i.o in [0, 4)``
around ``vectorized for x.i.i in [0, min(8, N - 8 * x.i.o - t))``) has, in the last column
panel, vectors that are wholly dead: a GEMM of 33 columns in 32-wide tiles has 1 live column in
its second panel, 1 live vector of 4. ``widen_tile_tails`` runs a dead vector as a whole one
(cheaper than a branch per vector in the reduction loop), so such a panel costs as much as a full
one: 33 columns cost as much as 64. This pass versions the loop around such a tile on the number
of live vectors (loop unswitching on a loop-invariant condition; Allen and Kennedy, "Optimizing
Compilers for Modern Architectures", section 7.2.2): one copy of the loop per count ``v`` in
``1 .. n - 1``, its unrolled loop cut to its first ``v`` iterations, and the loop as it is where
all ``n`` are live. Halide leaves this to the schedule (``specialize``); BLIS's
micro-kernels likewise come in edge versions of fewer columns.

The pass takes the outermost loop ``L`` (not unrolled, not vectorized) such that

- every loop in ``L`` named ``u`` is unrolled over a constant range ``[lo, lo + n)``, ``n >= 2``,
  and its body is one vectorized loop whose extent is ``min(c, R)`` (``ir.lane_cap``) for the
  same ``R``, affine with a negative coefficient of ``u`` (later vectors have fewer live lanes:
  the dead ones are a suffix), that accumulates into a register tile (the tile's update: the
  tile's loads and stores around ``L`` keep their masks, and code that only initialises or
  copies is not worth its copies: each version is compiled), and
- ``R`` names nothing bound inside ``L``, so the count of live vectors is known before it.

Cutting an iteration ``u`` whose vector loop has extent ``<= 0`` changes nothing: it ran no
iteration. ``VERSION_LIVE_VECTORS = 0`` turns the pass off (part of ``lower``'s cache key).
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import Affine, NonAffine, affine_form, const_value, sconst
from tensorlang.dtypes import int64
from tensorlang.expr import Cmp, Const, Expr, Var, map_children, substitute, walk

from .ir import Allocate, For, ForKind, IfThenElse, LetStmt, Load, LoweredFunc, Stmt, Store, \
    e2s, lane_cap, map_stmt, walk_stmts
from .simplify import simplify_expr

#: 1: the pass runs; 0: a tile's dead vectors run (widened) or stay masked (an A/B switch)
VERSION_LIVE_VECTORS = 1


def versioning() -> int:
    """``VERSION_LIVE_VECTORS`` now (part of ``lower``'s cache key: a benchmark flips it)."""
    return VERSION_LIVE_VECTORS


def version_live_vectors(f: LoweredFunc) -> LoweredFunc:
    """Version each outermost qualifying loop on its tile's live vectors (module docstring)."""
    if not VERSION_LIVE_VECTORS:
        return f

    registers = {b.name for b in f.buffers.values() if b.register} | {
        s.buffer.name for s in walk_stmts(f.body) if isinstance(s, Allocate) and s.buffer.register}

    def go(s: Stmt) -> Stmt:
        if isinstance(s, For) and s.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED):
            tile = _tile_loops(s, registers)
            if tile is not None:
                return _versions(s, *tile)
        return map_stmt(s, go, lambda e: e)

    body = go(f.body)
    return f if body is f.body else dataclasses.replace(f, body=body)


def _remainder(loop: For, registers: set[str]) -> Expr | None:
    """``R`` of an unrolled ``loop`` whose body is a vector loop of extent ``min(c, R)`` that
    accumulates into one of the ``registers`` tiles, ``R`` affine with a negative coefficient
    of the unrolled variable; else None."""
    v = loop.body
    if not isinstance(v, For) or v.kind is not ForKind.VECTORIZED or lane_cap(v.extent) is None \
            or not isinstance(v.body, Store) or v.body.reduce_op is None \
            or v.body.buffer not in registers:
        return None
    sides = [v.extent.a, v.extent.b]
    consts = [const_value(x) for x in sides]
    if sum(c is not None for c in consts) != 1:
        return None
    r = sides[consts.index(None)]
    if any(isinstance(x, Load) for x in walk(r)):  # (an extent read from memory: not fixed)
        return None
    form = _form(r, loop.var)
    return r if form is not None and form.coeff(loop.var) < 0 else None


def _form(r: Expr, u: str) -> Affine | None:
    """The affine form of ``r`` in ``u``, each largest term without ``u`` taken as a variable
    of its own (``N - N // 32 * 32 - 8 * u``: ``N // 32`` is not affine, but is fixed); None
    where ``u`` appears in a term that is not affine."""
    def opaque(e: Expr) -> Expr:
        if const_value(e) is None and u not in {x.name for x in walk(e) if isinstance(x, Var)}:
            return Var("fixed_" + e2s(e).encode().hex())  # (one name per distinct term)
        return map_children(e, opaque)
    try:
        return affine_form(opaque(r))
    except NonAffine:
        return None


def _tile_loops(s: For, registers: set[str]) -> tuple[str, int, int, Expr] | None:
    """``(u, lo, n, R)`` where ``s`` qualifies as the module docstring's ``L`` (its tiles
    accumulating into ``registers``), else None."""
    unrolled = [t for t in walk_stmts(s.body) if isinstance(t, For)
                and t.kind is ForKind.UNROLLED and _remainder(t, registers) is not None]
    names = {t.var for t in unrolled}
    if len(names) != 1:
        return None
    (u,) = names
    loops = [t for t in walk_stmts(s.body) if isinstance(t, For) and t.var == u]
    first = loops[0]
    lo, n = const_value(first.min), const_value(first.extent)
    r = _remainder(first, registers)
    if lo is None or n is None or n < 2 or r is None:
        return None
    form = _form(r, u)
    for t in loops[1:]:
        tr = _remainder(t, registers)
        if t.kind is not ForKind.UNROLLED or tr is None or const_value(t.min) != lo \
                or const_value(t.extent) != n or _form(tr, u) != form:
            return None
    inner = {t.var for t in walk_stmts(s) if isinstance(t, (For, LetStmt))}
    if ({x.name for x in walk(r) if isinstance(x, Var)} - {u}) & inner:
        return None
    return u, int(lo), int(n), r


def _versions(s: For, u: str, lo: int, n: int, r: Expr) -> Stmt:
    """``if R(lo + 1) <= 0: <s, 1 vector> elif ... elif R(lo + n - 1) <= 0: <s, n - 1 vectors>
    else: s``."""
    out: Stmt = s
    for v in range(n - 1, 0, -1):
        dead = simplify_expr(Cmp("le", substitute(r, {u: Const(lo + v, int64)}), sconst(0)))
        out = IfThenElse(dead, _cut(s, u, v), out)
    return out


def _cut(s: Stmt, u: str, v: int) -> Stmt:
    """``s`` with every loop named ``u`` cut to its first ``v`` iterations."""
    def go(t: Stmt) -> Stmt:
        if isinstance(t, For) and t.var == u:
            return dataclasses.replace(t, extent=sconst(v))
        return map_stmt(t, go, lambda e: e)
    return go(s)
