"""Proofs that an integer index stays inside a range over the loops around it.

A boundary condition (``constant_exterior``, ``clamp`` ...) makes every read of its Func a
clamped index and, for ``constant_exterior``, a select on the raw index being inside. Where the
loops that read it cannot leave the domain along a dimension (a packed panel's copy in the
whole panels: ``16 * d0 + d2`` with ``d0 < N // 16``), the clamp and the condition are dead,
and they cost the copy its vector loads (a clamped index is not affine: LLVM gathers). Halide's
simplifier removes them with the same reasoning (bounds of the enclosing loops, and
``c * (x / c) <= x``).

``provably_nonpositive(e)`` proves ``e <= 0`` for every value of the symbols it names: ``e``'s
upper bounds are linear forms in the symbols with rational coefficients, found by bounding
``min`` by either operand, ``mod c`` by ``[0, c - 1]`` and a floor division ``x // c`` exactly
where ``x`` is a multiple of ``c`` plus a constant, else as a symbol ``q`` of its own, replaced
at the end by ``x / c`` (``q`` counted up) or ``(x - c + 1) / c`` (counted down); one form
whose symbols cancel and whose constant is at most 0 is a proof. ``index_within`` first bounds
the index over the loops' ranges (``bounds.interval``).
"""

from __future__ import annotations

from fractions import Fraction

from tensorlang.affine import sadd, sconst, ssub
from tensorlang.errors import ScheduleError
from tensorlang.expr import BinOp, Cast, Const, Expr, Size, Var

from .bounds import Interval, interval

#: Linear forms kept per bound (``min`` operands multiply them); past it, the first ones
MAX_FORMS = 16

Form = tuple[dict[str, Fraction], Fraction]  # symbol -> coefficient, constant


def _scale(forms: list[Form], c: Fraction) -> list[Form]:
    return [({k: v * c for k, v in f.items()}, k0 * c) for f, k0 in forms]


def _combine(a: list[Form], b: list[Form], sign: int) -> list[Form]:
    out: list[Form] = []
    for fa, ka in a:
        for fb, kb in b:
            f = dict(fa)
            for k, v in fb.items():
                f[k] = f.get(k, Fraction(0)) + sign * v
            out.append(({k: v for k, v in f.items() if v != 0}, ka + sign * kb))
            if len(out) >= MAX_FORMS:
                return out
    return out


class _Atoms:
    """The floor divisions met while bounding one expression, each a symbol ``q`` of its own
    with its dividend's exact linear form ``x`` and divisor ``c``: ``c * q <= x <= c * q + c -
    1``."""

    def __init__(self) -> None:
        self.defs: dict[str, tuple[Form, int]] = {}
        self._names: dict[tuple, str] = {}

    def atom(self, x: Form, c: int) -> str:
        key = (tuple(sorted(x[0].items())), x[1], c)
        if key not in self._names:
            name = f"({len(self._names)} // {c})"
            self._names[key] = name
            self.defs[name] = (x, c)
        return self._names[key]


