"""Pointwise math, dtypes and NumPy promotion: reference and compiled kernel against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import check

import tensorlang as tl

DTYPES = [tl.float32, tl.float64, tl.int32, tl.int64]


def unary_func(dtype, fn, n=None):
    (N,) = tl.sizes("N") if n is None else (n,)
    X = tl.Input("X", (N,), dtype)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = fn(X[i])
    return F


def binary_func(da, db, fn):
    (N,) = tl.sizes("N")
    X, Y = tl.Input("X", (N,), da), tl.Input("Y", (N,), db)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = fn(X[i], Y[i])
    return F


def sample(dtype, n, rng, lo=-20, hi=20):
    if dtype.is_float:
        return (rng.random(n) * (hi - lo) + lo).astype(dtype.numpy)
    return rng.integers(lo, hi, n).astype(dtype.numpy)


@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("db", DTYPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_binary_promotion(da, db, op, rng):
    fn = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "max": tl.maximum, "min": tl.minimum}[op]
    npf = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
           "min": np.minimum}[op]
    for n in (1, 7, 33):
        x, y = sample(da, n, rng), sample(db, n, rng)
        check(binary_func(da, db, fn), npf(x, y), x, y)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_true_division_floats(dtype, rng):
    x, y = sample(dtype, 19, rng), sample(dtype, 19, rng)
    y[3] = 0.0
    with np.errstate(divide="ignore"):
        expected = x / y
    check(binary_func(dtype, dtype, lambda a, b: a / b), expected, x, y)


@pytest.mark.parametrize("dtype", [tl.int32, tl.int64])
def test_integer_division_is_floor_division_with_zero_divisor(dtype, rng):
    info = np.iinfo(dtype.numpy)
    x = np.array([7, -7, 7, -7, 0, 5, info.min, info.min, 3], dtype.numpy)
    y = np.array([2, 2, -2, -2, 3, 0, -1, 1, 0], dtype.numpy)
    with np.errstate(all="ignore"):
        expected_div, expected_mod = np.floor_divide(x, y), np.remainder(x, y)
    check(binary_func(dtype, dtype, lambda a, b: a / b), expected_div, x, y)
    check(binary_func(dtype, dtype, lambda a, b: a // b), expected_div, x, y)
    check(binary_func(dtype, dtype, lambda a, b: a % b), expected_mod, x, y)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_float_floordiv_and_mod_follow_numpy(dtype):
    x = np.array([1.0, -1.0, 7.5, -7.5, 0.0, 3.0, 1.0, -0.0], dtype.numpy)
    y = np.array([0.1, 3.0, -2.0, 2.0, 5.0, 0.0, -0.1, 2.0], dtype.numpy)
    with np.errstate(all="ignore"):
        check(binary_func(dtype, dtype, lambda a, b: a // b), np.floor_divide(x, y), x, y,
              rtol=0, atol=0)
        check(binary_func(dtype, dtype, lambda a, b: a % b), np.remainder(x, y), x, y,
              rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_minus_and_abs(dtype, rng):
    x = sample(dtype, 23, rng)
    check(unary_func(dtype, lambda a: -a), -x, x)
    check(unary_func(dtype, tl.abs), np.abs(x), x)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_transcendentals(name, dtype, rng):
    x = sample(dtype, 17, rng, 0, 10)
    if dtype.is_float:
        x[0] = 0.0
    npf = getattr(np, name)
    with np.errstate(all="ignore"):
        expected = npf(x)
    check(unary_func(dtype, getattr(tl, name)), expected, x, rtol=2e-6)


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons_where_and_logic(op, rng):
    fn = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
          "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}[op]
    x = np.array([1, 2, 3, np.nan, 5, 2], np.float32)
    y = np.array([2, 2, 1, 1, np.nan, 2], np.float32)
    check(binary_func(tl.float32, tl.float32, fn), fn(x, y), x, y)
    check(binary_func(tl.float32, tl.float32, lambda a, b: tl.where(fn(a, b), a, b * 2)),
          np.where(fn(x, y), x, y * 2), x, y)
    check(binary_func(tl.float32, tl.float32, lambda a, b: (a < 3) & ~(b > 1) | (a == 5)),
          (x < 3) & ~(y > 1) | (x == 5), x, y)


def test_python_scalars_are_weak_like_numpy(rng):
    x = sample(tl.float32, 9, rng)
    check(unary_func(tl.float32, lambda a: a * 2.5 + 1), x * 2.5 + 1, x)
    xi = sample(tl.int32, 9, rng)
    check(unary_func(tl.int32, lambda a: a * 3 - 1), xi * 3 - 1, xi)
    check(unary_func(tl.int32, lambda a: a * 0.5), xi * 0.5, xi)
    assert unary_func(tl.int32, lambda a: a + 1).dtype is tl.int32
    assert unary_func(tl.int32, lambda a: a + 1.0).dtype is tl.float64


def test_casts_saturate_and_map_nan_to_zero():
    x = np.array([1.9, -1.9, np.nan, np.inf, -np.inf, 3e10, -3e10, 0.5], np.float32)
    expected = np.array([1, -1, 0, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 0], np.int32)
    check(unary_func(tl.float32, lambda a: tl.cast(tl.int32, a)), expected, x)
    xi = np.array([0, 1, -3], np.int64)
    check(unary_func(tl.int64, lambda a: tl.cast(tl.bool_, a)), xi != 0, xi)
    check(unary_func(tl.int64, lambda a: a.astype("float32")), xi.astype(np.float32), xi)


def test_int32_overflow_wraps_like_numpy():
    x = np.array([2**31 - 1, -(2**31)], np.int32)
    with np.errstate(all="ignore"):
        check(unary_func(tl.int32, lambda a: a + 1), x + np.int32(1), x)


def test_var_as_value_and_bool_func(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    F, G = tl.Func("F"), tl.Func("G")
    F[i] = X[i] * i
    G[i] = X[i] > 0.5
    x = rng.random(11, dtype=np.float32)
    check(F, x * np.arange(11), x)
    check(G, x > 0.5, x)


def test_zero_dim_output(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (k,) = tl.vars("k")
    S = tl.Func("S")
    S[()] = X[k] * X[k]
    x = rng.random(29)
    check(S, np.asarray(np.dot(x, x)), x, rtol=1e-12)


def _unary_kernel(name: str, dtype, lanes: int = 0):
    """``F[i] = name(X[i])`` over a 1-D input of ``dtype``, compiled with ``i`` vectorized by
    ``lanes`` (0: the default schedule)."""
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), dtype)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = getattr(tl, name)(X[i])
    s = tl.Schedule(F)
    if lanes:
        s[F].vectorize(i, lanes)
    return tl.compile(F, s)


@pytest.mark.parametrize("name,lo,hi", [("exp", -87.0, 88.7), ("log", 1e-44, 3e38)])
@pytest.mark.parametrize("vectorized", [False, True])
def test_float32_exp_log_polynomials_accuracy_and_specials(name, lo, hi, vectorized):
    kern = _unary_kernel(name, tl.float32, 16 if vectorized else 0)
    grid = np.linspace(lo, hi, 20001) if name == "exp" else np.geomspace(lo, hi, 20001)
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 100.0, -100.0]
    x = np.concatenate([grid, specials]).astype(np.float32)
    with np.errstate(all="ignore"):
        expected = getattr(np, name)(x)
    got = kern(x)
    normal = np.isfinite(expected) & (np.abs(expected) > 1.2e-38)
    rel = np.abs(got[normal].astype(np.float64) - expected[normal]) / np.abs(expected[normal])
    assert rel.max() < 3e-7 or np.abs(got[normal] - expected[normal]).max() < 1e-6
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(got[np.isinf(expected)], expected[np.isinf(expected)])


@pytest.mark.parametrize("vectorized", [False, True])
def test_float64_exp_polynomial_accuracy_subnormals_and_specials(vectorized):
    kern = _unary_kernel("exp", tl.float64, 8 if vectorized else 0)
    grid = np.linspace(-745.2, 709.9, 40001)  # through the subnormal results and past overflow
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 709.78, 709.79, -745.13,
                -745.14, -708.4, 1e-300, -1e-300]
    x = np.concatenate([grid, specials, np.random.default_rng(1).standard_normal(4001) * 10])
    with np.errstate(all="ignore"):
        expected = np.exp(x)
    got = kern(x)
    normal = np.isfinite(expected) & (expected >= np.finfo(np.float64).tiny)
    rel = np.abs(got[normal] - expected[normal]) / expected[normal]
    assert rel.max() < 4.5e-16  # two ulp
    sub = np.isfinite(expected) & (expected < np.finfo(np.float64).tiny)
    assert np.abs(got[sub] - expected[sub]).max() <= 2 * 5e-324
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(got[np.isinf(expected)], expected[np.isinf(expected)])


@pytest.mark.parametrize("vectorized", [False, True])
def test_float64_log_polynomial_accuracy_subnormals_and_specials(vectorized):
    kern = _unary_kernel("log", tl.float64, 8 if vectorized else 0)
    rng = np.random.default_rng(2)
    grid = np.geomspace(5e-324, 1.7e308, 40001)  # subnormal inputs up to the largest double
    near_one = 1.0 + rng.standard_normal(4001) * 1e-3  # where log is small: relative error
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 1e-310,
                np.finfo(np.float64).tiny]
    x = np.concatenate([grid, near_one, specials, rng.random(4001) * 3])
    with np.errstate(all="ignore"):
        expected = np.log(x)
    got = kern(x)
    finite = np.isfinite(expected) & (expected != 0)
    rel = np.abs(got[finite] - expected[finite]) / np.abs(expected[finite])
    assert rel.max() < 6.7e-16  # three ulp
    assert got[x == 1.0].tolist() == [0.0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(got[np.isinf(expected)], expected[np.isinf(expected)])


_ERF = np.vectorize(math.erf, otypes=[np.float64])
MATH = {
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "erf": _ERF, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
}


@pytest.mark.parametrize("name", sorted(MATH))
@pytest.mark.parametrize("dtype", [tl.float32, tl.float64, tl.int32])
@pytest.mark.parametrize("n", [1, 7, 13])
def test_math_functions_match_numpy(name, dtype, n, rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), dtype)
    i = tl.Var("i")
    F = tl.Func("F")
    F[i] = getattr(tl, name)(X[i] * 3 if dtype is not tl.int32 else X[i])
    raw = (rng.random(n) - 0.5) * 6
    x = (np.round(raw) if dtype is tl.int32 else raw).astype(dtype.numpy)
    x[0] = 2.5 if dtype is not tl.int32 else 2  # a half: round goes to even, as NumPy
    arg = x * 3 if dtype is not tl.int32 else x.astype(np.float64)
    want = MATH[name](arg)
    # integers are promoted to float64 (np.floor(int32) is float64); float32 stays float32
    assert F.dtype.numpy == (np.float64 if dtype is tl.int32 else dtype.numpy)
    s = tl.Schedule(F)
    s[F].vectorize("i", 8)
    tol = 1e-6 if dtype is tl.float32 else 1e-12
    for sched in (None, s):
        got = tl.compile(F, sched)(X=x)
        np.testing.assert_allclose(got, want.astype(F.dtype.numpy), rtol=tol, atol=tol)
    np.testing.assert_allclose(tl.reference(F, X=x), want.astype(F.dtype.numpy), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("n", [1, 9])
def test_pow_and_clamp(n, rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    Y = tl.Input("Y", (N,), tl.float64)
    i = tl.Var("i")
    F = tl.Func("F")
    F[i] = X[i] ** 2.5 + tl.pow(2.0, X[i]) + tl.clamp(X[i], 0.25, 0.75) + X[i] ** Y[i]
    x, y = rng.random(n, dtype=np.float32), rng.random(n) * 3
    want = (x ** np.float32(2.5) + np.float32(2.0) ** x + np.clip(x, 0.25, 0.75)) + x ** y
    assert F.dtype is tl.float64  # float32 ** float64 promotes, as NumPy
    s = tl.Schedule(F)
    s[F].vectorize("i", 4)
    for sched in (None, s):
        np.testing.assert_allclose(tl.compile(F, sched)(X=x, Y=y), want, rtol=1e-6)
    K = tl.Input("K", (N,), tl.int32)
    with pytest.raises(tl.DefinitionError, match="integer powers"):
        K[i] ** 2


@pytest.mark.parametrize("n", [1, 6])
def test_saturating_cast_clamps_where_cast_would_wrap_or_overflow(n):
    (N,) = tl.sizes("N")
    I = tl.Input("I", (N,), tl.int64)  # noqa: E741
    X = tl.Input("X", (N,), tl.float64)
    i = tl.Var("i")
    A, B, C, D = (tl.Func(name) for name in "ABCD")
    A[i] = tl.saturating_cast(tl.int32, I[i])
    B[i] = tl.saturating_cast(tl.float32, X[i])
    C[i] = tl.saturating_cast(tl.int32, X[i])
    D[i] = tl.saturating_cast(tl.int64, tl.cast(tl.int32, I[i] % 1000))  # widening: a cast
    ints = np.array([2**40, -2**40, 7, -(2**31) - 1, 2**31, -5][:n], np.int64)
    floats = np.array([1e300, -np.inf, np.nan, 3.5, -1e10, 2.5e9][:n])
    f32 = np.finfo(np.float32).max
    want = {
        "A": np.clip(ints, -2**31, 2**31 - 1).astype(np.int32),
        "B": np.where(np.isnan(floats), np.nan, np.clip(floats, -f32, f32)).astype(np.float32),
        "C": np.clip(np.nan_to_num(np.trunc(floats), nan=0.0, posinf=2**31 - 1,
                                   neginf=-2**31), -2**31, 2**31 - 1).astype(np.int32),
        "D": (ints % 1000).astype(np.int64),
    }
    for name, f in zip("ABCD", (A, B, C, D)):
        args = {"I": ints} if name in "AD" else {"X": floats}
        assert f.dtype.numpy == want[name].dtype
        np.testing.assert_array_equal(tl.compile(f)(**args), want[name])
        np.testing.assert_array_equal(tl.reference(f, **args), want[name])
    with pytest.raises(tl.DefinitionError):
        tl.saturating_cast("int7", I[i])
