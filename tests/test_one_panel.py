"""A packed tile over a single column panel reads its row block in place
(``packed_reads.ONE_PANEL_IN_PLACE``): a GEMM of 32 columns copied A's ``mc x kc`` blocks for
one panel to read once. The rule-based schedule stays a point of the search space and computes
what NumPy computes."""

from __future__ import annotations

import pytest
from algorithms import (assert_a_point_of_the_space, assert_gemm_matches_numpy, described_target,
                        runnable)
from test_cpu_model import gemm

import tensorlang as tl
from tensorlang.autotuner import packed_reads
from tensorlang.autotuner.heuristic import heuristic_schedule


@pytest.mark.parametrize("dtype,threads", [(tl.float64, "2"), (tl.float32, "1")])
def test_one_column_panel_reads_a_in_place(dtype, threads, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    monkeypatch.setattr(packed_reads, "ONE_PANEL_UNPACKED", 0)  # (B in L2: no packed tile)
    C = gemm(dtype)
    target = described_target("icelake-server")
    sizes = {"M": 1000, "N": 32, "K": 1000}
    s = heuristic_schedule(C, sizes, target)
    text = s.to_python()
    assert "split('j', 32)" in text and "split('k'," in text, text  # one panel, k blocks
    assert "cache_read('B'" in text and "cache_read('A'" not in text, text
    assert_a_point_of_the_space(C, sizes, target, s)
    assert_gemm_matches_numpy(tl.compile(C, s, target=runnable(target)), dtype,
                              [(1000, 32, 1000), (997, 31, 1013), (1, 32, 1), (7, 40, 600),
                               (13, 1, 5)], seed=32)
    monkeypatch.setattr(packed_reads, "ONE_PANEL_IN_PLACE", 0)  # as before: A copied
    assert "cache_read('A'" in heuristic_schedule(C, sizes, target).to_python()
    # several panels (256 columns) copy A's blocks, each read by all of them
    monkeypatch.setattr(packed_reads, "ONE_PANEL_IN_PLACE", 1)
    several = heuristic_schedule(C, {**sizes, "N": 256}, target).to_python()
    assert "cache_read('A'" in several, several


@pytest.mark.parametrize("dtype,threads,n", [(tl.float32, "2", 16), (tl.float64, "2", 8),
                                            (tl.float64, "1", 32)])
def test_one_panel_in_l2_takes_no_packed_tile(dtype, threads, n, monkeypatch):
    # B of one panel's width is already a contiguous panel: the register tile over rows reads
    # it in place, its row tiles in parallel (``packed_reads.ONE_PANEL_UNPACKED``)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(dtype)
    target = described_target("znver4")
    sizes = {"M": 100, "N": n, "K": 1000}
    s = heuristic_schedule(C, sizes, target)
    text = s.to_python()
    assert "cache_read" not in text and "split('k'" not in text, text
    assert "parallel(" in text or threads == "1", text
    assert_a_point_of_the_space(C, sizes, target, s)
    assert_gemm_matches_numpy(tl.compile(C, s, target=runnable(target)), dtype,
                              [(100, n, 1000), (97, n, 13), (1, n, 1), (7, n - 1, 600)], seed=n)
    with monkeypatch.context() as m:
        m.setattr(packed_reads, "ONE_PANEL_UNPACKED", 0)  # before: B copied in panels
        assert "cache_read('B'" in heuristic_schedule(C, sizes, target).to_python()
    # B past L2 (znver4: 1 MiB) and many panels keep the packed tile
    past = (1 << 20) // (n * dtype.numpy.itemsize) + 100
    for other in ({**sizes, "K": past}, {**sizes, "N": 256}):
        assert "cache_read('B'" in heuristic_schedule(C, other, target).to_python(), other
