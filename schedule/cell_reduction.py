"""Lowering pass ``reduce_update_cells``: an atomic update's innermost loop that accumulates
into one cell runs as a reduction in a register.

An update definition that reads its own Func keeps strict order (the reduction policy of
``docs/architecture.md``), so its innermost loop — PolyBench cholesky's
``A[i, j] = where(k < j, A[i, j] - A[i, k] * A[j, k], A[i, j] / A[j, j])`` over ``k`` — stores
to memory and reloads on every iteration, one latency-bound step at a time. Where the schedule
marks the update ``atomic()`` (Halide's ``Stage::atomic``: the update's accumulation may be
reassociated), this pass rewrites such a loop in two steps:

1. **Index-set splitting** (Halide's loop partitioning of ``select`` conditions; Griebl, Feautrier
   and Lengauer, "Index Set Splitting", IJPP 2000): a ``where`` condition comparing the loop
   variable with an expression invariant in the loop (``k < j``, ``k == j``) splits the loop
   into the ranges on which it is constant, each with the ``where`` resolved;
2. **Scalar replacement** (Carr and Kennedy, "Scalar Replacement in the Presence of Conditional
   Control Flow", SPE 1994) of each range whose store is ``C = C op value`` (op ``+ - * max
   min``; the cell ``C`` the same on every iteration) and whose ``value`` provably never reads
   ``C`` — isl proves the index equations of every read of ``C``'s buffer against the cell's
   have no solution in the range, within the bounds of the enclosing loops and lets: the cell
   is loaded once into a one-element register buffer, the range accumulates into it as a
   reduction store (``reassoc``: LLVM's vectorizer turns it into SIMD partial sums) and the
   cell is stored back once.

Nothing else changes: a loop inside a vectorized loop or a GPU kernel, a loop whose body is
not a single unguarded store, whose cell index moves with the loop or reads memory, or whose
reads cannot be proven apart from the cell is left as it is. The results differ from the
strict order only by the rounding of a reassociated sum, as every reduction of the language
may.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from tensorlang.affine import sadd, sconst, smax, smin, ssub
from tensorlang.expr import BinOp, Cmp, Const, Expr, Select, Size, Var, map_children, walk

from .ir import (Allocate, Block, Buffer, For, ForKind, LetStmt, Load, LoweredFunc, Stmt, Store,
                 map_stmt)
from .legality.isl_text import Unrepresentable, quasi_affine
from .simplify import simplify_expr

#: the reduction ops a range may accumulate with (``sub`` accumulates the negated value)
_OPS = {"add": "sum", "sub": "sum", "mul": "prod", "max": "max", "min": "min"}
_LANES = frozenset({ForKind.VECTORIZED, ForKind.GPU_BLOCK, ForKind.GPU_THREAD})
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}


def _vars(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, (Var, Size))}


def _reads(e: Expr) -> bool:
    return any(isinstance(n, Load) for n in walk(e))


def _split_condition(value: Expr, x: str) -> tuple[str, Expr, Cmp] | None:
    """The one comparison of ``value``'s ``where`` conditions that involves loop variable
    ``x``, as ``(op, e, cmp)`` meaning ``x op e`` with ``e`` free of ``x``; None if there is
    none, several, or one of another shape."""
    found: list[Cmp] = []
    for n in walk(value):
        if isinstance(n, Select):
            for c in walk(n.cond):
                if isinstance(c, Cmp) and x in _vars(c) and all(
                        not c.same_as(o) for o in found):
                    found.append(c)
    if len(found) != 1:
        return None
    c = found[0]
    if c.op not in _FLIP or not c.a.dtype.is_int or _reads(c.a) or _reads(c.b):
        return None
    for side, other, op in ((c.a, c.b, c.op), (c.b, c.a, _FLIP[c.op])):
        if isinstance(side, Var) and side.name == x and x not in _vars(other):
            return op, other, c
    return None


def _ranges(op: str, e: Expr, lo: Expr, hi: Expr) -> list[tuple[Expr, Expr, bool]]:
    """``[lo, hi)`` cut where ``x op e`` changes: (start, end, truth) per range, in order."""
    def clamp(v: Expr) -> Expr:
        return smax(lo, smin(hi, v))

    e1 = sadd(e, sconst(1))
    cuts = {"lt": ([e], [True, False]), "le": ([e1], [True, False]),
            "gt": ([e1], [False, True]), "ge": ([e], [False, True]),
            "eq": ([e, e1], [False, True, False])}[op]
    points = [lo, *(clamp(p) for p in cuts[0]), hi]
    return [(points[k], points[k + 1], truth) for k, truth in enumerate(cuts[1])]


def _resolve(value: Expr, cond: Cmp, truth: bool) -> Expr:
    """``value`` with ``cond`` replaced by ``truth`` and the ``where``s it decides folded."""
    def go(n: Expr) -> Expr:
        if isinstance(n, Cmp) and n.same_as(cond):
            return Const(truth, n.dtype)
        n = map_children(n, go)
        if isinstance(n, Select) and isinstance(n.cond, Const):
            return n.t if n.cond.value else n.f
        return n

    return go(value)


def _accumulation(value: Expr, cell: Load) -> tuple[str, Expr] | None:
    """``(reduce op, term)`` if ``value`` is ``cell op term`` (either order for the commutative
    ops; ``cell - term`` as the sum of ``-term``)."""
    if not isinstance(value, BinOp) or value.op not in _OPS:
        return None
    for mine, other in ((value.a, value.b), (value.b, value.a)):
        if mine.same_as(cell):
            if value.op == "sub":
                if mine is not value.a or value.dtype.is_unsigned or value.dtype.is_bool:
                    return None
                neg = BinOp("mul", Const(-1.0 if value.dtype.is_float else -1, value.dtype),
                            other, value.dtype)
                return "sum", neg
            return _OPS[value.op], other
    return None


def _disjoint(reads: list[Load], cell: Load, x: str, start: Expr, end: Expr,
              context: tuple[Stmt, ...]) -> bool:
    """Whether isl proves that no read in ``reads`` touches ``cell`` for any ``x`` in
    ``[start, end)``, for every value of the other variables (isl parameters) that the
    enclosing loops and lets in ``context`` allow (a bound isl cannot state is left out: the set
    only grows, so an empty one still proves it)."""
    names: dict[str, str] = {}

    def name(v: str) -> str:
        return names.setdefault(v, f"p{len(names)}")

    def quasi(e: Expr) -> str:
        return quasi_affine(e, name, name)

    known: list[str] = []
    for c in context:
        try:
            if isinstance(c, For):
                v = name(c.var)
                known.append(f"{quasi(c.min)} <= {v} < {quasi(c.min)} + {quasi(c.extent)}")
            elif isinstance(c, LetStmt):
                known.append(f"{name(c.var)} = {quasi(c.value)}")
        except Unrepresentable:
            continue
    try:
        xs = name(x)
        bounds = [f"{quasi(start)} <= {xs} < {quasi(end)}", *known]
        for r in reads:
            eqs = [f"{quasi(a)} = {quasi(b)}" for a, b in zip(r.indices, cell.indices)]
            params = ", ".join(v for v in names.values() if v != xs)
            text = f"[{params}] -> {{ [{xs}] : {' and '.join(bounds + eqs)} }}"
            if not isl.Set(text).is_empty():
                return False
    except (Unrepresentable, isl.Error):
        return False
    return True


def _try(loop: For, buffers: dict[str, Buffer], counter: list[int],
         context: tuple[Stmt, ...]) -> Stmt | None:
    st = loop.body
    if loop.kind is not ForKind.SERIAL or not isinstance(st, Store) or st.reduce_op is not None:
        return None
    if not st.reassociable:
        return None
    x = loop.var
    if any(x in _vars(i) or _reads(i) for i in st.indices):
        return None
    split = _split_condition(st.value, x)
    end = sadd(loop.min, loop.extent)
    if split is None:
        pieces = [(loop.min, end, st.value)]
    else:
        op, e, cond = split
        pieces = [(a, b, simplify_expr(_resolve(st.value, cond, t)))
                  for a, b, t in _ranges(op, e, loop.min, end)]
    dtype = buffers[st.buffer].dtype
    if dtype.is_bool:
        return None
    cell = Load(st.buffer, st.indices, dtype)
    out: list[Stmt] = []
    reduced = False
    for a, b, value in pieces:
        extent = smax(sconst(0), ssub(b, a))
        acc = _accumulation(value, cell)
        if acc is not None:
            rop, term = acc
            reads = [n for n in walk(term) if isinstance(n, Load) and n.buffer == st.buffer]
            if _disjoint(reads, cell, x, a, b, context):
                counter[0] += 1
                buf = Buffer(f"{st.buffer}.cell{counter[0]}", dtype, (sconst(0),), (sconst(1),),
                             "internal", register=True)
                buffers[buf.name] = buf
                reg = (sconst(0),)
                body = Block((
                    Store(buf.name, reg, cell),
                    dataclasses.replace(loop, min=a, extent=extent,
                                        body=Store(buf.name, reg, term, rop)),
                    Store(st.buffer, st.indices, Load(buf.name, reg, dtype))))
                out.append(Allocate(buf, body))
                reduced = True
                continue
        out.append(dataclasses.replace(loop, min=a, extent=extent,
                                       body=dataclasses.replace(st, value=value)))
    return Block(tuple(out)) if reduced else None


def reduce_update_cells(f: LoweredFunc) -> LoweredFunc:
    """Apply the rewrite to every qualifying innermost loop (module docstring)."""
    buffers = dict(f.buffers)
    counter = [0]

    def go(s: Stmt, lanes: bool = False, context: tuple[Stmt, ...] = ()) -> Stmt:
        # not inside SIMD lanes or GPU threads: there the one-cell register would be shared
        if isinstance(s, For) and not lanes:
            r = _try(s, buffers, counter, context)
            if r is not None:
                return r
        inner = lanes or (isinstance(s, For) and s.kind in _LANES)
        ctx = context + (s,) if isinstance(s, (For, LetStmt)) else context
        return map_stmt(s, lambda c: go(c, inner, ctx), lambda e: e)

    body = go(f.body)
    if body is f.body:
        return f
    return dataclasses.replace(f, body=body, buffers=buffers)
