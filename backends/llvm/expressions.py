"""Scalar and vector expressions -> LLVM values: constants, arithmetic with NumPy's semantics (floor
division and modulo, NaN-propagating max/min, saturating casts), comparisons, intrinsic calls.
Part of ``CodeGen`` (``codegen.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import llvmlite.ir as ir

from tensorlang.schedule.ir import Load
from tensorlang.dtypes import DType
from tensorlang.errors import CompileError
from tensorlang.expr import BinOp, Call, Cast, Cmp, Const, Expr, Not, Select, Size, Var, walk

from .types import F16, FLOAT_FLAGS, I1, I16, I32, I64, value_type


def int_constant(v: ir.Value) -> int | None:
    """The value of ``v`` where it is a scalar integer constant, else None."""
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and \
            type(v.constant) is int:
        return v.constant
    return None


def value_key(v: ir.Value | None) -> object:
    """A key that tells LLVM values apart: a constant by its type and value (two equal
    constants are two Python objects, and a dropped one's ``id`` may be reused), anything else
    by identity (an instruction or argument lives as long as its module)."""
    c = int_constant(v) if v is not None else None
    return id(v) if c is None else (v.type.width, c)


#: vector constants by type and elements, one object each: llvmlite builds a vector constant's
#: element constants and formats them anew for every new object, where an object formats once
#: (the splat masks, lane indices and zero vectors of an unrolled tile repeat by the thousand)
_VECTOR_CONSTANTS: dict[tuple[str, str], ir.Constant] = {}
VECTOR_CONSTANTS_MAX = 4096


def vector_constant(t: ir.VectorType, values: Sequence) -> ir.Constant:
    """The constant of vector type ``t`` with elements ``values`` (ints, floats or bools; floats
    told apart by their bits, so -0.0 is not 0.0), shared by every caller."""
    key = (str(t), repr(tuple(struct.pack("<d", v) if isinstance(v, float) else v
                              for v in values)))
    c = _VECTOR_CONSTANTS.get(key)
    if c is None:
        if len(_VECTOR_CONSTANTS) >= VECTOR_CONSTANTS_MAX:
            _VECTOR_CONSTANTS.clear()
        c = _VECTOR_CONSTANTS[key] = ir.Constant(t, list(values))
    return c


def _wrapped(value: int, bits: int) -> int:
    """``value`` as a two's-complement integer of ``bits`` bits (LLVM's wrapping arithmetic)."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


