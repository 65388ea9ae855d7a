"""Scalar element types and NumPy's promotion rules.

tensorlang supports the element types ``bool``, ``int32``, ``int64``, ``float32`` and ``float64``.
Promotion follows NumPy 2 (NEP 50): two typed operands promote with ``numpy.result_type``; a Python
scalar is "weak" and takes the type of the typed operand when it fits its kind (``x_f32 * 2.5`` stays
float32, ``x_i32 * 2.5`` becomes float64).
"""

from __future__ import annotations

import enum

import numpy as np

from .errors import DefinitionError


class DType(enum.Enum):
    """An element type. ``.numpy`` is the matching ``numpy.dtype``; ``.itemsize`` is in bytes."""

    bool_ = "bool"
    int32 = "int32"
    int64 = "int64"
    float32 = "float32"
    float64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float64)

    @property
    def is_int(self) -> bool:
        return self in (DType.int32, DType.int64)

    @property
    def is_bool(self) -> bool:
        return self is DType.bool_

    def __repr__(self) -> str:
        return f"tl.{self.name}"

    __str__ = __repr__


bool_ = DType.bool_
int32 = DType.int32
int64 = DType.int64
float32 = DType.float32
float64 = DType.float64


def as_dtype(value: object) -> DType:
    """Convert a ``DType``, a NumPy dtype, a NumPy scalar type or a string to a ``DType``.

    Raises:
        DefinitionError: the type is not one tensorlang supports.
    """
    if isinstance(value, DType):
        return value
    try:
        name = np.dtype(value).name  # type: ignore[arg-type]
    except TypeError as exc:
        raise DefinitionError(f"unknown dtype {value!r}; use one of {_names()}") from exc
    for d in DType:
        if d.value == name:
            return d
    raise DefinitionError(f"unsupported dtype {name}; tensorlang supports {_names()}")


def _names() -> str:
    return ", ".join(d.value for d in DType)


def promote(a: DType, b: DType) -> DType:
    """The NumPy result type of two typed operands."""
    return as_dtype(np.result_type(a.numpy, b.numpy))


def promote_scalar(a: DType, scalar: bool | int | float) -> DType:
    """The NumPy 2 result type of a typed operand and a weak Python scalar."""
    return as_dtype(np.result_type(a.numpy, scalar))


def scalar_dtype(scalar: bool | int | float) -> DType:
    """The type a lone Python scalar gets: bool, int64 or float64 (NumPy's defaults)."""
    if isinstance(scalar, (bool, np.bool_)):
        return DType.bool_
    if isinstance(scalar, (int, np.integer)):
        return DType.int64 if not isinstance(scalar, np.integer) else as_dtype(type(scalar))
    if isinstance(scalar, (float, np.floating)):
        return DType.float64 if not isinstance(scalar, np.floating) else as_dtype(type(scalar))
    raise DefinitionError(f"cannot use {scalar!r} of type {type(scalar).__name__} as a constant")
