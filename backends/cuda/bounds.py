"""Constant upper bounds of the integer expressions a launch needs as constants: a thread
loop's extent in a cooperative kernel (the block's size), a shared buffer's size, a thread's
own buffer's index (``private.py``); and the ``let`` values inlined into them. Also the
clamps a boundary condition's read need not keep on a GPU (``unclamped_load``)."""

from __future__ import annotations

from tensorlang.affine import const_value, sadd, smul, ssub
from tensorlang.dtypes import DType, int64
from tensorlang.expr import BinOp, Cmp, Const, Expr, Select, Var, substitute, walk
from tensorlang.schedule.ir import Load


def inline_lets(e: Expr, lets: dict[str, Expr]) -> Expr:
    """``e`` with the ``let`` variables ``lets`` names replaced by their values (those
    values' own ``let`` variables too)."""
    for _ in range(len(lets) + 1):
        names = {n.name for n in walk(e) if isinstance(n, Var)} & set(lets)
        if not names:
            return e
        e = substitute(e, {n: lets[n] for n in names})
    return e


def upper_bound(e: Expr) -> int | None:
    """A constant ``c >= e`` for every value of its variables, or None where none was found:
    ``e`` with its additions moved below its ``min`` and ``max`` (:func:`_push_sums`) is a tree
    of them over affine leaves; a leaf that folds to a constant bounds itself, ``min`` is
    bounded by either side, ``max`` by both. This finds the tile size in the extents that
    splits and bounds inference write (``min(factor, extent - factor * outer)``,
    ``min(16 o + 15, M - 1) - 16 o + 1``), and a floor division by a positive constant is
    bounded by its dividend's bound divided (a split tile's count, ``(min(16 o + 15, M - 1) +
    2) // 2 - 8 o``); so is a product with a positive constant, and a sum by its terms' bounds
    (a padded extent, ``storage_align``'s ``(e + 27) // 32 * 32 + 4``).

    >>> from tensorlang import minimum
    >>> from tensorlang.expr import Size, Var
    >>> o, m = Var("o"), Size("M")
    >>> upper_bound((minimum(16 * o + 15, m - 1) + 2) // 2 - 8 * o)
    8
    """
    return _bound(_push_sums(e))


def _bound(e: Expr) -> int | None:
    c = const_value(e)
    if c is not None:
        return c
    if isinstance(e, BinOp) and e.op in ("min", "max"):
        a, b = _bound(e.a), _bound(e.b)
        if e.op == "min":
            return b if a is None else a if b is None else min(a, b)
        return None if a is None or b is None else max(a, b)
    c = _divisor(e)
    if c is not None:  # floor division by a positive constant is monotone
        a = _bound(e.a)  # type: ignore[attr-defined]
        return None if a is None else a // c
    c = _multiplier(e)
    if c is not None:  # so is a product with one (a padded extent: (e + 27) // 32 * 32 + 4)
        a = _bound(_multiplied(e))
        return None if a is None else a * c
    if isinstance(e, BinOp) and e.op == "add":
        a, b = _bound(e.a), _bound(e.b)
        return None if a is None or b is None else a + b
    return None


def _multiplier(e: Expr) -> int | None:
    """``c`` where ``e`` is ``x * c`` or ``c * x`` for a positive constant ``c``, else None."""
    if isinstance(e, BinOp) and e.op == "mul":
        for side in (e.b, e.a):
            c = const_value(side)
            if c is not None and c > 0:
                return c
    return None


def _multiplied(e: BinOp) -> Expr:
    """``x`` of a product ``x * c`` or ``c * x`` (``_multiplier``)."""
    return e.a if const_value(e.b) is not None and const_value(e.b) > 0 else e.b


def _divisor(e: Expr) -> int | None:
    """``c`` where ``e`` is ``x // c`` for a positive constant ``c``, else None."""
    if isinstance(e, BinOp) and e.op == "floordiv":
        c = const_value(e.b)
        if c is not None and c > 0:
            return c
    return None


def _minmax(op: str, a: Expr, b: Expr) -> Expr:
    return BinOp(op, a, b, int64)


