"""Explicit reducers: ``tl.sum``, ``tl.prod``, ``tl.max``, ``tl.min``.

``F[i] = tl.max(A[i, k])`` reduces over ``k`` (free on the right, absent on the left). A reducer
nested in a larger expression is lifted into its own Func (see ``tensorlang.func``).
"""

from __future__ import annotations

from typing import Any, Callable

from .expr import REDUCE_OPS, Reduce, as_expr


def _reducer(op: str) -> Callable[[Any], Reduce]:
    def reduce(expr: Any) -> Reduce:
        e = as_expr(expr)
        return Reduce(op, e, e.dtype)

    reduce.__name__ = op
    reduce.__doc__ = (
        f"Reduce ``expr`` with {op} over its Vars that are absent from the left side of the "
        f"definition it appears in (the identity is used for an empty range).\n\n"
        f"NaN propagates through max/min as in NumPy. See also: Halide ``{op}`` inline reduction, "
        f"TVM ``te.{op}``.")
    return reduce


sum = _reducer("sum")  # noqa: A001
prod = _reducer("prod")
max = _reducer("max")  # noqa: A001
min = _reducer("min")  # noqa: A001
assert tuple(f.__name__ for f in (sum, prod, max, min)) == REDUCE_OPS
