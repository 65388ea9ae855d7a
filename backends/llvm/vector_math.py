"""exp and log of float32 and float64 as straight-line IR (Cephes' and fdlibm's range reductions
and polynomials), so vector loops need no libm call per lane. Part of ``CodeGen``
(``codegen.py``).
"""

from __future__ import annotations

import functools
import math

import llvmlite.ir as ir


from .types import I32, I64


class VectorMathGen:
    """The vector math part of ``CodeGen``; a mixin (it uses ``CodeGen``'s state)."""

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

    def exp_f64(self, x: ir.Value) -> ir.Value:
        """``exp`` of float64 scalars or vectors as straight-line IR (no libm call per lane).

        ``exp(x) = 2**n * p(r)`` with ``n = round(x / ln 2)``, ``r = x - n ln 2`` (Cody and
        Waite's reduction with Cephes' two-part ln 2, ``|r| <= 0.347``) and ``p`` the Taylor
        polynomial of degree 13 (truncation below 1e-17 relative); the scale ``2**n`` is applied
        as two powers of two, so results down to the subnormals (``x`` above -745.13) and up to
        the largest double (``x`` below 709.78) come out; ``inf`` above, ``0`` below, NaN for
        NaN. See also: Cephes ``exp``; SLEEF ``xexp``.
        """
        b = self.builder
        t = x.type
        c = functools.partial(self.const, t)
        lo, hi = -745.1332191019412, 709.782712893384
        big = b.fcmp_ordered(">", x, c(hi))
        small = b.fcmp_ordered("<", x, c(lo))
        nan = b.fcmp_unordered("uno", x, x)
        xc = self.call_intrinsic("minnum", self.call_intrinsic("maxnum", x, c(lo)), c(hi))
        fx = self.call_intrinsic("floor", self.fop("fadd", self.fop("fmul", xc, c(
            1.4426950408889634)), c(0.5)))
        r = self.fop("fsub", xc, self.fop("fmul", fx, c(6.93145751953125e-1)))
        r = self.fop("fsub", r, self.fop("fmul", fx, c(1.42860682030941723212e-6)))
        y = c(1.0 / math.factorial(13))
        for k in range(12, -1, -1):
            y = self.fop("fadd", self.fop("fmul", y, r), c(1.0 / math.factorial(k)))
        it = ir.VectorType(I64, t.count) if isinstance(t, ir.VectorType) else I64
        ci = functools.partial(self.const, it)
        n = b.fptosi(fx, it)
        half = b.ashr(n, ci(1))  # 2**n as 2**half * 2**(n - half): both normal for n in
        rest = b.sub(n, half)  # [-1075, 1024]

        def pow2(k: ir.Value) -> ir.Value:
            return b.bitcast(b.shl(b.add(k, ci(1023)), ci(52)), t)

        res = self.fop("fmul", self.fop("fmul", y, pow2(half)), pow2(rest))
        res = b.select(big, c(float("inf")), res)
        res = b.select(small, c(0.0), res)
        return b.select(nan, x, res)

    def log_f64(self, x: ir.Value) -> ir.Value:
        """Natural ``log`` of float64 scalars or vectors as straight-line IR.

        ``x = m * 2**e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` from the bits (subnormals scaled
        by 2**52 first), ``log(m) = 2 atanh(s)`` with ``s = (m - 1) / (m + 1)``, ``|s| < 0.1716``,
        by its series to ``s**23`` (truncation below 1e-18 relative), and ``e ln 2`` with ln 2 in
        two parts; ``log(0) = -inf``, ``log(<0) = NaN``, ``log(inf) = inf``, NaN for NaN
        (NumPy's results). See also: Cephes ``log``; fdlibm ``__ieee754_log``.
        """
        b = self.builder
        t = x.type
        c = functools.partial(self.const, t)
        it = ir.VectorType(I64, t.count) if isinstance(t, ir.VectorType) else I64
        ci = functools.partial(self.const, it)
        sub = b.fcmp_ordered("<", x, c(2.2250738585072014e-308))  # subnormal (or <= 0)
        xs = b.select(sub, self.fop("fmul", x, c(4503599627370496.0)), x)  # * 2**52
        bits = b.bitcast(xs, it)
        e = b.sub(b.and_(b.lshr(bits, ci(52)), ci(0x7FF)), ci(1022))
        e = b.select(sub, b.sub(e, ci(52)), e)
        m = b.bitcast(b.or_(b.and_(bits, ci(0x000FFFFFFFFFFFFF)), ci(0x3FE0000000000000)), t)
        small = b.fcmp_ordered("<", m, c(0.7071067811865476))  # m in [0.5, 1) -> [0.707, 1.414)
        ef = b.sitofp(b.select(small, b.sub(e, ci(1)), e), t)
        m = b.select(small, self.fop("fadd", m, m), m)
        sr = self.fop("fdiv", self.fop("fsub", m, c(1.0)), self.fop("fadd", m, c(1.0)))
        z = self.fop("fmul", sr, sr)
        y = c(1.0 / 23.0)
        for k in range(21, 0, -2):
            y = self.fop("fadd", self.fop("fmul", y, z), c(1.0 / k))
        two_s = self.fop("fadd", sr, sr)
        res = self.fop("fadd", self.fop("fmul", ef, c(1.9082149292705877e-10)),
                       self.fop("fmul", two_s, y))
        res = self.fop("fadd", self.fop("fmul", ef, c(6.93147180369123816490e-01)), res)
        res = b.select(b.fcmp_ordered("==", x, c(0.0)), c(float("-inf")), res)
        res = b.select(b.fcmp_ordered("<", x, c(0.0)), c(float("nan")), res)
        res = b.select(b.fcmp_ordered("==", x, c(float("inf"))), x, res)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

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

