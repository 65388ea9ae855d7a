"""Loop-nest IR -> LLVM IR (llvmlite.ir), for the host target.

The kernel is ``i32 @name(T0* noalias %in0, ..., Tout* noalias %out, i64 %size0, ...)`` returning 0,
or 1 when an internal allocation failed. Buffers are row-major; a Load/Store at indices ``(i0, ..)``
reads element ``((i0 - min0) * ext1 + (i1 - min1)) * ext2 + ...``.

Facts the generated code states, because they hold:
- ``noalias`` on every buffer argument: inputs are only read and the runtime never passes an output
  that overlaps an input (it computes into a temporary instead). Worth 3-4x on GEMM (notes B3).
- ``contract`` on float arithmetic (FMA contraction), ``reassoc`` on reduction updates only
  (the reduction policy of docs/architecture.md §5: reductions are associative).
- ``nsw``/``inbounds`` on buffer offset arithmetic (offsets are checked in bounds at call time).

Semantics shared with the reference evaluator: integer ``//`` and ``%`` are floor division and
modulo with 0 for a zero divisor (no trap, as NumPy); float ``//`` and ``%`` follow NumPy's
``divmod`` algorithm; max/min propagate NaN (``llvm.maximum``); float-to-int casts saturate and map
NaN to 0 (``llvm.fptosi.sat``).
"""

from __future__ import annotations

import functools
import re

import llvmlite.ir as ir

from tensorlang.schedule.ir import (
    Allocate,
    Block,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    LoweredFunc,
    ProducerConsumer,
    Stmt,
    Store,
)
from tensorlang.dtypes import DType
from tensorlang.dtypes import int64 as I64_DT
from tensorlang.errors import CompileError
from tensorlang.expr import BinOp, Call, Cast, Cmp, Const, Expr, Not, Select, Size, Var, walk

from .target import Target

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
from tensorlang.schedule.realize import MAX_UNROLL  # noqa: E402

MAX_STACK_BYTES = 64 * 1024
#: heap buffers of at least this many bytes are asked to live on transparent huge pages (Linux)
HUGE_ALLOC_MIN = 4 << 20
HUGE_PAGE_BYTES = 2 << 20
MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux
#: a parallel loop is cut into about this many chunks per thread, claimed dynamically
CHUNKS_PER_THREAD = 4
_FLOAT_FLAGS = ("contract",)
_REDUCE_FLAGS = ("reassoc", "contract")


def value_type(d: DType) -> ir.Type:
    """The LLVM type of a value of dtype ``d`` in registers (bool is i1)."""
    return {DType.bool_: I1, DType.int32: I32, DType.int64: I64, DType.float32: F32,
            DType.float64: F64}[d]


def memory_type(d: DType) -> ir.Type:
    """The LLVM type of an element of dtype ``d`` in memory (bool is one byte, as NumPy)."""
    return I8 if d is DType.bool_ else value_type(d)


