"""The algorithm language as one namespace: Vars, sizes, Inputs, Funcs, RDoms, expressions,
reducers, boundary conditions, the NumPy reference evaluator. ``import tensorlang as tl`` gives
all of it plus the entry points (compile, check, autotune, Schedule, Kernel); code inside the
package's lower and middle layers (the built-in workloads of ``tensorlang.autotuner``) writes
algorithms with ``import tensorlang.language as tl``, which reaches no other layer."""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import (
    DType, as_dtype, bfloat16, bool_, float16, float32, float64, int8, int16, int32, int64,
    uint8, uint16,
)
from .einsum import einsum
from .errors import (
    CompileError,
    DefinitionError,
    DeviceError,
    IllegalScheduleError,
    ScheduleError,
    ShapeError,
    TuningError,
    TensorlangError,
)
from .expr import Expr, Size, Var, as_expr, binary, call, cast, compare
from .expr import const as _const
from .func import (
    BoundaryView,
    Definition,
    Func,
    Input,
    Update,
    clamp_edge,
    constant_exterior,
    mirror_image,
    mirror_interior,
    repeat_edge,
    repeat_image,
)
from .pipeline import Pipeline, workload_key
from .rdom import RDom, RVar
from .reducers import max, min, prod, sum  # noqa: A004
from .reference import reference

def sizes(names: str) -> tuple[Size, ...]:
    """Symbolic sizes from a space-separated string: ``M, N, K = tl.sizes("M N K")``.

    A single name returns a 1-tuple (unpack it: ``(N,) = tl.sizes("N")``).
    """
    return tuple(Size(n) for n in names.replace(",", " ").split())


def vars(names: str) -> tuple[Var, ...]:  # noqa: A001
    """Pure variables from a space-separated string: ``i, j, k = tl.vars("i j k")``."""
    return tuple(Var(n) for n in names.replace(",", " ").split())


def exp(x: Any) -> Expr:
    """e**x, elementwise (integers are promoted to float64, as NumPy)."""
    return call("exp", x)


def log(x: Any) -> Expr:
    """Natural logarithm, elementwise (log(0) = -inf, log(<0) = NaN, as NumPy)."""
    return call("log", x)


def sqrt(x: Any) -> Expr:
    """Square root, elementwise (sqrt(<0) = NaN)."""
    return call("sqrt", x)


def floor(x: Any) -> Expr:
    """The largest integer not above ``x``, as a float (``np.floor``: integers become float64)."""
    return call("floor", x)


def ceil(x: Any) -> Expr:
    """The smallest integer not below ``x``, as a float (``np.ceil``)."""
    return call("ceil", x)


def round(x: Any) -> Expr:  # noqa: A001
    """``x`` rounded to the nearest integer, halves to even, as a float (``np.round``)."""
    return call("round", x)


def sin(x: Any) -> Expr:
    """Sine of ``x`` in radians (``np.sin``)."""
    return call("sin", x)


def cos(x: Any) -> Expr:
    """Cosine of ``x`` in radians (``np.cos``)."""
    return call("cos", x)


def tanh(x: Any) -> Expr:
    """Hyperbolic tangent (``np.tanh``)."""
    return call("tanh", x)


def erf(x: Any) -> Expr:
    """The error function (``math.erf`` / ``scipy.special.erf``; libm's ``erf`` in kernels)."""
    return call("erf", x)


def pow(a: Any, b: Any) -> Expr:  # noqa: A001
    """``a ** b`` for floats, with NumPy promotion (``np.power``); also written ``a ** b``.

    Raises:
        DefinitionError: both operands are integers or bools (cast one to a float dtype).
    """
    return call("pow", a, b)


def sigmoid(x: Any) -> Expr:
    """The logistic function ``1 / (1 + exp(-x))`` (integers become float64)."""
    e = exp(-x) if isinstance(x, Expr) else exp(-_const(x))
    return 1.0 / (1.0 + e)


def clamp(x: Any, lo: Any, hi: Any) -> Expr:
    """``x`` limited to ``[lo, hi]`` (``np.clip``): ``minimum(maximum(x, lo), hi)``; NaN stays
    NaN."""
    return minimum(maximum(x, lo), hi)


def saturating_cast(dtype: Any, x: Any) -> Expr:
    """``x`` converted to ``dtype``, values outside its range clamped to its limits (Halide's
    ``saturating_cast``): a narrower integer type clamps instead of wrapping (int64 -> int32),
    float64 -> float32 clamps to the largest finite float32 (infinities too) instead of
    overflowing to inf; NaN stays NaN, or becomes 0 in an integer type (as ``tl.cast``, which
    already saturates float -> int). Other conversions are ``tl.cast``.

    Raises:
        DefinitionError: ``dtype`` is not a tensorlang dtype.
    """
    d = as_dtype(dtype)
    e = as_expr(x)
    src = e.dtype
    if d.is_int and src.is_int:
        lo, hi = np.iinfo(d.numpy), np.iinfo(src.numpy)
        if lo.min > hi.min:  # (limits the source type can hold: uint8 -> int8 clamps at 127)
            e = maximum(e, _const(int(lo.min), src))
        if lo.max < hi.max:
            e = minimum(e, _const(int(lo.max), src))
    elif d.is_float and src.is_float and d.numpy.itemsize < src.numpy.itemsize:
        big = float(np.finfo(d.numpy).max)
        e = minimum(maximum(e, _const(-big, src)), _const(big, src))
    return cast(d, e)


def abs(x: Any) -> Expr:  # noqa: A001
    """Absolute value, elementwise; keeps the type (abs of the most negative integer wraps)."""
    return call("abs", x)


def maximum(a: Any, b: Any) -> Expr:
    """Elementwise maximum with NumPy promotion; NaN propagates (``np.maximum``)."""
    return binary("max", a, b)


def minimum(a: Any, b: Any) -> Expr:
    """Elementwise minimum with NumPy promotion; NaN propagates (``np.minimum``)."""
    return binary("min", a, b)


def where(cond: Any, a: Any, b: Any) -> Expr:
    """``a`` where ``cond`` holds else ``b`` (``np.where``); ``a`` and ``b`` are promoted together.
    A non-bool ``cond`` means ``cond != 0``."""
    from .expr import Select, _operands, as_expr

    c = as_expr(cond)
    if not c.dtype.is_bool:
        c = compare("ne", c, 0)
    x, y, d = _operands("where", a, b)
    return Select(c, x, y, d)


def const(value: Any, dtype: Any = None) -> Expr:
    """A typed constant: ``tl.const(0.5, tl.float32)``."""
    return _const(value, dtype)


__all__ = [
    "DType", "bool_", "float32", "float64", "int32", "int64", "int8", "int16", "uint8",
    "uint16", "float16", "bfloat16", "einsum", "CompileError",
    "DefinitionError", "DeviceError", "IllegalScheduleError", "ScheduleError", "ShapeError",
    "TuningError", "TensorlangError",
    "Expr", "Size", "Var", "cast", "BoundaryView", "Definition", "Func", "Input", "clamp_edge",
    "constant_exterior", "Pipeline", "workload_key", "max", "min", "prod", "sum", "reference",
    "sizes", "vars", "exp", "log", "sqrt", "abs", "maximum", "minimum", "where", "const",
    "floor", "ceil", "round", "sin", "cos", "tanh", "erf", "pow", "sigmoid", "clamp",
    "repeat_edge", "repeat_image", "mirror_image", "mirror_interior", "saturating_cast",
    "RDom", "RVar", "Update",
]
