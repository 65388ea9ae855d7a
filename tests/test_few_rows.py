"""A packed GEMM whose rows make a single row block (32 x 4096 x 4096): the rule-based schedule
runs its column panels in parallel, every register tile of rows inside each panel, the remainder
rows too (``autotune/few_rows.py``, ``heuristic.FEW_ROWS``), where two threads ran it unpacked;
the nest matches NumPy on odd sizes, and the rule stays a point of the search space. A GEMM of
one row (``x^T B``) takes the column reduction's forms (``stream_rules.UNIT_VARS``)."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import (assert_a_point_of_the_space, assert_gemm_matches_numpy, described_target,
                        gemm)

import tensorlang as tl
from tensorlang.autotuner import few_rows, heuristic, narrow_tile, stream_rules
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.workloads import batch_matmul
from tensorlang.schedule.lower import lower


@pytest.fixture(autouse=True)
def _copied(monkeypatch):
    """These tests are of the nest that copies B's panels: few rows reading B in place
    (``few_rows.IN_PLACE_TILES``, tests/test_in_place.py) would take most of their shapes."""
    monkeypatch.setattr(few_rows, "IN_PLACE_TILES", 0)


# B copied a few column panels at a time (few_rows.COPY_ROW_BYTES): j.o.o the copies, in
# parallel, j.o.i the panels inside one
NEST = "reorder('k.o', 'j.o.o', 'j.o.i', 'i.o', 'k.i', 'i.i', 'j.i')"
# one panel per copy, where copies of two would not share out (523 columns in 64-column panels)
ONE_PANEL = "reorder('k.o', 'j.o', 'i.o', 'k.i', 'i.i', 'j.i')"


@pytest.mark.parametrize("cpu", ["icelake-server", "skylake-avx512", "znver4", "haswell"])
def test_few_rows_run_their_column_panels_in_parallel(cpu, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    sizes = {"M": 32, "N": 4096, "K": 4096}
    text = heuristic_schedule(gemm(tl.float64), sizes, described_target(cpu)).to_python()
    assert NEST in text and "parallel('j.o.o')" in text, text
    assert "cache_read('B', s[\"C\"], 'j.o.o'" in text and "cache_read('A', s[\"C\"], 'k.o'" in text
    monkeypatch.setattr(heuristic, "FEW_ROWS", 0)  # as before: a single row block, unpacked
    old = heuristic_schedule(gemm(tl.float64), sizes, described_target(cpu)).to_python()
    assert "cache_read" not in old, old


@pytest.mark.parametrize("cpu,group", [("icelake-server", 2), ("haswell", 8)])
def test_b_is_copied_a_few_panels_at_a_time(cpu, group, monkeypatch):
    # few_rows.COPY_ROW_BYTES: each copy reads 512 bytes of each row of B, the rows a page or
    # more apart: 2 panels of 32 float64 columns (AVX-512), 8 of 8 (AVX2); the copy's rows
    # prefetched 32 lines ahead in whole rows of it (packed_reads.PANEL_PREFETCH); odd sizes
    # against NumPy (a last copy of fewer panels, a ragged last panel, remainder rows)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    target = described_target(cpu)
    sizes = {"M": 17, "N": 4099, "K": 1031}
    s = heuristic_schedule(C, sizes, target)
    text = s.to_python()
    assert f"split('j.o', {group})" in text and NEST in text, text
    assert "prefetch('B', 'B_local_d0', offset=4)" in text, text  # (512 bytes: 8 lines a row)
    assert assert_a_point_of_the_space(C, sizes, target, s)["C.j.copy"] == group
    assert_gemm_matches_numpy(tl.compile(C, s), tl.float64, [(17, 4099, 1031), (1, 37, 5),
                                                            (7, 200, 1031)], seed=17)
    monkeypatch.setattr(few_rows, "COPY_ROW_BYTES", 0)  # as before: one panel per copy
    old = heuristic_schedule(C, sizes, target).to_python()
    assert ONE_PANEL in old, old


def test_on_one_thread_only_rows_past_the_tiles_take_the_few_rows_nest(monkeypatch):
    # 32 rows in 6-row tiles leave 2: inside each panel here, where BLIS's order (which copies
    # all of B in panels per kc block) took them before; 30 rows keep the nest they had
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "1")
    target = described_target("icelake-server")
    text = heuristic_schedule(gemm(tl.float64), {"M": 32, "N": 4096, "K": 4096},
                              target).to_python()
    assert "split('i', 6)" in text and NEST in text and "parallel" not in text, text
    text = heuristic_schedule(gemm(tl.float64), {"M": 30, "N": 4096, "K": 4096},
                              target).to_python()
    assert "split('i', 6)" in text and NEST not in text, text


def test_the_remainder_rows_share_the_panels_copy(monkeypatch):
    # one copy of B per column panel and k block: no piece of remainder rows copying it again
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    s = heuristic_schedule(C, {"M": 32, "N": 4096, "K": 4096}, described_target("icelake-server"))
    low = str(lower(C, s))
    assert "if i.i + 6 * i.o < M" in low  # the remainder rows, guarded, inside the panels
    # no piece of its own for them (the rule's other order had ``if M - M // 6 * 6 > 0:``
    # around a nest that copied every panel of B again)
    top = [ln for ln in low.splitlines() if ln.startswith("if ")]
    assert top == ["if N // 32 * 32 > 0:", "if N - N // 32 * 32 > 0:"], top


def test_the_few_rows_rule_is_a_point_of_the_space(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    sizes = {"M": 29, "N": 1031, "K": 1201}
    target = described_target("icelake-server")
    s = heuristic_schedule(C, sizes, target)
    assert NEST in s.to_python(), s.to_python()
    assert assert_a_point_of_the_space(C, sizes, target, s)["C.i.block"] == "all"


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
@pytest.mark.parametrize("cpu,threads", [("icelake-server", "2"), ("icelake-server", "1"),
                                         ("haswell", "2")])
def test_the_few_rows_nest_matches_numpy_on_odd_sizes(dtype, cpu, threads, monkeypatch):
    # a described CPU's rule (the same on every host), compiled for this one: whole and
    # remainder row tiles, whole and ragged column panels, whole and shorter k blocks
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(dtype)
    for m, n, k in [(29, 1031, 1201), (7, 523, 2048)]:
        s = heuristic_schedule(C, {"M": m, "N": n, "K": k}, described_target(cpu))
        assert NEST in s.to_python() or ONE_PANEL in s.to_python(), s.to_python()
        assert_gemm_matches_numpy(tl.compile(C, s), dtype, [(m, n, k), (1, 67, 5), (13, 40, 1100)],
                                  seed=m)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_gemm_of_one_row_is_a_column_reduction(threads, monkeypatch):
    # x^T B written as a GEMM with M = 1: its row Var of extent 1 counts as absent
    # (stream_rules.UNIT_VARS), so it takes the column reduction's forms: bands of columns a
    # few rows at a time where B streams from memory (stream_rules.column_rows), a segment of
    # vectors under the rows where it fits in cache (on Ice Lake-SP, whose L3 is no victim
    # cache, in one L2: stream_rules.MESH_L3_STREAMS); before, the default nest (k innermost,
    # B read down its columns)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(tl.float64)
    target = described_target("icelake-server")
    big, small = {"M": 1, "N": 4099, "K": 4099}, {"M": 1, "N": 151, "K": 797}
    s_big = heuristic_schedule(C, big, target)
    assert "reorder('i', 'j.o', 'k.o', 'j.i.o', 'k.i', 'j.i.i')" in s_big.to_python()
    s_small = heuristic_schedule(C, small, target)
    assert "reorder('i', 'j.o', 'k', 'j.i')" in s_small.to_python(), s_small.to_python()
    assert_a_point_of_the_space(C, big, target, s_big)
    for s, sizes in [(s_big, big), (s_small, small)]:
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        assert_gemm_matches_numpy(tl.compile(C, s), tl.float64, [(m, n, k), (3, 50, 7)], seed=n)
    monkeypatch.setattr(stream_rules, "UNIT_VARS", 0)
    # without it, a register tile of the one row (narrow_tile.FEW_ROWS_LEAST, stop 76; four
    # vectors since stop 82, ONE_ROW_VECTORS), and before that the default nest
    text = heuristic_schedule(C, small, target).to_python()
    assert "split('i'" not in text and "split('j', 32)" in text, text
    monkeypatch.setattr(narrow_tile, "FEW_ROWS_LEAST", 2)
    assert heuristic_schedule(C, small, target).to_python().strip() == ""


def test_few_rows_over_an_unsplit_reduction(monkeypatch):
    # K at most kc (32 x 4096 x 500): the reduction whole inside each tile, B's K x nr panel
    # copied per column panel, the panels in parallel; before, unpacked on several threads
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    target = described_target("icelake-server")
    sizes = {"M": 29, "N": 1031, "K": 301}
    s = heuristic_schedule(C, sizes, target)
    text = s.to_python()
    assert "reorder('j.o.o', 'j.o.i', 'i.o', 'k', 'i.i', 'j.i')" in text, text
    assert "split('k'" not in text and "cache_read('B', s[\"C\"], 'j.o.o'" in text, text
    assert "parallel('j.o.o')" in text, text
    assert assert_a_point_of_the_space(C, sizes, target, s)["C.i.block"] == "all"
    assert_gemm_matches_numpy(tl.compile(C, s), tl.float64, [(29, 1031, 301), (1, 67, 5),
                                                            (13, 40, 700)], seed=3)
    monkeypatch.setattr(heuristic, "FEW_ROWS", 0)
    assert "cache_read" not in heuristic_schedule(C, sizes, target).to_python()


@pytest.mark.parametrize("cpu", ["icelake-server", "znver4"])
def test_rows_one_thread_fits_in_a_block_take_the_few_rows_nest_over_blis_order(cpu, monkeypatch):
    # 127 x 1531 x 1999 on 2 threads: rows that leave a remainder took BLIS's order in two row
    # blocks (and the remainder's); one thread's rows fit one block, so the column panels run
    # in parallel instead (few_rows.FEW_ROWS_BLIS), with one thread's tile rows
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    target = described_target(cpu)
    sizes = {"M": 127, "N": 1531, "K": 1999}
    s = heuristic_schedule(C, sizes, target)
    assert NEST in s.to_python() and "parallel('j.o.o')" in s.to_python(), s.to_python()
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "1")
    one = heuristic_schedule(C, sizes, target).to_python()
    assert one.splitlines()[0] in s.to_python(), (one, s.to_python())  # the same tile rows
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    assert assert_a_point_of_the_space(C, sizes, target, s)["C.i.block"] == "all"
    assert_gemm_matches_numpy(tl.compile(C, s), tl.float64, [(127, 1531, 1999), (1, 67, 5),
                                                            (13, 40, 1100)], seed=127)
    monkeypatch.setattr(few_rows, "FEW_ROWS_BLIS", 0)  # as before: BLIS's order, row blocks
    old = heuristic_schedule(C, sizes, target).to_python()
    assert "reorder('k.o', 'i.o.o', 'j.o'" in old and "parallel('i.o.o')" in old, old


@pytest.mark.parametrize("cpu", ["icelake-server", "haswell"])
def test_rows_one_thread_fits_in_a_block_take_the_few_rows_nest_over_row_blocks(cpu,
                                                                               monkeypatch):
    # few_rows.FEW_ROWS_BLOCKS: 64 rows on 2 threads took two row blocks of 32 in 4-row tiles,
    # each block copying all of B's panels; one thread's rows (6-row tiles) fit one block, so
    # the column panels run in parallel instead, each copied once
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    target = described_target(cpu)
    sizes = {"M": 64, "N": 2053, "K": 1031}
    s = heuristic_schedule(C, sizes, target)
    assert "split('i', 6)" in s.to_python() and NEST in s.to_python(), s.to_python()
    assert assert_a_point_of_the_space(C, sizes, target, s)["C.i.block"] == "all"
    assert_gemm_matches_numpy(tl.compile(C, s), tl.float64, [(64, 2053, 1031), (1, 67, 5),
                                                            (13, 40, 1100)], seed=64)
    monkeypatch.setattr(few_rows, "FEW_ROWS_BLOCKS", 0)  # as before: the row blocks
    old = heuristic_schedule(C, sizes, target).to_python()
    assert "reorder('i.o.o', 'k.o', 'j.o'" in old and "parallel('i.o.o')" in old, old


def test_a_partial_panel_alone_keeps_the_row_blocks(monkeypatch):
    # few_rows.TAIL_ALONE: float32 500 x 500 x 4000 on 2 threads, 7 whole 64-column panels and
    # 52 columns: the partial panel, a piece of its own on one thread, would leave the threads
    # 81% busy, where BLIS's two row blocks keep both busy: the row blocks stay
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float32)
    target = described_target("icelake-server")
    sizes = {"M": 500, "N": 500, "K": 4000}
    s = heuristic_schedule(C, sizes, target).to_python()
    assert "split('j', 64" in s and "parallel('i.o.o')" in s and NEST not in s, s
    monkeypatch.setattr(few_rows, "TAIL_ALONE", 0)  # as before: the few-rows nest
    old = heuristic_schedule(C, sizes, target).to_python()
    assert NEST in old and "parallel('j.o.o')" in old, old
    # 512 columns (8 whole panels) share out either way: the few-rows nest
    monkeypatch.setattr(few_rows, "TAIL_ALONE", 1)
    assert NEST in heuristic_schedule(C, {**sizes, "N": 512}, target).to_python()


@pytest.mark.parametrize("batch", [1, 3])
def test_a_batch_too_short_for_the_threads_runs_the_few_rows_nest_inside_it(batch, monkeypatch):
    # few_rows.FEW_BATCH: 1 or 3 products of 32 rows on 2 threads; before, a batch of one ran
    # the plain register tile (no parallel loop for the packed nest) and a batch of three ran
    # its batch loop in parallel (3 iterations on 2 threads)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = batch_matmul(tl.float64)
    target = described_target("icelake-server")
    sizes = {"B": batch, "M": 29, "N": 1031, "K": 1201}
    s = heuristic_schedule(C, sizes, target)
    text = s.to_python()
    assert "reorder('b', 'k.o', 'j.o.o', 'j.o.i', 'i.o', 'k.i', 'i.i', 'j.i')" in text, text
    assert "parallel('j.o.o')" in text and "parallel('b')" not in text, text
    assert assert_a_point_of_the_space(C, sizes, target, s)["C.i.block"] == "all"
    kern = tl.compile(C, s)
    rng = np.random.default_rng(batch)
    for bt, m, n, k in [(batch, 29, 1031, 1201), (2, 1, 67, 5), (1, 13, 40, 1100)]:
        a, b = rng.standard_normal((bt, m, k)), rng.standard_normal((bt, k, n))
        np.testing.assert_allclose(kern(A=a, B=b), a @ b, rtol=1e-10, atol=1e-9)
    monkeypatch.setattr(few_rows, "FEW_BATCH", 0)
    old = heuristic_schedule(C, sizes, target).to_python()
    assert ("parallel('b')" in old) if batch > 1 else ("cache_read" not in old), old
    sizes["B"] = 8  # a batch that shares out keeps its parallel batch loop
    monkeypatch.setattr(few_rows, "FEW_BATCH", 1)
    assert "parallel('b')" in heuristic_schedule(C, sizes, target).to_python()
