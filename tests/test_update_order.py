"""The rule-based schedule's loop order for update definitions (``autotune/update_order.py``): a
reduction loop along which every access is contiguous goes innermost where the innermost loop as
written strides across rows — only where the legality check allows it — and every result matches
the loops as written on odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from algorithms import cholesky, described_target, lu, lu_loops, trisolv
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.update_order import (JAM_TILE, ROW_BLOCK, contiguous_accesses,
                                               contiguous_innermost, jam_row_block, jam_rows,
                                               strided_accesses)
from tensorlang.autotuner.workloads import BoundExtents
from tensorlang.errors import ScheduleError

SIZES = [1, 2, 7, 13, 67, 101]


def test_the_pivot_read_at_one_value_of_the_loop_does_not_count():
    f = lu()
    assert strided_accesses(f, 0, "r_x") == 1  # lu[k, j] down a column
    assert strided_accesses(f, 0, "r_y") == 0  # lu[j, j] only where k == j
    assert contiguous_accesses(f, 0, "r_y") >= 2  # the store and lu[k, j]


@pytest.mark.parametrize("n", SIZES)
def test_lu_runs_in_its_ikj_order_and_matches_the_c_loops(n):
    f = lu()
    s = heuristic_schedule(f, {"N": n})
    if n >= 64:  # j moves innermost where it runs UPDATE_MIN_VECTORS vectors (at most 8 x 8)
        assert "reorder('r_z', 'r_x', 'r_y')" in s.to_python()
    a = np.random.default_rng(n).standard_normal((n, n)) + n * np.eye(n)
    np.testing.assert_allclose(tl.compile(f, s)(A=a), lu_loops(a), rtol=1e-12, atol=1e-12)


def test_a_contiguous_innermost_loop_is_left_alone():
    # cholesky's dot product reads A[i, k] and A[j, k] along k: already contiguous
    ch = cholesky()
    s = tl.Schedule(ch)
    with pytest.raises(ScheduleError, match="strides across no row"):
        contiguous_innermost(s, ch, 0, BoundExtents(ch, {"N": 64}), 8, 4)


def test_a_pure_var_is_not_moved_inside_a_scan():
    # a column scan: the scan rule runs chunks of columns in parallel instead
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    i, j = tl.vars("i j")
    z = tl.Func("z", shape=(N, N))
    z[i, j] = A[i, j]
    r = tl.RDom((1, N - 1))
    z[r, j] = z[r, j] + 0.5 * z[r - 1, j]
    s = tl.Schedule(z)
    with pytest.raises(ScheduleError, match="no loop along which"):
        contiguous_innermost(s, z, 0, BoundExtents(z, {"N": 256}), 8, 4)


@pytest.mark.parametrize("n", [2, 9, 101])
def test_an_order_the_dependences_forbid_is_not_taken(n):
    # F[x, y] reads F[x - 1, y + 1], which the loops as written (y outer) have not updated yet;
    # y innermost would run that write first: the legality check refuses, the order stays
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    i, j = tl.vars("i j")
    F = tl.Func("F", shape=(N, N))
    F[i, j] = A[i, j]
    r = tl.RDom((1, N - 1), (0, N - 1))
    F[r.x, r.y] = F[r.x, r.y] + 0.5 * F[r.x - 1, r.y + 1]
    if n > 64:  # the rule proposes y innermost; the legality check refuses it
        proposal = tl.Schedule(F)
        assert contiguous_innermost(proposal, F, 0, BoundExtents(F, {"N": n}), 8, 4) == "r_y"
        assert not proposal.check(realize=False).ok
    s = heuristic_schedule(F, {"N": n})
    assert "reorder" not in s.to_python()
    a = np.random.default_rng(n).standard_normal((n, n))
    want = a.copy()
    for y in range(n - 1):  # RDom ranges are [lo, hi)
        for x in range(1, n - 1):
            want[x, y] += 0.5 * want[x - 1, y + 1]
    np.testing.assert_allclose(tl.compile(F, s)(A=a), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [13, 101])
def test_the_rule_based_order_is_a_point_of_the_search_space(n):
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    f = lu()
    hs = heuristic_schedule(f, {"N": n})
    space = SearchSpace(f, {"N": n})
    point = space.point(hs)
    assert point is not None, hs.to_python()
    params, _ = point
    assert ("lu.update0.contiguous" in params) == (n > 64)
    again = space.sample(optuna.trial.FixedTrial(params))
    assert space.signature(again) == space.signature(hs)
    a = np.random.default_rng(n).standard_normal((n, n)) + n * np.eye(n)
    np.testing.assert_allclose(tl.compile(f, again)(A=a), lu_loops(a), rtol=1e-12, atol=1e-12)


def _spd(n: int) -> np.ndarray:
    b = np.random.default_rng(n).random((n, n))
    return b @ b.T / n + np.eye(n)


def test_jam_rows_blocks_the_rows_that_share_a_row_and_refuses_the_others(monkeypatch):
    # cholesky: the cells A[i, j] of a block of rows i share the row A[j, k], those of a block
    # of rows j the row A[i, k]; lu's innermost loop strides down a column; trisolv's ranges
    # k < i move with the block: cut at their hull, the block shares the loop up to its first
    # row, and without hull cuts it cannot (the lowered nest is checked)
    from tensorlang.schedule import cell_reduction

    ch = cholesky()
    s = tl.Schedule(ch)
    assert jam_rows(s, ch, ch, 0, BoundExtents(ch, {"N": 67}), 8, 4) == ("r_z", None)
    assert f"split('r_z', {ROW_BLOCK}" in s.to_python()
    s = tl.Schedule(ch)
    assert jam_rows(s, ch, ch, 0, BoundExtents(ch, {"N": 67}), 8, 4, ROW_BLOCK,
                    (4, 3)) == ("r_z", "r_y")
    assert "split('r_z', 4" in s.to_python() and "split('r_y', 3" in s.to_python()
    s = tl.Schedule(ch)  # too few rows for the tile: one loop blocked
    assert jam_rows(s, ch, ch, 0, BoundExtents(ch, {"N": 12}), 1, 1, 4,
                    (4, 8)) == ("r_z", None)
    f = lu()
    with pytest.raises(ScheduleError, match="no contiguous reduction"):
        jam_rows(tl.Schedule(f), f, f, 0, BoundExtents(f, {"N": 67}), 8, 4)
    x, _ = trisolv()
    assert jam_rows(tl.Schedule(x), x, x, 0, BoundExtents(x, {"N": 67}), 8, 4) == ("r_y", None)
    monkeypatch.setattr(cell_reduction, "HULL_CUTS", 0)
    with pytest.raises(ScheduleError, match="share a row in registers"):
        jam_rows(tl.Schedule(x), x, x, 0, BoundExtents(x, {"N": 67}), 8, 4)


def test_jam_row_block_divides_the_rows_within_its_share_of_l2():
    # float64 rows of 2000 (16000 bytes), 0.9 of a 1.25 MiB L2: 73 rows; 40 (10 tiles of 4)
    # divides 2000, 44-72 do not. A block must divide the rows into at least two blocks (one
    # that does not leaves the whole nest guarded), so a prime row count, a block under two
    # tiles or no L2 share takes none
    assert jam_row_block(2000, 4, 16000, 1280 * 1024) == 10
    assert jam_row_block(2000, 4, 16000, 2 << 20) == 25  # 117 rows fit: 100 divides 2000
    assert jam_row_block(1999, 4, 16000, 1280 * 1024) == 1
    assert jam_row_block(96, 4, 768, 1 << 20) == 12  # (2 blocks of 48 rows)
    assert jam_row_block(2000, 4, 16000, 100_000) == 1  # 3 rows: not two tiles
    assert jam_row_block(2000, 4, 16000, 0) == 1


@pytest.mark.parametrize("n", [96, 97])
def test_a_tile_of_cholesky_takes_row_blocks_where_they_divide_the_rows(n):
    # with an L2 of l2 bytes the tile's rows i run in blocks of 16 (96 rows: 6 blocks); the
    # blocks of rows j inside a block, its tiles inside them. 97 is prime: no row block
    ch = cholesky()
    s = tl.Schedule(ch)
    l2 = 96 * 8 * 21  # 18 rows of 96 float64 in 0.9 of it: 16 divides 96, 12 < 16
    assert jam_rows(s, ch, ch, 0, BoundExtents(ch, {"N": n}), 8, 4, ROW_BLOCK, (4, 4),
                    l2) == ("r_z", "r_y")
    text = s.to_python()
    assert ("split('r_z.o', 4)" in text) == (n == 96), text
    if n == 96:
        assert "reorder('r_z.o.o', 'r_y.o', 'r_z.o.i', 'r_x', 'r_y.i', 'r_z.i')" in text
    s[ch].update(0).atomic()
    kern = tl.compile(ch, s)
    for m in SIZES + [16, 48, 96]:
        a = _spd(m)
        np.testing.assert_allclose(kern(A=a), np.tril(np.linalg.cholesky(a)) + np.triu(a, 1),
                                   rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [13, 67, 96])
def test_the_rule_based_jam_is_a_point_of_the_search_space(n):
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    ch = cholesky()
    avx512 = described_target("skylake-avx512")  # 32 vector registers: blocks of ROW_BLOCK
    hs = heuristic_schedule(ch, {"N": n}, avx512)
    space = SearchSpace(ch, {"N": n}, avx512)
    point = space.point(hs)
    assert point is not None, hs.to_python()
    params, choices = point
    # below 8 vectors of k the rule leaves the rows alone, and the space has no such decision
    assert ("ch.update0.jam" in params) == (n >= 64)
    again = space.sample(optuna.trial.FixedTrial(params))
    assert space.signature(again) == space.signature(hs)
    a = _spd(n)
    want = np.tril(np.linalg.cholesky(a)) + np.triu(a, 1)
    np.testing.assert_allclose(tl.compile(ch, again)(A=a), want, rtol=1e-10, atol=1e-12)
    if n >= 64:
        assert (params["ch.update0.jam"], params["ch.update0.jam2"]) == JAM_TILE
        assert set(choices["ch.update0.jam"]) == {0, 3, 4, 8, 16}
        assert set(choices["ch.update0.jam2"]) == {1, 2, 4}
        # a row block where one divides the rows (96: 2 blocks of 12 tiles; 67 is prime)
        assert params.get("ch.update0.jam_rows") == (True if n == 96 else None)
        for change in ({"ch.update0.jam": 0}, {"ch.update0.jam": 8, "ch.update0.jam2": 1},
                       {"ch.update0.jam": 3, "ch.update0.jam2": 2},
                       {"ch.update0.jam_rows": False} if n == 96 else {"ch.update0.jam": 16}):
            other = space.sample(optuna.trial.FixedTrial({**params, **change}))
            assert space.signature(other) != space.signature(hs)
            np.testing.assert_allclose(tl.compile(ch, other)(A=a), want, rtol=1e-10, atol=1e-12)


def test_doctests():
    import doctest

    from tensorlang.autotuner import update_order

    assert doctest.testmod(update_order).failed == 0
