"""Non-affine and data-dependent indices: ``//`` and ``%`` by constants, clamp / min / max /
where in an index, gathers (``L[I[y, x]]``) and scatter updates (``H[I[r]] += 1``), against NumPy
on odd sizes and under schedules; reads that may leave their array are refused when called."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import check

import tensorlang as tl
from tensorlang.dtypes import DType
from tensorlang.expr import Access
from tensorlang.intervals import value_range


def updown():
    """2x downsample (every other pixel) then nearest-neighbour upsample: ``x // 2`` reads, the
    upsampled domain inferred from them (Halide's interpolate pyramid in miniature)."""
    H, W = tl.sizes("H W")
    X = tl.Input("X", (H, W), tl.float64)
    y, x = tl.vars("y x")
    D = tl.Func("D")
    D[y, x] = X[2 * y, 2 * x]
    U = tl.Func("U")
    U[y, x] = D[y // 2, x // 2] + X[tl.minimum(y, H - 1), tl.minimum(x, W - 1)]
    return U, y, x


def updown_numpy(a):
    d = a[::2, ::2]
    h, w = 2 * d.shape[0], 2 * d.shape[1]
    up = np.repeat(np.repeat(d, 2, axis=0), 2, axis=1)
    yy = np.minimum(np.arange(h), a.shape[0] - 1)
    xx = np.minimum(np.arange(w), a.shape[1] - 1)
    return up + a[yy[:, None], xx[None, :]]


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (7, 5), (13, 16)])
def test_floordiv_indices_and_their_domain(shape, rng):
    U, _, _ = updown()
    a = rng.random(shape)
    check(U, updown_numpy(a), a, rtol=1e-12)


@pytest.mark.parametrize("schedule", [
    lambda s, U, y, x: s[U].vectorize(x, 4),
    lambda s, U, y, x: s[U].parallel(y).vectorize(x, 8),
    lambda s, U, y, x: s["D"].compute_at(s[U], y),
    lambda s, U, y, x: (s[U].split(y, 3), s["D"].compute_at(s[U], f"{y.name}.o")),
])
def test_floordiv_indices_scheduled(schedule, rng):
    U, y, x = updown()
    s = tl.Schedule(U)
    schedule(s, U, y, x)
    k = tl.compile(U, s)
    for shape in ((1, 1), (9, 7), (12, 17)):
        a = rng.random(shape)
        np.testing.assert_allclose(k(a), updown_numpy(a), rtol=1e-12)


