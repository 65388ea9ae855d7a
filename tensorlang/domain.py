"""Domain inference: the range of every Var of a definition, from the reads it makes.

"Valid" semantics, as in a valid convolution: each Var ranges over exactly the values for which every
bounded read stays inside the array (or Func) it reads. A read through a boundary condition
(``tl.clamp_edge``, ``tl.constant_exterior``) bounds nothing. Ranges are symbolic in the sizes.

Order of inference (deterministic): a Var is resolved in the first round in which some read bounds it
with all its other Vars already resolved; within a round every such read is intersected. Pure Vars are
then tightened so that multi-Var reads (``In[x + r]``) stay in bounds for the *whole* range of the
other Vars. Whatever this leaves out is still checked at call time with concrete sizes, so a read can
never go out of bounds silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from .affine import Affine, const_value, sadd, sceildiv, sconst, sfloordiv, smax, smin, smul, ssub
from .errors import DefinitionError
from .expr import Access, Expr


@dataclass(frozen=True)
class Constraint:
    """Read ``access`` keeps index ``dim`` (affine ``form``) within ``[lo, hi]`` (inclusive)."""

    access: Access
    dim: int
    form: Affine
    lo: Expr
    hi: Expr


Range = tuple[Expr, Expr]  # inclusive (lo, hi), size expressions


def _rest_bounds(form: Affine, var: str, known: dict[str, Range]) -> Range:
    rest = form.drop(var)
    lo = hi = rest.param_part().to_expr()
    for u, c in rest.coeffs:
        ulo, uhi = known[u]
        lo = sadd(lo, smul(ulo if c > 0 else uhi, c))
        hi = sadd(hi, smul(uhi if c > 0 else ulo, c))
    return lo, hi


def _bound(var: str, c: Constraint, known: dict[str, Range]) -> Range:
    a = c.form.coeff(var)
    rmin, rmax = _rest_bounds(c.form, var, known)
    if a > 0:
        return sceildiv(ssub(c.lo, rmin), a), sfloordiv(ssub(c.hi, rmax), a)
    b = -a
    return sceildiv(ssub(rmax, c.hi), b), sfloordiv(ssub(rmin, c.lo), b)


def _intersect(r1: Range | None, r2: Range) -> Range:
    if r1 is None:
        return r2
    return smax(r1[0], r2[0]), smin(r1[1], r2[1])


def infer_ranges(
    func: str,
    lhs: str,
    pure: list[str],
    rvars: list[str],
    constraints: list[Constraint],
    shape: tuple[Expr, ...] | None,
    fixed: dict[str, Range] | None = None,
) -> dict[str, Range]:
    """Infer the inclusive range of each pure and reduction Var.

    Args:
        func: the Func's name (for messages); lhs: the printed left side, e.g. ``C[i, j]``.
        pure: the pure Vars (left side), rvars: the reduction Vars, by name.
        constraints: one per bounded read and index dimension.
        shape: the Func's declared shape, which fixes the pure ranges to ``[0, shape)``.
        fixed: Vars whose range is given (RVars of an explicit RDom).

    Raises:
        DefinitionError: a Var no read bounds, or a range that is empty for every size.
    """
    known: dict[str, Range] = dict(fixed or {})
    if shape is not None:
        for v, s in zip(pure, shape):
            known[v] = (sconst(0), ssub(s, sconst(1)))
    unknown = [v for v in rvars + pure if v not in known]
    while unknown:
        snapshot = set(known)
        found: dict[str, Range] = {}
        for v in unknown:
            r: Range | None = None
            for c in constraints:
                if c.form.coeff(v) and all(u == v or u in snapshot for u in c.form.vars):
                    r = _intersect(r, _bound(v, c, known))
            if r is not None:
                found[v] = r
        if not found:
            v = unknown[0]
            kind = "reduction variable" if v in rvars else "variable"
            fix = (f"give {func} a shape=(...)" if v not in rvars else
                   f"read an array with {v} alone in an index so that it bounds {v}")
            raise DefinitionError(
                f"In definition of {func}: cannot infer the range of {kind} {v} in {lhs}: no read "
                f"of an array or Func bounds it (reads through boundary conditions, and indices "
                f"other than affine ones and their // by a constant, bound nothing); "
                f"{fix}")
        known.update(found)
        unknown = [v for v in unknown if v not in found]
    if shape is None:
        for c in constraints:
            if len(c.form.vars) < 2:
                continue
            for v in c.form.vars:
                if v in pure:
                    known[v] = _intersect(known[v], _bound(v, c, known))
    for v in pure + [r for r in rvars if r not in (fixed or {})]:
        lo, hi = known[v]
        ext = const_value(sadd(ssub(hi, lo), sconst(1)))
        if ext is not None and ext <= 0:
            raise DefinitionError(
                f"In definition of {func}: the inferred range of {v} in {lhs} is empty "
                f"([{lo}, {hi}]): its reads cannot all stay in bounds; check the index offsets "
                f"or use tl.clamp_edge / tl.constant_exterior")
    return known
