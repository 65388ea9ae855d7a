"""Bounds inference: interval arithmetic on index expressions, and the region a consumer reads.

``interval(e, ranges)`` gives symbolic ``(lo, hi)`` (inclusive) of integer expression ``e`` when the
Vars in ``ranges`` vary over their ranges and every other Var is held fixed. ``required_region``
applies it to every read of a producer in a consumer's loop nest below one loop: the box of the
producer that one iteration of that loop needs, clipped to the producer's domain.

See also: Halide ``src/Bounds.cpp`` (boxes_required), the Halide PLDI 2013 paper §4.2.
"""

from __future__ import annotations

from tensorlang.affine import const_value, sadd, sconst, sfloordiv, smax, smin, smul, ssub
from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, BinOp, Cast, Const, Expr, Select, Size, Var, map_children, walk
from tensorlang.func import FOLDING_BOUNDARIES

Interval = tuple[Expr, Expr]


def interval(e: Expr, ranges: dict[str, Interval]) -> Interval:
    """Inclusive symbolic bounds of integer expression ``e``. A product, floor division or
    remainder of two single values is that single value: a fused loop held fixed gives its parts
    (``fused // e``, ``fused % e``) one value each, not their whole ranges.

    Raises:
        ScheduleError: ``e`` is not bounded by this analysis (a product of two varying terms, a
            division by a non-constant).
    """
    if isinstance(e, Const):
        return e, e
    if isinstance(e, Var):
        return ranges.get(e.name, (e, e))
    if isinstance(e, Size):
        return e, e
    if isinstance(e, Cast):
        return interval(e.value, ranges)
    if isinstance(e, Select):
        a, b = interval(e.t, ranges), interval(e.f, ranges)
        return smin(a[0], b[0]), smax(a[1], b[1])
    if isinstance(e, BinOp):
        a = interval(e.a, ranges)
        b = interval(e.b, ranges)
        if e.op == "add":
            return sadd(a[0], b[0]), sadd(a[1], b[1])
        if e.op == "sub":
            return ssub(a[0], b[1]), ssub(a[1], b[0])
        if e.op == "max":
            return smax(a[0], b[0]), smax(a[1], b[1])
        if e.op == "min":
            return smin(a[0], b[0]), smin(a[1], b[1])
        cb = const_value(b[0]) if b[0].same_as(b[1]) else None
        ca = const_value(a[0]) if a[0].same_as(a[1]) else None
        if e.op == "mul" and (cb is not None or ca is not None):
            c, x = (cb, a) if cb is not None else (ca, b)
            lo, hi = smul(x[0], c), smul(x[1], c)
            return (lo, hi) if c >= 0 else (hi, lo)
        if e.op == "floordiv" and cb is not None and cb > 0:
            return sfloordiv(a[0], cb), sfloordiv(a[1], cb)
        if e.op in ("mul", "floordiv", "mod") and a[0].same_as(a[1]) and b[0].same_as(b[1]):
            # one value: a fused loop held fixed makes its parts (fused // e, fused % e) points
            point = BinOp(e.op, a[0], b[0], e.dtype)
            return point, point
        if e.op == "mod" and cb is not None and cb > 0:
            return sconst(0), sconst(cb - 1)
    raise ScheduleError(f"bounds inference cannot bound the index expression {e}")


Box = list[Interval | None]  # per dimension (lo, hi) inclusive, None where nothing is read


def read_box(producer: str, exprs: list[Expr], ranges: dict[str, Interval], rank: int,
             domain: tuple[tuple[Expr, Expr], ...]) -> Box:
    """The box of ``producer`` that ``exprs`` read while the Vars in ``ranges`` vary (reads
    through a boundary condition are clamped into ``domain`` first)."""
    box: Box = [None] * rank
    for e in exprs:
        for a in walk(e):
            if not isinstance(a, Access) or a.name != producer:
                continue
            for d, ix in enumerate(a.indices):
                dmin, dext = domain[d]
                try:
                    lo, hi = interval(ix, ranges)
                except ScheduleError:
                    # a gather (an index read from data) or an index interval arithmetic cannot
                    # bound: anywhere in the domain (every read was proven inside it)
                    lo, hi = dmin, ssub(sadd(dmin, dext), sconst(1))
                if a.boundary is not None:
                    dmin, dext = domain[d]
                    dhi = ssub(sadd(dmin, dext), sconst(1))
                    if a.boundary.kind in FOLDING_BOUNDARIES:  # lands anywhere in the domain
                        lo, hi = dmin, dhi
                    else:
                        lo, hi = smin(smax(lo, dmin), dhi), smin(smax(hi, dmin), dhi)
                cur = box[d]
                box[d] = (lo, hi) if cur is None else (smin(cur[0], lo), smax(cur[1], hi))
    return box


def union_box(a: Box, b: Box) -> Box:
    """The smallest box containing ``a`` and ``b``."""
    out: Box = []
    for x, y in zip(a, b):
        if x is None or y is None:
            out.append(x if y is None else y)
        else:
            out.append((smin(x[0], y[0]), smax(x[1], y[1])))
    return out


def clip_box(box: Box, domain: tuple[tuple[Expr, Expr], ...]) -> tuple[tuple[Expr, Expr], ...]:
    """``(min, extent)`` per dimension of ``box`` clipped to ``domain`` (the whole domain where
    the box is unknown)."""
    out = []
    for b, (dmin, dext) in zip(box, domain):
        if b is None:
            out.append((dmin, dext))
            continue
        dhi = ssub(sadd(dmin, dext), sconst(1))
        lo, hi = smax(b[0], dmin), smin(b[1], dhi)
        out.append((lo, sadd(ssub(hi, lo), sconst(1))))
    return tuple(out)


def box_extents(box: Box) -> list[Expr | None]:
    """Unclipped extent of each dimension (an upper bound of the clipped one)."""
    return [None if b is None else sadd(ssub(b[1], b[0]), sconst(1)) for b in box]


def simplify_in_ranges(e: Expr, ranges: dict[str, Interval]) -> Expr:
    """Drop ``max``/``min`` operands that the ranges of the enclosing loops decide: with ``i`` in
    ``[0, R - 1]``, ``max(i, 0)`` is ``i`` and ``min(i, R - 1)`` is ``i`` (Halide's simplifier
    with loop bounds, in miniature)."""
    def go(n: Expr) -> Expr:
        n = map_children(n, go)
        if isinstance(n, BinOp) and n.op in ("max", "min") and n.dtype.is_int:
            try:
                dlo, dhi = interval(ssub(n.a, n.b), ranges)
            except ScheduleError:
                return n
            lo, hi = const_value(dlo), const_value(dhi)
            if lo is not None and lo >= 0:
                return n.a if n.op == "max" else n.b
            if hi is not None and hi <= 0:
                return n.b if n.op == "max" else n.a
        return n

    return go(e)
