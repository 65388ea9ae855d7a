"""Affine forms of index expressions and simplifying arithmetic on symbolic sizes.

An index is affine when it is ``sum(c_v * v) + sum(c_s * S) + c`` with integer constants ``c_*``,
Vars ``v`` and Sizes ``S``: exactly what an isl affine expression with the sizes as parameters can
say (isl manual, "Affine Expressions"). Extents and minima of domains are *size expressions*: Exprs
over Sizes built with the ``s*`` helpers below, which fold constants and cancel affine terms so that
printed bounds read like ``N - 2`` instead of ``(N - 1) - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dtypes import int64
from .expr import BinOp, Cast, Const, Expr, Size, Var


class NonAffine(Exception):
    """Raised by :func:`affine_form` with the reason an expression is not affine. The message
    is formatted only when read (callers mostly catch it, and printing a large expression on
    every probe made building big pipelines quadratic)."""

    def __init__(self, template: str, *exprs: object) -> None:
        super().__init__(template)
        self.template, self.exprs = template, exprs

    def __str__(self) -> str:
        return self.template.format(*self.exprs)


@dataclass(frozen=True)
class Affine:
    """``sum(coeffs[v] * v) + sum(params[s] * s) + const`` (sorted, zero terms dropped)."""

    coeffs: tuple[tuple[str, int], ...]
    params: tuple[tuple[str, int], ...]
    const: int

    @staticmethod
    def make(coeffs: dict[str, int], params: dict[str, int], const: int) -> Affine:
        return Affine(tuple(sorted((k, v) for k, v in coeffs.items() if v)),
                      tuple(sorted((k, v) for k, v in params.items() if v)), const)

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.coeffs)

    def coeff(self, var: str) -> int:
        return dict(self.coeffs).get(var, 0)

    def __add__(self, o: Affine) -> Affine:
        c, p = dict(self.coeffs), dict(self.params)
        for k, v in o.coeffs:
            c[k] = c.get(k, 0) + v
        for k, v in o.params:
            p[k] = p.get(k, 0) + v
        return Affine.make(c, p, self.const + o.const)

    def scale(self, f: int) -> Affine:
        return Affine.make({k: v * f for k, v in self.coeffs}, {k: v * f for k, v in self.params},
                           self.const * f)

    def drop(self, var: str) -> Affine:
        return Affine.make({k: v for k, v in self.coeffs if k != var}, dict(self.params),
                           self.const)

    def param_part(self) -> Affine:
        return Affine.make({}, dict(self.params), self.const)

    def to_expr(self) -> Expr:
        """An int64 expression equal to this form (Vars and Sizes rebuilt by name)."""
        terms: list[tuple[Expr, int]] = [(Var(k), v) for k, v in self.coeffs]
        terms += [(Size(k), v) for k, v in self.params]
        terms.sort(key=lambda t: t[1] < 0)  # positive terms first: N - 32 * j rather than 0 - ...
        out: Expr | None = None
        for node, c in terms:
            term = node if abs(c) == 1 else _mul(Const(abs(c), int64), node)
            if out is None:
                out = term if c > 0 else BinOp("sub", Const(0, int64), term, int64)
            else:
                out = BinOp("add" if c > 0 else "sub", out, term, int64)
        if out is None:
            return Const(self.const, int64)
        if self.const > 0:
            out = BinOp("add", out, Const(self.const, int64), int64)
        elif self.const < 0:
            out = BinOp("sub", out, Const(-self.const, int64), int64)
        return out


def _mul(a: Expr, b: Expr) -> Expr:
    return BinOp("mul", a, b, int64)


def affine_form(e: Expr) -> Affine:
    """The affine form of integer expression ``e``.

    Raises:
        NonAffine: with the reason (a product of two variables, a division, a data-dependent read).
    """
    if isinstance(e, Const):
        if not e.dtype.is_int:
            raise NonAffine("{} is not an integer", e)
        return Affine((), (), int(e.value))
    if isinstance(e, Var):
        return Affine(((e.name, 1),), (), 0)
    if isinstance(e, Size):
        return Affine((), ((e.name, 1),), 0)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return affine_form(e.value)
    if isinstance(e, BinOp) and e.dtype.is_int:
        if e.op == "add":
            return affine_form(e.a) + affine_form(e.b)
        if e.op == "sub":
            return affine_form(e.a) + affine_form(e.b).scale(-1)
        if e.op == "mul":
            a, b = affine_form(e.a), affine_form(e.b)
            if not a.coeffs and not a.params:
                return b.scale(a.const)
            if not b.coeffs and not b.params:
                return a.scale(b.const)
            raise NonAffine("{} multiplies two non-constant terms", e)
        raise NonAffine("'{}' in {} is not affine", e.op, e)
    raise NonAffine("{} is not an affine integer expression of Vars and sizes", e)


# -- simplifying size arithmetic -------------------------------------------------------------
def _aff(e: Expr) -> Affine | None:
    try:
        return affine_form(e)
    except NonAffine:
        return None


def sconst(v: int) -> Expr:
    return Const(int(v), int64)


def sadd(a: Expr, b: Expr) -> Expr:
    fa, fb = _aff(a), _aff(b)
    if fa is not None and fb is not None:
        return (fa + fb).to_expr()
    if _is_zero(fb):
        return a
    if _is_zero(fa):
        return b
    (ta, ra), (tb, rb) = _terms(a), _terms(b)
    if all(ta.get(k, 0) + v == 0 for k, v in tb.items()) and set(ta) <= set(tb):
        return (ra + rb).to_expr()  # m + (N - m) is N
    return BinOp("add", a, b, int64)


def _is_zero(f: Affine | None) -> bool:
    return f is not None and not f.coeffs and not f.params and f.const == 0


def ssub(a: Expr, b: Expr) -> Expr:
    fa, fb = _aff(a), _aff(b)
    if fa is not None and fb is not None:
        return (fa + fb.scale(-1)).to_expr()
    if _is_zero(fb):
        return a
    (ta, ra), (tb, rb) = _terms(a), _terms(b)
    if ta == tb:  # the same non-affine terms cancel: (min(x, y) + 31) - min(x, y) is 31
        return (ra + rb.scale(-1)).to_expr()
    return BinOp("sub", a, b, int64)


def _terms(e: Expr) -> tuple[dict[tuple, int], Affine]:
    """``e`` as a sum of non-affine terms (by structure, ``Expr.key``, with integer
    coefficients; zero ones dropped) and an affine rest."""
    if isinstance(e, BinOp) and e.dtype.is_int and e.op in ("add", "sub"):
        (ta, ra), (tb, rb) = _terms(e.a), _terms(e.b)
        sign = 1 if e.op == "add" else -1
        for k, v in tb.items():
            ta[k] = ta.get(k, 0) + sign * v
        return {k: v for k, v in ta.items() if v}, ra + rb.scale(sign)
    fe = _aff(e)
    if fe is not None:
        return {}, fe
    return {e.key: 1}, Affine((), (), 0)


def smul(a: Expr, c: int) -> Expr:
    fa = _aff(a)
    if fa is not None:
        return fa.scale(c).to_expr()
    return BinOp("mul", a, sconst(c), int64)


def sfloordiv(a: Expr, c: int) -> Expr:
    """``floor(a / c)`` for a positive constant ``c``."""
    assert c > 0
    if c == 1:
        return a
    fa = _aff(a)
    if fa is not None and not fa.coeffs and not fa.params:
        return sconst(fa.const // c)
    if fa is not None and all(v % c == 0 for _, v in fa.params + fa.coeffs) and fa.const % c == 0:
        return Affine.make({k: v // c for k, v in fa.coeffs}, {k: v // c for k, v in fa.params},
                           fa.const // c).to_expr()
    return BinOp("floordiv", a, sconst(c), int64)


def sceildiv(a: Expr, c: int) -> Expr:
    """``ceil(a / c)`` for a positive constant ``c``, as ``(a + c - 1) // c``."""
    return sfloordiv(sadd(a, sconst(c - 1)), c)


