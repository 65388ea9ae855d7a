"""Integer index arithmetic as the code generator emits it (``ExpressionGen.int_op``): folded
where the operands are constants, with LLVM's wrapping semantics, the identities dropped, and
each operation emitted once per basic block; the kernels it builds match NumPy."""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

import tensorlang as tl
from tensorlang.backends.llvm import codegen
from tensorlang.backends.llvm.expressions import ExpressionGen
from tensorlang.backends.llvm.target import host_target
from tensorlang.schedule.lower import lower

I64, I32 = ir.IntType(64), ir.IntType(32)


class _Gen(ExpressionGen):
    def __init__(self):
        fn = ir.Function(ir.Module(), ir.FunctionType(I64, [I64, I64]), name="f")
        self.builder = ir.IRBuilder(fn.append_basic_block("a"))
        self.fn = fn
        self._int_ops = {}


def test_constants_fold_with_wrapping_and_identities_emit_nothing():
    g = _Gen()
    x, y = g.fn.args
    c = lambda t, v: ir.Constant(t, v)  # noqa: E731
    assert g.int_op("mul", c(I64, 6), c(I64, 7)).constant == 42
    assert g.int_op("add", c(I64, 2 ** 63 - 1), c(I64, 1)).constant == -2 ** 63
    assert g.int_op("sub", c(I32, -2 ** 31), c(I32, 1)).constant == 2 ** 31 - 1
    assert g.int_op("mul", c(I32, 65536), c(I32, 65536)).constant == 0
    assert g.int_op("add", x, c(I64, 0)) is x and g.int_op("add", c(I64, 0), y) is y
    assert g.int_op("sub", x, c(I64, 0)) is x and g.int_op("mul", c(I64, 1), y) is y
    assert g.int_op("mul", x, c(I64, 0)).constant == 0
    assert not g.builder.block.instructions  # nothing emitted
    # 0 - x is not x
    assert isinstance(g.int_op("sub", c(I64, 0), x), ir.Instruction)


def test_the_same_operation_is_emitted_once_per_block():
    g = _Gen()
    x, y = g.fn.args
    a = g.int_op("mul", x, ir.Constant(I64, 8), ("nsw",))
    assert g.int_op("mul", x, ir.Constant(I64, 8), ("nsw",)) is a  # equal constants, two objects
    assert g.int_op("mul", x, ir.Constant(I64, 8)) is not a  # other flags
    assert g.int_op("mul", x, ir.Constant(I64, 9), ("nsw",)) is not a
    g.builder.position_at_end(g.fn.append_basic_block("b"))
    assert g.int_op("mul", x, ir.Constant(I64, 8), ("nsw",)) is not a  # another block


def test_an_unrolled_tile_emits_its_index_arithmetic_once_and_matches_numpy():
    A = tl.Input("A", (tl.Size("M"), tl.Size("N")), tl.float32)
    x, y = tl.Var("x"), tl.Var("y")
    B = tl.Func("B")
    B[y, x] = A[y, x] * 2.0 + A[y, x + 0] + 1.0
    s = tl.Schedule(B)
    yo, yi = s[B].split(y, 4)
    xo, xi = s[B].split(x, 3)
    s[B].reorder(yo, xo, yi, xi).unroll(yi).unroll(xi)
    text, _ = codegen.generate(lower(s.pipeline, s), host_target())
    assert not any(line.rstrip().endswith(", 0") and " = sub " in line
                   for line in text.splitlines())  # no x - 0
    rhs: set[str] = set()
    for line in text.splitlines():
        if line.endswith(":"):  # a new basic block
            rhs = set()
        elif any(f" = {op} " in line for op in ("add", "sub", "mul")):
            r = line.split(" = ", 1)[1]
            assert r not in rhs, line  # emitted once in its block
            rhs.add(r)
    kern = tl.compile(B, s)
    for m, n in [(1, 1), (7, 5), (13, 11)]:
        a = np.random.default_rng(m).random((m, n), dtype=np.float32)
        np.testing.assert_allclose(kern(a), a * 2 + a + 1, rtol=1e-6)
