"""The flat offset of a multi-dimensional access, a fused loop's index put back together.

A loop fused from several (``fuse``) and split again (``split``: a copy's elements spread over
a block's threads) gives each dimension of an access its share of the fused index ``q`` by
floor division and modulo: copying a 64 x 8 x 3 x 3 tile reads ``W[q // 72, (q // 9) % 8,
(q // 3) % 3, q % 3]``. The row-major offset of that access, ``sum((i_d - m_d) * stride_d)``,
then holds ``((q // 9) % 8) * 9 + ((q // 3) % 3) * 3 + q % 3``, which is ``q % 72``: one
division where it took one or two a dimension (and LLVM cannot see it). ``flat_offset``
expands the offset into a sum of terms with integer coefficients (one sum per product of
symbolic strides), then applies, with floor division and positive constants ``a``, ``b``,
``c``,

- ``x // a // b = x // (a * b)``,
- ``((x // c) % a) * c + x % c = x % (a * c)`` and ``(x // c) * c + x % c = x`` (each times
  the same factor),

until none applies, and cancels equal terms of opposite sign (an index's tile start and the
buffer's minimum). Both identities hold for every integer ``x``: with ``x = Q * a * c + R``,
``0 <= R < a * c``, ``(x // c) % a = R // c`` and ``x % c = R % c``. Halide's simplifier has the
same rules (``Simplify_Add.cpp``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Const, Expr, map_children, walk

from .simplify import simplify_expr


@dataclass(eq=False)
class _Term:
    atom: Expr | None  # None: the constant term
    coeff: int


def flat_offset(indices: tuple[Expr, ...], mins: tuple[Expr, ...],
                extents: tuple[Expr, ...]) -> Expr | None:
    """The row-major offset of ``indices`` into a buffer of these ``mins`` and ``extents``
    (int64 Exprs, outermost dimension first), fused indices recombined (module docstring);
    None where no index divides by a constant (nothing to recombine: the caller's own form is
    as good)."""
    if not any(isinstance(n, BinOp) and n.op in ("floordiv", "mod") and isinstance(n.b, Const)
               for ix in indices for n in walk(ix)):
        return None
    groups: dict[tuple, tuple[Expr | None, list[_Term]]] = {}
    sym: Expr | None = None  # the symbolic part of the stride, and its constant part
    k = 1
    for d in range(len(indices) - 1, -1, -1):
        key = None if sym is None else sym.key
        terms = groups.setdefault(key, (sym, []))[1]
        for sign, e in ((1, indices[d]), (-1, mins[d])):
            for s, t in _signed_terms(simplify_expr(e)):
                _add(terms, t, sign * s * k)
        extent = simplify_expr(extents[d])
        if isinstance(extent, Const):
            k *= int(extent.value)
        else:
            sym = extent if sym is None else BinOp("mul", sym, extent, int64)
    out: Expr = Const(0, int64)
    for s, terms in groups.values():
        _recombine(terms)
        part = _sum(terms)
        out = BinOp("add", out, part if s is None else BinOp("mul", s, part, int64), int64)
    return simplify_expr(out)


def _merge_divisions(e: Expr) -> Expr:
    """``x // a // b`` as ``x // (a * b)`` (positive constants), everywhere in ``e``."""

    def go(n: Expr) -> Expr:
        n = map_children(n, go)
        if isinstance(n, BinOp) and n.op == "floordiv" and isinstance(n.b, Const) \
                and n.b.value > 0 and isinstance(n.a, BinOp) and n.a.op == "floordiv" \
                and isinstance(n.a.b, Const) and n.a.b.value > 0:
            return BinOp("floordiv", n.a.a, Const(int(n.a.b.value) * int(n.b.value), int64),
                         int64)
        return n

    return go(e)


def _signed_terms(e: Expr) -> list[tuple[int, Expr]]:
    """``e`` as a signed sum: each term with its integer factor taken out."""
    if isinstance(e, BinOp) and e.op in ("add", "sub") and e.dtype is int64:
        right = _signed_terms(e.b)
        return [*_signed_terms(e.a),
                *(right if e.op == "add" else [(-s, t) for s, t in right])]
    if isinstance(e, BinOp) and e.op == "mul" and e.dtype is int64:
        for c, other in ((e.a, e.b), (e.b, e.a)):
            if isinstance(c, Const):
                return [(s * int(c.value), t) for s, t in _signed_terms(other)]
    if isinstance(e, Const):
        return [(int(e.value), Const(1, int64))]
    return [(1, _merge_divisions(e))]


def _add(terms: list[_Term], atom: Expr, coeff: int) -> None:
    if isinstance(atom, Const):
        coeff, atom = coeff * int(atom.value), None
    for t in terms:
        if (t.atom is None and atom is None) or (t.atom is not None and atom is not None
                                                 and t.atom.same_as(atom)):
            t.coeff += coeff
            return
    terms.append(_Term(atom, coeff))


def _by_constant(e: Expr | None, op: str) -> tuple[Expr, int] | None:
    if isinstance(e, BinOp) and e.op == op and isinstance(e.b, Const) and e.b.value > 0:
        return e.a, int(e.b.value)
    return None


def _recombine(terms: list[_Term]) -> None:
    """Apply the module's identities to ``terms`` (in place) until none applies."""
    changed = True
    while changed:
        changed = False
        for low in terms:
            mod = _by_constant(low.atom, "mod")
            if mod is None or low.coeff == 0:
                continue
            x, c = mod
            for high in terms:
                if high is low or high.coeff != low.coeff * c:
                    continue
                outer = _by_constant(high.atom, "mod")
                div = _by_constant(outer[0] if outer else high.atom, "floordiv")
                if div is None or div[1] != c or not div[0].same_as(x):
                    continue
                terms.remove(high)
                terms.remove(low)
                new = x if outer is None else BinOp("mod", x, Const(outer[1] * c, int64), int64)
                for sign, t in _signed_terms(new):
                    _add(terms, t, sign * low.coeff)
                changed = True
                break
            if changed:
                break


def _sum(terms: list[_Term]) -> Expr:
    out: Expr = Const(0, int64)
    for t in terms:
        if t.coeff == 0:
            continue
        v: Expr = Const(t.coeff, int64) if t.atom is None else \
            t.atom if t.coeff == 1 else BinOp("mul", t.atom, Const(t.coeff, int64), int64)
        out = BinOp("add", out, v, int64)
    return out
