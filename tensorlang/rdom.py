"""Reduction domains: ``tl.RDom((lo, hi), ...)`` and its reduction variables (RVars).

An RDom is a box of half-open ranges, like ``range``; its dimensions are ``r.x, r.y, r.z, r.w`` (or
``r[0], r[1], ...``). A one-dimensional RDom is itself usable as an index (``F[r] = F[r - 1] + X[r]``).
Bounds may be ints or affine expressions of sizes. An update definition iterates its RDom in
lexicographic order with the *first* dimension innermost, as in Halide; it iterates the *whole*
RDom even where some of its dimensions are not used (``r.z`` of ``tl.RDom((1, N), (0, T))`` counts
repetitions: ``F[r.x] = ...`` over that RDom runs ``T`` sweeps), and so does a reduction.

``r.where(cond)`` restricts the RDom to the points where ``cond`` holds (Halide's
``RDom::where``): a triangle is ``tl.RDom((0, N), (0, N)).where(r.x <= r.y)``. Lowering turns each
affine comparison into a bound of the innermost loop it mentions (the loops run only the points
inside) and anything else into an ``if`` around the body; dependence analysis states affine
conditions to isl exactly (isl manual, "Sets and Relations").

See also: Halide ``RDom``/``RVar``; TVM ``te.reduce_axis``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .affine import NonAffine, affine_form, sadd, sconst, ssub
from .dtypes import int64
from .errors import DefinitionError
from .expr import Access, BinOp, Expr, Reduce, Var, as_expr, walk

_DIMS = "xyzw"


@dataclass(frozen=True, eq=False, repr=False)
class RVar(Var):
    """A reduction variable: a Var with an explicit range ``[min, min + extent)``."""

    min: Expr = field(default_factory=lambda: sconst(0))
    extent: Expr = field(default_factory=lambda: sconst(0))
    dim: int = field(default=0, compare=False)  # position in its RDom (0 = innermost loop)

    @property
    def domain(self) -> tuple[RVar, ...]:
        """Every variable of this RVar's RDom, first dimension first (just itself when built
        alone). A definition that uses one RVar iterates the whole RDom, as in Halide."""
        return getattr(self, "_domain", (self,))

    @property
    def predicates(self) -> tuple[Expr, ...]:
        """The conditions ``where`` put on this RVar's RDom (empty: the whole box)."""
        rdom = getattr(self, "_rdom", None)
        return () if rdom is None else tuple(rdom.predicates)

    def mark_used(self) -> None:
        """Record that a definition iterates this RVar's RDom (``where`` is refused after)."""
        rdom = getattr(self, "_rdom", None)
        if rdom is not None:
            rdom.used = True


def _bound(v: Any, what: str) -> Expr:
    e = as_expr(v)
    if not e.dtype.is_int:
        raise DefinitionError(f"RDom {what} must be an integer, got {e}")
    try:
        affine_form(e)
    except NonAffine as exc:
        raise DefinitionError(f"RDom {what} ({e}) must be affine in sizes: {exc}") from None
    if any(isinstance(n, Var) for n in walk(e)):
        raise DefinitionError(f"RDom {what} ({e}) may use sizes and constants, not Vars")
    return e if e.dtype is int64 else sconst(int(e.value))  # type: ignore[attr-defined]