class CodeGen:
    """Builds the LLVM module of one lowered kernel. Use :func:`generate`."""

    def __init__(self, f: LoweredFunc, target: Target) -> None:
        self.f = f
        self.target = target
        self.module = ir.Module(name=f.name)
        self.module.triple = target.triple
        args = [*f.inputs, f.output]
        arg_types = [memory_type(b.dtype).as_pointer() for b in args] + [I64] * len(f.sizes)
        fnty = ir.FunctionType(I32, arg_types)
        self.fn = ir.Function(self.module, fnty, name=f.name)
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
        self.live_allocs: list[ir.Value] = []
        self.allocas, self.builder = self._blocks(self.fn)
        self._intrinsics: dict[str, ir.Function] = {}
        self._loop_md = 0
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
        self.vec: tuple[str, int] | None = None  # (loop variable, lanes) of an explicit vector loop
        self.lane0 = False  # evaluate the vector loop variable as a scalar (addresses, lanes)

    # -- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _blocks(fn: ir.Function) -> tuple[ir.IRBuilder, ir.IRBuilder]:
        """An ``entry`` block that only holds allocas (closed by :meth:`_close`) and a builder
        for the body, so that stack slots are static allocas wherever they are requested."""
        entry = ir.IRBuilder(fn.append_basic_block("entry"))
        body = ir.IRBuilder(fn.append_basic_block("body"))
        return entry, body

    def _close(self) -> None:
        self.allocas.branch(self.fn.basic_blocks[1])

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
        return {F32: "f32", F64: "f64", I32: "i32", I64: "i64", I8: "i8", I1: "i1"}[t]

    @staticmethod
    def const(t: ir.Type, value: object) -> ir.Constant:
        """A constant of type ``t``, splatted when ``t`` is a vector type."""
        if isinstance(t, ir.VectorType):
            return ir.Constant(t, [value] * t.count)
        return ir.Constant(t, value)

    def splat(self, v: ir.Value, lanes: int) -> ir.Value:
        b = self.builder
        vt = ir.VectorType(v.type, lanes)
        undef = ir.Constant(vt, ir.Undefined)
        one = b.insert_element(undef, v, ir.Constant(I32, 0))
        return b.shuffle_vector(one, undef, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def unify(self, *vals: ir.Value) -> list[ir.Value]:
        """Broadcast scalars to the vector width of any vector operand."""
        lanes = next((v.type.count for v in vals if isinstance(v.type, ir.VectorType)), None)
        if lanes is None:
            return list(vals)
        return [v if isinstance(v.type, ir.VectorType) else self.splat(v, lanes) for v in vals]

    def call_intrinsic(self, base: str, *args: ir.Value, extra: tuple = (),
                       builder: ir.IRBuilder | None = None) -> ir.Value:
        """Call ``llvm.<base>.<type of args[0]>`` (with ``builder``, default the current one)."""
        t = args[0].type
        fn = self.intrinsic(f"llvm.{base}.{self._suffix(t)}", t,
                            [a.type for a in args] + [e.type for e in extra])
        return (builder or self.builder).call(fn, [*args, *extra])

    def fop(self, op: str, a: ir.Value, b: ir.Value, flags: tuple = _FLOAT_FLAGS) -> ir.Value:
        inst = getattr(self.builder, op)(a, b)
        inst.flags.extend(flags)
        return inst

    # -- expressions -------------------------------------------------------------------------------
    def expr(self, e: Expr) -> ir.Value:
        """Emit ``e``. Expressions of sizes only (strides, extents, bounds) are emitted once per
        function, in its entry block, which dominates every use."""
        if isinstance(e, (BinOp, Cast)) and self._size_only(e):
            cache = self._entry_values.setdefault(id(self.fn), {})
            v = cache.get(e.key)
            if v is None:
                saved, self.builder = self.builder, self.allocas
                try:
                    v = self._expr(e)
                finally:
                    self.builder = saved
                cache[e.key] = v
            return v
        if self._cse is not None and isinstance(e, BinOp) and e.dtype.is_int:
            names = self._var_names_memo.get(e.key)
            if names is None:
                names = tuple(sorted({n.name for n in walk(e) if isinstance(n, Var)}))
                self._var_names_memo[e.key] = names
            key = (e.key, self.lane0, self.vec, tuple(id(self.vars.get(n)) for n in names))
            v = self._cse.get(key)
            if v is None:
                v = self._cse[key] = self._expr(e)
            return v
        return self._expr(e)

    def _size_only(self, e: Expr) -> bool:
        k = e.key
        r = self._size_only_memo.get(k)
        if r is None:
            r = not any(isinstance(n, (Var, Load)) for n in walk(e))
            self._size_only_memo[k] = r
        return r

    def _expr(self, e: Expr) -> ir.Value:
        b = self.builder
        if isinstance(e, Const):
            t = value_type(e.dtype)
            return ir.Constant(t, int(e.value) if not e.dtype.is_float else float(e.value))
        if isinstance(e, Var):
            v = self.vars[e.name]
            if self.vec is not None and e.name == self.vec[0] and not self.lane0:
                lanes = self.vec[1]
                return b.add(self.splat(v, lanes),
                             ir.Constant(ir.VectorType(I64, lanes), list(range(lanes))))
            return v
        if isinstance(e, Size):
            return self.sizes[e.name]
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, BinOp):
            x, y = self.unify(self.expr(e.a), self.expr(e.b))
            return self.binop(e.op, x, y, e.dtype)
        if isinstance(e, Cmp):
            x, y = self.unify(self.expr(e.a), self.expr(e.b))
            return self.compare(e.op, x, y, e.a.dtype)
        if isinstance(e, Not):
            a = self.expr(e.a)
            return b.xor(a, self.const(a.type, 1))
        if isinstance(e, Call):
            return self.call(e.name, self.expr(e.args[0]), e.dtype)
        if isinstance(e, Select):
            c, t, f = self.unify(self.expr(e.cond), self.expr(e.t), self.expr(e.f))
            return b.select(c, t, f)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.value), e.value.dtype, e.dtype)
        raise CompileError(f"codegen: unsupported expression {type(e).__name__}: {e}")

    def binop(self, op: str, x: ir.Value, y: ir.Value, d: DType,
              flags: tuple = _FLOAT_FLAGS) -> ir.Value:
        b = self.builder
        if d.is_float:
            if op in ("add", "sub", "mul", "div"):
                return self.fop({"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}[op],
                                x, y, flags)
            if op in ("max", "min"):
                return self.call_intrinsic("maximum" if op == "max" else "minimum", x, y)
            if op in ("floordiv", "mod"):
                return self.float_divmod(x, y, op)
        elif d.is_bool:
            if op in ("and", "max"):
                return b.and_(x, y) if op == "and" else b.or_(x, y)
            if op in ("or", "min"):
                return b.or_(x, y) if op == "or" else b.and_(x, y)
        else:
            if op == "add":
                return b.add(x, y)
            if op == "sub":
                return b.sub(x, y)
            if op == "mul":
                return b.mul(x, y)
            if op in ("max", "min"):
                return self.call_intrinsic("smax" if op == "max" else "smin", x, y)
            if op in ("floordiv", "mod"):
                return self.int_divmod(x, y, op)
        raise CompileError(f"codegen: unsupported operator {op} on {d}")

    def int_divmod(self, x: ir.Value, y: ir.Value, op: str) -> ir.Value:
        """Floor division / modulo; 0 for y == 0; y == -1 handled without the x86 overflow trap."""
        b = self.builder
        t = x.type
        zero, one, mone = self.const(t, 0), self.const(t, 1), self.const(t, -1)
        if isinstance(y, ir.Constant) and isinstance(y.type, ir.IntType) and \
                y.constant not in (0, -1):
            safe = y
            special = None
        else:
            special = b.or_(b.icmp_signed("==", y, zero), b.icmp_signed("==", y, mone))
            safe = b.select(special, one, y)
        q = b.sdiv(x, safe)
        r = b.srem(x, safe)
        fix = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, safe), zero))
        if op == "floordiv":
            res = b.select(fix, b.sub(q, one), q)
            if special is not None:
                alt = b.select(b.icmp_signed("==", y, zero), zero, b.sub(zero, x))
                res = b.select(special, alt, res)
        else:
            res = b.select(fix, b.add(r, safe), r)
            if special is not None:
                res = b.select(special, zero, res)
        return res

    def float_divmod(self, x: ir.Value, y: ir.Value, op: str) -> ir.Value:
        """NumPy's ``npy_divmod``: floor division and modulo that agree with Python's."""
        b = self.builder
        t = x.type
        zero, one, half = self.const(t, 0.0), self.const(t, 1.0), self.const(t, 0.5)
        mod = b.frem(x, y)
        div = b.fdiv(b.fsub(x, mod), y)
        mod_nz = b.fcmp_unordered("!=", mod, zero)
        sign_differs = b.icmp_unsigned("!=", b.fcmp_ordered("<", y, zero),
                                       b.fcmp_ordered("<", mod, zero))
        adjust = b.and_(b.fcmp_ordered("!=", mod, zero), sign_differs)
        mod2 = b.select(adjust, b.fadd(mod, y), mod)
        div2 = b.select(adjust, b.fsub(div, one), div)
        mod3 = b.select(mod_nz, mod2, self.call_intrinsic("copysign", zero, y))
        floor = self.call_intrinsic("floor", div2)
        floor2 = b.select(b.fcmp_ordered(">", b.fsub(div2, floor), half), b.fadd(floor, one),
                          floor)
        fdiv = b.select(b.fcmp_unordered("!=", div2, zero), floor2,
                        self.call_intrinsic("copysign", zero, b.fdiv(x, y)))
        y_zero = b.fcmp_ordered("==", y, zero)
        if op == "floordiv":
            return b.select(y_zero, b.fdiv(x, y), fdiv)
        return b.select(y_zero, mod, mod3)

    def exp_f32(self, x: ir.Value) -> ir.Value:
        """``exp`` of float32 scalars or vectors as straight-line IR (no libm call per lane).

        Cephes ``expf``: ``exp(x) = 2**n * p(r)`` with ``n = round(x / ln 2)``, ``r = x - n ln 2``
        (ln 2 in two parts) and a degree-6 polynomial ``p``; relative error <= 2.5e-7 (about 2
        ulp) on [-87.3, 88.7]; exactly ``inf`` above 88.72, ``0`` below -87.34 (NumPy returns
        subnormals there, below 1.2e-38), NaN for NaN. See also: Halide ``fast_exp``; SLEEF.
        """
        b = self.builder
        t = x.type
        c = functools.partial(self.const, t)
        lo, hi = -87.33654475, 88.72283935546875
        big = b.fcmp_ordered(">", x, c(88.72283935546875))
        small = b.fcmp_ordered("<", x, c(lo))
        nan = b.fcmp_unordered("uno", x, x)
        xc = self.call_intrinsic("minnum", self.call_intrinsic("maxnum", x, c(lo)), c(hi))
        fx = self.call_intrinsic("floor", self.fop("fadd", self.fop("fmul", xc, c(
            1.44269504088896341)), c(0.5)))
        r = self.fop("fsub", xc, self.fop("fmul", fx, c(0.693359375)))
        r = self.fop("fsub", r, self.fop("fmul", fx, c(-2.12194440e-4)))
        z = self.fop("fmul", r, r)
        y = c(1.9875691500e-4)
        for coef in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                     5.0000001201e-1):
            y = self.fop("fadd", self.fop("fmul", y, r), c(coef))
        y = self.fop("fadd", self.fop("fadd", self.fop("fmul", y, z), r), c(1.0))
        it = ir.VectorType(I32, t.count) if isinstance(t, ir.VectorType) else I32
        n = b.fptosi(fx, it)
        # n reaches 128 near the top of the range: scale by 2**(n - 1) and then by 2
        top = b.icmp_signed(">", n, self.const(it, 127))
        n = b.select(top, b.sub(n, self.const(it, 1)), n)
        pow2 = b.bitcast(b.shl(b.add(n, self.const(it, 127)), self.const(it, 23)), t)
        res = self.fop("fmul", self.fop("fmul", y, pow2), b.select(top, c(2.0), c(1.0)))
        res = b.select(big, c(float("inf")), res)
        res = b.select(small, c(0.0), res)
        return b.select(nan, x, res)

    def log_f32(self, x: ir.Value) -> ir.Value:
        """Natural ``log`` of float32 scalars or vectors as straight-line IR.

        Cephes ``logf``: ``x = m * 2**e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` from the bits,
        ``log(x) = log(m) + e ln 2`` with a degree-9 polynomial for ``log(1 + f)``; relative error
        <= 2e-7 for normal and subnormal inputs; ``log(0) = -inf``, ``log(<0) = NaN``,
        ``log(inf) = inf``, NaN for NaN (NumPy's results). See also: Halide ``fast_log``.
        """
        b = self.builder
        t = x.type
        c = functools.partial(self.const, t)
        it = ir.VectorType(I32, t.count) if isinstance(t, ir.VectorType) else I32
        ci = functools.partial(self.const, it)
        sub = b.fcmp_ordered("<", x, c(1.17549435e-38))  # subnormal (or <= 0): scale up first
        xs = b.select(sub, self.fop("fmul", x, c(8388608.0)), x)
        bits = b.bitcast(xs, it)
        e = b.sub(b.and_(b.lshr(bits, ci(23)), ci(0xFF)), ci(126))
        e = b.select(sub, b.sub(e, ci(23)), e)
        m = b.bitcast(b.or_(b.and_(bits, ci(0x807FFFFF)), ci(0x3F000000)), t)  # [0.5, 1)
        small = b.fcmp_ordered("<", m, c(0.707106781186547524))
        ef = b.sitofp(b.select(small, b.sub(e, ci(1)), e), t)
        m = b.select(small, self.fop("fadd", m, m), m)
        f = self.fop("fsub", m, c(1.0))
        z = self.fop("fmul", f, f)
        y = c(7.0376836292e-2)
        for coef in (-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                     -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1):
            y = self.fop("fadd", self.fop("fmul", y, f), c(coef))
        y = self.fop("fmul", self.fop("fmul", y, f), z)
        y = self.fop("fadd", y, self.fop("fmul", ef, c(-2.12194440e-4)))
        y = self.fop("fadd", y, self.fop("fmul", z, c(-0.5)))
        res = self.fop("fadd", self.fop("fadd", f, y), self.fop("fmul", ef, c(0.693359375)))
        res = b.select(b.fcmp_ordered("==", x, c(0.0)), c(float("-inf")), res)
        res = b.select(b.fcmp_ordered("<", x, c(0.0)), c(float("nan")), res)
        res = b.select(b.fcmp_ordered("==", x, c(float("inf"))), x, res)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    def compare(self, op: str, x: ir.Value, y: ir.Value, d: DType) -> ir.Value:
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[op]
        if d.is_float:
            if op == "ne":
                return self.builder.fcmp_unordered(sym, x, y)
            return self.builder.fcmp_ordered(sym, x, y)
        if d.is_bool:
            return self.builder.icmp_unsigned(sym, x, y)
        return self.builder.icmp_signed(sym, x, y)

    def call(self, name: str, x: ir.Value, d: DType) -> ir.Value:
        if name == "exp" and d is DType.float32:
            return self.exp_f32(x)
        if name == "log" and d is DType.float32:
            return self.log_f32(x)
        if name in ("exp", "log", "sqrt"):
            return self.call_intrinsic(name, x)
        if name == "abs":
            if d.is_float:
                return self.call_intrinsic("fabs", x)
            return self.call_intrinsic("abs", x, extra=(ir.Constant(I1, 0),))
        if name == "neg":
            return self.builder.fneg(x) if d.is_float else self.builder.neg(x)
        raise CompileError(f"codegen: unsupported function {name}")

    def cast(self, x: ir.Value, src: DType, dst: DType) -> ir.Value:
        b = self.builder
        t = value_type(dst)
        if isinstance(x.type, ir.VectorType):
            t = ir.VectorType(t, x.type.count)
        if src is dst:
            return x
        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", x, self.const(x.type, 0.0))
            return b.icmp_signed("!=", x, self.const(x.type, 0))
        if src.is_bool:
            return b.uitofp(x, t) if dst.is_float else b.zext(x, t)
        if src.is_float and dst.is_float:
            return b.fpext(x, t) if dst.itemsize > src.itemsize else b.fptrunc(x, t)
        if src.is_int and dst.is_int:
            return b.sext(x, t) if dst.itemsize > src.itemsize else b.trunc(x, t)
        if src.is_int and dst.is_float:
            return b.sitofp(x, t)
        fn = self.intrinsic(f"llvm.fptosi.sat.{self._suffix(t)}.{self._suffix(x.type)}", t,
                            [x.type])
        return b.call(fn, [x])

    # -- memory ----------------------------------------------------------------------------------
    def buffer(self, name: str) -> Buffer:
        """The geometry of ``name``: from the innermost enclosing Allocate, else the argument."""
        scoped = self.scoped.get(name)
        return scoped[-1] if scoped else self.f.buffers[name]

    def address(self, name: str, indices: tuple[Expr, ...]) -> ir.Value:
        b = self.builder
        buf = self.buffer(name)
        flat: ir.Value | None = None
        for d, (ix, lo) in enumerate(zip(indices, buf.mins)):
            rel = b.sub(self.expr(ix), self.expr(lo), flags=["nsw"])
            if flat is None:
                flat = rel
            else:
                flat = b.add(b.mul(flat, self.expr(buf.extents[d]), flags=["nsw"]), rel,
                             flags=["nsw"])
        if flat is None:
            flat = ir.Constant(I64, 0)
        return b.gep(self.ptrs[name], [flat], inbounds=True)

    # -- statements -------------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        b = self.builder
        if isinstance(s, Block):
            for c in s.stmts:
                self.stmt(c)
        elif isinstance(s, ProducerConsumer):
            self.stmt(s.body)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, LetStmt):
            self.vars[s.var] = self.expr(s.value)
            self.stmt(s.body)
            del self.vars[s.var]
        elif isinstance(s, IfThenElse):
            cond = self.expr(s.cond)
            if s.otherwise is None:
                with b.if_then(cond):
                    self.stmt(s.then)
            else:
                with b.if_else(cond) as (then, otherwise):
                    with then:
                        self.stmt(s.then)
                    with otherwise:
                        self.stmt(s.otherwise)
        elif isinstance(s, Allocate):
            self.allocate(s)
        else:
            raise CompileError(f"codegen: unsupported statement {type(s).__name__}")

    # -- vector memory access ----------------------------------------------------------------------
    def _pattern(self, indices: tuple[Expr, ...]) -> str:
        """How an access varies with the vector loop variable: ``scalar`` (not at all),
        ``contiguous`` (unit stride in the last dimension) or ``gather`` (anything else)."""
        if self.vec is None or self.lane0:
            return "scalar"
        var = self.vec[0]
        coefs = []
        for ix in indices:
            c = _linear_coeff(ix, var)
            if c is None:
                return "gather"
            coefs.append(c)
        if not any(coefs):
            return "scalar"
        if coefs[-1] == 1 and not any(coefs[:-1]):
            return "contiguous"
        return "gather"

    def _lane(self, lane: int) -> None:
        var, _ = self.vec  # type: ignore[misc]
        self.lane0 = True
        self.vars[var] = self._vbase if lane == 0 else self.builder.add(
            self._vbase, ir.Constant(I64, lane))

    def _end_lane(self) -> None:
        self.lane0 = False
        self.vars[self.vec[0]] = self._vbase  # type: ignore[index]

    def load(self, e: Load) -> ir.Value:
        b = self.builder
        mt = memory_type(e.dtype)
        pattern = self._pattern(e.indices)
        if pattern == "scalar":
            v = b.load(self.address(e.buffer, e.indices), align=e.dtype.itemsize)
        elif pattern == "contiguous":
            lanes = self.vec[1]  # type: ignore[index]
            self._lane(0)
            ptr = self.address(e.buffer, e.indices)
            self._end_lane()
            v = b.load(b.bitcast(ptr, ir.VectorType(mt, lanes).as_pointer()),
                       align=e.dtype.itemsize)
        else:
            lanes = self.vec[1]  # type: ignore[index]
            v = ir.Constant(ir.VectorType(mt, lanes), ir.Undefined)
            for lane in range(lanes):
                self._lane(lane)
                x = b.load(self.address(e.buffer, e.indices), align=e.dtype.itemsize)
                self._end_lane()
                v = b.insert_element(v, x, ir.Constant(I32, lane))
        return b.icmp_unsigned("!=", v, self.const(v.type, 0)) if e.dtype.is_bool else v

    def store(self, s: Store) -> None:
        self._cse = {}  # the Store's value, indices and address: one basic block
        try:
            self._store(s)
        finally:
            self._cse = None

    def _store(self, s: Store) -> None:
        b = self.builder
        d = self.buffer(s.buffer).dtype
        value = self.expr(s.value)
        pattern = self._pattern(s.indices)
        if pattern != "scalar" and not isinstance(value.type, ir.VectorType):
            value = self.splat(value, self.vec[1])  # type: ignore[index]
        if s.reduce_op is not None:
            old = self.load(Load(s.buffer, s.indices, d))
            op = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}[s.reduce_op]
            value = self.binop(op, old, value, d, flags=_REDUCE_FLAGS)
        if d.is_bool:
            value = b.zext(value, ir.VectorType(I8, value.type.count)
                           if isinstance(value.type, ir.VectorType) else I8)
        if pattern == "scalar":
            b.store(value, self.address(s.buffer, s.indices), align=d.itemsize)
        elif pattern == "contiguous":
            self._lane(0)
            ptr = self.address(s.buffer, s.indices)
            self._end_lane()
            b.store(value, b.bitcast(ptr, value.type.as_pointer()), align=d.itemsize)
        else:
            for lane in range(self.vec[1]):  # type: ignore[index]
                self._lane(lane)
                ptr = self.address(s.buffer, s.indices)
                self._end_lane()
                b.store(b.extract_element(value, ir.Constant(I32, lane)), ptr, align=d.itemsize)

    def vector_loop(self, s: For, lanes: int) -> None:
        """Emit the body with the loop variable as a vector of lanes, in chunks no wider than a
        native register (e.g. 32 float32 lanes = 2 x 16 on AVX-512; 56 = 16 + 16 + 16 + 8):
        equal-width loads and stores of each accumulator let LLVM keep it in a register across
        outer loops, and a tile as wide as the image row wastes no lanes."""
        itemsize = max((self.buffer(n).dtype.itemsize for n in _buffers_in(s.body)
                        if n in self.f.buffers or self.scoped.get(n)), default=4)
        native = max(1, self.target.vector_bits // (8 * itemsize))
        outer_vec, outer_base = self.vec, getattr(self, "_vbase", None)
        base = self.expr(s.min)
        saved = self.vars.get(s.var)
        start = 0
        while start < lanes:
            # whole native vectors, then a tail of descending powers of two (56 float32 lanes on
            # AVX-512: 16 + 16 + 16 + 8), so no chunk is an odd-width vector LLVM must widen
            width = min(native, 1 << ((lanes - start).bit_length() - 1))
            self._vbase = base if start == 0 else self.builder.add(base, ir.Constant(I64, start))
            self.vars[s.var] = self._vbase
            if width == 1:
                self.vec = None
                self.stmt(s.body)
            else:
                self.vec = (s.var, width)
                self.stmt(s.body)
            start += width
        self.vec, self._vbase = outer_vec, outer_base
        if saved is None:
            del self.vars[s.var]
        else:
            self.vars[s.var] = saved

    def _vectorizable(self, s: For, lanes: int) -> bool:
        def mentions(e: Expr) -> bool:
            return any(isinstance(n, Var) and n.name == s.var for n in walk(e))

        def ok(st: Stmt) -> bool:
            if isinstance(st, Block):
                return all(ok(c) for c in st.stmts)
            if isinstance(st, ProducerConsumer):
                return ok(st.body)
            if isinstance(st, Store):
                return any(mentions(i) for i in st.indices)
            if isinstance(st, For):
                return (st.kind in (ForKind.SERIAL, ForKind.UNROLLED) and not mentions(st.min)
                        and not mentions(st.extent) and ok(st.body))
            if isinstance(st, IfThenElse):
                return (not mentions(st.cond) and ok(st.then)
                        and (st.otherwise is None or ok(st.otherwise)))
            return False

        return self.vec is None and 1 < lanes <= 64 and ok(s.body)

    def loop(self, s: For) -> None:
        if s.kind is ForKind.UNROLLED:
            return self.unrolled(s)
        if s.kind is ForKind.PARALLEL and not self.in_parallel:
            return self.parallel(s)
        if s.kind is ForKind.VECTORIZED:
            from tensorlang.affine import const_value

            lanes = const_value(s.extent)
            if lanes is not None and self._vectorizable(s, lanes):
                return self.vector_loop(s, lanes)
        b = self.builder
        lo = self.expr(s.min)
        end = b.add(lo, self.expr(s.extent))
        pre = b.block
        header = self.fn.append_basic_block(f"{s.var}.header")
        body = self.fn.append_basic_block(f"{s.var}.body")
        exit_ = self.fn.append_basic_block(f"{s.var}.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name=s.var)
        iv.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", iv, end), body, exit_)
        b.position_at_end(body)
        outer = self.vars.get(s.var)
        self.vars[s.var] = iv
        self.stmt(s.body)
        nxt = b.add(iv, ir.Constant(I64, 1), flags=["nsw"])
        iv.add_incoming(nxt, b.block)
        br = b.branch(header)
        if s.kind is ForKind.VECTORIZED:
            self.loop_metadata(br, s.width)
        elif s.kind is ForKind.SERIAL and s.width == 1:
            self.loop_metadata(br, 1, vectorize=False)
        b.position_at_end(exit_)
        if outer is None:
            del self.vars[s.var]
        else:
            self.vars[s.var] = outer

    def unrolled(self, s: For) -> None:
        from tensorlang.affine import const_value

        n = const_value(s.extent)
        if n is None or n > MAX_UNROLL:
            raise CompileError(
                f"cannot unroll loop {s.var}: its extent {s.extent} is not a constant of at most "
                f"{MAX_UNROLL}; split it by a constant factor and unroll the inner loop")
        lo = self.expr(s.min)
        outer = self.vars.get(s.var)
        for k in range(n):
            self.vars[s.var] = self.builder.add(lo, ir.Constant(I64, k))
            self.stmt(s.body)
        if outer is None:
            del self.vars[s.var]
        else:
            self.vars[s.var] = outer

    def loop_metadata(self, br: ir.Instruction, width: int, vectorize: bool = True) -> None:
        """Ask LLVM's loop vectorizer for ``width`` lanes, or (``vectorize=False``) to leave the
        loop scalar (``llvm.loop`` metadata; the self-reference is patched into the text by
        :func:`generate`)."""
        m = self.module
        self._loop_md += 1
        props = [m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.enable"),
                                 ir.Constant(I1, int(vectorize))])]
        if width > 1:
            props.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"),
                                         ir.Constant(I32, width)]))
        node = m.add_metadata([ir.MetaDataString(m, f"TL_LOOP_{self._loop_md}"), *props])
        br.set_metadata("llvm.loop", node)

    def parallel(self, s: For) -> None:
        """Outline the loop into ``impl(noalias buffers..., ints..., lo, hi)`` called on each
        thread's chunk by a trampoline that ``GOMP_parallel`` runs on every pool thread."""
        self.uses_parallel = True
        self._outlined += 1
        m, b = self.module, self.builder
        ptr_names = list(self.ptrs)
        int_names = [("size", k) for k in self.sizes] + [("var", k) for k in self.vars]
        ptr_types = [self.ptrs[k].type for k in ptr_names]
        impl_ty = ir.FunctionType(I32, ptr_types + [I64] * (len(int_names) + 2))
        impl = ir.Function(m, impl_ty, name=f"{self.fn.name}.par{self._outlined}")
        impl.linkage = "internal"
        for a, k in zip(impl.args, ptr_names):
            a.name = k
            a.add_attribute("noalias")
        # -- caller: closure = [ptrs..., ints..., min, extent, status, next] as i64 ---------------
        nslots = len(ptr_names) + len(int_names) + 4
        closure = self.allocas.alloca(ir.ArrayType(I64, nslots), name=f"closure{self._outlined}")
        slots = [b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, k)]) for k in range(nslots)]
        vals = [b.ptrtoint(self.ptrs[k], I64) for k in ptr_names]
        vals += [self.sizes[k] if kind == "size" else self.vars[k] for kind, k in int_names]
        lo0 = self.expr(s.min)
        vals += [lo0, self.expr(s.extent), ir.Constant(I64, 0), lo0]
        for slot, v in zip(slots, vals):
            b.store(v, slot)
        tramp = self._trampoline(impl, ptr_types, len(int_names), nslots)
        gomp = self.intrinsic("GOMP_parallel", ir.VoidType(),
                              [tramp.type, I8.as_pointer(), I32, I32])
        b.call(gomp, [tramp, b.bitcast(closure, I8.as_pointer()),
                      ir.Constant(I32, self.num_threads), ir.Constant(I32, 0)])
        status = b.load(slots[-2])
        with b.if_then(b.icmp_signed("!=", status, ir.Constant(I64, 0)), likely=False):
            self.free_all()
            b.ret(b.trunc(status, I32))
        # -- impl: the loop over [lo, hi) with the outer state rebuilt from arguments ------------
        saved = (self.fn, self.builder, self.allocas, self.ptrs, self.sizes, self.vars,
                 self.live_allocs)
        self.fn = impl
        self.allocas, self.builder = self._blocks(impl)
        self.ptrs = dict(zip(ptr_names, impl.args))
        ints = impl.args[len(ptr_names):]
        self.sizes = {k: a for (kind, k), a in zip(int_names, ints) if kind == "size"}
        self.vars = {k: a for (kind, k), a in zip(int_names, ints) if kind == "var"}
        self.live_allocs = []
        self.in_parallel = True
        lo, hi = ints[-2], ints[-1]
        from tensorlang.expr import BinOp, Var

        chunk = For(s.var, Var("__lo"), BinOp("sub", Var("__hi"), Var("__lo"), I64_DT),
                    ForKind.SERIAL, s.body)
        self.vars["__lo"], self.vars["__hi"] = lo, hi
        self.loop(chunk)
        self.builder.ret(ir.Constant(I32, 0))
        self._close()
        self.in_parallel = False
        (self.fn, self.builder, self.allocas, self.ptrs, self.sizes, self.vars,
         self.live_allocs) = saved

    def _trampoline(self, impl: ir.Function, ptr_types: list, n_ints: int,
                    nslots: int) -> ir.Function:
        """The function every pool thread runs: it claims chunks of the loop from a shared
        counter (``atomicrmw add`` on the closure's ``next`` slot) until none are left, and runs
        ``impl`` on each. Dynamic claiming, as Halide's thread pool does, instead of one fixed
        share per thread: a thread the OS deschedules (another process on its core) delays only
        the chunk it holds, and the others take the rest; ``CHUNKS_PER_THREAD`` chunks per
        thread keep the claims' cost (one atomic add each) negligible."""
        m = self.module
        tramp = ir.Function(m, ir.FunctionType(ir.VoidType(), [I8.as_pointer()]),
                            name=f"{impl.name}.tramp")
        tramp.linkage = "internal"
        entry = tramp.append_basic_block("entry")
        head = tramp.append_basic_block("claim")
        body = tramp.append_basic_block("run")
        done = tramp.append_basic_block("done")
        b = ir.IRBuilder(entry)
        arr = b.bitcast(tramp.args[0], ir.ArrayType(I64, nslots).as_pointer())
        slot = [b.gep(arr, [ir.Constant(I32, 0), ir.Constant(I32, k)]) for k in range(nslots)]
        args = [b.inttoptr(b.load(slot[k]), t) for k, t in enumerate(ptr_types)]
        args += [b.load(slot[len(ptr_types) + k]) for k in range(n_ints)]
        base = len(ptr_types) + n_ints
        mn, ext = b.load(slot[base]), b.load(slot[base + 1])
        status, nxt = slot[base + 2], slot[base + 3]
        nt = b.sext(b.call(self.intrinsic("omp_get_num_threads", I32, []), []), I64)
        pieces = b.mul(nt, ir.Constant(I64, CHUNKS_PER_THREAD))
        grain = b.sdiv(b.sub(b.add(ext, pieces), ir.Constant(I64, 1)), pieces)
        grain = self.call_intrinsic("smax", grain, ir.Constant(I64, 1), builder=b)
        end = b.add(mn, ext)
        b.branch(head)
        b.position_at_end(head)
        lo = b.atomic_rmw("add", nxt, grain, "monotonic")
        b.cbranch(b.icmp_signed("<", lo, end), body, done)
        b.position_at_end(body)
        hi = self.call_intrinsic("smin", b.add(lo, grain), end, builder=b)
        rc = b.call(impl, args + [lo, hi])
        with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
            b.store_atomic(b.sext(rc, I64), status, "monotonic", 8)
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()
        return tramp

    def allocate(self, s: Allocate) -> None:
        self.scoped.setdefault(s.buffer.name, []).append(s.buffer)
        try:
            self._allocate(s)
        finally:
            self.scoped[s.buffer.name].pop()

    def _allocate(self, s: Allocate) -> None:
        b = self.builder
        buf = s.buffer
        from tensorlang.affine import const_value

        sizes = [const_value(e) for e in buf.extents]
        if all(c is not None for c in sizes):
            total = buf.dtype.itemsize
            for c in sizes:
                total *= max(int(c), 0)  # type: ignore[arg-type]
            if total <= MAX_STACK_BYTES:
                arr = self.allocas.alloca(memory_type(buf.dtype), max(total // buf.dtype.itemsize, 1),
                                   name=buf.name)
                arr.align = 64
                outer = self.ptrs.get(buf.name)
                self.ptrs[buf.name] = arr
                self.stmt(s.body)
                if outer is None:
                    del self.ptrs[buf.name]
                else:
                    self.ptrs[buf.name] = outer
                return
        n: ir.Value = ir.Constant(I64, buf.dtype.itemsize)
        for e in buf.extents:
            n = b.mul(n, self.expr(e))
        n = self.call_intrinsic("smax", n, ir.Constant(I64, 1))
        raw = b.call(self._heap_alloc(), [n])
        with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(I8.as_pointer(), None)),
                       likely=False):
            self.free_all()
            b.ret(ir.Constant(I32, 1))
        self.ptrs[buf.name] = b.bitcast(raw, memory_type(buf.dtype).as_pointer())
        self.live_allocs.append(raw)
        self.stmt(s.body)
        self.live_allocs.pop()
        free = self.intrinsic("free", ir.VoidType(), [I8.as_pointer()])
        self.builder.call(free, [raw])
        del self.ptrs[buf.name]

    def _heap_alloc(self) -> ir.Function:
        """``i8* @tl.alloc(i64 n)``, the kernel's heap allocator (freed with ``free``): ``malloc``,
        except that on Linux a buffer of at least ``HUGE_ALLOC_MIN`` bytes is 2 MB-aligned and
        advised onto transparent huge pages (``madvise(MADV_HUGEPAGE)``, as NumPy does for its
        arrays of >= 4 MB). glibc serves sizes above 32 MB with a fresh ``mmap`` on every
        call, so a compute_root buffer pays its first-touch page faults on every call; in 2 MB
        pages a 64 MB buffer takes 32 faults instead of 16384. Measured (blur 4096², ``bx``
        at root: 64 MB; both kernels timed alternately in one process): 24.8 ms per call with
        malloc, 10.2 ms with this."""
        fn = self.module.globals.get("tl.alloc")
        if fn is not None:
            return fn
        ptr = I8.as_pointer()
        malloc = self.intrinsic("malloc", ptr, [I64])
        fn = ir.Function(self.module, ir.FunctionType(ptr, [I64]), name="tl.alloc")
        fn.linkage = "internal"
        (n,) = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        if "linux" in self.target.triple:
            big = b.and_(b.icmp_unsigned(">=", n, ir.Constant(I64, HUGE_ALLOC_MIN)),
                         b.icmp_unsigned("<=", n, ir.Constant(I64, 1 << 62)))
            with b.if_then(big):
                size = b.and_(b.add(n, ir.Constant(I64, HUGE_PAGE_BYTES - 1)),
                              ir.Constant(I64, -HUGE_PAGE_BYTES))
                aligned = self.intrinsic("aligned_alloc", ptr, [I64, I64])
                p = b.call(aligned, [ir.Constant(I64, HUGE_PAGE_BYTES), size])
                with b.if_then(b.icmp_unsigned("!=", p, ir.Constant(ptr, None))):
                    madvise = self.intrinsic("madvise", I32, [ptr, I64, I32])
                    b.call(madvise, [p, size, ir.Constant(I32, MADV_HUGEPAGE)])
                b.ret(p)
        b.ret(b.call(malloc, [n]))
        return fn

    def free_all(self) -> None:
        free = self.intrinsic("free", ir.VoidType(), [I8.as_pointer()])
        for raw in reversed(self.live_allocs):
            self.builder.call(free, [raw])

    def build(self) -> ir.Module:
        self.stmt(self.f.body)
        self.builder.ret(ir.Constant(I32, 0))
        self._close()
        return self.module


