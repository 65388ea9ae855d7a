"""Algorithm expressions as isl text: affine index expressions and domain constraints."""

from __future__ import annotations

from tensorlang.affine import NonAffine, affine_form
from typing import Callable

from tensorlang.expr import BinOp, Cast, Cmp, Const, Expr, Size, Var


class Unrepresentable(Exception):
    """An expression isl cannot state exactly (the caller over-approximates or gives up); the
    message is formatted only when read."""

    def __init__(self, template: object, *exprs: object) -> None:
        super().__init__(template)
        self.template, self.exprs = template, exprs

    def __str__(self) -> str:
        return str(self.template).format(*self.exprs) if self.exprs else str(self.template)


def affine(e: Expr, rename: dict[str, str] | None = None) -> str:
    """``e`` (affine in Vars and sizes) as isl text, Vars renamed through ``rename``."""
    try:
        f = affine_form(e)
    except NonAffine as exc:
        raise Unrepresentable(exc) from None
    ren = rename or {}
    terms = [f"{c}*{ren.get(v, v)}" for v, c in f.coeffs]
    terms += [f"{c}*{p}" for p, c in f.params]
    terms.append(str(f.const))
    return " + ".join(terms)


def lower_bounds(e: Expr) -> list[str]:
    """Expressions whose maximum is ``e`` (``max(a, b)`` -> both; ``a // c`` -> floor)."""
    if isinstance(e, BinOp) and e.op == "max":
        return lower_bounds(e.a) + lower_bounds(e.b)
    return [_quasi(e)]


def upper_bounds(e: Expr) -> list[str]:
    """Expressions whose minimum is ``e``."""
    if isinstance(e, BinOp) and e.op == "min":
        return upper_bounds(e.a) + upper_bounds(e.b)
    return [_quasi(e)]


def _quasi(e: Expr) -> str:
    if isinstance(e, BinOp) and e.op == "floordiv" and isinstance(e.b, Const):
        return f"floor(({_quasi(e.a)})/{int(e.b.value)})"
    if isinstance(e, BinOp) and e.op in ("add", "sub"):
        try:
            return affine(e)
        except Unrepresentable:
            op = "+" if e.op == "add" else "-"
            return f"({_quasi(e.a)}) {op} ({_quasi(e.b)})"
    if isinstance(e, BinOp) and e.op == "mul" and isinstance(e.b, Const):
        return f"{int(e.b.value)}*({_quasi(e.a)})"
    return affine(e)


_ISL_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "="}


def condition(e: Expr, rename: dict[str, str] | None = None) -> str:
    """A comparison of affine integer expressions (an ``RDom.where`` condition) as an isl
    constraint (``!=`` as ``<`` or ``>``); anything else raises :class:`Unrepresentable`."""
    if isinstance(e, Cmp) and e.op in _ISL_CMP and e.a.dtype.is_int and e.b.dtype.is_int:
        return f"({affine(e.a, rename)}) {_ISL_CMP[e.op]} ({affine(e.b, rename)})"
    if isinstance(e, Cmp) and e.op == "ne" and e.a.dtype.is_int and e.b.dtype.is_int:
        a, b = affine(e.a, rename), affine(e.b, rename)
        return f"(({a}) < ({b}) or ({a}) > ({b}))"
    raise Unrepresentable("{} is not a comparison of affine expressions", e)


def quasi_affine(e: Expr, var_name: Callable[[str], str] = str,
                 size_name: Callable[[str], str] = str,
                 opaque: Callable[[Expr], str] | None = None) -> str:
    """``e`` as an isl quasi-affine expression: +, -, * by a constant, ``//`` and ``%`` by a
    positive constant (isl's ``floor`` and ``mod``), ``min`` and ``max`` (isl manual, "Affine
    Expressions"); Vars and Sizes named through ``var_name`` / ``size_name``; ``opaque``, where
    given, names an integer subexpression that is none of these (it may raise Unrepresentable).

    Raises:
        Unrepresentable: anything else (a product of two variables, a read of data).
    """
    def go(n: Expr) -> str:
        if isinstance(n, Const) and n.dtype.is_int:
            return str(int(n.value))
        if isinstance(n, Var):
            return var_name(n.name)
        if isinstance(n, Size):
            return size_name(n.name)
        if isinstance(n, Cast) and n.dtype.is_int and n.value.dtype.is_int:
            return go(n.value)
        if isinstance(n, BinOp) and n.dtype.is_int:
            a, b = n.a, n.b
            if n.op in ("add", "sub"):
                return f"({go(a)} {'+' if n.op == 'add' else '-'} {go(b)})"
            if n.op == "mul":
                if isinstance(b, Const):
                    return f"({int(b.value)} * {go(a)})"
                if isinstance(a, Const):
                    return f"({int(a.value)} * {go(b)})"
            if n.op in ("max", "min"):
                return f"{n.op}({go(a)}, {go(b)})"
            if n.op in ("floordiv", "mod") and isinstance(b, Const) and int(b.value) > 0:
                c = int(b.value)
                return f"floor(({go(a)})/{c})" if n.op == "floordiv" else f"(({go(a)}) mod {c})"
        if opaque is not None and n.dtype.is_int:
            return opaque(n)
        raise Unrepresentable("{} is not quasi-affine", n)

    return go(e)
