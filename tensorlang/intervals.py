"""Concrete ranges of integer index expressions, for proving reads in bounds when sizes are known.

An affine index is exact (``Pipeline.bind`` uses its affine form); any other index — ``x // 2``,
``x % 8``, ``tl.clamp(..)``, ``tl.where(..)``, or a value read from an array (a *gather*,
``L[I[y, x]]``) — is bounded by interval arithmetic over the ranges of its Vars, a read of data
taking every value of its dtype (a uint8 index lies in ``[0, 255]``, so it is proven in bounds of
a 256-entry table). Over-approximate: a read it cannot prove inside its array is refused when the
kernel is called, never run out of bounds.

See also: Halide ``src/Bounds.cpp`` (interval arithmetic on expressions); Cousot and Cousot,
"Abstract interpretation" (POPL 1977), the interval domain.
"""

from __future__ import annotations

import math

import numpy as np

from .expr import Access, BinOp, Cast, Const, Expr, Select, Size, Var

Interval = tuple[int, int]  # inclusive


def dtype_range(dtype) -> Interval | None:
    """Every value of an integer or bool dtype, None for floats."""
    if dtype.is_bool:
        return 0, 1
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        return int(info.min), int(info.max)
    return None


def value_range(e: Expr, ranges: dict[str, Interval], sizes: dict[str, int]) -> Interval | None:
    """Inclusive ``(lo, hi)`` of integer expression ``e`` while each Var ranges over ``ranges``
    (Python ints, exact); None when this analysis cannot bound it (a float converted to an
    integer, a division by a non-constant)."""
    if isinstance(e, Const):
        v = int(e.value)
        return v, v
    if isinstance(e, Var):
        return ranges.get(e.name)
    if isinstance(e, Size):
        return sizes[e.name], sizes[e.name]
    if isinstance(e, Access):  # a read of data: any value of its type
        return dtype_range(e.dtype)
    if isinstance(e, Cast):
        if not e.value.dtype.is_int and not e.value.dtype.is_bool:
            # float -> int truncates toward zero and saturates at the type's limits (NaN -> 0)
            full = dtype_range(e.dtype)
            f = _float_range(e.value, ranges, sizes)
            if f is None or full is None:
                return full
            lo, hi = max(math.trunc(f[0]), full[0]), min(math.trunc(f[1]), full[1])
            return min(lo, 0), max(hi, 0)  # (a NaN, which tl.clamp keeps, converts to 0)
        inner = value_range(e.value, ranges, sizes)
        full = dtype_range(e.dtype)
        if inner is None or full is None:
            return full
        # a narrowing cast wraps: the inner range stays only where it fits the target type
        return inner if full[0] <= inner[0] and inner[1] <= full[1] else full
    if isinstance(e, Select):
        a, b = value_range(e.t, ranges, sizes), value_range(e.f, ranges, sizes)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if isinstance(e, BinOp) and e.dtype.is_int:
        a, b = value_range(e.a, ranges, sizes), value_range(e.b, ranges, sizes)
        if a is None or b is None:
            return None
        if e.op == "add":
            return a[0] + b[0], a[1] + b[1]
        if e.op == "sub":
            return a[0] - b[1], a[1] - b[0]
        if e.op == "mul":
            p = [x * y for x in a for y in b]
            return min(p), max(p)
        if e.op == "max":
            return max(a[0], b[0]), max(a[1], b[1])
        if e.op == "min":
            return min(a[0], b[0]), min(a[1], b[1])
        if e.op in ("floordiv", "mod") and b[0] == b[1] and b[0] > 0:
            c = b[0]
            if e.op == "floordiv":
                return a[0] // c, a[1] // c
            if a[1] - a[0] + 1 >= c or a[0] // c != a[1] // c:
                return 0, c - 1
            return a[0] % c, a[1] % c
    return None


def _float_range(e: Expr, ranges: dict[str, Interval], sizes: dict[str, int]
                 ) -> tuple[float, float] | None:
    """Finite ``(lo, hi)`` of a float expression, from constants, clamps (``tl.clamp``,
    ``minimum``/``maximum`` with a bounded side), selects and integer conversions; None when
    unbounded (what a ``tl.clamp(Y, 0.0, 255.0)`` before a cast to an index bounds)."""
    inf = float("inf")

    def go(n: Expr) -> tuple[float, float]:
        if isinstance(n, Const):
            return float(n.value), float(n.value)
        if isinstance(n, Cast) and (n.value.dtype.is_int or n.value.dtype.is_bool):
            r = value_range(n.value, ranges, sizes)
            return (-inf, inf) if r is None else (float(r[0]), float(r[1]))
        if isinstance(n, Cast):
            return go(n.value)
        if isinstance(n, Select):
            (a0, a1), (b0, b1) = go(n.t), go(n.f)
            return min(a0, b0), max(a1, b1)
        if isinstance(n, BinOp) and n.op in ("max", "min", "add", "sub", "mul", "div"):
            (a0, a1), (b0, b1) = go(n.a), go(n.b)
            if n.op == "max":
                return max(a0, b0), max(a1, b1)
            if n.op == "min":
                return min(a0, b0), min(a1, b1)
            if not all(math.isfinite(v) for v in (a0, a1, b0, b1)):
                return -inf, inf
            if n.op == "add":
                return a0 + b0, a1 + b1
            if n.op == "sub":
                return a0 - b1, a1 - b0
            if n.op == "div" and not b0 <= 0 <= b1:
                p = [a0 / b0, a0 / b1, a1 / b0, a1 / b1]
                return min(p), max(p)
            if n.op == "mul":
                p = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
                return min(p), max(p)
        return -inf, inf

    lo, hi = go(e)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    # float32 arithmetic rounds: widen by more than its error so the truncation stays sound
    return lo - abs(lo) * 1e-5 - 1e-5, hi + abs(hi) * 1e-5 + 1e-5