def test_simplify_divides_the_divisible_terms_out_of_floordiv_and_mod():
    # floor semantics: exact for negative terms too; a panel's (i.i + 8 i.o) // 8 is
    # i.o + i.i // 8 (an unrolled i.i folds it to a constant)
    import itertools

    from tensorlang.dtypes import int64
    from tensorlang.expr import BinOp, Const, Var
    from tensorlang.schedule.simplify import simplify_expr

    a, b = Var("a"), Var("b")
    e = str(simplify_expr((a + b * 8 + 19) // 8))
    assert e.count("//") == 1 and "8 * b" not in e and "b * 8" not in e  # b + 2 + (a + 3) // 8
    for op in ("floordiv", "mod"):
        for c in (2, 8, 3):
            for coef_a, coef_b, k in itertools.product((1, -1, 2 * c, -c), (c, -2 * c, 5),
                                                       (-7, 0, 19)):
                expr = BinOp(op, a * coef_a + b * coef_b + k, Const(c, int64), int64)
                simple = simplify_expr(expr)
                for va, vb in itertools.product(range(-9, 10, 4), range(-5, 6, 3)):
                    got = _eval(simple, {"a": va, "b": vb})
                    x = coef_a * va + coef_b * vb + k
                    assert got == (x // c if op == "floordiv" else x % c), (expr, simple)
    assert "//" not in str(simplify_expr((a * 8 + 16) // 8))  # all of it divides: a + 2


def test_simplify_divides_products_of_opaque_terms_out():
    # a partitioned piece starts at N // 16 * 16 (not affine): (N // 16 * 16 + 16 d + r) // 16 is
    # N // 16 + d + r // 16, which a panel's index needs to stay contiguous in the piece
    import itertools

    from tensorlang.dtypes import int64
    from tensorlang.expr import BinOp, Const, Var
    from tensorlang.schedule.simplify import simplify_expr

    n, d, r = Var("n"), Var("d"), Var("r")
    c16 = Const(16, int64)
    start = BinOp("mul", BinOp("floordiv", n, c16, int64), c16, int64)
    for op in ("floordiv", "mod"):
        for sign, k in itertools.product((1, -1), (0, 5, -21)):
            x = start + d * 16 + r + k if sign == 1 else d * 32 - start + r + k
            expr = BinOp(op, x, c16, int64)
            simple = simplify_expr(expr)
            assert "// 16 * 16" not in str(simple), simple
            for vn, vd, vr in itertools.product((-17, 0, 5, 37), (-2, 0, 3), (0, 7, 15, -4)):
                env = {"n": vn, "d": vd, "r": vr}
                want = _eval(x, env)
                assert _eval(simple, env) == (want // 16 if op == "floordiv" else want % 16), \
                    (expr, simple)


def _eval(e, env):
    from tensorlang.expr import BinOp, Const, Var

    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[e.name]
    assert isinstance(e, BinOp), e
    x, y = _eval(e.a, env), _eval(e.b, env)
    return {"add": x + y, "sub": x - y, "mul": x * y, "floordiv": x // y if y else 0,
            "mod": x % y if y else 0}[e.op]


def test_mod_where_and_clamp_indices(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.int64)
    P = tl.Input("P", (4,), tl.int64)
    (i,) = tl.vars("i")
    F = tl.Func("F", shape=(N,))  # (these indices bound nothing: the domain is given)
    # a periodic pattern, a reversed read and a clamped one
    F[i] = P[i % 4] * 100 + X[tl.where(i % 2 == 0, i, N - 1 - i)] + X[tl.clamp(i - 3, 0, N - 1)]
    for n in (1, 2, 7, 12):
        x = rng.integers(-9, 9, n)
        p = rng.integers(-9, 9, 4)
        idx = np.arange(n)
        want = p[idx % 4] * 100 + x[np.where(idx % 2 == 0, idx, n - 1 - idx)] + \
            x[np.clip(idx - 3, 0, n - 1)]
        check(F, want, X=x, P=p)


def lut():
    """A gather: a lookup table indexed by image values (clamped into the table)."""
    H, W = tl.sizes("H W")
    I = tl.Input("I", (H, W), tl.int32)
    T = tl.Input("T", (256,), tl.float32)
    y, x = tl.vars("y x")
    G = tl.Func("G")
    G[y, x] = T[tl.clamp(I[y, x], 0, 255)] * 2.0
    return G, y, x


@pytest.mark.parametrize("schedule", [None, "vec", "par_vec"])
def test_gather_through_a_lookup_table(schedule, rng):
    G, y, x = lut()
    s = tl.Schedule(G)
    if schedule == "vec":
        s[G].vectorize(x, 8)
    elif schedule == "par_vec":
        s[G].parallel(y).vectorize(x, 4)
    k = tl.compile(G, s)
    t = rng.random(256).astype(np.float32)
    for shape in ((1, 1), (5, 7), (3, 33)):
        img = rng.integers(-20, 300, shape).astype(np.int32)  # some outside the table: clamped
        want = (t[np.clip(img, 0, 255)] * 2.0).astype(np.float32)
        np.testing.assert_allclose(k(I=img, T=t), want, rtol=1e-6)
        np.testing.assert_allclose(tl.reference(G, I=img, T=t), want, rtol=1e-6)


def test_gather_of_a_computed_func(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    Ix = tl.Input("Ix", (N,), tl.int64)
    (i,) = tl.vars("i")
    Sq = tl.Func("Sq")
    Sq[i] = X[i] * X[i]
    G = tl.Func("G")
    G[i] = Sq[tl.clamp(Ix[i], 0, N - 1)]
    s = tl.Schedule(G)
    s["Sq"].compute_at(s[G], i)  # the gathered producer: computed whole, wherever it is read
    for n in (1, 6, 11):
        x, ix = rng.random(n), rng.integers(-2, n + 2, n)
        want = (x ** 2)[np.clip(ix, 0, n - 1)]
        check(G, want, X=x, Ix=ix)
        np.testing.assert_allclose(tl.compile(G, s)(X=x, Ix=ix), want)


def test_unbounded_gather_is_refused_when_called(rng):
    (N,) = tl.sizes("N")
    Ix = tl.Input("Ix", (N,), tl.int32)
    T = tl.Input("T", (16,), tl.float32)
    (i,) = tl.vars("i")
    G = tl.Func("G")
    G[i] = T[Ix[i]]
    k = tl.compile(G)
    with pytest.raises(tl.ShapeError, match=r"may take values in \[-2147483648, 2147483647\].*"
                                             r"tl\.clamp\(index, 0, 15\)"):
        k(Ix=np.zeros(4, np.int32), T=np.zeros(16, np.float32))
    with pytest.raises(tl.ShapeError, match="tl.clamp"):
        tl.reference(G, Ix=np.zeros(4, np.int32), T=np.zeros(16, np.float32))
    # a modulo by a constant larger than the array is refused too
    H = tl.Func("H", shape=(N,))
    H[i] = T[i % 20]
    with pytest.raises(tl.ShapeError, match=r"\[0, 19\]"):
        tl.compile(H)(N=30, T=np.zeros(16, np.float32))


def histogram():
    H, W = tl.sizes("H W")
    I = tl.Input("I", (H, W), tl.int32)
    (b,) = tl.vars("b")
    hist = tl.Func("hist", shape=(256,), dtype=tl.int32)
    hist[b] = 0
    r = tl.RDom((0, W), (0, H))
    v = tl.clamp(I[r.y, r.x], 0, 255)
    hist[v] = hist[v] + 1
    return hist, r


@pytest.mark.parametrize("shape", [(1, 1), (7, 11), (16, 3)])
def test_scatter_histogram(shape, rng):
    hist, _ = histogram()
    img = rng.integers(0, 256, shape).astype(np.int32)
    check(hist, np.bincount(img.ravel(), minlength=256).astype(np.int32), I=img)


def test_scatter_carries_a_dependence_through_the_histogram():
    hist, r = histogram()
    for loop in (r.x, r.y):
        s = tl.Schedule(hist)
        s[hist].update(0).parallel(loop)
        with pytest.raises(tl.IllegalScheduleError, match="carried by"):
            tl.compile(hist, s)


def test_per_row_scatter_runs_rows_in_parallel(rng):
    H, W = tl.sizes("H W")
    I = tl.Input("I", (H, W), tl.int32)
    y, b = tl.vars("y b")
    rh = tl.Func("rh", shape=(H, 256), dtype=tl.int32)
    rh[y, b] = 0
    q = tl.RDom((0, W), name="q")
    v = tl.clamp(I[y, q], 0, 255)
    rh[y, v] = rh[y, v] + 1
    s = tl.Schedule(rh)
    s[rh].update(0).parallel(y)
    img = rng.integers(0, 256, (9, 13)).astype(np.int32)
    want = np.stack([np.bincount(row, minlength=256) for row in img]).astype(np.int32)
    np.testing.assert_array_equal(tl.compile(rh, s)(I=img), want)
    check(rh, want, I=img)


def test_index_errors():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    with pytest.raises(tl.DefinitionError, match="has type"):
        F[i] = X[X[i]]  # a float index
    r = tl.RDom((0, N))
    with pytest.raises(tl.DefinitionError, match="holds a reducer"):
        F[i] = X[tl.sum(tl.cast(tl.int64, X[r]))]
    G = tl.Func("G", shape=(N,))
    G[i] = X[i]
    with pytest.raises(tl.DefinitionError, match="reads G itself"):
        G[tl.cast(tl.int64, G[r])] = 0.0


def test_value_range():
    x = tl.Var("x")
    N = tl.Size("N")
    rng = {"x": (0, 9)}
    assert value_range(x // 2, rng, {}) == (0, 4)
    assert value_range(x % 4, rng, {}) == (0, 3)
    assert value_range((x + 1) % 16, rng, {}) == (1, 10)
    assert value_range(tl.clamp(x - 3, 0, N - 1), rng, {"N": 5}) == (0, 4)
    assert value_range(tl.where(x > 2, x, 100), rng, {}) == (0, 100)
    u8 = Access("I", (x,), DType.int32, None, None)
    assert value_range(u8, rng, {}) == (-2 ** 31, 2 ** 31 - 1)
    assert value_range(x * x, rng, {}) == (0, 81)
