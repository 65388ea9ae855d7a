"""Two pieces of a partitioned stage in one parallel loop (``schedule/parallel_pieces.py``):
where loop partitioning splits a stage along the Var its parallel loop iterates, the remainder
runs as more iterations of that loop (a branch on the loop variable), not as a parallel loop
of its own after the first has joined. Computed as NumPy computes it on odd sizes, with and
without the merge."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import assert_gemm_matches_numpy, described_target, gemm, runnable

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.schedule import parallel_pieces

GEMV_SHAPES = [(1, 1000, 1000), (1, 1, 7), (1, 129, 5), (3, 1031, 13), (2, 128, 3), (1, 127, 1),
               (0, 5, 3), (4, 0, 2)]


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_a_gemvs_column_remainder_runs_in_the_parallel_loop(dtype, monkeypatch):
    # 1 x 1000 x 1000: column segments in parallel, the columns past the last whole segment
    # were a piece of their own, run on one thread after the segments' loop had joined
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(dtype)
    target = described_target("znver4")
    s = heuristic_schedule(C, {"M": 1, "N": 1000, "K": 1000}, target)
    assert "parallel('j.o')" in s.to_python(), s.to_python()
    kern = tl.compile(C, s, target=runnable(target))
    nest = kern.loop_nest()
    assert nest.count("parallel for") == 1, nest
    assert "if j.o < " in nest, nest
    assert_gemm_matches_numpy(kern, dtype, GEMV_SHAPES, seed=5)
    monkeypatch.setattr(parallel_pieces, "ONE_PARALLEL_LOOP", 0)  # before: two parallel loops
    before = tl.compile(C, s, target=runnable(target))
    assert before.loop_nest().count("parallel for") == 2, before.loop_nest()
    assert_gemm_matches_numpy(before, dtype, GEMV_SHAPES[:4], seed=5)


def test_pieces_along_a_var_the_parallel_loop_does_not_iterate_stay_apart(monkeypatch):
    # parallel over rows, partitioned along the columns: both pieces run every row, so one
    # parallel loop of both would hold each row twice; they stay two loops
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float32)
    s = tl.Schedule(C)
    s["C"].split("j", 16)
    s["C"].reorder("i", "j.o", "k", "j.i")
    s["C"].vectorize("j.i")
    s["C"].parallel("i")
    kern = tl.compile(C, s)
    assert kern.loop_nest().count("parallel for") == 2, kern.loop_nest()
    assert_gemm_matches_numpy(kern, tl.float32, [(7, 37, 5), (1, 15, 3), (3, 16, 2)], seed=7)


def test_merged_pieces_compute_their_own_producers():
    # a producer computed at the parallel loop: each iteration, whole tile or remainder,
    # computes and allocates its own rows of it
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float32)
    y, x = tl.vars("y x")
    bx = tl.Func("bx")
    bx[y, x] = In[y, x] * 2 + In[y, tl.clamp(x + 1, 0, W - 1)]
    out = tl.Func("out")
    out[y, x] = bx[y, x] + bx[tl.clamp(y + 1, 0, H - 1), x]
    s = tl.Schedule(out)
    s["out"].split("y", 8)
    s["out"].parallel("y.o")
    s["bx"].compute_at(s["out"], "y.o")
    kern = tl.compile(out, s)
    nest = kern.loop_nest()
    assert nest.count("parallel for") == 1 and "if y.o < " in nest, nest
    rng = np.random.default_rng(3)
    for h, w in [(29, 13), (8, 5), (1, 1), (17, 64)]:
        a = rng.random((h, w), dtype=np.float32)
        b = a * 2 + a[:, np.minimum(np.arange(w) + 1, w - 1)]
        ref = b + b[np.minimum(np.arange(h) + 1, h - 1), :]
        np.testing.assert_allclose(kern(a), ref, rtol=1e-6)


def test_a_piece_in_two_versions_merges_each_with_the_remainder(rng, monkeypatch):
    # A^T x streamed by rows: bands of 24 columns in parallel, the rows split by 4 (unrolled).
    # The whole bands' piece comes in two versions (M % 4 == 0 or not), decided outside its
    # parallel loop; the band past the last whole one was a parallel loop of its own after
    # either version had joined (2100 columns in bands of 1056: one band a loop, one thread)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    M, N = tl.sizes("M N")
    A, x = tl.Input("A", (M, N), tl.float64), tl.Input("x", (M,), tl.float64)
    j = tl.Var("j")
    r = tl.RDom((0, M), name="r")
    y = tl.Func("y")
    y[j] = tl.sum(A[r, j] * x[r])
    s = tl.Schedule(y)
    s[y].split("j", 24)
    s[y].split("j.i", 8)
    s[y].split("r_x", 4)
    s[y].reorder("j.o", "r_x.o", "j.i.o", "r_x.i", "j.i.i")
    s[y].vectorize("j.i.i")
    s[y].unroll("r_x.i")
    s[y].parallel("j.o")
    shapes = [(40, 100), (41, 100), (43, 96), (4, 24), (3, 23), (1, 1), (0, 5), (5, 0), (97, 251)]

    def check(kern):
        for m, n in shapes:
            a, v = rng.random((m, n)), rng.random(m)
            np.testing.assert_allclose(kern(a, v), a.T @ v, rtol=1e-12, atol=1e-12)

    kern = tl.compile(y, s)
    nest = kern.loop_nest()
    assert nest.count("parallel for") == 2 and "if j.o < " in nest, nest  # one per version
    check(kern)
    monkeypatch.setattr(parallel_pieces, "VERSIONED_PIECES", 0)  # before: the remainder's own
    before = tl.compile(y, s)
    assert before.loop_nest().count("parallel for") == 3, before.loop_nest()
    check(before)
