"""LLVM types of tensorlang dtypes, in registers and in memory."""

from __future__ import annotations

import llvmlite.ir as ir

from tensorlang.dtypes import DType

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), \
    ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()


_VALUE_TYPES = {DType.bool_: I1, DType.int8: I8, DType.int16: I16, DType.int32: I32,
                DType.int64: I64, DType.uint8: I8, DType.uint16: I16, DType.float16: F32,
                DType.bfloat16: F32, DType.float32: F32, DType.float64: F64}


def value_type(d: DType) -> ir.Type:
    """The LLVM type of a value of dtype ``d`` in registers (bool is i1; float16 and bfloat16
    are float32, rounded to their precision after each operation)."""
    return _VALUE_TYPES[d]


def memory_type(d: DType) -> ir.Type:
    """The LLVM type of an element of dtype ``d`` in memory (bool is one byte, as NumPy;
    float16 is LLVM's half, bfloat16 its 16 bits as an integer)."""
    if d is DType.bool_:
        return I8
    if d is DType.float16:
        return F16
    if d is DType.bfloat16:
        return I16
    return value_type(d)


#: fast-math flags of float arithmetic (FMA contraction) and of reduction updates (also
#: reassociation: the reduction policy of docs/architecture.md §5)
FLOAT_FLAGS = ("contract",)
REDUCE_FLAGS = ("reassoc", "contract")