def _split_const(e: Expr) -> tuple[Expr, int]:
    """``e`` as ``base + c`` for an integer constant ``c`` (``base`` may be non-affine)."""
    if isinstance(e, BinOp) and e.op in ("add", "sub") and isinstance(e.b, Const) \
            and e.dtype.is_int:
        base, c = _split_const(e.a)
        return base, c + (int(e.b.value) if e.op == "add" else -int(e.b.value))
    return e, 0


def _const_diff(a: Expr, b: Expr) -> int | None:
    fa, fb = _aff(a), _aff(b)
    if fa is None or fb is None:
        (ba, ca), (bb, cb) = _split_const(a), _split_const(b)
        return ca - cb if ba.same_as(bb) else None
    d = fa + fb.scale(-1)
    return None if d.coeffs or d.params else d.const


def smax(a: Expr, b: Expr) -> Expr:
    d = _const_diff(a, b)
    if d is not None:
        return a if d >= 0 else b
    if a.same_as(b):
        return a
    return BinOp("max", a, b, int64)


def smin(a: Expr, b: Expr) -> Expr:
    d = _const_diff(a, b)
    if d is not None:
        return a if d <= 0 else b
    if a.same_as(b):
        return a
    return BinOp("min", a, b, int64)


def const_value(e: Expr) -> int | None:
    """The integer value of ``e`` if it is constant after affine folding, else None."""
    f = _aff(e)
    if f is None or f.coeffs or f.params:
        return None
    return f.const


def eval_size(e: Expr, sizes: dict[str, int]) -> int:
    """Evaluate the size expression ``e`` with concrete ``sizes`` (Python integers, exact)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Size):
        return sizes[e.name]
    if isinstance(e, Cast):
        return eval_size(e.value, sizes)
    if isinstance(e, BinOp):
        a, b = eval_size(e.a, sizes), eval_size(e.b, sizes)
        if e.op == "add":
            return a + b
        if e.op == "sub":
            return a - b
        if e.op == "mul":
            return a * b
        if e.op == "floordiv":
            return a // b if b else 0
        if e.op == "mod":
            return a % b if b else 0
        if e.op == "max":
            return max(a, b)
        if e.op == "min":
            return min(a, b)
    raise TypeError(f"not a size expression: {e}")
