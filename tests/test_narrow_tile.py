"""A GEMM whose rows are at most one native vector takes the rule-based schedule's register tile
(``autotune/narrow_tile.py``): which widths take it, that the kernels match NumPy on odd sizes,
and that the rule-based schedule stays a point of the search space."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import heuristic, narrow_tile, stream_rules
from tensorlang.autotuner import space as space_mod
from tensorlang.autotuner.space import SearchSpace

sys.path.insert(0, os.path.dirname(__file__))
from algorithms import ZEN4, assert_gemm_matches_numpy, described_target, gemm  # noqa: E402


def _vectorized(s) -> bool:
    return "vectorize(" in s.to_python()


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_a_narrow_gemm_takes_a_register_tile(dtype, monkeypatch):
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    C = gemm(dtype)
    lanes = heuristic.lanes(C, ZEN4)
    for n in (4, 5, lanes):
        sizes = {"M": 37, "N": n, "K": 13}
        s = heuristic.heuristic_schedule(C, sizes, ZEN4)
        assert _vectorized(s) and "unroll(" in s.to_python(), (n, s.to_python())
        assert SearchSpace(C, sizes, ZEN4).point(s) is not None, (n, s.to_python())
        with monkeypatch.context() as m:
            m.setattr(narrow_tile, "NARROW_COLUMNS", 0)  # before: the scalar nest
            assert not _vectorized(heuristic.heuristic_schedule(C, sizes, ZEN4))
    # fewer rows than the tile's: a tile of all of them (the space's ``regs`` rows too)
    for m in (2, 3, 7):
        sizes = {"M": m, "N": lanes, "K": 13}
        s = heuristic.heuristic_schedule(C, sizes, ZEN4)
        assert _vectorized(s) and f"split('i', {m}" in s.to_python().replace('"', "'"), \
            (m, s.to_python())
        assert SearchSpace(C, sizes, ZEN4).point(s) is not None, (m, s.to_python())
    # rows of 2 and 3 columns: one vector of 2-3 lanes per row where the reduction is too short
    # for vector lanes (rfactor_rules.NARROW_LANE_TERMS; longer: test_narrow_lanes.py), which
    # the space's narrowest vector width takes whole (space.whole_loop_vector)
    for n in (2, 3):
        sizes = {"M": 37, "N": n, "K": 13}
        s = heuristic.heuristic_schedule(C, sizes, ZEN4)
        text = s.to_python()
        assert "s[\"C\"].vectorize('j.i')" in text and "unroll('i.i')" in text, text
        assert SearchSpace(C, sizes, ZEN4).point(s) is not None, text
        with monkeypatch.context() as m:
            m.setattr(narrow_tile, "NARROW_COLUMNS", 4)  # before: the scalar nest
            assert not _vectorized(heuristic.heuristic_schedule(C, sizes, ZEN4))
            m.setattr(narrow_tile, "NARROW_COLUMNS", 2)
            m.setattr(space_mod, "NARROW_WHOLE", 0)  # a 3-lane row outside the space's widths
            assert SearchSpace(C, sizes, ZEN4).point(s) is None, text


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_narrow_tiles_match_numpy_on_odd_sizes(dtype, rng, monkeypatch):
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    C = gemm(dtype)
    npd = np.float64 if dtype == tl.float64 else np.float32
    tol = 1e-10 if dtype == tl.float64 else 2e-4
    # (and tiles of all the rows: wider than a vector, one row)
    for m, n, k in [(37, 4, 13), (17, 5, 1), (31, 7, 101), (64, 8, 3), (19, 16, 29),
                    (3, 8, 13), (2, 5, 7), (7, 16, 1), (2, 17, 101), (3, 33, 1), (1, 33, 97),
                    (1, 5, 13), (37, 2, 13), (41, 3, 17), (5, 2, 255), (1, 3, 101), (9, 3, 1)]:
        kern = tl.compile(C, heuristic.heuristic_schedule(C, {"M": m, "N": n, "K": k}))
        a, b = rng.random((m, k)).astype(npd), rng.random((k, n)).astype(npd)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_a_gemm_of_fewer_rows_than_the_tile_takes_a_tile_of_all_of_them(dtype, monkeypatch):
    # rows wider than a native vector too (2 x 16 x 1000 ran the default nest: no rule applied),
    # and one row (x^T B) narrower than a row segment: a tile of one row, its Var not split
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    C = gemm(dtype)
    lanes = heuristic.lanes(C, ZEN4)
    for m, n in [(2, 16), (3, 33), (1, 33), (1, 7), (1, 4), (2, 2 * lanes + 1)]:
        sizes = {"M": m, "N": n, "K": 1000}
        s = heuristic.heuristic_schedule(C, sizes, ZEN4)
        text = s.to_python().replace('"', "'")
        assert _vectorized(s) and (f"split('i', {m})" in text) == (m > 1), (m, n, text)
        assert SearchSpace(C, sizes, ZEN4).point(s) is not None, (m, n, text)
        with monkeypatch.context() as mp:  # before: the default nest here
            mp.setattr(narrow_tile, "FEW_ROWS_WIDE", 0)
            mp.setattr(narrow_tile, "FEW_ROWS_LEAST", 2)
            before = heuristic.heuristic_schedule(C, sizes, ZEN4).to_python()
            if m == 1 or (m, n) == (2, 16) and lanes == 8:
                assert before == "", (m, n, before)
    # one row of at least a row segment keeps the segment form (ROW_VECTORS vectors; serially,
    # as few multiply-adds run where its B does not make it stream: test_stream_rules.py)
    monkeypatch.setattr(stream_rules, "MIN_PARALLEL_STREAM_BYTES", 0)
    text = heuristic.heuristic_schedule(C, {"M": 1, "N": 9 * lanes, "K": 1000}, ZEN4).to_python()
    assert f"split('j', {8 * lanes}" in text.replace('"', "'"), text


def _rows_and_parallel(text: str) -> tuple[int, str]:
    """The row tile's rows and the parallel loop of a register tile's schedule text."""
    text = text.replace('"', "'")
    rows = int(text.split("split('i', ")[1].split(")")[0].split(",")[0])
    return rows, text.split(".parallel('")[1].split("'")[0] if ".parallel(" in text else ""


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_few_rows_take_a_dividing_tile_and_parallel_column_panels(dtype, monkeypatch):
    # 33 rows of 2 native vectors: 3 tiles of 11 rows (22 accumulators), not 4 of 8 and a
    # guarded 1-row remainder run on its own; 3 row tiles on 2 threads share out worse than
    # the column panels, which run in parallel outermost, the last one guarded
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    C = gemm(dtype)
    target = described_target("znver4")
    sizes = {"M": 33, "N": 33 if dtype == tl.float64 else 100, "K": 256}
    s = heuristic.heuristic_schedule(C, sizes, target)
    text = s.to_python()
    assert _rows_and_parallel(text) == (11, "j.o"), text
    assert "ShiftInwards" not in text and SearchSpace(C, sizes, target).point(s) is not None, text
    with monkeypatch.context() as m:
        m.setattr(narrow_tile, "PANELS_PARALLEL", 0)  # the row tiles in parallel
        assert _rows_and_parallel(heuristic.heuristic_schedule(C, sizes, target).to_python()) \
            == (11, "i.o")
        m.setattr(narrow_tile, "DIVISOR_ACCUMULATORS", 0)  # before: 8 rows and a remainder
        assert _rows_and_parallel(heuristic.heuristic_schedule(C, sizes, target).to_python()) \
            == (8, "i.o")
    # an outer product (K = 1) is bound by its stores: its row tiles stay in parallel
    assert _rows_and_parallel(heuristic.heuristic_schedule(
        C, {**sizes, "N": 1000, "K": 1}, target).to_python()) == (11, "i.o")
    # AVX2's 16 registers hold no 11-row tile of 2 vectors: 6 rows (the budget's 12
    # accumulators), as before
    assert _rows_and_parallel(heuristic.heuristic_schedule(
        C, sizes, described_target("haswell")).to_python())[0] == 6


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_dividing_tiles_and_parallel_panels_match_numpy(dtype, monkeypatch):
    # schedules built for 2 threads (panels in parallel, guarded last panel), each kernel run
    # on 1-3 (the count is read at every call)
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    C = gemm(dtype)
    for m, n, k in [(33, 100, 256), (33, 33, 17), (22, 101, 19), (39, 67, 16), (13, 70, 31),
                    (33, 1000, 1), (3, 100, 97), (11, 45, 17)]:
        kern = tl.compile(C, heuristic.heuristic_schedule(C, {"M": m, "N": n, "K": k}))
        for threads in ("1", "2", "3"):
            monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
            assert_gemm_matches_numpy(kern, dtype, [(m, n, k)], seed=m * n + k)


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_a_tile_of_one_row_or_a_few_takes_whole_rows_serially_and_four_vectors_in_parallel(
        dtype, monkeypatch):
    # x^T B narrower than a row segment, wider than four vectors: run serially, one tile of the
    # whole row (vectorized whole where it is not whole vectors), no piece guarded or computed
    # twice (WHOLE_ROW); in parallel (B of MIN_PARALLEL_STREAM_BYTES or more) pieces of four
    # vectors to share out (ONE_ROW_VECTORS), the last one guarded
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    C = gemm(dtype)
    target = described_target("znver4")
    lanes = heuristic.lanes(C, target)
    for n in (4 * lanes + 1, 6 * lanes + 3, 7 * lanes):
        sizes = {"M": 1, "N": n, "K": 1000}
        s = heuristic.heuristic_schedule(C, sizes, target)
        text = s.to_python().replace('"', "'")
        assert f"split('j', {n}," in text and "parallel" not in text, (n, text)
        assert SearchSpace(C, sizes, target).point(s) is not None, (n, text)
        with monkeypatch.context() as m:
            m.setattr(narrow_tile, "WHOLE_ROW", 0)  # before: four vectors, guarded
            before = heuristic.heuristic_schedule(C, sizes, target).to_python().replace('"', "'")
            assert f"split('j', {4 * lanes})" in before, (n, before)
        big = {"M": 1, "N": n, "K": 8000}
        s = heuristic.heuristic_schedule(C, big, target)
        text = s.to_python().replace('"', "'")
        assert f"split('j', {4 * lanes})" in text and "ShiftInwards" not in text, (n, text)
        assert "parallel('j.o')" in text, (n, text)
        assert SearchSpace(C, big, target).point(s) is not None, (n, text)
    # a few rows whose whole rows fit the accumulator budget: all of them, each whole
    n = 4 * lanes + 1  # 5 vectors a row
    for m in (2, 3):
        sizes = {"M": m, "N": n, "K": 1000}
        s = heuristic.heuristic_schedule(C, sizes, target)
        text = s.to_python().replace('"', "'")
        assert f"split('i', {m})" in text and f"split('j', {n}," in text, (m, text)
        assert SearchSpace(C, sizes, target).point(s) is not None, (m, text)
    text = heuristic.heuristic_schedule(C, {"M": 4, "N": n, "K": 1000}, target).to_python()
    assert f"'j', {n}" not in text, text  # (20 accumulators: over Zen 4's budget of 16)
    for m, n, k in [(1, 4 * lanes + 1, 97), (1, 6 * lanes + 3, 1), (1, 5 * lanes + 7, 1000),
                    (1, 100, 13), (1, 4 * lanes + 1, 8000), (2, 4 * lanes + 1, 1000),
                    (3, 4 * lanes + 1, 17)]:
        kern = tl.compile(C, heuristic.heuristic_schedule(C, {"M": m, "N": n, "K": k}))
        assert_gemm_matches_numpy(kern, dtype, [(m, n, k), (1, 7, 5), (m + 2, n + 5, 13),
                                                (1, 1, 1)], seed=n + k)


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_few_rows_run_serially_take_whole_rows_not_the_packed_in_place_nest(dtype, monkeypatch):
    # On Zen 5 (a packed tile of two vectors) a GEMM of 2-3 rows over a B too small to share
    # out took the packed path's in-place nest, serially: panels of two vectors, four
    # accumulators. Now it takes the whole-rows tile, as on Zen 4 (SERIAL_WHOLE_ROWS), a point
    # of the search space; rows too wide for the accumulators keep the in-place nest
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    C = gemm(dtype)
    target = described_target("znver5")
    lanes = heuristic.lanes(C, target)
    n = 6 * lanes + 4  # 7 vectors a row: 100 float32, 52 float64
    for m in (2,):
        sizes = {"M": m, "N": n, "K": 1000}
        s = heuristic.heuristic_schedule(C, sizes, target)
        text = s.to_python().replace('"', "'")
        assert f"split('i', {m})" in text and f"split('j', {n}," in text, (m, text)
        assert "parallel" not in text, text
        assert SearchSpace(C, sizes, target).point(s) is not None, (m, text)
        with monkeypatch.context() as mp:
            mp.setattr(narrow_tile, "SERIAL_WHOLE_ROWS", 0)  # before: 2-vector panels
            before = heuristic.heuristic_schedule(C, sizes, target).to_python().replace('"', "'")
            assert f"split('j', {2 * lanes})" in before, before
    wide = heuristic.heuristic_schedule(C, {"M": 3, "N": n, "K": 1000}, target).to_python()
    assert f"'j', {n}" not in wide, wide  # (21 accumulators: over the budget of 16)
    for m, n2, k in [(2, n, 1000), (2, n - 3, 997), (3, 5 * lanes + 1, 257)]:
        kern = tl.compile(C, heuristic.heuristic_schedule(C, {"M": m, "N": n2, "K": k}, target))
        assert_gemm_matches_numpy(kern, dtype, [(m, n2, k), (1, 7, 5), (m + 2, n2 + 5, 13),
                                                (1, 1, 1)], seed=n2 + k)


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_few_rows_under_the_latency_bound_take_four_vectors_a_row(dtype, monkeypatch):
    # a tile of 2 rows x 2 vectors is no more than Zen 4's latency bound (4 independent
    # multiply-adds; Skylake's 8: up to 4 rows; Haswell's 10 but 10 accumulators at 4 vectors):
    # its row takes 4 vectors where it is wider
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    C = gemm(dtype)
    cases = {"znver4": {2: 4, 3: 2}, "skylake-avx512": {2: 4, 4: 4, 5: 2}, "haswell": {2: 4, 3: 2}}
    for cpu, vectors in cases.items():
        target = described_target(cpu)
        lanes = heuristic.lanes(C, target)
        for m, v in vectors.items():
            # (Skylake packs B from K = 256; rows wider than ROW_VECTORS vectors: not whole,
            # narrow_tile.WHOLE_ROW)
            sizes = {"M": m, "N": 9 * lanes + 3, "K": 17}
            s = heuristic.heuristic_schedule(C, sizes, target)
            text = s.to_python().replace('"', "'")
            assert f"split('i', {m})" in text and f"split('j', {v * lanes}" in text, (cpu, m, text)
            assert SearchSpace(C, sizes, target).point(s) is not None, (cpu, m, text)
            with monkeypatch.context() as mp:
                mp.setattr(narrow_tile, "FEW_ROWS_VECTORS", 0)  # before: two vectors
                before = heuristic.heuristic_schedule(C, sizes, target).to_python()
                assert f"split('j', {2 * lanes}" in before.replace('"', "'"), (cpu, m, before)
    # a row no wider than four vectors keeps its tile (a whole row of 3 vectors and 3 lanes)
    lanes = heuristic.lanes(C, described_target("znver4"))
    text = heuristic.heuristic_schedule(C, {"M": 2, "N": 3 * lanes + 3, "K": 1000},
                                        described_target("znver4")).to_python()
    assert f"split('j', {4 * lanes}" not in text.replace('"', "'"), text
    # kernels of the Skylake rule (4 rows x 4 vectors) and of this host's, on odd sizes
    for cpu, (m, n, k) in [("skylake-avx512", (4, 101, 17)), ("skylake-avx512", (3, 67, 19)),
                           (None, (2, 100, 1000)), (None, (2, 33, 19)), (None, (2, 71, 1))]:
        target = described_target(cpu) if cpu else None
        kern = tl.compile(C, heuristic.heuristic_schedule(C, {"M": m, "N": n, "K": k}, target))
        assert_gemm_matches_numpy(kern, dtype, [(m, n, k), (m, n + 5, 3)], seed=m * n + k)