def _exact(e: Expr, atoms: _Atoms) -> Form | None:
    """``e`` as one linear form (floor divisions as symbols, or folded where the dividend is a
    multiple of the divisor plus a constant), or None where it is not linear (``min``,
    ``max``, a product of two varying terms)."""
    if isinstance(e, Const):
        return ({}, Fraction(int(e.value))) if e.dtype.is_int else None
    if isinstance(e, (Var, Size)):
        return {e.name: Fraction(1)}, Fraction(0)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return _exact(e.value, atoms)
    if not isinstance(e, BinOp) or not e.dtype.is_int:
        return None
    if e.op in ("add", "sub"):
        a, b = _exact(e.a, atoms), _exact(e.b, atoms)
        if a is None or b is None:
            return None
        return _combine([a], [b], 1 if e.op == "add" else -1)[0]
    if e.op == "mul" and (isinstance(e.a, Const) or isinstance(e.b, Const)):
        c, x = (e.a, e.b) if isinstance(e.a, Const) else (e.b, e.a)
        f = _exact(x, atoms)
        return None if f is None else _scale([f], Fraction(int(c.value)))[0]
    if e.op == "floordiv" and isinstance(e.b, Const) and int(e.b.value) > 0:
        c = int(e.b.value)
        x = _exact(e.a, atoms)
        if x is None:
            return None
        if all(v.denominator == 1 and v.numerator % c == 0 for v in x[0].values()) \
                and x[1].denominator == 1:
            # (c * q + k) // c == q + k // c
            return {k: v / c for k, v in x[0].items()}, Fraction(int(x[1]) // c)
        return {atoms.atom(x, c): Fraction(1)}, Fraction(0)
    return None


def bounds(e: Expr, upper: bool, atoms: _Atoms | None = None) -> list[Form]:
    """Linear forms each at least (``upper``) or at most ``e`` wherever the symbols it names take
    any integer values (floor divisions as symbols of ``atoms``); empty where none is known."""
    atoms = atoms if atoms is not None else _Atoms()
    exact = _exact(e, atoms)
    if exact is not None:
        return [exact]
    if not isinstance(e, BinOp) or not e.dtype.is_int:
        return []
    op, a, b = e.op, e.a, e.b
    if op == "add":
        return _combine(bounds(a, upper, atoms), bounds(b, upper, atoms), 1)
    if op == "sub":
        return _combine(bounds(a, upper, atoms), bounds(b, not upper, atoms), -1)
    if op == "mul" and (isinstance(a, Const) or isinstance(b, Const)):
        c, x = (a, b) if isinstance(a, Const) else (b, a)
        v = int(c.value)
        return _scale(bounds(x, upper if v >= 0 else not upper, atoms), Fraction(v))
    if op == "min":
        return (bounds(a, True, atoms) + bounds(b, True, atoms))[:MAX_FORMS] if upper else []
    if op == "max":
        return [] if upper else (bounds(a, False, atoms) + bounds(b, False, atoms))[:MAX_FORMS]
    if op == "mod" and isinstance(b, Const) and int(b.value) > 0:
        return [({}, Fraction(int(b.value) - 1 if upper else 0))]
    if op == "floordiv" and isinstance(b, Const) and int(b.value) > 0:
        c = int(b.value)
        if upper:  # x // c <= x / c
            return _scale(bounds(a, True, atoms), Fraction(1, c))
        # x // c >= (x - c + 1) / c
        return [(f, k0 - Fraction(c - 1, c)) for f, k0 in _scale(bounds(a, False, atoms),
                                                                 Fraction(1, c))]
    return []


def _eliminate(form: Form, atoms: _Atoms) -> Form:
    """``form``'s upper bound without floor-division symbols: ``q <= x / c`` where ``q``'s
    coefficient is positive, ``q >= (x - c + 1) / c`` where negative (innermost last)."""
    f, k0 = dict(form[0]), form[1]
    for _ in range(len(atoms.defs) + 1):
        name = next((n for n in f if n in atoms.defs), None)
        if name is None:
            break
        coef = f.pop(name)
        (x, xk), c = atoms.defs[name]
        shift = Fraction(0) if coef > 0 else Fraction(-(c - 1))
        for n, v in x.items():
            f[n] = f.get(n, Fraction(0)) + coef * v / c
        k0 += coef * (xk + shift) / c
        f = {n: v for n, v in f.items() if v != 0}
    return f, k0


def provably_nonpositive(e: Expr) -> bool:
    """Whether ``e <= 0`` for all values of its symbols (sizes, loop variables)."""
    atoms = _Atoms()
    for form in bounds(e, True, atoms):
        f, k0 = _eliminate(form, atoms)
        if not f and k0 <= 0:
            return True
    return False


def index_within(ix: Expr, lo: Expr, extent: Expr, ranges: dict[str, Interval]) -> bool:
    """Whether index ``ix`` stays in ``[lo, lo + extent)`` while each loop variable of ``ranges``
    stays in its inclusive range."""
    try:
        low, high = interval(ix, ranges)
    except ScheduleError:
        return False
    return provably_nonpositive(ssub(lo, low)) and \
        provably_nonpositive(ssub(sadd(high, sconst(1)), sadd(lo, extent)))
