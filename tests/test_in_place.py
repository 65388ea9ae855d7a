"""Few rows read B in place (``few_rows.in_place``, ``IN_PLACE_TILES``): a GEMM of at most eight
register tiles of rows, whose tile's column of B fits a quarter of L2 and whose B fits a quarter
of L3, runs its column panels in parallel with nothing copied and the reduction whole in each
tile; which shapes take it, that it is a point of the search space, and NumPy's answer on odd
sizes (whole and remainder row tiles, whole and ragged column panels, a batch)."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import assert_a_point_of_the_space, assert_gemm_matches_numpy, described_target, \
    gemm

import tensorlang as tl
from tensorlang.autotuner import few_rows
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.workloads import batch_matmul

IN_PLACE = "reorder('j.o', 'i.o', 'k', 'i.i', 'j.i')"


@pytest.mark.parametrize("m,n,k,dtype,reads", [
    (16, 1000, 1000, tl.float64, True),   # 4 tiles, a 250 KB column of B, B 8 MB
    (2, 100, 256, tl.float64, True),
    (33, 1000, 1000, tl.float64, False),  # 9 tiles
    (16, 1000, 4000, tl.float64, False),  # a 1 MB column of B
    (8, 2000, 2048, tl.float32, False),   # a 512 KB column of B
])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_which_gemms_read_b_in_place(m, n, k, dtype, reads, threads, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    text = heuristic_schedule(gemm(dtype), {"M": m, "N": n, "K": k},
                              described_target("znver4")).to_python()
    assert (IN_PLACE in text and "cache_read" not in text) == reads, text
    # (2 x 100 x 256, a small product: its panels serially, few_rows.SERIAL_SMALL)
    small = m * n * k < 1 << 18
    assert ("parallel('j.o')" in text) == (reads and threads == "2" and not small), text
    monkeypatch.setattr(few_rows, "IN_PLACE_TILES", 0)
    if reads:  # as before: B's panels copied
        text = heuristic_schedule(gemm(dtype), {"M": m, "N": n, "K": k},
                                  described_target("znver4")).to_python()
        assert "cache_read('B'" in text, text


def test_the_in_place_nest_is_a_point_of_the_space(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    sizes = {"M": 29, "N": 1031, "K": 301}
    target = described_target("znver4")
    s = heuristic_schedule(C, sizes, target)
    # (29 rows: the last tile shifted inwards, few_rows.IN_PLACE_SHIFT)
    assert IN_PLACE in s.to_python() and "tail='ShiftInwards'" in s.to_python(), s.to_python()
    assert_a_point_of_the_space(C, sizes, target, s)


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
@pytest.mark.parametrize("cpu,threads", [("znver4", "2"), ("znver4", "1"), ("haswell", "2")])
def test_the_in_place_nest_matches_numpy_on_odd_sizes(dtype, cpu, threads, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(dtype)
    for m, n, k in [(29, 523, 301), (7, 523, 97)]:  # (Haswell's L3 of 8 MB: B of 1.2 MB)
        s = heuristic_schedule(C, {"M": m, "N": n, "K": k}, described_target(cpu))
        assert IN_PLACE in s.to_python(), s.to_python()
        assert_gemm_matches_numpy(tl.compile(C, s), dtype, [(m, n, k), (1, 67, 5), (13, 40, 1),
                                                            (5, 1, 3)], seed=m)


def test_a_short_batch_reads_b_in_place_inside_it(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = batch_matmul(tl.float64)
    sizes = {"B": 1, "M": 29, "N": 1031, "K": 301}
    target = described_target("znver4")
    s = heuristic_schedule(C, sizes, target)
    assert "reorder('b', 'j.o', 'i.o', 'k', 'i.i', 'j.i')" in s.to_python(), s.to_python()
    assert_a_point_of_the_space(C, sizes, target, s)
    kern = tl.compile(C, s)
    rng = np.random.default_rng(5)
    for bt, m, n, k in [(1, 29, 1031, 301), (3, 1, 67, 5), (2, 13, 40, 11)]:
        a, b = rng.standard_normal((bt, m, k)), rng.standard_normal((bt, k, n))
        np.testing.assert_allclose(kern(A=a, B=b), a @ b, rtol=1e-10, atol=1e-9)
