"""Narrow element types: uint8, uint16, int8, int16 (NumPy's promotion and wrap-around),
float16 and bfloat16 (each operation rounded from float32, as NumPy and ml_dtypes compute), in
kernels and the NumPy reference, against NumPy on odd sizes, default and vectorized schedules."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tensorlang as tl

INTS = [tl.uint8, tl.uint16, tl.int8, tl.int16]
HALVES = [tl.float16, tl.bfloat16]


def _compile(F, vectorize):
    s = tl.Schedule(F)
    if vectorize:
        s[F].vectorize(F.definition.args[-1], vectorize)
    return tl.compile(F, s)


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype.numpy)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype.numpy)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("vectorize", [None, 16, 64])
def test_integer_arithmetic_wraps_like_numpy(dtype, vectorize, rng):
    (N,) = tl.sizes("N")
    A, B = tl.Input("A", (N,), dtype), tl.Input("B", (N,), dtype)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = (A[i] * B[i] + A[i] - 3) // tl.maximum(B[i], 1) + A[i] % 7 + tl.minimum(A[i], B[i])
    assert F.dtype is dtype  # NumPy 2: a Python int keeps the array's type
    k = _compile(F, vectorize)
    for n in (1, 13, 70):
        a, b = _ints(rng, dtype, n), _ints(rng, dtype, n)
        with np.errstate(all="ignore"):
            want = (a * b + a - dtype.numpy.type(3)) // np.maximum(b, dtype.numpy.type(1)) \
                + a % dtype.numpy.type(7) + np.minimum(a, b)
        np.testing.assert_array_equal(k(A=a, B=b), want)
        np.testing.assert_array_equal(tl.reference(F, A=a, B=b), want)


@pytest.mark.parametrize("src,dst", [(tl.uint8, tl.int16), (tl.int8, tl.uint8),
                                     (tl.uint16, tl.uint8), (tl.int16, tl.int8),
                                     (tl.uint8, tl.float32), (tl.uint16, tl.float64)])
def test_casts_and_promotion(src, dst, rng):
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N,), src)
    B = tl.Input("B", (N,), tl.int8)
    (i,) = tl.vars("i")
    C, S, P = tl.Func("C"), tl.Func("S"), tl.Func("P")
    C[i] = tl.cast(dst, A[i])
    S[i] = tl.saturating_cast(dst, A[i])
    P[i] = A[i] + B[i]  # NumPy's promotion of the two types
    a, b = _ints(rng, src, 37), _ints(rng, tl.int8, 37)
    np.testing.assert_array_equal(tl.compile(C)(A=a), a.astype(dst.numpy))
    if dst.is_int:
        info = np.iinfo(dst.numpy)
        want = np.clip(a.astype(np.int64), info.min, info.max).astype(dst.numpy)
        np.testing.assert_array_equal(tl.compile(S)(A=a), want)
        np.testing.assert_array_equal(tl.reference(S, A=a), want)
    got = tl.compile(P)(A=a, B=b)
    assert got.dtype == np.result_type(a.dtype, b.dtype)
    np.testing.assert_array_equal(got, a + b)


def test_float_to_unsigned_saturates(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    U = tl.Func("U")
    U[i] = tl.cast(tl.uint8, X[i])
    x = np.array([-5.0, 0.0, 1.7, 254.9, 255.0, 300.0, np.nan], np.float32)
    want = np.array([0, 0, 1, 254, 255, 255, 0], np.uint8)
    np.testing.assert_array_equal(tl.compile(U)(X=x), want)
    np.testing.assert_array_equal(tl.reference(U, X=x), want)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("vectorize", [None, 8])
def test_half_precision_rounds_each_operation(dtype, vectorize, rng):
    (N,) = tl.sizes("N")
    A, B = tl.Input("A", (N,), dtype), tl.Input("B", (N,), dtype)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = A[i] * B[i] + A[i] / (B[i] + 2.0) - tl.sqrt(tl.abs(A[i]))
    assert F.dtype is dtype
    k = _compile(F, vectorize)
    for n in (1, 9, 33):
        a = (rng.random(n) * 8 - 4).astype(dtype.numpy)
        b = (rng.random(n) * 8).astype(dtype.numpy)
        want = a * b + a / (b + dtype.numpy.type(2.0)) - np.sqrt(np.abs(a))
        got = k(A=a, B=b)
        assert got.dtype == dtype.numpy
        # every operation rounds as NumPy's does: equal, up to sqrt's last bit
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2 ** -7 if dtype is tl.bfloat16 else 2 ** -10)
        np.testing.assert_array_equal(tl.reference(F, A=a, B=b), want)


@pytest.mark.parametrize("dtype", HALVES)
def test_half_conversions_and_reductions(dtype, rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N, 5), tl.float64)
    i, j = tl.vars("i j")
    H = tl.Func("H")
    H[i, j] = tl.cast(dtype, X[i, j])
    S = tl.Func("S")
    S[i] = tl.sum(H[i, j])  # a float16 / bfloat16 accumulator, rounded at each step
    x = rng.random((7, 5)) * 100
    x[0, 0], x[1, 1] = np.nan, np.inf
    got = tl.compile(H)(X=x)
    assert got.dtype == dtype.numpy
    # (compared as float32: NumPy's NaN-aware equality knows float kinds only, not bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), x.astype(dtype.numpy).astype(np.float32))
    h = x.astype(dtype.numpy)
    acc = np.zeros(7, dtype.numpy)
    for jj in range(5):
        acc = acc + h[:, jj]
    np.testing.assert_array_equal(tl.compile(S)(X=x).astype(np.float32), acc.astype(np.float32))
    np.testing.assert_array_equal(tl.reference(S, X=x).astype(np.float32),
                                  acc.astype(np.float32))


def test_bfloat16_arrays_are_ml_dtypes_arrays():
    assert tl.bfloat16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert tl.Input("A", (3,), "bfloat16").dtype is tl.bfloat16
    assert tl.Input("B", (3,), np.uint16).dtype is tl.uint16


def test_float16_needs_f16c():
    from algorithms import described_target

    (N,) = tl.sizes("N")
    A = tl.Input("A", (N,), tl.float16)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = A[i] * 2.0
    # the described haswell target here lists no +f16c: LLVM would call compiler-rt's
    # conversions, which a JIT-loaded kernel cannot reach, so compiling refuses
    with pytest.raises(tl.CompileError, match="F16C"):
        tl.compile(F, target=described_target("haswell"))
