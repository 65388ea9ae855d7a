"""Scalar element types and NumPy's promotion rules.

tensorlang supports the element types ``bool``; ``int8``, ``int16``, ``int32``, ``int64``;
``uint8``, ``uint16``; ``float16``, ``bfloat16``, ``float32`` and ``float64``. bfloat16 arrays are
``ml_dtypes.bfloat16`` arrays (the NumPy extension type JAX uses). Narrow integers wrap around as
NumPy's do; float16 and bfloat16 arithmetic rounds each operation's float32 result, as NumPy and
ml_dtypes compute them. Promotion follows NumPy 2 (NEP 50): two typed operands promote with ``numpy.result_type``; a Python
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
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    uint8 = "uint8"
    uint16 = "uint16"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        if self is DType.bfloat16:  # (imported here: ml_dtypes is slow to import)
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return 2 if self is DType.bfloat16 else self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self._value_ in _FLOATS

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer (not bool)."""
        return self._value_ in _INTS

    @property
    def is_unsigned(self) -> bool:
        return self._value_ in _UNSIGNED

    @property
    def is_half(self) -> bool:
        """A 16-bit float (float16, bfloat16): computed in float32, rounded after each
        operation."""
        return self._value_ in _HALVES

    @property
    def is_bool(self) -> bool:
        return self is DType.bool_

    def __repr__(self) -> str:
        return f"tl.{self.name}"

    __str__ = __repr__


#: the kinds' members by value (a set of strings: the properties above are asked millions of
#: times in a lowering, and an Enum member hashes in Python)
_INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16"})
_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_UNSIGNED = frozenset({"uint8", "uint16"})
_HALVES = frozenset({"float16", "bfloat16"})

bool_ = DType.bool_
int8 = DType.int8
int16 = DType.int16
uint8 = DType.uint8
uint16 = DType.uint16
float16 = DType.float16
bfloat16 = DType.bfloat16
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
    if isinstance(value, str) and value in _BY_NAME:  # ('bfloat16' without ml_dtypes loaded)
        return _BY_NAME[value]
    try:
        name = np.dtype(value).name  # type: ignore[arg-type]
    except TypeError as exc:
        raise DefinitionError(f"unknown dtype {value!r}; use one of {_names()}") from exc
    for d in DType:
        if d.value == name:
            return d
    raise DefinitionError(f"unsupported dtype {name}; tensorlang supports {_names()}")


_BY_NAME = {d.value: d for d in DType}


def _names() -> str:
    return ", ".join(d.value for d in DType)


def promote(a: DType, b: DType) -> DType:
    """The NumPy result type of two typed operands. NumPy has none for bfloat16 with int32,
    int64 or float16: there tensorlang takes JAX's (bfloat16 with an integer stays bfloat16,
    with float16 both become float32)."""
    try:
        return as_dtype(np.result_type(a.numpy, b.numpy))
    except np.exceptions.DTypePromotionError:
        other = b if a is DType.bfloat16 else a
        return DType.bfloat16 if other.is_int or other.is_bool else DType.float32


def promote_scalar(a: DType, scalar: bool | int | float) -> DType:
    """The NumPy 2 result type of a typed operand and a weak Python scalar (NEP 50: a Python
    float keeps any float type, float16 and bfloat16 included; a Python int keeps any integer
    or float type)."""
    if a.is_half and isinstance(scalar, (bool, int, float)):
        return a
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
