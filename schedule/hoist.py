"""Lowering pass ``hoist_invariants``: loop-invariant code motion and CSE of index arithmetic.

For each loop, the largest integer subexpressions of its body that depend on no variable bound
inside the loop (its own variable, inner loops, inner lets) and are not trivial (a lone variable,
size or constant) are computed once, in a ``let`` just before the loop; equal expressions share one
``let`` (common-subexpression elimination). Only index and bound arithmetic (int64) moves: data
loads never do, so no read is moved past a write. Loops inside a vectorized loop are left alone so
that the vector body stays a single block of explicit SIMD. Printing the nest shows what each
loop really computes per iteration.
"""

from __future__ import annotations

import dataclasses
import itertools

from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Expr, Var, children, map_children

from .ir import (
    Allocate,
    Block,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    LoweredFunc,
    Prefetch,
    ProducerConsumer,
    Stmt,
    Store,
    map_stmt_and_bounds,
    walk_stmts,
)


def _bound_inside(s: Stmt) -> set[str]:
    """Variables bound by ``s`` or inside it (loop variables and lets)."""
    return {st.var for st in walk_stmts(s) if isinstance(st, (For, LetStmt))}


def _candidates(e: Expr, inner: set[str], out: list[Expr], memo: dict, path: set[int]
                ) -> bool:
    """Collect the maximal hoistable subexpressions of ``e`` into ``out``; add to ``path`` the
    identity of every node above one (the nodes ``_rewrite`` has to rebuild). Whether one was
    found in ``e``."""
    if _hoistable(e, inner, memo):
        out.append(e)
        return True
    found = False
    for n in children(e):
        found = _candidates(n, inner, out, memo, path) or found
    if found:
        path.add(id(e))
    return found


def _mark(e: Expr, table: dict[tuple, Var], path: set[int]) -> bool:
    """Add to ``path`` the nodes of ``e`` above (or at) one equal to a hoisted expression: for
    the expressions the candidates are not collected from (a folded initialisation's
    conditions), which are rewritten all the same. Whether ``e`` has one."""
    found = e.key in table
    for n in children(e):
        found = _mark(n, table, path) or found
    if found:
        path.add(id(e))
    return found


def _reads(e: Expr, memo: dict) -> tuple[frozenset[str], bool]:
    """The variable names ``e`` reads and whether it loads data, memoized per node (keyed by
    identity; ``memo`` keeps the node alive so the key stays unique). Without the memo the
    pass re-walked every subexpression once per enclosing candidate and loop: half of the
    lowering's time on conv2d."""
    hit = memo.get(id(e))
    if hit is not None:
        return hit[1]
    if isinstance(e, Var):
        res: tuple[frozenset[str], bool] = (frozenset((e.name,)), False)
    else:
        names: set[str] = set()
        loads = isinstance(e, Load)
        for c in children(e):
            n, ld = _reads(c, memo)
            names |= n
            loads = loads or ld
        res = (frozenset(names), loads)
    memo[id(e)] = (e, res)
    return res


def _hoistable(e: Expr, inner: set[str], memo: dict) -> bool:
    if not isinstance(e, BinOp) or e.dtype is not int64:
        return False
    names, loads = _reads(e, memo)
    return not loads and names.isdisjoint(inner)


def _exprs_of(s: Stmt) -> list[Expr]:
    if isinstance(s, Allocate):
        return [*s.buffer.mins, *s.buffer.extents]
    if isinstance(s, For):
        return [s.min, s.extent]
    if isinstance(s, Store):
        return [*s.indices, s.value]
    if isinstance(s, Prefetch):
        return list(s.indices)
    if isinstance(s, IfThenElse):
        return [s.cond]
    if isinstance(s, LetStmt):
        return [s.value]
    return []


def _rewrite(s: Stmt, table: dict[tuple, Var], path: set[int]) -> Stmt:
    """``s`` with each expression equal to one in ``table`` replaced by its variable; only the
    nodes on ``path`` (those above one) are rebuilt, the others are kept as they are."""
    def fe(e: Expr) -> Expr:
        v = table.get(e.key)
        if v is not None:
            return v
        if id(e) not in path:
            return e
        return map_children(e, fe)

    def fs(st: Stmt) -> Stmt:
        return map_stmt_and_bounds(st, fs, fe)

    return fs(s)


def hoist_invariants(f: LoweredFunc) -> LoweredFunc:
    """Apply the pass top-down: hoist out of a serial or parallel loop first, then visit the
    loops inside it (which then see the outer ``let`` variables as plain names)."""
    names = (f"t{n}" for n in itertools.count())
    memo: dict = {}

    def hoist(s: For) -> Stmt:
        inner = _bound_inside(s)
        found: list[Expr] = []
        path: set[int] = set()
        for st in walk_stmts(s.body):
            for e in _exprs_of(st):
                _candidates(e, inner, found, memo, path)
        table: dict[tuple, Var] = {}
        lets: list[tuple[str, Expr]] = []
        for e in found:
            if e.key not in table:
                v = Var(next(names))
                table[e.key] = v
                lets.append((v.name, e))
        if table:
            for st in walk_stmts(s.body):
                if isinstance(st, Store) and st.initial is not None:
                    for c in st.initial[0]:
                        _mark(c, table, path)
        body = _rewrite(s.body, table, path) if table else s.body
        out: Stmt = dataclasses.replace(s, body=visit(body, False))
        for name, e in reversed(lets):
            out = LetStmt(name, e, out)
        return out

    def visit(s: Stmt, in_vector: bool) -> Stmt:
        if isinstance(s, For):
            if in_vector or s.kind is ForKind.VECTORIZED:
                return dataclasses.replace(s, body=visit(s.body, True))
            if s.kind is ForKind.UNROLLED:
                return dataclasses.replace(s, body=visit(s.body, False))
            return hoist(s)
        if isinstance(s, (Block, IfThenElse, LetStmt, ProducerConsumer, Allocate)):
            return map_stmt_and_bounds(s, lambda c: visit(c, in_vector), lambda e: e)
        return s

    return dataclasses.replace(f, body=visit(f.body, False))
