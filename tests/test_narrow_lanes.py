"""A GEMM whose rows have 2 or 3 columns reduces in vector lanes along ``k``
(``rfactor_rules.narrow_columns`` and ``rfactor_lanes``): which shapes take the form, its row
blocks in the target's vector registers, that the kernels match NumPy on odd sizes, and that the
rule-based schedule stays a point of the search space."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import heuristic, rfactor_rules
from tensorlang.autotuner import space as space_mod
from tensorlang.autotuner.space import SearchSpace

sys.path.insert(0, os.path.dirname(__file__))
from algorithms import ZEN4, described_target, gemm  # noqa: E402


def _threads(monkeypatch, n: int) -> None:
    for module in (heuristic, rfactor_rules, space_mod):
        monkeypatch.setattr(module, "num_threads", lambda: n)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_a_gemm_of_two_or_three_columns_reduces_in_vector_lanes(dtype, threads, monkeypatch):
    _threads(monkeypatch, threads)
    C = gemm(dtype)
    lanes = heuristic.lanes(C, ZEN4)
    # (a shorter reduction: the register tile of one narrow vector per row, narrow_tile)
    shortest = max(2 * rfactor_rules.NARROW_LANE_VECTORS * lanes, rfactor_rules.NARROW_LANE_TERMS)
    for n in (2, 3):
        sizes = {"M": 1000, "N": n, "K": 1000}
        s = heuristic.heuristic_schedule(C, sizes, ZEN4)
        text = s.to_python()
        assert "s.rfactor('C', 'k.i')" in text and 's["C_rf"].vectorize(' in text, text
        assert f"s[\"C_rf\"].split('j', {n})" in text and "unroll('j.i')" in text, text
        assert ("parallel(" in text) == (threads == 2), text
        point = SearchSpace(C, sizes, ZEN4).point(s)
        assert point is not None and point[0]["C.rfactor_lanes"] is True, text
        with monkeypatch.context() as m:
            m.setattr(rfactor_rules, "NARROW_LANE_COLUMNS", 0)  # before: the scalar nest
            assert "rfactor" not in heuristic.heuristic_schedule(C, sizes, ZEN4).to_python()
        # a small product (serial_share.few_vectors) on one thread, in one block of few rows
        text = heuristic.heuristic_schedule(C, {"M": 7, "N": n, "K": shortest}, ZEN4).to_python()
        assert "rfactor" in text and "parallel(" not in text, text
        assert "s[\"C_rf\"].split('i', 7)" in text, text
    # not: 4 columns (a register tile along j, narrow_tile), a reduction shorter than
    # NARROW_LANE_TERMS (the register tile too, a narrow vector per row), one column (a
    # matrix-vector product as a matrix: other rules)
    for n, k in [(4, 1000), (2, shortest - 1), (3, 17), (1, 1000)]:
        text = heuristic.heuristic_schedule(C, {"M": 1000, "N": n, "K": k}, ZEN4).to_python()
        assert "rfactor" not in text, (n, k, text)
        assert n == 1 or "s[\"C\"].vectorize('j.i')" in text, (n, k, text)
    with monkeypatch.context() as m:  # before: lanes down to 2 * NARROW_LANE_VECTORS vectors
        m.setattr(rfactor_rules, "NARROW_LANE_TERMS", 0)
        sizes = {"M": 1000, "N": 2, "K": 4 * lanes}
        text = heuristic.heuristic_schedule(C, sizes, ZEN4).to_python()
        assert "rfactor" in text, text


@pytest.mark.parametrize("threads", [1, 2])
def test_narrow_rows_read_b_from_a_transposed_copy_and_merge_a_block_at_a_time(threads,
                                                                              monkeypatch):
    # B's columns (N apart down a column) copied once with k contiguous, before the rows, where
    # the rows make more blocks than threads; the lanes added up a block of rows at a time
    _threads(monkeypatch, threads)
    C = gemm(tl.float32)
    for n in (2, 3):
        text = heuristic.heuristic_schedule(C, {"M": 1000, "N": n, "K": 1000}, ZEN4).to_python()
        assert ("s.cache_read('B', s[\"C_rf\"], 'i.o', index=0, layout=(1, 0))" in text
                and 's["B_local"].compute_root()' in text), text
        assert "s[\"C\"].split('i', 8)" in text and f"s[\"C\"].split('j', {n})" in text, text
        assert "s[\"C\"].reorder('i.o', 'j.o', 'C_rf_r', 'i.i', 'j.i')" in text, text
        assert "s[\"C\"].parallel(" not in text, text
        with monkeypatch.context() as m:
            m.setattr(rfactor_rules, "NARROW_COPY", 0)
            m.setattr(rfactor_rules, "MERGE_ROWS", 0)
            text = heuristic.heuristic_schedule(C, {"M": 1000, "N": n, "K": 1000}, ZEN4).to_python()
            assert "cache_read" not in text and "s[\"C\"].split('i'" not in text, text
    # one block of all the rows, or no more blocks than threads, each read B once anyway (in
    # parallel, where the copy would be serial): no copy
    for m in (5, 8 * threads):
        text = heuristic.heuristic_schedule(C, {"M": m, "N": 2, "K": 1000}, ZEN4).to_python()
        assert "rfactor" in text and "cache_read" not in text, (m, text)
    # B stored with k contiguous already (C = A B^T): read in place
    M, N, K = tl.sizes("M N K")
    A, Bt = tl.Input("A", (M, K), tl.float32), tl.Input("Bt", (N, K), tl.float32)
    i, j, k = tl.vars("i j k")
    D = tl.Func("D")
    D[i, j] = A[i, k] * Bt[j, k]
    text = heuristic.heuristic_schedule(D, {"M": 1000, "N": 2, "K": 1000}, ZEN4).to_python()
    assert "rfactor" in text and "cache_read" not in text, text


@pytest.mark.parametrize("cpu,columns,rows", [("skylake-avx512", 2, 8), ("skylake-avx512", 3, 8),
                                              ("haswell", 2, 4), ("haswell", 3, 4)])
def test_a_block_of_narrow_rows_fits_the_vector_registers(cpu, columns, rows, monkeypatch):
    # a block's accumulators (rows x columns vectors) and one vector of B per column within the
    # target's registers: AVX-512's 32 hold 8 rows of 3, AVX2's 16 only 4 rows of 2 or 3
    _threads(monkeypatch, 2)
    C = gemm(tl.float64)
    text = heuristic.heuristic_schedule(
        C, {"M": 1000, "N": columns, "K": 1000}, described_target(cpu)).to_python()
    assert f"s[\"C_rf\"].split('i', {rows})" in text, text


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_narrow_rows_in_vector_lanes_match_numpy_on_odd_sizes(dtype, rng, monkeypatch):
    # (two threads: the parallel blocks; a small product runs serially there too)
    threads = 2
    # rows not a multiple of the block (and fewer rows than a block: one block of all of them),
    # k not a multiple of the lanes (a guarded last vector), a prime number of everything
    _threads(monkeypatch, threads)
    C = gemm(dtype)
    lanes = heuristic.lanes(C)
    npd = np.float64 if dtype == tl.float64 else np.float32
    tol = 1e-10 if dtype == tl.float64 else 2e-4
    shortest = max(2 * rfactor_rules.NARROW_LANE_VECTORS * lanes, rfactor_rules.NARROW_LANE_TERMS)
    for m, n, k in [(37, 2, 257), (1009, 3, shortest), (7, 3, 1009), (2, 2, 263), (131, 3, 1000)]:
        s = heuristic.heuristic_schedule(C, {"M": m, "N": n, "K": k})
        assert "rfactor" in s.to_python(), (m, n, k)
        kern = tl.compile(C, s)
        a, b = rng.random((m, k)).astype(npd), rng.random((k, n)).astype(npd)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=tol, atol=tol * k)
        # the kernel is compiled for no particular size: others run it right too
        for m2, n2, k2 in [(1, 1, 1), (5, 3, 7), (40, 2, 333), (9, 5, 17)]:
            a, b = rng.random((m2, k2)).astype(npd), rng.random((k2, n2)).astype(npd)
            np.testing.assert_allclose(kern(a, b), a @ b, rtol=tol, atol=tol * k2)


@pytest.mark.parametrize("threads", [1, 2, 16])
@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_one_narrow_row_reduces_in_vector_lanes_serially(dtype, threads, rng, monkeypatch):
    # one row (x^T B, B of 2 or 3 columns), fewer rows than threads: before ONE_ROW_LANES the
    # one-row nest, a chain of dependent multiply-adds per column whatever the length of k; now
    # one vector of partial sums per column, the row alone in its block, serially (however long
    # k: one row leaves no loop to share out)
    _threads(monkeypatch, threads)
    C = gemm(dtype)
    lanes = heuristic.lanes(C)
    npd = np.float64 if dtype == tl.float64 else np.float32
    tol = 1e-10 if dtype == tl.float64 else 2e-4
    for n, k in [(2, 1009), (3, 257), (2, 100003)]:
        sizes = {"M": 1, "N": n, "K": k}
        s = heuristic.heuristic_schedule(C, sizes)
        text = s.to_python()
        assert f"s[\"C\"].split('k', {lanes})" in text and "s.rfactor('C', 'k.i')" in text, text
        assert f"s[\"C_rf\"].split('j', {n})" in text and "parallel(" not in text, text
        point = SearchSpace(C, sizes).point(s)
        assert point is not None and point[0]["C.rfactor_lanes"] is True, text
        kern = tl.compile(C, s)
        a, b = rng.random((1, k)).astype(npd), rng.random((k, n)).astype(npd)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=tol, atol=tol * k)
        for m2, n2, k2 in [(1, 1, 1), (5, 3, 7), (40, 2, 333), (9, 5, 17)]:  # any size runs it
            a, b = rng.random((m2, k2)).astype(npd), rng.random((k2, n2)).astype(npd)
            np.testing.assert_allclose(kern(a, b), a @ b, rtol=tol, atol=tol * k2)
        with monkeypatch.context() as m:
            m.setattr(rfactor_rules, "ONE_ROW_LANES", 0)
            assert "rfactor" not in heuristic.heuristic_schedule(C, sizes).to_python()
    # a short reduction keeps the register tile; a few rows with more work than one parallel
    # region per thread keep their rules (rfactor_chunks, a parallel loop over the rows)
    assert "rfactor" not in heuristic.heuristic_schedule(
        C, {"M": 1, "N": 2, "K": 17}).to_python()
    if threads == 16:
        text = heuristic.heuristic_schedule(C, {"M": 3, "N": 2, "K": 100003}).to_python()
        assert "s.rfactor('C', 'k.i')" not in text, text
        text = heuristic.heuristic_schedule(C, {"M": 3, "N": 2, "K": 1009}).to_python()
        assert "s.rfactor('C', 'k.i')" in text and "parallel(" not in text, text
