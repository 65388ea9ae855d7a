"""Two pieces of a partitioned stage as one parallel loop.

Loop partitioning (``realize._Realizer.produce_partitioned``, Halide's partitioning of a
GuardWithIf split) runs a root stage's whole tiles as one piece and the remainder as another,
one after the other. Where both pieces run the same serial loops down to a parallel loop over
the partitioned Var, the remainder ran as a parallel loop of its own after the first had
joined: a GEMV's 104 columns past seven whole 128-wide column segments ran on one thread while
the other waited, with a fork and a join of their own. Here the two parallel loops become one
whose iteration runs the first piece's body or the second's, so the pool's dynamic chunks
(``backends/llvm/parallel.py``) balance the remainder with the whole tiles, and the whole
tiles keep their unguarded body. A piece that comes in two versions (an ``if`` on the sizes
around two ``produce`` statements: a reduction split whose tail may be empty) is merged version
by version, the other piece's code then emitted in both.

Legal because the pieces are independent (each point of a pure definition is computed on its
own, and producers computed inside a piece's loops are allocated per iteration): any order and
any interleaving of their iterations computes the same cells.
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import sadd, sconst, smax, ssub
from tensorlang.dtypes import int64
from tensorlang.expr import Cmp, Expr, Select, Var, substitute

from .ir import For, ForKind, IfThenElse, ProducerConsumer, Stmt, map_stmt_and_bounds

#: 1: two pieces of a partitioned stage that share their loops outside a parallel loop run in
#: one parallel loop (``merge_pieces``); 0: one after the other, each parallel loop joined
#: before the next starts, as before (for a benchmark's A/B)
ONE_PARALLEL_LOOP = 1
#: 1: a piece in two versions (an ``if`` on the sizes around two ``produce`` statements) is
#: merged version by version (``merge_pieces``); 0: such pieces stay two parallel loops, as
#: before (for a benchmark's A/B)
VERSIONED_PIECES = 1


def piece_switches() -> tuple[int, ...]:
    """This module's switches now (part of ``lower``'s cache key, through
    ``realize.lowering_switches``)."""
    return (ONE_PARALLEL_LOOP, VERSIONED_PIECES)


def merge_pieces(first: tuple[Expr, Stmt], second: tuple[Expr, Stmt],
                 along: frozenset[str]) -> Stmt | None:
    """One statement running both pieces, each given as ``(condition, statement)``: the piece
    runs where its condition (its region is not empty) holds. ``None`` unless both are the same
    ``produce`` of one Func whose loops are the same (variable, range, kind) down to a parallel
    loop over the same variable, one of ``along`` (the loops derived from the partitioned Var:
    over another, each piece would run every iteration, and one loop of both would run each
    twice with half the work); that loop then runs the first piece's iterations, then the
    second's (its variable shifted in the second body), each with the body it had."""
    if not ONE_PARALLEL_LOOP:
        return None
    (c1, s1), (c2, s2) = first, second
    for n, s in enumerate((s1, s2)):
        if isinstance(s, IfThenElse) and s.otherwise is not None and VERSIONED_PIECES:
            # a piece in two versions (a reduction split whose tail may be empty: ``if K % 4
            # == 0``), decided outside its loops: each version merged with the other piece
            pairs = [((c1, b), second) if n == 0 else (first, (c2, b))
                     for b in (s.then, s.otherwise)]
            both = [merge_pieces(a, b, along) for a, b in pairs]
            if None in both:
                return None
            return IfThenElse(s.cond, both[0], both[1])
    if not (isinstance(s1, ProducerConsumer) and isinstance(s2, ProducerConsumer)
            and s1.func == s2.func):
        return None
    body = _merge_loops(s1.body, s2.body, c1, c2, along)
    return None if body is None else dataclasses.replace(s1, body=body)


def _merge_loops(a: Stmt, b: Stmt, c1: Expr, c2: Expr, along: frozenset[str]) -> Stmt | None:
    if not (isinstance(a, For) and isinstance(b, For) and a.var == b.var and a.kind is b.kind):
        return None
    if a.kind is not ForKind.PARALLEL:
        if not (a.min.same_as(b.min) and a.extent.same_as(b.extent)):
            return None
        body = _merge_loops(a.body, b.body, c1, c2, along)
        return None if body is None else dataclasses.replace(a, body=body)
    if a.var not in along:
        return None
    n1 = Select(c1, smax(a.extent, sconst(0)), sconst(0), int64)
    n2 = Select(c2, smax(b.extent, sconst(0)), sconst(0), int64)
    v = Var(a.var)
    split = sadd(a.min, n1)
    # the second piece's iteration ``split + t`` is its own iteration ``b.min + t``
    shift = {a.var: sadd(ssub(v, split), b.min)}

    def fe(e: Expr) -> Expr:
        return substitute(e, shift)

    def go(s: Stmt) -> Stmt:  # (producers' allocation bounds name the variable too)
        return map_stmt_and_bounds(s, go, fe)

    body = IfThenElse(Cmp("lt", v, split), a.body, go(b.body))
    return dataclasses.replace(a, extent=sadd(n1, n2), body=body)
