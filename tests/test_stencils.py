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
