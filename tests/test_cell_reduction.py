"""``atomic()`` and the ``reduce_update_cells`` lowering pass: an update's innermost loop that
accumulates into one cell, split where a ``where`` on its variable changes, runs as a reduction
in a register — only where isl proves no read of the loop touches the cell — and every result
matches NumPy on odd sizes."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import algorithms
import tensorlang as tl
from tensorlang.errors import ScheduleError
from tensorlang.schedule.lower import lower

SIZES = [1, 2, 7, 13, 31]


def _cells(out, s) -> list[str]:
    return [b for b in lower(out, s).buffers if ".cell" in b]


def _cholesky():
    return algorithms.cholesky()


def _spd(n: int) -> np.ndarray:
    b = np.random.default_rng(n).random((n, n))
    return b @ b.T / n + np.eye(n)


def _lu_np(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    for k in range(len(a)):
        a[k + 1:, k] /= a[k, k]
        a[k + 1:, k + 1:] -= np.outer(a[k + 1:, k], a[k, k + 1:])
    return a


@pytest.mark.parametrize("atomic", [False, True])
def test_cholesky_dot_products_reduce_in_a_register(atomic):
    ch = _cholesky()
    s = tl.Schedule(ch)
    if atomic:
        s[ch].update(0).atomic()
    assert bool(_cells(ch, s)) == atomic  # strict order unless the schedule allows it
    kern = tl.compile(ch, s)
    for n in SIZES:
        a = _spd(n)
        want = np.tril(np.linalg.cholesky(a)) + np.triu(a, 1)
        np.testing.assert_allclose(kern(A=a), want, rtol=1e-10, atol=1e-12)


def test_equality_condition_splits_the_loop_and_drops_empty_ranges():
    lu = algorithms.lu()
    s = tl.Schedule(lu)
    s[lu].update(0).atomic()
    nest = str(lower(lu, s))
    # k < min(i, j + 1): the sum for k < j, the division at k == j; k > j never runs (isl
    # proves that range empty, so it is not emitted)
    assert len(_cells(lu, s)) == 1, nest
    assert nest.count("for r_x") == 2, nest
    assert "where" not in nest.split("produce lu.update(0)")[1], nest
    kern = tl.compile(lu, s)
    for n in SIZES:
        a = _spd(n)
        np.testing.assert_allclose(kern(A=a), _lu_np(a), rtol=1e-9, atol=1e-12)


def _sum_of_all():
    """``F[row] += F[col] / 8`` over every ``(col, row)``, ``col`` innermost: each row's sum
    reads the cells it and the rows before it accumulate into."""
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (i,) = tl.vars("i")
    F = tl.Func("F", shape=(N,))
    F[i] = X[i]
    r = tl.RDom((0, N), (0, N))  # col (inner), row
    F[r.y] = F[r.y] + F[r.x] / 8.0
    return F


def test_a_read_that_may_touch_the_cell_keeps_strict_order():
    # F[i] += F[r] / 8 over every r: at r == i the loop reads the cell it accumulates into,
    # so the sum cannot be reassociated (its later terms depend on its earlier ones)
    F = _sum_of_all()
    s = tl.Schedule(F)
    s[F].update(0).atomic()
    assert not _cells(F, s)
    kern = tl.compile(F, s)
    for n in SIZES:
        x = np.random.default_rng(n).random(n)
        want = x.copy()
        for row in range(n):
            for col in range(n):
                want[row] += want[col] / 8.0
        np.testing.assert_allclose(kern(X=x), want, rtol=1e-12)


def test_a_read_of_another_cell_is_proven_apart():
    # a triangular solve: x[i] -= L[i, j] x[j] for j < i reads x[j], never x[i]
    (N,) = tl.sizes("N")
    L, b = tl.Input("L", (N, N), tl.float64), tl.Input("b", (N,), tl.float64)
    (i,) = tl.vars("i")
    x = tl.Func("x", shape=(N,))
    x[i] = b[i]
    r = tl.RDom((0, N), (0, N))  # j, i: j <= i
    r.where(r.x <= r.y)
    x[r.y] = tl.where(r.x < r.y, x[r.y] - L[r.y, r.x] * x[r.x], x[r.y] / L[r.y, r.y])
    s = tl.Schedule(x)
    s[x].update(0).atomic()
    assert len(_cells(x, s)) == 1
    kern = tl.compile(x, s)
    for n in SIZES:
        rng = np.random.default_rng(n)
        lo = np.tril(rng.random((n, n))) + n * np.eye(n)
        rhs = rng.random(n)
        np.testing.assert_allclose(kern(L=lo, b=rhs), np.linalg.solve(lo, rhs), rtol=1e-10)


def test_atomic_on_a_pure_stage_is_refused():
    ch = _cholesky()
    s = tl.Schedule(ch)
    with pytest.raises(ScheduleError, match=r"update\(n\)\.atomic\(\)"):
        s[ch].atomic()


def test_atomic_round_trips_through_the_trace():
    ch = _cholesky()
    s = tl.Schedule(ch)
    s[ch].update(0).atomic()
    assert 's["ch"].update(0).atomic()' in str(s)
    t = tl.Schedule.from_json(ch, s.to_json())
    assert _cells(ch, t)


def test_rule_based_schedule_marks_updates_atomic():
    from tensorlang.autotuner.heuristic import heuristic_schedule

    ch = _cholesky()
    s = heuristic_schedule(ch, {"N": 64})
    assert _cells(ch, s)
    a = _spd(64)
    np.testing.assert_allclose(tl.compile(ch, s)(A=a),
                               np.tril(np.linalg.cholesky(a)) + np.triu(a, 1), rtol=1e-10)


@pytest.mark.parametrize("op,dtype", [("add", tl.int32), ("sub", tl.float32),
                                      ("max", tl.float32), ("min", tl.int16),
                                      ("mul", tl.float64)])
def test_each_reduction_op_on_a_strided_row(op, dtype):
    # F[i] = F[i] op X[i, r] over a row of X: the cell is F[i], the reads X's
    (M, N) = tl.sizes("M N")
    X = tl.Input("X", (M, N), dtype)
    (i,) = tl.vars("i")
    F = tl.Func("F", shape=(M,))
    F[i] = X[i, 0]
    r = tl.RDom((1, N), (0, M))  # columns 1 to N - 1, rows
    cur, x = F[r.y], X[r.y, r.x]
    F[r.y] = {"add": cur + x, "sub": cur - x, "max": tl.maximum(cur, x),
              "min": tl.minimum(cur, x), "mul": cur * x}[op]
    s = tl.Schedule(F)
    s[F].update(0).atomic()
    assert _cells(F, s)
    kern = tl.compile(F, s)
    npf = {"add": np.add, "sub": np.subtract, "max": np.maximum, "min": np.minimum,
           "mul": np.multiply}[op]
    for m, n in [(1, 1), (1, 2), (3, 7), (5, 33)]:
        rng = np.random.default_rng(m * n)
        xs = (rng.integers(-50, 50, (m, n)) if dtype.is_int
              else rng.random((m, n)) + 0.5).astype(dtype.numpy)
        want = xs[:, 0].copy()
        for c in range(1, n):
            want = npf(want, xs[:, c])
        np.testing.assert_allclose(kern(X=xs), want, rtol=1e-5)


def test_enclosing_loop_bounds_prove_reads_apart():
    # F[N] += F[i] / 2 for i < k < N: only k's loop bound (k < N) keeps i from reaching N
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (c,) = tl.vars("c")
    F = tl.Func("F", shape=(N + 1,))
    F[c] = tl.constant_exterior(X, 0.0)[c]
    r = tl.RDom((0, N), (1, N))  # i, k
    r.where(r.x < r.y)
    F[N] = F[N] + F[r.x] / 2.0
    s = tl.Schedule(F)
    s[F].update(0).atomic()
    assert _cells(F, s)
    kern = tl.compile(F, s)
    for n in SIZES:
        x = np.random.default_rng(n).random(n)
        want = np.append(x, 0.0)
        for k in range(1, n):
            for i in range(k):
                want[n] += want[i] / 2.0
        np.testing.assert_allclose(kern(X=x), want, rtol=1e-12)


def test_boundary_condition_is_resolved_inside_the_range():
    # Y[k] = sum over i < k of r[k - i - 1] x[i] (durbin's reversed dot product), r read through
    # constant_exterior: inside i < k the clamp and its where fold away, so the sum is a plain
    # reduction over contiguous (reversed) reads
    (N,) = tl.sizes("N")
    R, X = tl.Input("R", (N,), tl.float64), tl.Input("X", (N,), tl.float64)
    (c,) = tl.vars("c")
    Y = tl.Func("Y", shape=(N,))
    Y[c] = 0.0 * X[c]
    d = tl.RDom((0, N), (0, N))  # i, k
    d.where(d.x < d.y)
    Y[d.y] = Y[d.y] + tl.constant_exterior(R, 0.0)[d.y - d.x - 1] * X[d.x]
    s = tl.Schedule(Y)
    s[Y].update(0).atomic()
    nest = str(lower(Y, s))
    assert _cells(Y, s), nest
    reduction = [ln for ln in nest.splitlines() if ".cell1[0] +=" in ln]
    assert reduction and "where" not in reduction[0] and "max(" not in reduction[0], nest
    kern = tl.compile(Y, s)
    for n in SIZES:
        rng = np.random.default_rng(n)
        r, x = rng.random(n), rng.random(n)
        want = np.array([sum(r[k - i - 1] * x[i] for i in range(k)) for k in range(n)])
        np.testing.assert_allclose(kern(R=r, X=x), want, rtol=1e-12, atol=1e-15)


def test_guard_from_rdom_where_is_resolved_per_range():
    # RDom.where(i != n - 1 or k == 0) guards the store: the ranges i < n - 1 and i > n - 1
    # have no guard left and the sum over them reduces; at i == n - 1 the guard is k == 0
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N, N), tl.float64)
    (c,) = tl.vars("c")
    S = tl.Func("S", shape=(N,))
    S[c] = 0.0 * X[c, 0]
    d = tl.RDom((0, N), (0, N))  # i, k
    d.where((d.x != N - 1) | (d.y == 0))
    S[d.y] = S[d.y] + X[d.y, d.x]
    s = tl.Schedule(S)
    s[S].update(0).atomic()
    assert _cells(S, s)
    kern = tl.compile(S, s)
    for n in SIZES:
        x = np.random.default_rng(n).random((n, n))
        want = x[:, : n - 1].sum(axis=1)
        want[0] += x[0, n - 1]
        np.testing.assert_allclose(kern(X=x), want, rtol=1e-12)


def _blocked(ch, b: int, unroll: bool = True):
    """cholesky's update with the rows of ``i`` in blocks of ``b`` and ``k`` outside the block:
    the unroll-and-jam of ``update_order.jam_rows``."""
    s = tl.Schedule(ch)
    u = s[ch].update(0)
    zo, zi = u.split("r_z", b)
    u.reorder(zo, "r_y", "r_x", zi)
    if unroll:
        u.unroll(zi)
    u.atomic()
    return s


@pytest.mark.parametrize("b", [3, 4])
def test_unrolled_block_of_cells_accumulates_together(b):
    # each row j < i is final when the block reads it: the block's b dot products share the
    # loads of row j and accumulate in one register buffer of b cells; the rows on the block's
    # diagonal (a guard on the unrolled variable) and a last partial block (n % b) too
    f = _cholesky()
    s = _blocked(f, b)
    assert s.check().ok  # the order is legal: each row j < i is final when the block reads it
    tiles = [buf for name, buf in lower(f, s).buffers.items() if ".cell" in name]
    assert tiles and all(buf.register for buf in tiles)
    assert {int(buf.extents[0].value) for buf in tiles} == {b}
    kern = tl.compile(f, s)
    for n in SIZES + [2 * b + 1]:
        a = _spd(n)
        want = np.tril(np.linalg.cholesky(a)) + np.triu(a, 1)
        np.testing.assert_allclose(kern(A=a), want, rtol=1e-10, atol=1e-12)


def test_a_block_is_not_jammed_without_its_unroll():
    f = _cholesky()
    tiles = [buf for name, buf in lower(f, _blocked(f, 4, unroll=False)).buffers.items()
             if ".cell" in name]
    assert all(int(buf.extents[0].value) == 1 for buf in tiles)


def _rows_blocked(F, b: int):
    """An update over ``r`` (``r_x`` inner) with ``r_y`` in blocks of ``b`` unrolled inside
    ``r_x``, marked atomic."""
    s = tl.Schedule(F)
    u = s[F].update(0)
    yo, yi = u.split("r_y", b)
    u.reorder(yo, "r_x", yi)
    u.unroll(yi)
    u.atomic()
    return s


def test_a_block_whose_reads_touch_its_cells_is_not_jammed():
    # F[row] += F[col] / 8: the block's terms read the block's own cells (col in the block),
    # so no register buffer may hold them across the loop (the lowering pass alone decides
    # this, whatever the legality check says of the order)
    F = _sum_of_all()
    assert not _cells(F, _rows_blocked(F, 4))


def _tiled(ch, a: int, b: int):
    """cholesky's update with rows ``i`` in blocks of ``a`` and rows ``j`` in blocks of ``b``,
    both unrolled inside ``k`` (the two-loop unroll-and-jam of ``update_order.jam_rows``)."""
    s = tl.Schedule(ch)
    u = s[ch].update(0)
    zo, zi = u.split("r_z", a)
    yo, yi = u.split("r_y", b)
    u.reorder(zo, yo, "r_x", yi, zi)
    u.unroll(yi)
    u.unroll(zi)
    u.atomic()
    return s


@pytest.mark.parametrize("a,b", [(4, 4), (3, 4), (2, 3), (5, 2)])
def test_a_tile_of_two_unrolled_loops_accumulates_together(a, b):
    # rows j of the tile depend on each other below the tile's first row (k < j moves with
    # the tile): the reduction loop is cut at the hull of k < j — up to the tile's first j all
    # a x b cells accumulate in registers, the tile's own triangle runs in order; sizes not a
    # multiple of a or b take the guarded version, whose tail guards the triangle implies
    f = _cholesky()
    s = _tiled(f, a, b)
    assert s.check().ok
    tiles = [buf for name, buf in lower(f, s).buffers.items() if ".cell" in name]
    assert tiles and all(buf.register for buf in tiles)
    assert a * b in {int(buf.extents[0].value) for buf in tiles}
    kern = tl.compile(f, s)
    for n in SIZES + [2 * a * b + 1, 37]:
        m = _spd(n)
        want = np.tril(np.linalg.cholesky(m)) + np.triu(m, 1)
        np.testing.assert_allclose(kern(A=m), want, rtol=1e-10, atol=1e-12)


def test_guarded_version_keeps_its_tile_in_registers():
    # n = 37 is no multiple of 4: the guarded version splits with a tail guard on the rows j
    # (``r_y.i + ... < N``) between the two unrolled loops; it moves inside them and, implied
    # by j <= i < N, is dropped from the loop that accumulates
    f = _cholesky()
    nest = str(lower(f, _tiled(f, 4, 4)))
    guarded = nest[nest.index("else:"):]
    assert "cell" in guarded
    lines = guarded.splitlines()
    first = next(k for k, ln in enumerate(lines) if "+= (-1.0)" in ln)  # whole blocks of i
    assert "unrolled for r_z.i" in lines[first - 1], "\n".join(lines[first - 4:first + 1])


def test_a_tile_in_row_blocks_keeps_its_cells_in_registers_past_two_guards():
    # update_order.jam(..., rows=3): rows i in blocks of 3 tiles of 4, the blocks of rows j
    # between the two. At n = 37 (no multiple of 12) the tiles of the blocks' steady state have
    # two ifs around their store (the row tail i < N and the triangle j <= i); nested, they are
    # one guard to the cell reduction, which keeps the tile's 16 cells in registers there too
    from tensorlang.autotuner.update_order import jam

    f = _cholesky()
    s = jam(tl.Schedule(f), f, 0, "r_z", 4, "r_y", 4, rows=3)
    s[f].update(0).atomic()
    assert "split('r_z.o', 3" in s.to_python()
    assert s.check().ok
    nest = str(lower(f, s))
    guarded = nest[nest.index("else:"):]
    lines = guarded.splitlines()
    sums = [k for k, ln in enumerate(lines) if "+= (-1.0)" in ln]
    assert len(sums) >= 2, guarded  # the diagonal tiles' and the steady state's
    assert all("cell" in lines[k] for k in sums)
    kern = tl.compile(f, s)
    for n in SIZES + [24, 37, 49]:
        m = _spd(n)
        want = np.tril(np.linalg.cholesky(m)) + np.triu(m, 1)
        np.testing.assert_allclose(kern(A=m), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("hull", [0, 1])
def test_trisolv_rows_block_at_the_hull_of_their_triangle(monkeypatch, hull):
    # x[i] -= L[i, j] * x[j] for j < i, rows i in blocks of 4 inside j: j < i moves with the
    # block. Cut at its hull (j below the block's first row: every cell's sum) the block
    # accumulates in registers; without the hull cuts the loop cannot be shared
    from tensorlang.schedule import cell_reduction

    monkeypatch.setattr(cell_reduction, "HULL_CUTS", hull)
    x, _ = algorithms.trisolv()
    s = _rows_blocked(x, 4)
    assert s.check().ok
    tiles = [buf for name, buf in lower(x, s).buffers.items() if ".cell" in name]
    assert (4 in {int(buf.extents[0].value) for buf in tiles}) == bool(hull)
    kern = tl.compile(x, s)
    for n in SIZES + [37]:
        rng = np.random.default_rng(n)
        L = np.tril(rng.random((n, n))) + n * np.eye(n)
        b = rng.random(n)
        np.testing.assert_allclose(kern(L=L, b=b), np.linalg.solve(L, b), rtol=1e-10)


@pytest.mark.parametrize("cpu,block", [("skylake-avx512", 16), ("haswell", 12)])
def test_rule_based_schedule_jams_cholesky_rows(cpu, block):
    # rows i x rows j: 4 x 4 cells with AVX-512's 32 vector registers, 3 x 4 with AVX2's 16
    # (update_order.jam_tile)
    from algorithms import described_target
    from tensorlang.autotuner.heuristic import heuristic_schedule

    ch = _cholesky()
    n = 67  # not a multiple of the block
    s = heuristic_schedule(ch, {"N": n}, described_target(cpu))
    tiles = [buf for name, buf in lower(ch, s).buffers.items() if ".cell" in name]
    assert any(int(buf.extents[0].value) == block for buf in tiles), str(s)
    a = _spd(n)
    np.testing.assert_allclose(tl.compile(ch, s)(A=a),
                               np.tril(np.linalg.cholesky(a)) + np.triu(a, 1), rtol=1e-10)


@settings(max_examples=int(os.environ.get("TL_SCHEDULE_EXAMPLES", "12")) // 2, deadline=None)
@given(data=st.data())
def test_random_tiles_of_dot_products_match_numpy(data):
    # (half the property tests' examples: each compiles two unrolled tiles of up to 25 cells)
    # cholesky's rows i and j blocked by random factors, the unrolled loops in either order
    # inside k (or k split, its outer part outside j), and trisolv's rows: whatever the
    # legality check accepts must match NumPy on sizes that leave tails (hull cuts, tail
    # guards moved into the tile and dropped where implied, bounds projected out of a split)
    a = data.draw(st.integers(1, 5), label="rows i")
    b = data.draw(st.integers(1, 5), label="rows j")
    kc = data.draw(st.sampled_from([0, 2, 3, 8]), label="kc")
    i_outside = data.draw(st.booleans(), label="i's unrolled loop outside j's")
    f = _cholesky()
    s = tl.Schedule(f)
    u = s[f].update(0)
    zo, zi = u.split("r_z", a)
    yo, yi = u.split("r_y", b)
    inner = [zi, yi] if i_outside else [yi, zi]
    k = ["r_x"]
    if kc:
        xo, xi = u.split("r_x", kc)
        u.reorder(zo, xo, yo, xi, *inner)
    else:
        u.reorder(zo, yo, *k, *inner)
    u.unroll(yi)
    u.unroll(zi)
    u.atomic()
    if s.check().ok:
        kern = tl.compile(f, s)
        for n in (1, 2, 2 * a * b + 1, 3 * kc + 2, 23):
            m = _spd(n)
            np.testing.assert_allclose(kern(A=m), np.tril(np.linalg.cholesky(m)) + np.triu(m, 1),
                                       rtol=1e-10, atol=1e-12, err_msg=s.to_python())
    x, _ = algorithms.trisolv()
    t = _rows_blocked(x, a + 1)
    if t.check().ok:
        kern = tl.compile(x, t)
        for n in (1, 2, 2 * a + 3, 23):
            rng = np.random.default_rng(n)
            L = np.tril(rng.random((n, n))) + n * np.eye(n)
            rhs = rng.random(n)
            np.testing.assert_allclose(kern(L=L, b=rhs), np.linalg.solve(L, rhs), rtol=1e-10,
                                       err_msg=t.to_python())
