"""``tl.einsum``: NumPy's subscript notation, building a Func by the einsum rule."""

from __future__ import annotations

from typing import Any

from .errors import DefinitionError
from .expr import Expr, Var
from .func import BoundaryView, Func, Input


def einsum(subscripts: str, *operands: Input | Func | BoundaryView, name: str | None = None,
           dtype: Any = None) -> Func:
    """A Func computing ``numpy.einsum(subscripts, *operands)``.

    Accepts NumPy's explicit (``"ik,kj->ij"``) and implicit (``"ij,jk"``: the output is every
    index that appears once, in alphabetical order) forms, batch indices (``"bij,bjk->bik"``),
    repeated indices in one operand (diagonals: ``"ii->i"``), and scalar outputs (``"i,i->"``).
    Broadcasting ellipses (``...``) are not supported.

    Args:
        subscripts: the subscript string. operands: Inputs, Funcs or boundary views.
        name: the Func's name (default ``einsum_<subscripts>``, deterministic).
        dtype: optional result type; default the NumPy promotion of the operands' types.

    Returns:
        A defined Func of rank ``len(output subscripts)``; the product of the operands is summed
        over every index absent from the output.

    Raises:
        DefinitionError: malformed subscripts, a count or rank mismatch, an output index that is
            repeated or appears in no operand.
    """
    s = subscripts.replace(" ", "")
    if "..." in s:
        raise DefinitionError(f"einsum {subscripts!r}: broadcasting '...' is not supported; "
                              f"name every index")
    if "->" in s:
        lhs, out = s.split("->", 1)
    else:
        lhs = s
        letters = lhs.replace(",", "")
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise DefinitionError(f"einsum {subscripts!r} names {len(terms)} operands but "
                              f"{len(operands)} were given")
    for t in [*terms, out]:
        bad = [c for c in t if not c.isalpha()]
        if bad:
            raise DefinitionError(f"einsum {subscripts!r}: {bad[0]!r} is not a subscript letter")
    for t, op in zip(terms, operands):
        if not isinstance(op, (Input, Func, BoundaryView)):
            raise DefinitionError(f"einsum operands are Inputs or Funcs, not {type(op).__name__}")
        if op.rank != len(t):
            raise DefinitionError(f"einsum {subscripts!r}: operand {op.name} has rank {op.rank} "
                                  f"but subscripts {t!r} name {len(t)} indices")
    for c in out:
        if out.count(c) > 1:
            raise DefinitionError(f"einsum {subscripts!r}: output index {c!r} is repeated")
        if c not in lhs:
            raise DefinitionError(f"einsum {subscripts!r}: output index {c!r} appears in no "
                                  f"operand")
    v = {c: Var(c) for c in dict.fromkeys(lhs.replace(",", "") + out)}
    expr: Expr | None = None
    for t, op in zip(terms, operands):
        term = op[tuple(v[c] for c in t)]
        expr = term if expr is None else expr * term
    f = Func(name or f"einsum_{'_'.join(terms)}__{out or 'scalar'}", dtype=dtype)
    f[tuple(v[c] for c in out)] = expr
    return f