def _linear_coeff(e: Expr, var: str) -> int | None:
    """``c`` if ``e == c * var + (terms without var)``, whatever those terms are (min, //, ...);
    None if ``var`` occurs non-linearly."""
    if isinstance(e, Var):
        return 1 if e.name == var else 0
    if not any(isinstance(n, Var) and n.name == var for n in walk(e)):
        return 0
    if isinstance(e, BinOp) and e.dtype.is_int:
        if e.op in ("add", "sub"):
            a, b = _linear_coeff(e.a, var), _linear_coeff(e.b, var)
            if a is None or b is None:
                return None
            return a + b if e.op == "add" else a - b
        if e.op == "mul":
            for x, y in ((e.a, e.b), (e.b, e.a)):
                if isinstance(y, Const):
                    c = _linear_coeff(x, var)
                    return None if c is None else c * int(y.value)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return _linear_coeff(e.value, var)
    return None


def _buffers_in(s: Stmt) -> set[str]:
    out: set[str] = set()

    def exprs(e: Expr) -> None:
        for n in walk(e):
            if isinstance(n, Load):
                out.add(n.buffer)

    def go(st: Stmt) -> None:
        if isinstance(st, Store):
            out.add(st.buffer)
            exprs(st.value)
        elif isinstance(st, Block):
            for c in st.stmts:
                go(c)
        elif isinstance(st, (For, ProducerConsumer, LetStmt, Allocate)):
            go(st.body)
        elif isinstance(st, IfThenElse):
            go(st.then)
            if st.otherwise is not None:
                go(st.otherwise)

    go(s)
    return out


#: a loop's metadata node as llvmlite prints it (``!2 = !{ !"TL_LOOP_1", !1 }``; older llvmlite
#: versions print no spaces)
_LOOP_MD = re.compile(r'^(![0-9]+) = !\{ ?!"TL_LOOP_[0-9]+"(.*?) ?\}$', re.M)


def generate(f: LoweredFunc, target: Target, num_threads: int = 0) -> tuple[str, bool]:
    """LLVM IR text of the kernel for lowered function ``f``, and whether it uses parallel loops.

    Raises:
        CompileError: the loop nest uses a construct this backend does not support.
    """
    cg = CodeGen(f, target)
    cg.num_threads = num_threads
    text = str(cg.build())
    # llvm.loop nodes must be distinct and refer to themselves (llvmlite cannot say so)
    text = _LOOP_MD.sub(lambda m: f"{m.group(1)} = distinct !{{{m.group(1)}{m.group(2)}}}", text)
    return text, cg.uses_parallel

