"""``expressions.vector_constant``: one shared llvmlite constant per vector type and elements, so
that a kernel's repeated splat masks and lane indices are built and printed once; constants that
print differently are never shared."""

from __future__ import annotations

import llvmlite.ir as ir

from tensorlang.backends.llvm.expressions import ExpressionGen, vector_constant
from tensorlang.backends.llvm.types import F64, I32, I64


def test_equal_vector_constants_are_one_object_and_print_as_before():
    a = vector_constant(ir.VectorType(I64, 8), range(8))
    assert a is vector_constant(ir.VectorType(I64, 8), tuple(range(8)))
    assert str(a) == str(ir.Constant(ir.VectorType(I64, 8), list(range(8))))
    assert a is not vector_constant(ir.VectorType(I32, 8), range(8))  # another type
    assert a is not vector_constant(ir.VectorType(I64, 4), range(4))


def test_signed_zeros_and_bools_are_not_taken_for_each_other():
    t = ir.VectorType(F64, 4)
    neg, pos = ExpressionGen.const(t, -0.0), ExpressionGen.const(t, 0.0)
    assert neg is not pos and str(neg) != str(pos)
    assert str(neg) == str(ir.Constant(t, [-0.0] * 4))
    nan = float("nan")  # (NaNs of either sign print alike in Python, not in LLVM IR)
    assert str(ExpressionGen.const(t, nan)) == str(ir.Constant(t, [nan] * 4))
    assert str(ExpressionGen.const(t, -nan)) == str(ir.Constant(t, [-nan] * 4))
    i1 = ir.VectorType(ir.IntType(1), 4)
    assert str(ExpressionGen.const(i1, True)) == str(ir.Constant(i1, [True] * 4))
    assert str(ExpressionGen.const(ir.VectorType(I32, 4), 1)) == \
        str(ir.Constant(ir.VectorType(I32, 4), [1] * 4))
