"""A catalogue of schedules labelled legal or illegal by hand, with the reason for each.

Illegal: the error names the primitive, the loop and a witness pair of iterations.
Legal: the kernel compiles (so the isl check proved it) and matches the reference on odd sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import blur, conv2d, matmul, skewed, softmax

import tensorlang as tl


def scan_rows():
    H, W = tl.sizes("H W")
    X = tl.Input("X", (H, W), tl.float64)
    y, x = tl.vars("y x")
    S = tl.Func("S")
    S[y, x] = X[y, x]
    r = tl.RDom((1, W))
    S[y, r] = S[y, r - 1] + X[y, r]
    return S, lambda rng, m, n: {"X": rng.random((m, n))}


def diagonal():
    """G[x, y] = G[x - 1, y - 1] + ...: both loop orders run it forwards."""
    H, W = tl.sizes("H W")
    Y = tl.Input("Y", (H, W), tl.float64)
    y, x = tl.vars("y x")
    G = tl.Func("G")
    G[y, x] = Y[y, x]
    r = tl.RDom((1, H), (1, W))
    G[r.x, r.y] = G[r.x - 1, r.y - 1] + Y[r.x, r.y]
    return G, lambda rng, m, n: {"Y": rng.random((m, n))}


def gauss_seidel():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = X[i]
    r = tl.RDom((1, N - 1))
    F[r] = (F[r - 1] + F[r] + F[r + 1]) / 3
    return F, lambda rng, m, n: {"X": rng.random(m + n)}


def prefix2d():
    """Summed-area table: a scan along x, then a scan along y."""
    H, W = tl.sizes("H W")
    X = tl.Input("X", (H, W), tl.float64)
    y, x = tl.vars("y x")
    S = tl.Func("S")
    S[y, x] = X[y, x]
    rx = tl.RDom((1, W), name="rx")
    S[y, rx] = S[y, rx - 1] + S[y, rx]
    ry = tl.RDom((1, H), name="ry")
    S[ry, x] = S[ry - 1, x] + S[ry, x]
    return S, lambda rng, m, n: {"X": rng.random((m, n))}


def _mm():
    C, arrays = matmul()
    return C, lambda rng, m, n: arrays(rng, m, n, 7)


def _conv():
    O, arrays = conv2d()
    return O, lambda rng, m, n: arrays(rng, m, n, 2)


def _blur():
    out, arrays = blur()
    return out, lambda rng, m, n: arrays(rng, m, n, 1)


def _softmax():
    out, arrays = softmax()
    return out, lambda rng, m, n: arrays(rng, m, n, 1)


def st(s, name):
    return s[name]


# (id, algorithm, schedule, legal?, error fragments) — the reason is in the comment of each line.
CASES = [
    # -- reductions (einsum rule): reduction loops reorder freely, never run at once -------------
    ("mm_parallel_k", _mm, lambda s: st(s, "C").parallel("k"), False,
     ["parallel(C, loop='k')", "cannot parallel k", "iterations (i=0, j=0, k=0)"]),  # k carries
    ("mm_vectorize_k", _mm, lambda s: st(s, "C").vectorize("k", 8), False,
     ["vectorize(C", "k.i", "iterations"]),  # lanes would update the same cell
    ("mm_parallel_fused_ik", _mm, lambda s: st(s, "C").reorder("i", "k", "j").parallel("k"),
     False, ["cannot parallel k", "iterations"]),  # still the reduction loop
    ("mm_parallel_i", _mm, lambda s: st(s, "C").parallel("i"), True, []),  # pure: independent
    ("mm_parallel_j_vectorize", _mm, lambda s: st(s, "C").reorder("i", "k", "j").vectorize(
        "j", 8).parallel("i"), True, []),  # pure loops of a reduction
    ("mm_reorder_k_outer", _mm, lambda s: st(s, "C").reorder("k", "i", "j"), True, []),
    # reduction policy: k may go anywhere
    ("mm_tile_split_k", _mm, lambda s: (st(s, "C").tile("i", "j", 4, 8), st(s, "C").split(
        "k", 3), st(s, "C").reorder("i.o", "j.o", "k.o", "i.i", "k.i", "j.i")), True, []),
    ("mm_split_k_parallel_outer", _mm, lambda s: (st(s, "C").split("k", 4), st(s, "C").parallel(
        "k.o")), False, ["cannot parallel k.o", "iterations"]),  # needs rfactor
    ("mm_fuse_ij_parallel", _mm, lambda s: st(s, "C").parallel(st(s, "C").fuse("i", "j")),
     True, []),  # fused pure loops
    ("mm_cache_write", _mm, lambda s: (st(s, "C").tile("i", "j", 4, 8), s.cache_write(
        "C", "j.o")), True, []),
    ("mm_cache_read", _mm, lambda s: (st(s, "C").split("k", 4), s.cache_read(
        "B", st(s, "C"), "k.o")), True, []),
    ("mm_cache_write_parallel_k", _mm, lambda s: (st(s, "C").tile("i", "j", 4, 8), s.cache_write(
        "C", "j.o").parallel("k")), False, ["C_local", "cannot parallel k", "iterations"]),
    ("conv_reorder_reduction", _conv, lambda s: st(s, "O").reorder(
        "n", "ci", "co", "ry", "y", "rx", "x"), True, []),  # (ci, ry, rx) reorder freely
    ("conv_parallel_co_vector_x", _conv, lambda s: (st(s, "O").reorder(
        "n", "co", "y", "ci", "ry", "rx", "x"), st(s, "O").vectorize("x", 4),
        st(s, "O").parallel("co")), True, []),
    ("conv_parallel_ci", _conv, lambda s: st(s, "O").parallel("ci"), False,
     ["cannot parallel ci", "iterations"]),
    ("conv_vectorize_rx", _conv, lambda s: st(s, "O").vectorize("rx"), False,
     ["cannot vectorize rx", "iterations"]),
    ("conv_inline_pad", _conv, lambda s: st(s, "pad").compute_inline(), True, []),
    ("conv_pad_at_y", _conv, lambda s: st(s, "pad").compute_at(st(s, "O"), "y"), True, []),
    ("softmax_parallel_reductions_k", _softmax, lambda s: st(s, "mx").parallel("k"), False,
     ["mx", "cannot parallel k", "iterations"]),  # a max over k is a reduction
    ("softmax_rows_at", _softmax, lambda s: [st(s, f).compute_at(st(s, "softmax"), "i")
                                             for f in ("mx", "e", "sm")], True, []),
    ("softmax_parallel_rows", _softmax, lambda s: (st(s, "mx").parallel("i"),
                                                   st(s, "sm").parallel("i")), True, []),
    # -- pure stages: any tiling / reorder / placement --------------------------------------------
    ("blur_tile_reorder", _blur, lambda s: (st(s, "out").tile("y", "x", 4, 8), st(s, "out").reorder(
        "x.o", "y.o", "x.i", "y.i")), True, []),
    ("blur_compute_at_inner", _blur, lambda s: (st(s, "out").tile("y", "x", 4, 8),
                                                st(s, "bx").compute_at(st(s, "out"), "x.i")),
     True, []),
    ("blur_compute_at_outer", _blur, lambda s: (st(s, "out").split("y", 4), st(s, "bx").compute_at(
        st(s, "out"), "y.o")), True, []),
    ("blur_store_at", _blur, lambda s: (st(s, "out").split("y", 4), st(s, "bx").store_at(
        st(s, "out"), "y.o").compute_at(st(s, "out"), "y.i")), True, []),
    ("blur_inline_parallel_vector", _blur, lambda s: (st(s, "bx").compute_inline(),
                                                      st(s, "out").vectorize("x", 4).parallel(
                                                          "y")), True, []),
    ("blur_shift_inwards", _blur, lambda s: st(s, "out").split("x", 4, tail="ShiftInwards"),
     True, []),  # recomputing a pure point is harmless
    # -- scans (strict recurrences) ---------------------------------------------------------------
    ("scan_parallel_rows", scan_rows, lambda s: st(s, "S").update(0).parallel("y"), True, []),
    # each row is an independent scan
    ("scan_vectorize_rows", scan_rows, lambda s: st(s, "S").update(0).reorder(
        "r_x", "y").vectorize("y", 4), True, []),  # lanes are different rows
    ("scan_parallel_rx", scan_rows, lambda s: st(s, "S").update(0).parallel("r_x"), False,
     ["parallel(S.update(0), loop='r_x')", "flow dependence", "(y=0, r_x=1)"]),
    ("scan_vectorize_rx", scan_rows, lambda s: st(s, "S").update(0).vectorize("r_x", 4), False,
     ["cannot vectorize r_x.i", "flow dependence between iterations (y=0, r_x="]),
    ("scan_split_rx", scan_rows, lambda s: st(s, "S").update(0).split("r_x", 4), True, []),
    # splitting keeps the order
    ("scan_split_rx_swap", scan_rows, lambda s: (st(s, "S").update(0).split("r_x", 4), st(
        s, "S").update(0).reorder("r_x.i", "r_x.o")), False,
     ["reorder(S.update(0)", "would run backwards", "from iteration (y=0, r_x=", "r_x.i"]),  # runs r_x out of order
    ("scan_unroll_rx", scan_rows, lambda s: st(s, "S").update(0).unroll("r_x", 2), True, []),
    ("scan_reorder_rows_inside", scan_rows, lambda s: st(s, "S").update(0).reorder("r_x", "y"),
     True, []),  # pure loop moves freely
    ("scan_parallel_pure_def", scan_rows, lambda s: st(s, "S").parallel("y").vectorize("x", 4),
     True, []),
    ("scan_shift_inwards", scan_rows, lambda s: st(s, "S").update(0).split(
        "y", 4, tail="ShiftInwards"), False, ["split(S.update(0), loop='y'", "running an update "
                                               "twice", "iterations (y.o=0, y.i=1)"]),
    # -- multi-dimensional recurrences --------------------------------------------------------
    ("skewed_default", skewed, lambda s: None, True, []),
    ("skewed_interchange", skewed, lambda s: st(s, "F").update(0).reorder("r_x", "r_y"), False,
     ["reorder(F.update(0)", "anti dependence", "(r_x=", "would run backwards"]),
    ("skewed_parallel_ry", skewed, lambda s: st(s, "F").update(0).parallel("r_y"), False,
     ["cannot parallel r_y", "anti dependence", "iterations"]),
    ("skewed_parallel_rx_inner", skewed, lambda s: st(s, "F").update(0).parallel("r_x"), True, []),
    # within one r_y, the points only read the next row: independent
    ("skewed_tile_keep_order", skewed, lambda s: (st(s, "F").update(0).split("r_y", 2), st(
        s, "F").update(0).split("r_x", 3)), True, []),
    ("diagonal_interchange", diagonal, lambda s: st(s, "G").update(0).reorder("r_x", "r_y"),
     True, []),  # distance (1, 1): forwards in both orders
    ("diagonal_parallel_rx", diagonal, lambda s: st(s, "G").update(0).parallel("r_x"), True, []),
    ("gauss_seidel_parallel", gauss_seidel, lambda s: st(s, "F").update(0).parallel("r_x"),
     False, ["cannot parallel r_x", "dependence", "iterations"]),
    ("gauss_seidel_unroll", gauss_seidel, lambda s: st(s, "F").update(0).unroll("r_x", 3),
     True, []),
    ("prefix2d_parallel_independent", prefix2d, lambda s: (st(s, "S").update(0).parallel("y"),
                                                          st(s, "S").update(1).parallel("x")),
     True, []),
    ("prefix2d_parallel_scan_dim", prefix2d, lambda s: st(s, "S").update(1).parallel("ry_x"),
     False, ["S.update(1)", "cannot parallel ry_x", "flow dependence between iterations ("]),
    ("scan_compute_at_consumer_tile", None, None, False,
     ["compute_at(S, consumer='out', loop='x.o')", "S.update(0) iteration (y=0, r_x=2) reads "
      "what (y=0, r_x=1) wrote"]),
    # a scan producer cannot be recomputed per consumer tile (it needs the whole row)
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_catalogue(case):
    name, alg, build, legal, fragments = case
    rng = np.random.default_rng(3)
    if alg is None:  # compute_at of a scan inside a tiled consumer
        S, arrays = scan_rows()
        y, x = tl.vars("y x")
        out = tl.Func("out")
        out[y, x] = S[y, x] * 2
        s = tl.Schedule(out)
        s[out].tile(y, x, 4, 4)
        with pytest.raises(tl.IllegalScheduleError) as err:
            s[S].compute_at(s[out], "x.o")
        for frag in fragments:
            assert frag in str(err.value)
        return
    out, arrays = alg()
    s = tl.Schedule(out)
    if not legal:
        with pytest.raises(tl.IllegalScheduleError) as err:
            build(s)
            report = tl.check(out, s)
            assert any(status == "refuted" for _, status in report.primitives), str(report)
            tl.compile(out, s)
        text = str(err.value)
        for frag in fragments:
            assert frag in text, f"{frag!r} not in: {text}"
        return
    build(s)
    report = tl.check(out, s)
    assert report.ok, str(report)
    assert all(status == "proven" for _, status in report.primitives)
    kern = tl.compile(out, s)
    for m, n in [(5, 7), (2, 3), (9, 4)]:
        arrs = arrays(rng, m, n)
        np.testing.assert_allclose(kern(**arrs), tl.reference(out, **arrs), rtol=1e-4,
                                   atol=1e-6, err_msg=name)


def test_catalogue_size():
    assert len(CASES) >= 40
    assert sum(1 for c in CASES if not c[3]) >= 15
