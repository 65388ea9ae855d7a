"""Bounds inference: interval arithmetic on index expressions, and the region a consumer reads.

``interval(e, ranges)`` gives symbolic ``(lo, hi)`` (inclusive) of integer expression ``e`` when the
Vars in ``ranges`` vary over their ranges and every other Var is held fixed. ``required_region``
applies it to every read of a producer in a consumer's loop nest below one loop: the box of the
producer that one iteration of that loop needs, clipped to the producer's domain.

See also: Halide ``src/Bounds.cpp`` (boxes_required), the Halide PLDI 2013 paper §4.2.
"""

from __future__ import annotations

from tensorlang.affine import sadd, sconst, sfloordiv, smax, smin, smul, ssub, const_value
from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, BinOp, Cast, Const, Expr, Select, Size, Var, walk

Interval = tuple[Expr, Expr]


def interval(e: Expr, ranges: dict[str, Interval]) -> Interval:
    """Inclusive symbolic bounds of integer expression ``e``.

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
        if e.op == "mod" and cb is not None and cb > 0:
            return sconst(0), sconst(cb - 1)
    raise ScheduleError(f"bounds inference cannot bound the index expression {e}")


def required_region(producer: str, exprs: list[Expr], ranges: dict[str, Interval],
                    domain: tuple[tuple[Expr, Expr], ...]
                    ) -> tuple[tuple[Expr, Expr], ...]:
    """The box of ``producer`` read by ``exprs`` (consumer expressions, loop Vars in ``ranges``
    varying) as ``(min, extent)`` per dimension, clipped to the producer's ``domain``.

    Returns the producer's whole domain for a dimension no read touches.
    """
    reads = [n for e in exprs for n in walk(e) if isinstance(n, Access) and n.name == producer]
    out = []
    for d, (dmin, dext) in enumerate(domain):
        lo: Expr | None = None
        hi: Expr | None = None
        dhi = ssub(sadd(dmin, dext), sconst(1))
        for a in reads:
            ilo, ihi = interval(a.indices[d], ranges)
            if a.boundary is not None:  # the read is clamped into the domain
                ilo, ihi = smin(smax(ilo, dmin), dhi), smin(smax(ihi, dmin), dhi)
            lo = ilo if lo is None else smin(lo, ilo)
            hi = ihi if hi is None else smax(hi, ihi)
        if lo is None or hi is None:
            out.append((dmin, dext))
            continue
        clo, chi = smax(lo, dmin), smin(hi, dhi)
        out.append((clo, sadd(ssub(chi, clo), sconst(1))))
    return tuple(out)


def unclipped_extent(producer: str, exprs: list[Expr], ranges: dict[str, Interval],
                     dim: int) -> Expr | None:
    """The extent of the box read in dimension ``dim`` before clipping (None if no read)."""
    lo: Expr | None = None
    hi: Expr | None = None
    for e in exprs:
        for a in walk(e):
            if isinstance(a, Access) and a.name == producer:
                ilo, ihi = interval(a.indices[dim], ranges)
                lo = ilo if lo is None else smin(lo, ilo)
                hi = ihi if hi is None else smax(hi, ihi)
    if lo is None or hi is None:
        return None
    return sadd(ssub(hi, lo), sconst(1))
