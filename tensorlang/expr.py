"""Algorithm IR: immutable, structurally hashed expression nodes and their operators.

Every node is a frozen dataclass whose ``key`` is a nested tuple of plain values; two nodes are the
same expression iff their keys are equal, ``hash(node) == hash(node.key)``, and the canonical text of
a whole algorithm (hence its workload key) is built from keys. ``==`` on expressions builds an
equality *expression*, as in Halide and TVM; like TVM's ``EqualOp`` its truth value is structural
equality, so nodes still work as dict keys. ``<`` and friends build comparisons whose truth value is
undefined (use ``tl.where``).

See also: Halide ``src/IR.h``; tinygrad ``tinygrad/uop/ops.py`` (one hash-consed node type).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator

import numpy as np

from .dtypes import DType, as_dtype, float64, int64, promote, promote_scalar, scalar_dtype
from .errors import DefinitionError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Binary arithmetic operators. ``div`` is true division (floats only: integer ``/`` is built as
#: ``floordiv``, the floor division NumPy's ``//`` computes); ``mod`` is NumPy's ``%`` (the result
#: has the sign of the divisor); ``and``/``or`` are logical and apply to bool operands only.
BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "max", "min", "and", "or")
#: Comparison operators; each yields bool. With a NaN operand all but ``ne`` are false (IEEE).
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
#: Pointwise functions. ``exp``, ``log``, ``sqrt`` compute in floating point (integers are promoted
#: to float64 as NumPy does); ``abs`` and ``neg`` keep the operand's type (integers wrap, as NumPy).
FUNCTIONS = ("exp", "log", "sqrt", "abs", "neg", "floor", "ceil", "round", "sin", "cos", "tanh",
             "erf", "pow")
#: functions of floats only: an integer or bool argument is promoted to float64 (as NumPy's)
FLOAT_FUNCTIONS = ("exp", "log", "sqrt", "floor", "ceil", "round", "sin", "cos", "tanh", "erf")


def check_name(name: object, what: str) -> str:
    """Return ``name`` if it is a valid identifier, else raise ``DefinitionError``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise DefinitionError(f"{what} name {name!r} is not a valid identifier (letters, digits, _)")
    return name


def _key_of(value: Any) -> Any:
    if isinstance(value, Expr):
        return value.key
    if isinstance(value, tuple):
        return tuple(_key_of(v) for v in value)
    if isinstance(value, DType):
        return value.value
    if isinstance(value, float):
        return repr(value)  # NaN equals itself in a key; 1.0 differs from 1
    return value


class Expr:
    """Base class of every algorithm-IR expression. ``dtype`` is its element type."""

    dtype: DType

    # -- structural identity ---------------------------------------------------------------
    @functools.cached_property
    def key(self) -> tuple:
        """A nested tuple of plain values identifying this expression structurally."""
        items = [type(self).__name__]
        for name in _compared_fields(type(self)):
            items.append(_key_of(getattr(self, name)))
        return tuple(items)

    def __hash__(self) -> int:
        return hash(self.key)

    def same_as(self, other: object) -> bool:
        """Structural equality (what ``bool(a == b)`` also answers)."""
        return isinstance(other, Expr) and (self is other or self.key == other.key)

    def __bool__(self) -> bool:
        raise TypeError(
            "the truth value of a tensorlang expression is undefined: it is computed per element "
            "at run time; use tl.where(cond, a, b) instead of if/and/or"
        )

    # -- arithmetic ------------------------------------------------------------------------
    def __add__(self, o: Any) -> Expr:
        return binary("add", self, o)

    def __radd__(self, o: Any) -> Expr:
        return binary("add", o, self)

    def __sub__(self, o: Any) -> Expr:
        return binary("sub", self, o)

    def __rsub__(self, o: Any) -> Expr:
        return binary("sub", o, self)

    def __mul__(self, o: Any) -> Expr:
        return binary("mul", self, o)

    def __rmul__(self, o: Any) -> Expr:
        return binary("mul", o, self)

    def __truediv__(self, o: Any) -> Expr:
        return binary("div", self, o)

    def __rtruediv__(self, o: Any) -> Expr:
        return binary("div", o, self)

    def __floordiv__(self, o: Any) -> Expr:
        return binary("floordiv", self, o)

    def __rfloordiv__(self, o: Any) -> Expr:
        return binary("floordiv", o, self)

    def __mod__(self, o: Any) -> Expr:
        return binary("mod", self, o)

    def __rmod__(self, o: Any) -> Expr:
        return binary("mod", o, self)

    def __neg__(self) -> Expr:
        return call("neg", self)

    def __pos__(self) -> Expr:
        return self

    def __abs__(self) -> Expr:
        return call("abs", self)

    def __pow__(self, o: Any) -> Expr:
        return call("pow", self, o)

    def __rpow__(self, o: Any) -> Expr:
        return call("pow", o, self)

    # -- comparisons and logic ---------------------------------------------------------------
    def __lt__(self, o: Any) -> Expr:
        return compare("lt", self, o)

    def __le__(self, o: Any) -> Expr:
        return compare("le", self, o)

    def __gt__(self, o: Any) -> Expr:
        return compare("gt", self, o)

    def __ge__(self, o: Any) -> Expr:
        return compare("ge", self, o)

    def __eq__(self, o: Any) -> Expr:  # type: ignore[override]
        return compare("eq", self, o)

    def __ne__(self, o: Any) -> Expr:  # type: ignore[override]
        return compare("ne", self, o)

    def __and__(self, o: Any) -> Expr:
        return binary("and", self, o)

    def __rand__(self, o: Any) -> Expr:
        return binary("and", o, self)

    def __or__(self, o: Any) -> Expr:
        return binary("or", self, o)

    def __ror__(self, o: Any) -> Expr:
        return binary("or", o, self)

    def __invert__(self) -> Expr:
        if not self.dtype.is_bool:
            raise DefinitionError(f"~ applies to bool expressions only, not {self.dtype}: {self}")
        return Not(self)

    def astype(self, dtype: Any) -> Expr:
        """This expression converted to ``dtype`` (NumPy ``astype`` semantics)."""
        return cast(dtype, self)

    def __str__(self) -> str:
        from .printer import expr_str

        return expr_str(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}: {self.dtype}>"


