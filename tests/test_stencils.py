"""Affine indices, multi-stage pipelines, inferred domains and boundary conditions."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import check

import tensorlang as tl


def blur_pipeline():
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float32)
    y, x = tl.vars("y x")
    bx = tl.Func("bx")
    bx[y, x] = (In[y, x - 1] + In[y, x] + In[y, x + 1]) / 3
    out = tl.Func("out")
    out[y, x] = (bx[y - 1, x] + bx[y, x] + bx[y + 1, x]) / 3
    return out


def numpy_blur(a):
    t = np.float32(3)
    bx = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / t
    return (bx[:-2] + bx[1:-1] + bx[2:]) / t


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 17), (31, 29), (64, 65)])
def test_two_stage_blur(shape, rng):
    a = rng.random(shape, dtype=np.float32)
    check(blur_pipeline(), numpy_blur(a), In=a)


def test_inferred_domains_are_symbolic():
    out = blur_pipeline()
    bx = tl.Pipeline(out).func("bx")
    assert [(str(lo), str(ext)) for lo, ext in bx.bounds] == [("0", "H"), ("1", "W - 2")]
    assert [(str(lo), str(ext)) for lo, ext in out.bounds] == [("1", "H - 2"), ("1", "W - 2")]


@pytest.mark.parametrize("n,kw", [(1, 1), (10, 3), (31, 5), (7, 7)])
def test_strided_convolution(n, kw, rng):
    N, KW = tl.sizes("N KW")
    In, Wt = tl.Input("In", (N,), tl.float64), tl.Input("Wt", (KW,), tl.float64)
    x, r = tl.vars("x r")
    F = tl.Func("F")
    F[x] = In[2 * x + r] * Wt[r]
    a, w = rng.random(n), rng.random(kw)
    nout = (n - kw) // 2 + 1
    expected = np.array([np.dot(a[2 * o: 2 * o + kw], w) for o in range(nout)]).reshape(nout)
    if n >= kw:
        check(F, expected, a, w, rtol=1e-12)
    else:
        with pytest.raises(tl.ShapeError, match="too small"):
            tl.reference(F, a, w)


@pytest.mark.parametrize("n,c,hw", [(1, 1, 3), (2, 3, 7), (1, 2, 5)])
def test_conv2d_valid(n, c, hw, rng):
    B, CI, H, W, CO = tl.sizes("B CI H W CO")
    In = tl.Input("In", (B, CI, H, W), tl.float32)
    Wt = tl.Input("Wt", (CO, CI, 3, 3), tl.float32)
    b, co, y, x, ci, ry, rx = tl.vars("b co y x ci ry rx")
    O = tl.Func("O")
    O[b, co, y, x] = In[b, ci, y + ry, x + rx] * Wt[co, ci, ry, rx]
    a = rng.random((n, c, hw, hw), dtype=np.float32)
    w = rng.random((4, c, 3, 3), dtype=np.float32)
    win = np.lib.stride_tricks.sliding_window_view(a, (3, 3), axis=(2, 3))
    expected = np.einsum("bcyxij,ocij->boyx", win, w).astype(np.float32)
    check(O, expected, a, w, rtol=1e-5)


def test_flip_with_size_in_index(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.int64)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = X[N - 1 - i] * 10 + X[i]
    x = rng.integers(0, 9, 13)
    check(F, x[::-1] * 10 + x, x)


@pytest.mark.parametrize("shape", [(1, 1), (2, 5), (9, 13)])
def test_clamp_edge_and_constant_exterior(shape, rng):
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float32)
    y, x = tl.vars("y x")
    E, C = tl.Func("E", shape=(H, W)), tl.Func("C", shape=(H, W))
    e, c = tl.clamp_edge(In), tl.constant_exterior(In, -1.5)
    E[y, x] = e[y - 1, x] + e[y, x + 2] * 2
    C[y, x] = c[y - 1, x] + c[y, x + 2] * 2
    a = rng.random(shape, dtype=np.float32)
    pe = np.pad(a, ((1, 0), (0, 2)), mode="edge")
    pc = np.pad(a, ((1, 0), (0, 2)), mode="constant", constant_values=-1.5)
    h, w = shape
    check(E, pe[:h, :w] + pe[1:, 2:] * np.float32(2), a)
    check(C, pc[:h, :w] + pc[1:, 2:] * np.float32(2), a)


def test_boundary_on_a_func_and_fixed_int_shape(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (i,) = tl.vars("i")
    G = tl.Func("G")
    G[i] = X[i] * 2
    F = tl.Func("F", shape=(5,))
    F[i] = tl.clamp_edge(G)[i * 3 - 2]
    x = rng.random(4)
    g = x * 2
    check(F, g[np.clip(np.arange(5) * 3 - 2, 0, 3)], x)


def test_funcs_read_with_offsets_between_stages(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.int32)
    (i,) = tl.vars("i")
    A, B = tl.Func("A"), tl.Func("B")
    A[i] = X[i + 1] - X[i]
    B[i] = A[i] * A[i + 2]
    x = rng.integers(-9, 9, 12).astype(np.int32)
    d = x[1:] - x[:-1]
    check(B, d[:-2] * d[2:], x)


PAD_MODES = {"repeat_image": "wrap", "mirror_image": "symmetric", "mirror_interior": "reflect",
             "repeat_edge": "edge"}


@pytest.mark.parametrize("kind", sorted(PAD_MODES))
@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (5, 7), (13, 4)])
def test_folding_boundary_conditions_match_numpy_pad(kind, shape, rng):
    # taps reach up to 3 outside (more than a small array's extent): every index folds back
    # the way np.pad's modes do, in the reference, the default kernel and a scheduled one
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float64)
    y, x = tl.vars("y x")
    v = getattr(tl, kind)(In)
    F = tl.Func("F", shape=(H, W))
    F[y, x] = v[y - 3, x] + 2.0 * v[y, x + 1] + 3.0 * v[y + 2, x - 3] + v[y, x]
    a = rng.random(shape)
    p = np.pad(a, 3, mode=PAD_MODES[kind])
    h, w = shape
    want = (p[0:h, 3:3 + w] + 2.0 * p[3:3 + h, 4:4 + w] + 3.0 * p[5:5 + h, 0:w]
            + p[3:3 + h, 3:3 + w])
    np.testing.assert_allclose(tl.reference(F, In=a), want, rtol=1e-12)
    s = tl.Schedule(F)
    s[F].split("y", 2)
    s[F].vectorize("x", 4)
    s[F].parallel("y.o")
    for sched in (None, s):
        np.testing.assert_allclose(tl.compile(F, sched)(In=a), want, rtol=1e-12)


def test_a_folded_producer_computed_at_its_consumer_is_computed_whole(rng):
    # bounds inference: a folded read may land anywhere in the producer's domain
    (N,) = tl.sizes("N")
    In = tl.Input("In", (N,), tl.float64)
    x = tl.Var("x")
    G = tl.Func("G", shape=(N,))
    G[x] = In[x] * 2.0
    F = tl.Func("F", shape=(N,))
    F[x] = tl.repeat_image(G)[x - 1] + tl.mirror_interior(G)[x + 2]
    s = tl.Schedule(F)
    xo, xi = s[F].split(x, 4)
    s[G].compute_at(s[F], xo)
    a = rng.random(11)
    g = a * 2.0
    want = np.roll(g, 1) + np.pad(g, 2, mode="reflect")[4:4 + 11]
    np.testing.assert_allclose(tl.compile(F, s)(In=a), want, rtol=1e-12)
    np.testing.assert_allclose(tl.reference(F, In=a), want, rtol=1e-12)


def test_folding_boundaries_refuse_empty_arrays_and_updates_reading_themselves():
    M, N = tl.sizes("M N")
    In = tl.Input("In", (M,), tl.float64)
    x = tl.Var("x")
    F = tl.Func("F", shape=(N,))
    F[x] = tl.mirror_image(In)[x - 1]
    with pytest.raises(tl.ShapeError, match=r"mirror_image\(In\) of an empty array"):
        tl.compile(F)(In=np.zeros(0), N=3)
    with pytest.raises(tl.ShapeError, match=r"mirror_image\(In\) of an empty array"):
        tl.reference(F, In=np.zeros(0), N=3)
    G = tl.Func("G", shape=(N,))
    G[x] = In[x]
    r = tl.RDom((0, N), name="r")
    with pytest.raises(tl.DefinitionError, match="reads itself through repeat_image"):
        G[r] = tl.repeat_image(G)[r - 1] + G[r]
