"""Lowering pass ``simplify``: integer constant folding and algebraic identities.

Folds integer arithmetic on constants (with NumPy's wrap-around for the type), and the identities
``x + 0``, ``x - 0``, ``x * 1``, ``x * 0`` (integers only: ``0.0 * x`` is NaN for an infinite ``x``),
``x // 1``, ``max/min`` of equal operands, and casts of constants. Floating-point expressions are
left alone so that rounding stays exactly what the algorithm says. Index arithmetic (int64)
takes the variable terms of an affine dividend that a constant divisor ``c`` divides out of
floor division and modulo: ``(c * x + r) // c = x + r // c`` and ``(c * x + r) % c = r % c`` (floor
semantics, exact for every sign), so that a panel's ``(i.i + 8 * i.o) // 8`` is
``i.o + i.i // 8``, which an unrolled ``i.i`` folds to a constant.
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import Affine, NonAffine, affine_form, const_value
from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Cast, Const, Expr, cast, map_children
from tensorlang.intervals import Interval

from .ir import For, LetStmt, LoweredFunc, Stmt, lane_cap, map_stmt


def _wrap(v: int, e: Expr) -> Const:
    bits = 8 * e.dtype.itemsize
    v &= (1 << bits) - 1
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return Const(v, e.dtype)


def simplify_expr(e: Expr) -> Expr:
    """Simplify one expression bottom-up."""

    def go(n: Expr) -> Expr:
        n = map_children(n, go)
        if isinstance(n, BinOp) and n.dtype.is_int:
            a, b = n.a, n.b
            ca = a.value if isinstance(a, Const) else None
            cb = b.value if isinstance(b, Const) else None
            if ca is not None and cb is not None:
                if n.op == "add":
                    return _wrap(ca + cb, n)
                if n.op == "sub":
                    return _wrap(ca - cb, n)
                if n.op == "mul":
                    return _wrap(ca * cb, n)
                if n.op == "max":
                    return Const(max(ca, cb), n.dtype)
                if n.op == "min":
                    return Const(min(ca, cb), n.dtype)
                if n.op == "floordiv" and cb not in (0, -1):
                    return Const(ca // cb, n.dtype)
            if n.op in ("add", "sub") and cb == 0:
                return a
            if n.op == "add" and ca == 0:
                return b
            if n.op == "mul" and (cb == 1 or ca == 1):
                return a if cb == 1 else b
            if n.op == "mul" and (cb == 0 or ca == 0):
                return Const(0, n.dtype)
            if n.op == "floordiv" and cb == 1:
                return a
            if n.op in ("max", "min") and a.same_as(b):
                return a
        if isinstance(n, BinOp) and n.dtype is int64 and n.op in ("floordiv", "mod") \
                and isinstance(n.b, Const) and n.b.value > 1:
            split = _divide_out(n.a, int(n.b.value))
            if split is not None:
                whole, rest = split
                if n.op == "mod":
                    return go(BinOp("mod", rest, n.b, int64))
                return go(BinOp("add", whole, BinOp("floordiv", rest, n.b, int64), int64))
        if isinstance(n, BinOp) and n.dtype is int64 and n.op in ("add", "sub", "mul"):
            try:
                return affine_form(n).to_expr()  # canonical order, constants combined
            except NonAffine:
                pass
        if isinstance(n, Cast) and isinstance(n.value, Const):
            return cast(n.dtype, n.value)
        return n

    return go(e)


def _divide_out(e: Expr, c: int) -> tuple[Expr, Expr] | None:
    """``(x, r)`` with ``e == c * x + r`` where ``x`` holds every term of ``e`` (a sum) that
    ``c`` divides: a variable or size term of an affine term's form whose coefficient it
    divides, or any product of a constant it divides and another expression (a piece's start
    ``N // 16 * 16``); ``r`` the rest (with the constant). None when no such term divides
    out."""
    whole: list[Expr] = []
    rest: list[Expr] = []
    affine: list[tuple[int, Expr]] = []
    for sign, t in _terms(e, 1):
        k = next((x for x in (t.a, t.b) if isinstance(x, Const)), None) \
            if isinstance(t, BinOp) and t.op == "mul" else None
        if k is not None and int(k.value) % c == 0:
            other = t.b if t.a is k else t.a
            whole.append(_times(other, sign * int(k.value) // c))
        else:
            affine.append((sign, t))
    for sign, t in affine:
        try:
            fa = affine_form(t)
        except NonAffine:
            rest.append(_times(t, sign))
            continue
        part = Affine.make({k: v // c for k, v in fa.coeffs if v % c == 0},
                           {k: v // c for k, v in fa.params if v % c == 0}, 0)
        if part.coeffs or part.params:
            whole.append(_times(part.to_expr(), sign))
        rest.append(_times(Affine.make({k: v for k, v in fa.coeffs if v % c},
                                       {k: v for k, v in fa.params if v % c},
                                       fa.const).to_expr(), sign))
    if not whole:
        return None
    return _sum(whole), _sum(rest)


def _terms(e: Expr, sign: int) -> list[tuple[int, Expr]]:
    """``e`` as a signed sum of terms (its ``add``/``sub`` nodes flattened)."""
    if isinstance(e, BinOp) and e.op in ("add", "sub") and e.dtype is int64:
        return [*_terms(e.a, sign), *_terms(e.b, sign if e.op == "add" else -sign)]
    return [(sign, e)]


def _times(e: Expr, k: int) -> Expr:
    if k == -1:
        return BinOp("sub", Const(0, int64), e, int64)
    return e if k == 1 else BinOp("mul", e, Const(k, int64), int64)


def _sum(parts: list[Expr]) -> Expr:
    """The sum of ``parts``, its affine ones combined (``d - 2 * d`` is ``-d``)."""
    out: Expr = Const(0, int64)
    opaque: list[Expr] = []
    for x in parts:
        try:
            affine_form(x)
        except NonAffine:
            opaque.append(x)
            continue
        out = BinOp("add", out, x, int64)
    out = affine_form(out).to_expr()
    for x in opaque:
        negated = isinstance(x, BinOp) and x.op == "sub" and isinstance(x.a, Const) \
            and x.a.value == 0
        out = BinOp("sub", out, x.b, int64) if negated else BinOp("add", x, out, int64)
    return out


#: whether ``simplify`` folds divisions and modulos in the ranges of the loops around them
#: (``fold_in_loop_ranges``); 0: not, as before. An int, for ``benchmarks/gemm_packed.py``'s
#: ``auto:tensorlang.schedule.simplify.RANGE_FOLD=0``
RANGE_FOLD = 1


def range_folding() -> int:
    """``RANGE_FOLD`` now (part of ``lower``'s cache key: a benchmark switches it)."""
    return RANGE_FOLD


def simplify(f: LoweredFunc) -> LoweredFunc:
    """Apply :func:`simplify_expr` to every expression of the kernel, then
    :func:`fold_in_loop_ranges` with the ranges of the loops around each."""

    def fs(s: Stmt) -> Stmt:
        return map_stmt(s, fs, simplify_expr)

    body = fs(f.body)
    if RANGE_FOLD:
        body = _in_ranges(body, {})
    return f if body is f.body else dataclasses.replace(f, body=body)


def fold_in_loop_ranges(e: Expr, ranges: dict[str, Interval]) -> Expr:
    """Fold the floor divisions and modulos of ``e`` by a constant ``d`` whose dividend is
    affine in loops of known constant range (``ranges``: loop variable -> inclusive bounds)
    and stays within one multiple of ``d`` over them: ``(j.i.i + 8 * j.i.o) // 16`` is 0 and
    ``(j.i.i + 8 * j.i.o) % 16`` is ``j.i.i + 8 * j.i.o`` for a tile's ``j.i.i`` in ``[0, 7]``
    and ``j.i.o`` in ``[0, 1]`` (a packed panel's column inside a register tile), so code
    generation sees a unit-stride access (a vector load, or a masked one, not a gather).
    Halide's simplifier does the same with the bounds of the enclosing loops."""

    def go(n: Expr) -> Expr:
        n = map_children(n, go)
        if isinstance(n, BinOp) and n.dtype is int64 and n.op in ("floordiv", "mod") \
                and isinstance(n.b, Const) and int(n.b.value) > 0:
            r = _affine_range(n.a, ranges)
            d = int(n.b.value)
            if r is not None and r[0] // d == r[1] // d:
                q = r[0] // d
                if n.op == "floordiv":
                    return Const(q, int64)
                return simplify_expr(BinOp("sub", n.a, Const(q * d, int64), int64)) if q \
                    else n.a
        return n

    if not ranges:
        return e
    out = go(e)
    return e if out is e else simplify_expr(out)


def _affine_range(e: Expr, ranges: dict[str, Interval]) -> Interval | None:
    """Inclusive bounds of ``e`` when it is affine in variables of ``ranges`` only."""
    try:
        form = affine_form(e)
    except NonAffine:
        return None
    if form.params or any(v not in ranges for v in form.vars):
        return None
    lo = hi = form.const
    for v, c in form.coeffs:
        a, b = ranges[v]
        lo += c * (a if c > 0 else b)
        hi += c * (b if c > 0 else a)
    return lo, hi


def _in_ranges(s: Stmt, ranges: dict[str, Interval]) -> Stmt:
    """``s`` with :func:`fold_in_loop_ranges` applied to its expressions, each with the ranges
    of the loops around it whose min is a constant and whose extent is a constant or a constant
    cap (``min(8, N - 8 * x.o)``: at most 8)."""
    if isinstance(s, For):
        lo, ext = const_value(s.min), const_value(s.extent)
        if ext is None:
            ext = lane_cap(s.extent)
        inner = {k: v for k, v in ranges.items() if k != s.var}
        if lo is not None and ext is not None and ext >= 1:
            inner[s.var] = (int(lo), int(lo) + int(ext) - 1)
        return map_stmt(s, lambda c: _in_ranges(c, inner),
                        lambda e: fold_in_loop_ranges(e, ranges))
    if isinstance(s, LetStmt):
        inner = {k: v for k, v in ranges.items() if k != s.var}
        return map_stmt(s, lambda c: _in_ranges(c, inner),
                        lambda e: fold_in_loop_ranges(e, ranges))
    return map_stmt(s, lambda c: _in_ranges(c, ranges), lambda e: fold_in_loop_ranges(e, ranges))

