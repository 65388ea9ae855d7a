"""Vector loops whose extent is not a constant (the guarded tail of a GuardWithIf split,
``min(8, N - 8 * x.o)``) run as masked vector code: right on every size, and masked in the IR."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl

SIZES = (1, 5, 8, 13, 29)


def _tail_kernel(f: tl.Func, var: str, lanes: int = 8, reorder: tuple[str, ...] = ()):
    s = tl.Schedule(f)
    if reorder:
        s[f].reorder(*reorder)
    s[f].vectorize(var, lanes)
    return tl.compile(f, s)


def test_contiguous_loads_and_stores_of_a_tail_are_masked(rng):
    (N,) = tl.sizes("N")
    A, B = tl.Input("A", (N,), tl.float64), tl.Input("B", (N,), tl.float64)
    (i,) = tl.vars("i")
    f = tl.Func("f")
    f[i] = A[i] * 2.0 + B[i]
    kern = _tail_kernel(f, "i")
    assert "llvm.masked.load" in kern.llvm_ir() and "llvm.masked.store" in kern.llvm_ir()
    for n in SIZES:
        a, b = rng.random(n), rng.random(n)
        np.testing.assert_array_equal(kern(a, b), a * 2.0 + b)


def test_strided_reads_and_writes_of_a_tail_are_masked_gathers_and_scatters(rng):
    M, N = tl.sizes("M N")
    A = tl.Input("A", (N, M), tl.float32)
    i, j = tl.vars("i j")
    t = tl.Func("t")
    t[i, j] = A[j, i] + 1.0  # read along j: a gather
    kern = _tail_kernel(t, "j")
    assert "llvm.masked.gather" in kern.llvm_ir()
    w = tl.Func("w")
    w[i, j] = A[j, i] - 1.0
    scat = _tail_kernel(w, "i", reorder=("i", "j"))  # i innermost: w[i, j] written along i
    assert "llvm.masked.scatter" in scat.llvm_ir()
    for m, n in [(1, 1), (5, 13), (29, 8), (3, 17)]:
        a = rng.random((n, m), dtype=np.float32)
        np.testing.assert_array_equal(kern(a), a.T + 1.0)
        np.testing.assert_array_equal(scat(a), a.T - 1.0)


def test_a_guarded_register_tile_accumulates_only_its_live_lanes(rng):
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.float64), tl.Input("B", (K, N), tl.float64)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]
    s = tl.Schedule(C)
    io, ii = s[C].split(i, 4)
    jo, ji = s[C].split(j, 16)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].unroll(ii).vectorize(ji, 8)
    kern = tl.compile(C, s)
    for m, n, kk in [(1, 1, 1), (7, 13, 5), (9, 31, 3), (4, 16, 2)]:
        a, b = rng.random((m, kk)), rng.random((kk, n))
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-12)


@pytest.mark.parametrize("dtype", [tl.uint8, tl.int32, tl.float16])
def test_masked_tails_of_small_and_integer_types(dtype, rng):
    (N,) = tl.sizes("N")
    X, Y = tl.Input("X", (N,), dtype), tl.Input("Y", (N,), dtype)
    (i,) = tl.vars("i")
    q, gt = tl.Func("q"), tl.Func("gt")
    q[i] = X[i] // Y[i] if dtype is not tl.float16 else X[i] * Y[i]
    gt[i] = X[i] > Y[i]  # bool, stored as bytes
    kq, kg = _tail_kernel(q, "i", 16), _tail_kernel(gt, "i", 16)
    for n in SIZES:
        x = rng.integers(0, 9, n).astype(dtype.numpy)
        y = rng.integers(0, 4, n).astype(dtype.numpy)  # zeros too: x // 0 is 0
        if dtype is tl.float16:
            want = x * y
        else:
            want = np.where(y == 0, 0, x // np.where(y == 0, 1, y)).astype(dtype.numpy)
        np.testing.assert_array_equal(kq(x, y), want)
        np.testing.assert_array_equal(kg(x, y), x > y)


def test_the_tail_of_a_split_inside_a_split_tail_is_masked(rng):
    # i split by 50, its inner loop by 8 and vectorized: where N leaves a partial outer tile,
    # the vector loop's extent is min(min(8, rest - 8 * i.i.o), 50 - 8 * i.i.o); its lane cap
    # is 8 (it ran as a scalar loop LLVM was told to vectorize, and refused with a warning)
    from tensorlang.schedule.ir import lane_cap
    from tensorlang.expr import Var

    e = Var("e")
    assert lane_cap(tl.minimum(tl.minimum(16, e), 125 - e)) == 16
    assert lane_cap(tl.minimum(tl.minimum(e, 4), tl.minimum(e, 8))) == 4
    assert lane_cap(tl.minimum(e, e + 1)) is None
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N,), tl.float64)
    (i,) = tl.vars("i")
    f = tl.Func("f")
    f[i] = A[i] * 3.0
    s = tl.Schedule(f)
    s[f].split("i", 50)
    s[f].vectorize("i.i", 8)
    kern = tl.compile(f, s)
    ir = kern.llvm_ir()
    assert "llvm.masked.store" in ir
    for n in (1, 7, 49, 57, 103):
        a = rng.random(n)
        np.testing.assert_array_equal(kern(a), a * 3.0)


def test_a_vector_loop_around_a_loop_it_cannot_vectorize_compiles_without_llvm_warnings(
        capfd, rng):
    # a triangular sum vectorized along its rows: the inner loop's extent varies per lane, so
    # the rows run as a scalar loop around it; LLVM used to be told to vectorize that outer
    # loop anyway and printed "loop not vectorized" on stderr for each such loop
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    i, j = tl.vars("i j")
    f = tl.Func("f", shape=(N,))
    f[i] = 0.0
    r = tl.RDom((0, N), (0, N))
    r.where(r.x <= r.y)
    f[r.y] = f[r.y] + A[r.y, r.x]
    s = tl.Schedule(f)
    s[f].update(0).reorder("r_y", "r_x")
    s[f].update(0).vectorize("r_y", 8)
    kern = tl.compile(f, s)
    assert "not vectorized" not in capfd.readouterr().err
    for n in (1, 9, 20):
        a = rng.random((n, n))
        np.testing.assert_allclose(kern(A=a), np.tril(a).sum(axis=1), rtol=1e-12)