_FLIP = {"min": "max", "max": "min"}


def _push_sums(e: Expr, depth: int = 0) -> Expr:
    """``e`` with ``x + min(a, b)`` as ``min(x + a, x + b)``, ``x - min(a, b)`` as
    ``max(x - a, x - b)`` (and ``max`` alike), so sums of the same variables meet and cancel in
    the leaves (``sadd`` / ``ssub`` fold affine terms)."""
    if not isinstance(e, BinOp) or depth > 64:
        return e
    if e.op in ("min", "max"):
        return _minmax(e.op, _push_sums(e.a, depth + 1), _push_sums(e.b, depth + 1))
    if _divisor(e) is not None:
        return BinOp("floordiv", _push_sums(e.a, depth + 1), e.b, e.dtype)
    c = _multiplier(e)
    if c is not None:
        return BinOp("mul", _push_sums(_multiplied(e), depth + 1), Const(c, e.dtype), e.dtype)
    if e.op not in ("add", "sub"):
        return e
    a, b = _push_sums(e.a, depth + 1), _push_sums(e.b, depth + 1)
    # an integer sum moves into a floor division by c as c times itself: s + x // c is
    # (c s + x) // c, x // c - s is (x - c s) // c (a split's tile count: (extent + 1) // 2)
    c = _divisor(b) if e.op == "add" else None
    if c is not None and _divisor(a) is None:
        return _push_sums(BinOp("floordiv", sadd(smul(a, c), b.a), b.b, e.dtype),
                          depth + 1)
    c = _divisor(a)
    if c is not None and _divisor(b) is None:
        op = sadd if e.op == "add" else ssub
        return _push_sums(BinOp("floordiv", op(a.a, smul(b, c)), a.b, e.dtype),
                          depth + 1)
    if isinstance(a, BinOp) and a.op in ("min", "max"):
        op = sadd if e.op == "add" else ssub
        return _minmax(a.op, _push_sums(op(a.a, b), depth + 1),
                       _push_sums(op(a.b, b), depth + 1))
    if isinstance(b, BinOp) and b.op in ("min", "max"):
        if e.op == "add":
            return _minmax(b.op, _push_sums(sadd(a, b.a), depth + 1),
                           _push_sums(sadd(a, b.b), depth + 1))
        return _minmax(_FLIP[b.op], _push_sums(ssub(a, b.a), depth + 1),
                       _push_sums(ssub(a, b.b), depth + 1))
    return sadd(a, b) if e.op == "add" else ssub(a, b)


def unclamped_load(e: Select) -> Load | None:
    """The load of ``where(cond, In[clamp(x)], other)`` with its indices unclamped, where
    ``cond`` states that each clamped index lies inside its clamp: a boundary condition
    (``constant_exterior``) reads ``In[max(min(x, hi), lo)]`` under ``x >= lo and x <= hi``
    so that the read stays inside the buffer when the condition is false; a GPU loads only
    where it holds (a predicated load), so the clamps are work for nothing. None: ``e`` is not
    of that form (its true branch is no load, or no index is a clamp its condition states)."""
    t = e.t
    if not isinstance(t, Load):
        return None
    facts = conjuncts(e.cond)

    def stated(op: str, x: Expr, y: Expr) -> bool:
        return any(isinstance(c, Cmp) and c.op == op and c.a.same_as(x) and c.b.same_as(y)
                   for c in facts)

    indices, changed = [], False
    for ix in t.indices:
        if isinstance(ix, BinOp) and ix.op == "max" and isinstance(ix.a, BinOp) \
                and ix.a.op == "min":
            x, hi, lo = ix.a.a, ix.a.b, ix.b
            if stated("ge", x, lo) and stated("le", x, hi):
                indices.append(x)
                changed = True
                continue
        indices.append(ix)
    return Load(t.buffer, tuple(indices), t.dtype) if changed else None


def conjuncts(c: Expr) -> list[Expr]:
    """The operands of ``c``'s top-level ``and``s, in order."""
    if isinstance(c, BinOp) and c.op == "and" and c.dtype is DType.bool_:
        return conjuncts(c.a) + conjuncts(c.b)
    return [c]