class ExpressionGen:
    """The expressions part of ``CodeGen``; a mixin (it uses ``CodeGen``'s state)."""

    @staticmethod
    def const(t: ir.Type, value: object) -> ir.Constant:
        """A constant of type ``t``, splatted when ``t`` is a vector type."""
        if isinstance(t, ir.VectorType):
            if isinstance(value, (int, float)):  # (bool is an int)
                return vector_constant(t, (value,) * t.count)
            return ir.Constant(t, [value] * t.count)
        return ir.Constant(t, value)

    @staticmethod
    def shaped(t: ir.Type, like: ir.Value) -> ir.Type:
        """Scalar type ``t``, as a vector of ``like``'s lanes when ``like`` is a vector."""
        return ir.VectorType(t, like.type.count) if isinstance(like.type, ir.VectorType) else t

    def splat(self, v: ir.Value, lanes: int) -> ir.Value:
        b = self.builder
        vt = ir.VectorType(v.type, lanes)
        undef = ir.Constant(vt, ir.Undefined)
        one = b.insert_element(undef, v, ir.Constant(I32, 0))
        mask = vector_constant(ir.VectorType(I32, lanes), (0,) * lanes)
        return b.shuffle_vector(one, undef, mask)

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

    def int_op(self, op: str, x: ir.Value, y: ir.Value, flags: tuple = ()) -> ir.Value:
        """``x op y`` for ``op`` in add, sub, mul on two scalar integers of one type: computed
        here where both are constants, the operand itself where the other is the identity (0
        for add and sub, 1 for mul; 0 for a product with 0), and emitted once per basic block
        for the same operands (common-subexpression elimination: an unrolled register tile's
        addresses repeat the same index arithmetic). Vectors and other types: emitted as
        asked. LLVM would fold and share these too; emitting less of it saves our Python and
        LLVM's passes the work."""
        t = x.type
        if not isinstance(t, ir.IntType) or t.width < 8 or y.type != t:
            return getattr(self.builder, op)(x, y, flags=list(flags))
        cx, cy = int_constant(x), int_constant(y)
        if cx is not None and cy is not None:
            r = cx + cy if op == "add" else cx - cy if op == "sub" else cx * cy
            return ir.Constant(t, _wrapped(r, t.width))
        if op == "add" and cx == 0:
            return y
        if op in ("add", "sub") and cy == 0:
            return x
        if op == "mul":
            if cx == 1 or cy == 1:
                return y if cx == 1 else x
            if cx == 0 or cy == 0:
                return ir.Constant(t, 0)
        block = self.builder.block
        key = (op, tuple(flags), value_key(x), value_key(y), id(block))
        hit = self._int_ops.get(key)
        if hit is not None:
            return hit[0]
        v = getattr(self.builder, op)(x, y, flags=list(flags))
        self._int_ops[key] = (v, x, y, block)  # (the operands and block kept alive: ids stay)
        return v

    def fop(self, op: str, a: ir.Value, b: ir.Value, flags: tuple = FLOAT_FLAGS) -> ir.Value:
        inst = getattr(self.builder, op)(a, b)
        inst.flags.extend(flags)
        return inst

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
            key = (e.key, self.lane0, self.vec, tuple(value_key(self.vars.get(n)) for n in names))
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
                             vector_constant(ir.VectorType(I64, lanes), range(lanes)))
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
            if len(e.args) == 2:  # pow
                return self.round_half(self.call_intrinsic(
                    e.name, *self.unify(*(self.expr(a) for a in e.args))), e.dtype)
            return self.round_half(self.call(e.name, self.expr(e.args[0]), e.dtype), e.dtype)
        if isinstance(e, Select):
            c, t, f = self.unify(self.expr(e.cond), self.expr(e.t), self.expr(e.f))
            return b.select(c, t, f)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.value), e.value.dtype, e.dtype)
        raise CompileError(f"codegen: unsupported expression {type(e).__name__}: {e}")

    def to_half(self, x: ir.Value) -> ir.Value:
        """float32 or float64 value(s) -> LLVM half, rounded once (to nearest, ties to even),
        with the F16C instructions (without them LLVM would call compiler-rt, which a JIT-loaded
        kernel cannot reach). float64 goes through float32 rounded to odd, which keeps the
        second rounding exact (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums:
        proved algorithms using rounding to odd", IEEE TC 2008)."""
        if "+f16c" not in self.target.features.split(","):
            raise CompileError(
                f"float16 needs the F16C instructions, which target {self.target.cpu} lacks; "
                f"use bfloat16 or float32")
        b = self.builder
        f32 = self.shaped(ir.FloatType(), x)
        if x.type != f32:  # float64: to float32 rounding to odd
            i32 = self.shaped(I32, x)
            t = b.fptrunc(x, f32)
            back = b.fpext(t, x.type)
            inexact = b.fcmp_ordered("!=", back, x)  # (false for NaN)
            away = b.fcmp_ordered(">", self.call_intrinsic("fabs", back),
                                  self.call_intrinsic("fabs", x))
            bits = b.bitcast(t, i32)
            bits = b.select(away, b.sub(bits, self.const(i32, 1)), bits)
            bits = b.select(inexact, b.or_(bits, self.const(i32, 1)), bits)
            x = b.bitcast(bits, f32)
        return b.fptrunc(x, self.shaped(F16, x))

    def round_half(self, x: ir.Value, d: DType) -> ir.Value:
        """A float32 value rounded to ``d``'s precision when ``d`` is float16 or bfloat16 (to
        nearest, ties to even; NaN stays NaN), as NumPy rounds each operation's result."""
        if d is DType.float16:
            return self.builder.fpext(self.to_half(x), x.type)
        if d is DType.bfloat16:
            return self.bf16_widen(self.bf16_bits(x))
        return x

    def bf16_bits(self, x: ir.Value) -> ir.Value:
        """The bfloat16 nearest a float32 value (ties to even), as its 16 bits; NaN stays a
        quiet NaN."""
        b = self.builder
        i32 = self.shaped(I32, x)
        bits = b.bitcast(x, i32)
        lsb = b.and_(b.lshr(bits, self.const(i32, 16)), self.const(i32, 1))
        rounded = b.add(b.add(bits, self.const(i32, 0x7FFF)), lsb)
        nan = b.fcmp_unordered("uno", x, x)
        quiet = b.or_(bits, self.const(i32, 0x00400000))
        out = b.lshr(b.select(nan, quiet, rounded), self.const(i32, 16))
        return b.trunc(out, self.shaped(I16, x))

    def bf16_widen(self, h: ir.Value) -> ir.Value:
        """bfloat16 bits (i16) as the float32 of the same value."""
        b = self.builder
        i32 = self.shaped(I32, h)
        return b.bitcast(b.shl(b.zext(h, i32), self.const(i32, 16)),
                         self.shaped(ir.FloatType(), h))

    def binop(self, op: str, x: ir.Value, y: ir.Value, d: DType,
              flags: tuple = FLOAT_FLAGS) -> ir.Value:
        if d in (DType.float16, DType.bfloat16):
            # each operation rounds to d, as NumPy's do: no fusing a product into an FMA (with
            # native half arithmetic, AVX512-FP16, LLVM narrows the float32 operations to d)
            flags = tuple(f for f in flags if f != "contract")
        return self.round_half(self._binop(op, x, y, d, flags), d)

    def _binop(self, op: str, x: ir.Value, y: ir.Value, d: DType,
               flags: tuple = FLOAT_FLAGS) -> ir.Value:
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
            if op in ("add", "sub", "mul"):
                return self.int_op(op, x, y)
            if op in ("max", "min"):
                u = "u" if d.is_unsigned else "s"
                return self.call_intrinsic(f"{u}max" if op == "max" else f"{u}min", x, y)
            if op in ("floordiv", "mod") and d.is_unsigned:
                return self.uint_divmod(x, y, op)
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

    def uint_divmod(self, x: ir.Value, y: ir.Value, op: str) -> ir.Value:
        """Unsigned division / modulo (floor and truncation agree); 0 for y == 0 (NumPy)."""
        b = self.builder
        zero, one = self.const(x.type, 0), self.const(x.type, 1)
        if isinstance(y, ir.Constant) and isinstance(y.type, ir.IntType) and y.constant != 0:
            return b.udiv(x, y) if op == "floordiv" else b.urem(x, y)
        is0 = b.icmp_unsigned("==", y, zero)
        safe = b.select(is0, one, y)
        res = b.udiv(x, safe) if op == "floordiv" else b.urem(x, safe)
        return b.select(is0, zero, res)

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

    def compare(self, op: str, x: ir.Value, y: ir.Value, d: DType) -> ir.Value:
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[op]
        if d.is_float:
            if op == "ne":
                return self.builder.fcmp_unordered(sym, x, y)
            return self.builder.fcmp_ordered(sym, x, y)
        if d.is_bool or d.is_unsigned:
            return self.builder.icmp_unsigned(sym, x, y)
        return self.builder.icmp_signed(sym, x, y)

    def call(self, name: str, x: ir.Value, d: DType) -> ir.Value:
        if name == "exp" and d is DType.float32:
            return self.exp_f32(x)
        if name == "exp" and d is DType.float64:
            return self.exp_f64(x)
        if name == "log" and d is DType.float32:
            return self.log_f32(x)
        if name == "log" and d is DType.float64:
            return self.log_f64(x)
        if name in ("exp", "log", "sqrt", "floor", "ceil", "sin", "cos", "tanh"):
            return self.call_intrinsic(name, x)
        if name == "round":  # NumPy rounds half to even
            return self.call_intrinsic("roundeven", x)
        if name == "erf":  # no LLVM intrinsic: libm's erf / erff, lane by lane
            return self.libm(name if d is DType.float64 else name + "f", x)
        if name == "abs":
            if d.is_float:
                return self.call_intrinsic("fabs", x)
            if d.is_unsigned:
                return x
            return self.call_intrinsic("abs", x, extra=(ir.Constant(I1, 0),))
        if name == "neg":
            return self.builder.fneg(x) if d.is_float else self.builder.neg(x)
        raise CompileError(f"codegen: unsupported function {name}")

    def libm(self, symbol: str, x: ir.Value) -> ir.Value:
        """``symbol(x)`` from libm (resolved from the process when the kernel is loaded), once
        per lane of a vector."""
        b = self.builder
        scalar = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        fn = self.intrinsic(symbol, scalar, [scalar])
        if not isinstance(x.type, ir.VectorType):
            return b.call(fn, [x])
        out = ir.Constant(x.type, ir.Undefined)
        for lane in range(x.type.count):
            idx = ir.Constant(I32, lane)
            out = b.insert_element(out, b.call(fn, [b.extract_element(x, idx)]), idx)
        return out

    def cast(self, x: ir.Value, src: DType, dst: DType) -> ir.Value:
        b = self.builder
        t = self.shaped(value_type(dst), x)
        if src is dst:
            return x
        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", x, self.const(x.type, 0.0))
            return b.icmp_signed("!=", x, self.const(x.type, 0))
        if src.is_bool:
            return self.round_half(b.uitofp(x, t), dst) if dst.is_float else b.zext(x, t)
        if src.is_float and dst.is_float:  # (float16 / bfloat16 are float32 in registers)
            if dst is DType.float16:  # one rounding, as NumPy (float64 too)
                return b.fpext(self.to_half(x), t)
            if x.type != t:
                x = b.fpext(x, t) if dst is DType.float64 else b.fptrunc(x, t)
            return self.round_half(x, dst)
        if src.is_int and dst.is_int:
            if dst.itemsize > src.itemsize:
                return b.zext(x, t) if src.is_unsigned else b.sext(x, t)
            return b.trunc(x, t) if dst.itemsize < src.itemsize else x
        if src.is_int and dst.is_float:
            return self.round_half(b.uitofp(x, t) if src.is_unsigned else b.sitofp(x, t), dst)
        sat = "fptoui" if dst.is_unsigned else "fptosi"
        fn = self.intrinsic(f"llvm.{sat}.sat.{self._suffix(t)}.{self._suffix(x.type)}", t,
                            [x.type])
        return b.call(fn, [x])