class RDom:
    """A reduction domain: ``tl.RDom((lo0, hi0), (lo1, hi1), ..., name="r")``.

    Its variables are named ``<name>_x``, ``<name>_y``, ... (these are also their loop names in a
    schedule). Each pair is a half-open range ``[lo, hi)`` of ints or size expressions (``(1, N)``). A single
    range may be given bare: ``tl.RDom((1, N))``.

    Raises:
        DefinitionError: no range, a range that is not a pair, a non-affine or Var-dependent bound.
    """

    def __init__(self, *ranges: Any, name: str | None = None) -> None:
        if len(ranges) == 1 and isinstance(ranges[0], list):
            ranges = tuple(ranges[0])
        if not ranges:
            raise DefinitionError("an RDom needs at least one (lo, hi) range")
        # a deterministic default (loop names in traces must not depend on creation order);
        # two different RDoms in one definition need distinct names (checked there)
        self.name = name or "r"
        dims = []
        for d, rg in enumerate(ranges):
            if not (isinstance(rg, tuple) and len(rg) == 2):
                raise DefinitionError(f"RDom dimension {d}: expected a (lo, hi) pair, got {rg!r}")
            lo, hi = _bound(rg[0], f"dimension {d} lower bound"), _bound(rg[1], f"dimension "
                                                                                f"{d} upper bound")
            suffix = _DIMS[d] if d < len(_DIMS) else str(d)
            dims.append(RVar(f"{self.name}_{suffix}", lo, ssub(hi, lo), d))
        self.dims: tuple[RVar, ...] = tuple(dims)
        self.predicates: list[Expr] = []
        self.used = False
        for r in dims:  # frozen dataclass: set the back-references after construction
            object.__setattr__(r, "_domain", self.dims)
            object.__setattr__(r, "_rdom", self)

    def where(self, condition: Any) -> RDom:
        """Restrict this RDom to the points where ``condition`` holds; returns the RDom itself
        (Halide's ``RDom::where``), so conditions chain: ``r.where(r.x <= r.y).where(...)``.

        ``condition`` is a boolean expression of this RDom's variables, sizes, constants and the
        pure Vars of the definitions that use the RDom; ``&`` of several comparisons is kept as
        separate conditions. A reduction over an empty restriction gives the reducer's identity;
        an update runs nothing there.

        Raises:
            DefinitionError: a condition that is not boolean, reads an array or Func, holds a
                reducer, uses another RDom's variables, or is added after a definition already
                uses this RDom (call ``where`` first).
        """
        if self.used:
            raise DefinitionError(
                f"RDom {self.name}.where(...) after a definition already iterates {self.name}; "
                f"restrict the RDom before using it (the definitions made so far would not see "
                f"the condition)")
        e = as_expr(condition)
        if not e.dtype.is_bool:
            raise DefinitionError(f"RDom {self.name}.where({e}): the condition has type "
                                  f"{e.dtype}; give a comparison such as {self.x.name} <= ...")
        mine = {r.name for r in self.dims}
        for n in walk(e):
            if isinstance(n, Access):
                raise DefinitionError(
                    f"RDom {self.name}.where({e}) reads {n.name}; a condition of an RDom may use "
                    f"its variables, pure Vars and sizes only (select on the value with "
                    f"tl.where instead)")
            if isinstance(n, Reduce):
                raise DefinitionError(f"RDom {self.name}.where({e}) holds a reducer; compute it "
                                      f"as a Func first")
            if isinstance(n, RVar) and n.name not in mine:
                raise DefinitionError(
                    f"RDom {self.name}.where({e}) uses {n.name}, a variable of another RDom; "
                    f"a condition may use {', '.join(sorted(mine))}, pure Vars and sizes")
        self.predicates.extend(_conjuncts(e))
        return self

    def __len__(self) -> int:
        return len(self.dims)

    def __getitem__(self, d: int) -> RVar:
        return self.dims[d]

    @property
    def x(self) -> RVar:
        return self.dims[0]

    @property
    def y(self) -> RVar:
        return self.dims[1]

    @property
    def z(self) -> RVar:
        return self.dims[2]

    @property
    def w(self) -> RVar:
        return self.dims[3]

    def as_index(self) -> RVar:
        if len(self.dims) != 1:
            raise DefinitionError(f"RDom {self.name} has {len(self.dims)} dimensions; index with "
                                  f"{self.name}.x, {self.name}.y, ...")
        return self.dims[0]

    # a one-dimensional RDom is usable as an index expression
    def __add__(self, o: Any) -> Expr:
        return self.as_index() + o

    def __radd__(self, o: Any) -> Expr:
        return o + self.as_index()

    def __sub__(self, o: Any) -> Expr:
        return self.as_index() - o

    def __rsub__(self, o: Any) -> Expr:
        return o - self.as_index()

    def __mul__(self, o: Any) -> Expr:
        return self.as_index() * o

    def __rmul__(self, o: Any) -> Expr:
        return o * self.as_index()

    def __neg__(self) -> Expr:
        return -self.as_index()

    def __repr__(self) -> str:
        rs = ", ".join(f"[{d.min}, {sadd(d.min, d.extent)})" for d in self.dims)
        return f"RDom({self.name}: {rs})"


def _conjuncts(e: Expr) -> list[Expr]:
    """``a & b & c`` as ``[a, b, c]`` (each becomes its own loop bound or guard)."""
    if isinstance(e, BinOp) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def as_index(x: Any) -> Any:
    """RDoms used directly as indices mean their single RVar."""
    return x.as_index() if isinstance(x, RDom) else x