# ---------------------------------------------------------------------------------------------
# Leaves
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    """A constant of type ``dtype``; ``value`` is a Python bool, int or float of that type."""

    value: bool | int | float
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A pure variable (an index of a Func's domain, or a loop variable); int64 when used as a value.

    See also: Halide ``Var``, TVM ``te.var``.
    """

    name: str
    dtype: DType = field(default=int64, init=False)

    def __post_init__(self) -> None:
        check_name(self.name.replace(".", "_"), "Var")


@dataclass(frozen=True, eq=False, repr=False)
class Size(Expr):
    """A symbolic size (a problem dimension such as M, N, K), bound from the arrays at call time.

    Sizes are the parameters of the polyhedral model: extents are affine expressions in them.
    """

    name: str
    dtype: DType = field(default=int64, init=False)

    def __post_init__(self) -> None:
        check_name(self.name, "Size")


# ---------------------------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, repr=False)
class BinOp(Expr):
    """``a op b`` with both operands already of type ``dtype`` (promotion inserts casts)."""

    op: str
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Cmp(Expr):
    """``a op b`` for ``op`` in COMPARE_OPS; operands share a type; the result is bool."""

    op: str
    a: Expr
    b: Expr
    dtype: DType = field(default=DType.bool_, init=False)

    def __bool__(self) -> bool:
        if self.op == "eq":
            return self.a.same_as(self.b)
        if self.op == "ne":
            return not self.a.same_as(self.b)
        return Expr.__bool__(self)


@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    """Logical negation of a bool expression."""

    a: Expr
    dtype: DType = field(default=DType.bool_, init=False)


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A pointwise function from FUNCTIONS applied to ``args``."""

    name: str
    args: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``where(cond, t, f)``: ``t`` where ``cond`` holds, else ``f``; both branches share ``dtype``."""

    cond: Expr
    t: Expr
    f: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    """``value`` converted to ``dtype`` (float->int truncates toward zero, saturating)."""

    value: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Boundary:
    """How reads outside an array's bounds are answered: ``clamp_edge``, ``constant_exterior``,
    or a fold back into the domain (``repeat_image``, ``mirror_image``, ``mirror_interior``)."""

    kind: str
    value: Const | None = None

    @property
    def key(self) -> tuple:
        return ("Boundary", self.kind, None if self.value is None else self.value.key)


@dataclass(frozen=True, eq=False, repr=False)
class Access(Expr):
    """A read ``name[indices]`` of an Input or a Func. Indices are affine int64 expressions.

    ``producer`` is the Input or Func object read (not part of the structural key: the name is).
    ``boundary`` is None for a bounded read (it constrains the domain, "valid" semantics) or a
    ``Boundary`` for a read through ``tl.clamp_edge`` / ``tl.constant_exterior``.
    """

    name: str
    indices: tuple[Expr, ...]
    dtype: DType
    boundary: Boundary | None = None
    producer: Any = field(default=None, compare=False)

    @property
    def key(self) -> tuple:  # type: ignore[override]
        b = None if self.boundary is None else self.boundary.key
        kind = type(self.producer).__name__
        return ("Access", kind, self.name, _key_of(self.indices), self.dtype.value, b)


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """``op`` over the Vars free in ``value`` that are absent from the definition's left side.

    Built by ``tl.sum / tl.max / tl.min / tl.prod``; lives only until the definition is stored.
    """

    op: str
    value: Expr
    dtype: DType


REDUCE_OPS = ("sum", "prod", "max", "min")


# ---------------------------------------------------------------------------------------------
# Construction helpers (NumPy promotion)
# ---------------------------------------------------------------------------------------------
def _is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating))


def const(value: Any, dtype: Any = None) -> Const:
    """A constant of ``dtype`` (default: NumPy's type for the Python scalar)."""
    d = scalar_dtype(value) if dtype is None else as_dtype(dtype)
    return Const(_convert_scalar(value, d), d)


def _convert_scalar(value: Any, d: DType) -> bool | int | float:
    if d.is_bool:
        return bool(value)
    if d.is_int:
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            raise DefinitionError(f"cannot convert {value} to {d}")
        return int(np.asarray(value).astype(d.numpy))
    return float(np.asarray(value, dtype=d.numpy))


def as_expr(x: Any) -> Expr:
    """Turn a Python/NumPy scalar into a ``Const``; pass expressions through."""
    if isinstance(x, Expr):
        return x
    if _is_scalar(x):
        return const(x)
    if hasattr(x, "as_index"):  # a one-dimensional RDom is its RVar
        return x.as_index()
    hint = ""
    if hasattr(x, "name") and hasattr(x, "rank"):
        hint = f"; {x.name} is a Func or Input: read it with indices, e.g. {x.name}[i]"
    elif isinstance(x, np.ndarray):
        hint = "; arrays are passed when the kernel is called: declare a tl.Input"
    raise DefinitionError(f"cannot use {type(x).__name__} {x!r} in an expression{hint}")


def cast(dtype: Any, value: Any) -> Expr:
    """``value`` converted to ``dtype``. Float to int truncates toward zero (saturating at the
    type's limits, NaN to 0); int to bool is ``!= 0``. See also: Halide ``cast``."""
    d = as_dtype(dtype)
    e = as_expr(value)
    if e.dtype is d:
        return e
    if isinstance(e, Const):
        v = e.value
        if d.is_int and e.dtype.is_float:
            v = _saturate(v, d)
        return Const(_convert_scalar(v, d), d)
    return Cast(e, d)


def _saturate(v: float, d: DType) -> int:
    if math.isnan(v):
        return 0
    info = np.iinfo(d.numpy)
    return int(min(max(math.trunc(v) if math.isfinite(v) else v, info.min), info.max))


def _operands(op: str, a: Any, b: Any) -> tuple[Expr, Expr, DType]:
    ea, eb = isinstance(a, Expr), isinstance(b, Expr)
    if ea and eb:
        d = promote(a.dtype, b.dtype)
    elif ea and _is_scalar(b):
        d = promote_scalar(a.dtype, b) if not isinstance(b, np.generic) else promote(
            a.dtype, scalar_dtype(b))
    elif eb and _is_scalar(a):
        d = promote_scalar(b.dtype, a) if not isinstance(a, np.generic) else promote(
            b.dtype, scalar_dtype(a))
    else:
        x, y = as_expr(a), as_expr(b)
        d = promote(x.dtype, y.dtype)
        a, b = x, y
    return cast(d, a), cast(d, b), d


def binary(op: str, a: Any, b: Any) -> Expr:
    """Build ``a op b`` with NumPy promotion. Integer ``div`` becomes ``floordiv``."""
    x, y, d = _operands(op, a, b)
    if op in ("and", "or"):
        if not d.is_bool:
            raise DefinitionError(
                f"& and | apply to bool expressions (comparisons) only, not {d}: {x} {op} {y}")
        return BinOp(op, x, y, d)
    if d.is_bool and op not in ("max", "min"):
        raise DefinitionError(
            f"arithmetic '{op}' on two bool expressions ({x}, {y}); cast one with tl.cast first")
    if op == "div" and not d.is_float:
        op = "floordiv"
    return BinOp(op, x, y, d)


def compare(op: str, a: Any, b: Any) -> Expr:
    """Build the comparison ``a op b`` (bool) with NumPy promotion of the operands."""
    x, y, _ = _operands(op, a, b)
    return Cmp(op, x, y)


def call(name: str, *args: Any) -> Expr:
    """Apply the pointwise function ``name`` (see FUNCTIONS); ``pow`` takes two arguments,
    promoted together as NumPy's ``power``.

    Raises:
        DefinitionError: ``pow`` of integers or bools (cast one operand to a float dtype), or a
            function of a bool that has no meaning for bools.
    """
    if name == "pow":
        x, y, d = _operands("pow", *args)
        if not d.is_float:
            raise DefinitionError(f"** / tl.pow of {d} operands ({x} ** {y}): integer powers "
                                  f"overflow silently; cast an operand to a float dtype first "
                                  f"(tl.cast(tl.float64, x))")
        return Call(name, (x, y), d)
    (x,) = (as_expr(a) for a in args)
    if name in FLOAT_FUNCTIONS:
        if not x.dtype.is_float:
            x = cast(float64, x)
        return Call(name, (x,), x.dtype)
    if x.dtype.is_bool:
        raise DefinitionError(f"{name} of a bool expression; cast it with tl.cast first: {x}")
    return Call(name, (x,), x.dtype)


# ---------------------------------------------------------------------------------------------
# Traversal
# ---------------------------------------------------------------------------------------------
@functools.cache
def _compared_fields(cls: type) -> tuple[str, ...]:
    """Names of the dataclass fields of ``cls`` that take part in structural identity (read once
    per class: ``dataclasses.fields`` on every node was a third of the lowering's time)."""
    return tuple(f.name for f in fields(cls) if f.compare)


@functools.cache
def _rebuilt_fields(cls: type) -> tuple[str, ...]:
    """The compared fields ``map_children`` rebuilds (those the constructor takes)."""
    return tuple(f.name for f in fields(cls) if f.compare and f.init)


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``e``, in field order (found once per node and kept on it,
    as ``key`` is: nodes are immutable, and every pass of the lowering walks them again)."""
    d = e.__dict__
    kids = d.get("_children")
    if kids is None:
        out: list[Expr] = []
        for name in _compared_fields(type(e)):
            v = getattr(e, name)
            if isinstance(v, Expr):
                out.append(v)
            elif isinstance(v, tuple):
                out.extend(c for c in v if isinstance(c, Expr))
        kids = d["_children"] = tuple(out)
    return kids


def walk(e: Expr) -> Iterator[Expr]:
    """Pre-order traversal of ``e`` and all its sub-expressions."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def map_children(e: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """Rebuild ``e`` with ``fn`` applied to each direct child; returns ``e`` itself if unchanged."""
    if not children(e):  # (a leaf: a variable, size or constant)
        return e
    changes: dict[str, Any] = {}
    for name in _rebuilt_fields(type(e)):
        v = getattr(e, name)
        if isinstance(v, Expr):
            nv = fn(v)
            if nv is not v:
                changes[name] = nv
        elif isinstance(v, tuple) and any(isinstance(c, Expr) for c in v):
            nt = tuple(fn(c) if isinstance(c, Expr) else c for c in v)
            if any(a is not b for a, b in zip(nt, v)):
                changes[name] = nt
    if not changes:
        return e

    return dataclasses.replace(e, **changes)  # type: ignore[type-var]


def substitute(e: Expr, mapping: dict[str, Expr]) -> Expr:
    """Replace each Var named in ``mapping`` by its expression."""

    def go(n: Expr) -> Expr:
        if isinstance(n, Var):
            return mapping.get(n.name, n)
        return map_children(n, go)

    return go(e)


def free_vars(e: Expr) -> list[Var]:
    """The distinct Vars in ``e``, in order of first appearance (left to right)."""
    seen: dict[str, Var] = {}
    for n in walk(e):
        if isinstance(n, Var) and n.name not in seen:
            seen[n.name] = n
    return list(seen.values())


def accesses(e: Expr) -> list[Access]:
    """Every Access in ``e`` (pre-order, duplicates kept)."""
    return [n for n in walk(e) if isinstance(n, Access)]
