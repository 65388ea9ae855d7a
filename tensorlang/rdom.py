"""Reduction domains: ``tl.RDom((lo, hi), ...)`` and its reduction variables (RVars).

An RDom is a box of half-open ranges, like ``range``; its dimensions are ``r.x, r.y, r.z, r.w`` (or
``r[0], r[1], ...``). A one-dimensional RDom is itself usable as an index (``F[r] = F[r - 1] + X[r]``).
Bounds may be ints or affine expressions of sizes. An update definition iterates its RDom in
lexicographic order with the *first* dimension innermost, as in Halide; it iterates the *whole*
RDom even where some of its dimensions are not used (``r.z`` of ``tl.RDom((1, N), (0, T))`` counts
repetitions: ``F[r.x] = ...`` over that RDom runs ``T`` sweeps), and so does a reduction.

See also: Halide ``RDom``/``RVar``; TVM ``te.reduce_axis``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .affine import NonAffine, affine_form, sadd, sconst, ssub
from .dtypes import int64
from .errors import DefinitionError
from .expr import Expr, Var, as_expr, walk

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
        for r in dims:  # frozen dataclass: set the back-reference after construction
            object.__setattr__(r, "_domain", self.dims)

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


def as_index(x: Any) -> Any:
    """RDoms used directly as indices mean their single RVar."""
    return x.as_index() if isinstance(x, RDom) else x

