"""Loop-nest IR -> LLVM IR (llvmlite.ir), for the host target.

The kernel is ``i32 @name(T0* noalias %in0, ..., Tout* noalias %out, i64 %size0, ...)`` returning 0,
or 1 when an internal allocation failed. Buffers are row-major; a Load/Store at indices ``(i0, ..)``
reads element ``((i0 - min0) * ext1 + (i1 - min1)) * ext2 + ...``.

Facts the generated code states, because they hold:
- ``noalias`` on every buffer argument: inputs are only read and the runtime never passes an output
  that overlaps an input (it computes into a temporary instead). Without it LLVM must assume
  a store may change any input and reloads operands instead of keeping them in registers.
- ``contract`` on float arithmetic (FMA contraction), ``reassoc`` on reduction updates only
  (the reduction policy of docs/architecture.md §5: reductions are associative).
- ``nsw``/``inbounds`` on buffer offset arithmetic (offsets are checked in bounds at call time).

Semantics shared with the reference evaluator: integer ``//`` and ``%`` are floor division and
modulo with 0 for a zero divisor (no trap, as NumPy); float ``//`` and ``%`` follow NumPy's
``divmod`` algorithm; max/min propagate NaN (``llvm.maximum``); float-to-int casts saturate and map
NaN to 0 (``llvm.fptosi.sat``).

``CodeGen`` is composed from one module per job: ``types.py`` (dtypes -> LLVM types),
``expressions.py``, ``vector_math.py`` (exp/log polynomials), ``memory.py`` (addresses, loads,
stores, allocation), ``loops.py`` (statements, serial/vector/unrolled loops) and ``parallel.py``
(outlining onto the OpenMP runtime); this module holds the kernel's signature and entry.
"""

from __future__ import annotations

import re

import llvmlite.ir as ir

from tensorlang.expr import Expr
from tensorlang.schedule.ir import Buffer, LoweredFunc

from .expressions import ExpressionGen
from .loops import LoopGen
from .memory import MemoryGen
from .parallel import ParallelGen
from .row_bases import RowKey
from .target import Target
from .types import F16, F32, F64, I1, I8, I16, I32, I64, memory_type
from .vector_math import VectorMathGen


class CodeGen(ExpressionGen, VectorMathGen, MemoryGen, LoopGen, ParallelGen):
    """Builds the LLVM module of one lowered kernel. Use :func:`generate`."""

    def __init__(self, f: LoweredFunc, target: Target, module: ir.Module | None = None) -> None:
        self.f = f
        self.target = target
        if module is None:
            module = ir.Module(name=f.name)
            module.triple = target.triple
        self.module = module
        args = [*f.inputs, *f.outputs]
        self.fn = self.declare([memory_type(b.dtype).as_pointer() for b in args]
                               + [I64] * len(f.sizes))
        self.ptrs: dict[str, ir.Value] = {}
        for b, a in zip(args, self.fn.args):
            a.name = b.name
            a.add_attribute("noalias")
            self.ptrs[b.name] = a
        self.sizes: dict[str, ir.Value] = {}
        for s, a in zip(f.sizes, self.fn.args[len(args):]):
            a.name = s
            self.sizes[s] = a
        self.vars: dict[str, ir.Value] = {}
        self.live_allocs: list[ir.Value] = []  # the CUDA host code's device buffers
        #: the current function's heap buffers, a stack slot each that holds the buffer while
        #: it is live and null otherwise, and its one failure exit (``MemoryGen.fail``)
        self.heap_slots: list[ir.AllocaInstr] = []
        self.cleanup: tuple[ir.Block, ir.PhiInstr] | None = None
        self.allocas, self.builder = self._blocks(self.fn)
        self._intrinsics: dict[str, ir.Function] = {}
        self._loop_md = 0
        self.access_group: ir.MDValue | None = None  # of the independent loop being emitted
        self._outlined = 0
        self.in_parallel = False
        self.uses_parallel = False
        self.num_threads = 0
        self.scoped: dict[str, list[Buffer]] = {}  # buffers by enclosing Allocate, innermost last
        self._entry_values: dict[int, dict[tuple, ir.Value]] = {}
        self._size_only_memo: dict[tuple, bool] = {}
        #: index arithmetic already emitted in the current Store (one basic block), by expression
        #: and the LLVM values its Vars are bound to: 25 taps of a 5x5 stencil share one base
        self._cse: dict[tuple, ir.Value] | None = None
        self._var_names_memo: dict[tuple, tuple[str, ...]] = {}
        #: integer arithmetic already emitted, by operation, operands and basic block
        #: (``ExpressionGen.int_op``)
        self._int_ops: dict[tuple, tuple] = {}
        self.vec: tuple[str, int] | None = None  # (loop variable, lanes) of an explicit vector loop
        #: the live lanes (<lanes x i1>) of a masked vector loop's chunk; None: all
        self.mask: ir.Value | None = None
        self.lane0 = False  # evaluate the vector loop variable as a scalar (addresses, lanes)
        #: the expressions of the enclosing ``let``s, by name: a vector loop's extent hoisted
        #: into one (``let t = min(8, N - 8 * x.o)``) keeps its lane cap
        self.lets: dict[str, Expr] = {}
        #: the reads of the innermost serial loop being emitted that load from row base pointers
        #: (``row_bases.row_reads``)
        self.row_keys: frozenset[RowKey] = frozenset()

    def declare(self, arg_types: list[ir.Type]) -> ir.Function:
        """The entry function: ``i32 @name(buffers..., sizes...)``; a subclass may add
        arguments after these or change the return type and calling convention."""
        return ir.Function(self.module, ir.FunctionType(I32, arg_types), name=self.f.name)

    @staticmethod
    def _blocks(fn: ir.Function) -> tuple[ir.IRBuilder, ir.IRBuilder]:
        """An ``entry`` block that only holds allocas (closed by :meth:`_close`) and a builder
        for the body, so that stack slots are static allocas wherever they are requested."""
        entry = ir.IRBuilder(fn.append_basic_block("entry"))
        body = ir.IRBuilder(fn.append_basic_block("body"))
        return entry, body

    def _close(self) -> None:
        self.allocas.branch(self.fn.basic_blocks[1])
        self.close_cleanup()

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        if name not in self._intrinsics:
            fn = self.module.globals.get(name)
            if fn is None:
                fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
            self._intrinsics[name] = fn
        return self._intrinsics[name]

    def _suffix(self, t: ir.Type) -> str:
        if isinstance(t, ir.VectorType):
            return f"v{t.count}{self._suffix(t.element)}"
        return {F16: "f16", F32: "f32", F64: "f64", I32: "i32", I64: "i64", I16: "i16", I8: "i8",
                I1: "i1"}[t]


    def build(self) -> ir.Module:
        self.stmt(self.f.body)
        self.builder.ret(ir.Constant(I32, 0))
        self._close()
        return self.module


#: a loop's metadata node as llvmlite prints it (``!2 = !{ !"TL_LOOP_1", !1 }``; older llvmlite
#: versions print no spaces)
_LOOP_MD = re.compile(r'^(![0-9]+) = !\{ ?!"TL_LOOP_[0-9]+"(.*?) ?\}$', re.M)
#: an access group as llvmlite prints it (``!3 = !{ !"TL_GROUP_1" }``): must be distinct, empty
_GROUP_MD = re.compile(r'^(![0-9]+) = !\{ ?!"TL_GROUP_[0-9]+" ?\}$', re.M)


def generate(f: LoweredFunc, target: Target, num_threads: int = 0) -> tuple[str, bool]:
    """LLVM IR text of the kernel for lowered function ``f``, and whether it uses parallel loops.

    Raises:
        CompileError: the loop nest uses a construct this backend does not support.
    """
    cg = CodeGen(f, target)
    cg.num_threads = num_threads
    return module_text(cg.build()), cg.uses_parallel


def module_text(module: ir.Module) -> str:
    """The LLVM IR text of ``module``, with its loop metadata made valid."""
    # llvm.loop nodes must be distinct and refer to themselves, access groups distinct and
    # empty (llvmlite cannot say so)
    text = _LOOP_MD.sub(lambda m: f"{m.group(1)} = distinct !{{{m.group(1)}{m.group(2)}}}",
                        str(module))
    return _GROUP_MD.sub(lambda m: f"{m.group(1)} = distinct !{{}}", text)

