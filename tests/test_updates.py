"""Update definitions (Halide semantics): scans, recurrences, in-place stencils; their stages."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import skewed
from conftest import check

import tensorlang as tl


def cumsum_rows(dtype=tl.float32):
    H, W = tl.sizes("H W")
    X = tl.Input("X", (H, W), dtype)
    y, x = tl.vars("y x")
    S = tl.Func("S")
    S[y, x] = X[y, x]
    r = tl.RDom((1, W))
    S[y, r] = S[y, r - 1] + X[y, r]
    return S, y, r


@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (8, 2), (5, 64)])
def test_scan_reference_and_compiled(shape, rng):
    S, _, _ = cumsum_rows(tl.float64)
    a = rng.random(shape)
    check(S, np.cumsum(a, axis=1), a, rtol=1e-12)


def test_one_dimensional_scan_and_explicit_rdom_reduction(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.int64)
    (i,) = tl.vars("i")
    S = tl.Func("S")
    S[i] = X[i]
    r = tl.RDom((1, N))
    S[r] = S[r - 1] + X[r]
    x = rng.integers(-5, 5, 23)
    check(S, np.cumsum(x), x)
    (K,) = tl.sizes("K")
    Wt = tl.Input("Wt", (K,), tl.int64)
    rk = tl.RDom((0, K))
    G = tl.Func("G")
    G[i] = tl.sum(X[i + rk] * Wt[rk])
    w = rng.integers(-3, 3, 4)
    check(G, np.convolve(x, w[::-1], "valid"), x, w)


@pytest.mark.parametrize("shape", [(2, 2), (5, 4), (9, 13)])
def test_skewed_recurrence(shape, rng):
    F, _ = skewed()
    b = rng.random(shape)
    ref = b.copy()
    for yy in range(shape[1] - 1):  # r.y outer, r.x inner: first dimension innermost
        for xx in range(1, shape[0]):
            ref[xx, yy] = ref[xx - 1, yy + 1] * 0.5 + b[xx, yy]
    check(F, ref, b, rtol=1e-12)


def test_in_place_stencil_two_updates(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = X[i]
    r = tl.RDom((1, N - 1))
    F[r] = (F[r - 1] + F[r] + F[r + 1]) / 3  # Gauss-Seidel sweep: reads the new F[r - 1]
    F[i] = F[i] * 2
    x = rng.random(12)
    ref = x.copy()
    for k in range(1, 11):
        ref[k] = (ref[k - 1] + ref[k] + ref[k + 1]) / 3
    check(F, ref * 2, x, rtol=1e-12)


def test_update_stage_schedules(golden, rng):
    S, y, r = cumsum_rows()
    s = tl.Schedule(S)
    yo, yi = s[S].update(0).split(y, 8)
    s[S].update(0).reorder(yo, r.x, yi).vectorize(yi).parallel(yo)
    s[S].vectorize(s[S].loops[-1], 16)
    kern = tl.compile(S, s)
    for shape in [(1, 1), (9, 5), (16, 33)]:
        a = rng.random(shape, dtype=np.float32)
        np.testing.assert_allclose(kern(a), np.cumsum(a, axis=1), rtol=1e-5)
    golden("scan_update_schedule", kern.loop_nest())
    assert 's["S"].update(0).split(\'y\', 8)' in s.to_python()
    again = tl.Schedule.from_json(S, s.to_json())
    assert tl.compile(S, again).loop_nest() == kern.loop_nest()


@pytest.mark.parametrize("build,exc,msg", [
    (lambda s, S, y, r: s[S].update(0).parallel(r.x), tl.IllegalScheduleError,
     r"cannot parallel r_x: the flow dependence between iterations \(y=0, r_x=1\) and "
     r"\(y=0, r_x=2\) is carried by r_x"),
    (lambda s, S, y, r: s[S].update(0).vectorize(r.x, 8), tl.IllegalScheduleError,
     r"cannot vectorize r_x\.i: the flow dependence"),
    (lambda s, S, y, r: s[S].update(0).split(r.x, 4, tail="ShiftInwards"),
     tl.IllegalScheduleError, "running an update twice"),
    (lambda s, S, y, r: s[S].update(0).split("nope", 4, tail="ShiftInwards"),
     tl.ScheduleError, "got unknown loop 'nope'"),  # (was a witness made up for 'nope')
    (lambda s, S, y, r: (s[S].update(0).split(r.x, 4), s[S].update(0).reorder(
        f"{r.x.name}.i", f"{r.x.name}.o")), tl.IllegalScheduleError,
     r"reorder\(S.update\(0\), loops=\('r_x.i', 'r_x.o'\)\): the flow dependence from "
     r"iteration \(y=0, r_x=\d+\) to \(y=0, r_x=\d+\) would run backwards"),
    (lambda s, S, y, r: s[S].update(1), tl.ScheduleError, "there is no update\\(1\\)"),
    (lambda s, S, y, r: s[S].compute_inline(), tl.IllegalScheduleError,
     r"compute_inline\(S\): computing S inline recomputes it in pieces.*iteration \(y=0, "
     r"r_x=2\) reads what \(y=0, r_x=1\) wrote"),
    (lambda s, S, y, r: s[S].update(0).compute_root(), tl.ScheduleError,
     "has update definitions"),
])
def test_update_schedule_errors(build, exc, msg):
    S, y, r = cumsum_rows()
    out = tl.Func("out")
    out[y, S.definition.args[1]] = S[y, S.definition.args[1]] + 1
    s = tl.Schedule(out)
    with pytest.raises(exc, match=msg):
        build(s, S, y, r)
        tl.compile(out, s)


def jacobi_steps():
    """T Jacobi sweeps over a two-row buffer (1-D), the time dimension r.z used nowhere in the
    update: ``out`` and the buffer Func."""
    N, T = tl.sizes("N T")
    A = tl.Input("A", (N,), tl.float64)
    p, i = tl.vars("p i")
    F = tl.Func("buf", shape=(2, N))
    F[p, i] = A[i]
    r = tl.RDom((1, N - 1), (0, 2), (0, T))
    F[1 - r.y, r.x] = (F[r.y, r.x - 1] + F[r.y, r.x] + F[r.y, r.x + 1]) / 3
    out = tl.Func("out")
    out[i] = F[0, i]
    return out, F


def test_update_iterates_the_whole_rdom(rng):
    """An RDom dimension the update does not use still repeats it (Halide)."""
    out, _ = jacobi_steps()
    a = rng.random(13)
    want = a.copy()
    for _ in range(4):
        b = want.copy()
        b[1:-1] = (want[:-2] + want[1:-1] + want[2:]) / 3
        want[1:-1] = (b[:-2] + b[1:-1] + b[2:]) / 3
    np.testing.assert_allclose(tl.compile(out)(a, T=4), want, rtol=1e-12)
    np.testing.assert_allclose(tl.reference(out, A=a, T=4), want, rtol=1e-12)


def test_reduction_over_an_rdom_counts_its_unused_dimensions(rng):
    (M,) = tl.sizes("M")
    X = tl.Input("X", (M,), tl.float64)
    (i,) = tl.vars("i")
    r = tl.RDom((0, M), (0, 3))
    G = tl.Func("G")
    G[i] = X[i] + tl.sum(X[r.x])
    x = rng.random(7)
    check(G, x + 3 * x.sum(), x, rtol=1e-12)


@pytest.mark.parametrize("n", [3, 4, 13, 29, 40, 66, 75])
def test_rule_based_update_is_vectorized_and_partitioned(n, rng):
    """The rule-based schedule vectorizes a time-stepped sweep's space loop (the dependence
    analysis proves it); where the vector width does not divide the sweep, the update's loop is
    partitioned: whole vectors without masks, then the tail, in the same order."""
    from algorithms import described_target
    from tensorlang.autotuner.heuristic import UPDATE_MIN_VECTORS, heuristic_schedule

    out, _ = jacobi_steps()
    # made for an AVX-512 CPU (8 float64 lanes) whatever the host; it runs on any
    s = heuristic_schedule(out, {"N": n, "T": 3}, described_target("znver4"))
    kern = tl.compile(out, s)
    a = rng.random(n)
    np.testing.assert_allclose(kern(a, T=3), tl.reference(out, A=a, T=3), rtol=1e-12)
    if n - 2 < UPDATE_MIN_VECTORS * 8:  # shorter rows: left to LLVM's own vectorizer
        assert "vectorize('r_x'" not in s.to_python()
    else:
        assert "update(0).vectorize('r_x'" in s.to_python()
        guarded = kern.loop_nest().split("produce buf.update(0):")[1].split("else:")[1]
        assert "vectorized for r_x.i in [0, 8)" in guarded or \
            "vectorized for r_x.i in [0, 16)" in guarded
        assert "min(8, N" in guarded or "min(16, N" in guarded  # the tail, after


def test_scan_stays_serial_under_the_rule_based_schedule(rng):
    from tensorlang.autotuner.heuristic import heuristic_schedule

    S, _, _ = cumsum_rows(tl.float64)
    s = heuristic_schedule(S, {"H": 64, "W": 300})
    assert "vectorize('r_x'" not in s.to_python()
    a = rng.random((64, 300))
    np.testing.assert_allclose(tl.compile(S, s)(a), np.cumsum(a, axis=1), rtol=1e-12)


@pytest.mark.parametrize("shape", [(5, 203), (2, 70), (9, 64)])
def test_rule_based_column_scan_runs_chunks_of_columns(shape, rng):
    """A scan down the rows (each column independent, columns contiguous): the rule-based
    schedule puts chunks of columns outermost in parallel and their vectors innermost, with a
    GuardWithIf tail where the chunk does not divide the width."""
    from tensorlang.autotuner.heuristic import heuristic_schedule

    H, W = tl.sizes("H W")
    X = tl.Input("X", (H, W), tl.float64)
    y, x = tl.vars("y x")
    S = tl.Func("S")
    S[y, x] = X[y, x]
    r = tl.RDom((1, H))
    S[r, x] = S[r - 1, x] + X[r, x]
    s = heuristic_schedule(S, {"H": shape[0], "W": shape[1]})
    if shape[1] >= 64:
        assert "update(0).reorder('x.o', 'r_x', 'x.i')" in s.to_python()
    a = rng.random(shape)
    np.testing.assert_allclose(tl.compile(S, s)(a), np.cumsum(a, axis=0), rtol=1e-12)


@pytest.mark.parametrize("h", [1, 7, 13, 16, 21])
def test_partitioned_update_with_a_split_of_a_split(h, rng):
    """A GuardWithIf split of a split's inner loop: the innermost loop is bounded by both tails,
    so it is never taken as whole on the first split's partition alone."""
    S, y, r = cumsum_rows(tl.float64)
    s = tl.Schedule(S)
    st = s[S].update(0)
    yo, yi = st.split(y, 8)
    yio, yii = st.split(yi, 3)
    st.reorder(yo, yio, r.x, yii)
    a = rng.random((h, 6))
    np.testing.assert_allclose(tl.compile(S, s)(a), np.cumsum(a, axis=1), rtol=1e-12)


def _row_sum_recurrence():
    N = tl.Size("N")
    R = tl.Input("R", (N,), tl.float64)
    k, i = tl.vars("k i")
    Y = tl.Func("Y", shape=(N, N))
    Y[k, i] = tl.where(k == 0, R[i], 0.0)
    return N, R, k, i, Y


def test_a_nested_reducer_reading_the_updated_func_is_refused_with_the_fix():
    # the program: it compiled to NaN rows and tl.reference raised KeyError
    N, R, k, i, Y = _row_sum_recurrence()
    t, s = tl.RDom((1, N), name="t"), tl.RDom((0, N), name="s")
    with pytest.raises(tl.DefinitionError, match=r"reads Y, the Func this update defines.*"
                                                 r"add the reduction's dimension"):
        Y[t, i] = Y[t - 1, i] + tl.sum(Y[t - 1, s])
    assert not Y.updates  # nothing half-defined is left behind


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_the_suggested_rewrite_computes_the_recurrence(n, rng):
    # the fix the message names: the reduction's dimension in the update's RDom
    N, R, k, i, Y = _row_sum_recurrence()
    r = tl.RDom((0, N), (0, N), (1, N), name="r")  # s innermost, then i, then t
    Y[r.z, r.y] = tl.where(r.x == 0, Y[r.z - 1, r.y], Y[r.z, r.y]) + Y[r.z - 1, r.x]
    rv = rng.random(n)
    want = np.zeros((n, n))
    want[0] = rv
    for t in range(1, n):
        want[t] = want[t - 1] + want[t - 1].sum()
    np.testing.assert_allclose(tl.reference(Y, R=rv), want, rtol=1e-12)
    np.testing.assert_allclose(tl.compile(Y)(R=rv), want, rtol=1e-12)


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (7, 11)])
def test_a_nested_reducer_in_an_update_is_computed_per_iteration(shape, rng):
    # F[r] += sum_q A[r, q]: r is iterated by the update, q reduced by the nested sum (it used
    # to reduce over r as well, giving every row the total)
    m, n = shape
    M, N = tl.sizes("M N")
    A = tl.Input("A", (M, N), tl.float64)
    i = tl.Var("i")
    F = tl.Func("F", shape=(M,))
    F[i] = 1.0
    r, q = tl.RDom((0, M), name="r"), tl.RDom((0, N), name="q")
    F[r] = F[r] * 2.0 + tl.sum(A[r, q] * A[r, q])
    a = rng.random((m, n))
    want = 2.0 + (a * a).sum(1)
    np.testing.assert_allclose(tl.reference(F, A=a), want, rtol=1e-12)
    np.testing.assert_allclose(tl.compile(F)(A=a), want, rtol=1e-12)
    s = tl.Schedule(F)
    lifted = tl.Pipeline(F).funcs[0]
    assert lifted.name == "F_sum0" and len(lifted.definition.args) == 1
    s[lifted].vectorize(lifted.definition.args[0].name, 4)
    np.testing.assert_allclose(tl.compile(F, s)(A=a), want, rtol=1e-12)


def test_a_nested_reducer_over_only_iterated_rvars_is_refused():
    M, N = tl.sizes("M N")
    A = tl.Input("A", (M, N), tl.float64)
    i = tl.Var("i")
    F = tl.Func("F", shape=(M,))
    F[i] = 0.0
    r = tl.RDom((0, M), (0, N), name="r")
    with pytest.raises(tl.DefinitionError, match="reduces over nothing"):
        F[r.x] = F[r.x] + tl.sum(A[r.x, r.y])


def _two_planes():
    """G[f, j] over two planes, plane 0 first: plane 0 reads plane 1 one cell to the right (not
    yet updated), plane 1 reads plane 0 (updated): each tl.where branch reads only the plane
    the other phase writes, or its own cell."""
    (W,) = tl.sizes("W")
    X = tl.Input("X", (2, W), tl.float64)
    c, j = tl.vars("c j")
    G = tl.Func("G", shape=(2, W))
    G[c, j] = X[c, j]
    r = tl.RDom((0, W - 1), (0, 2))  # j, f
    G[r.y, r.x] = tl.where(r.y == 0, G[0, r.x] + G[1, r.x + 1], G[1, r.x] - 0.5 * G[0, r.x])
    return G, r


def _two_planes_np(x: np.ndarray) -> np.ndarray:
    g = x.copy()
    n = g.shape[1] - 1
    for j in range(n):
        g[0, j] = g[0, j] + g[1, j + 1]
    for j in range(n):
        g[1, j] = g[1, j] - 0.5 * g[0, j]
    return g


@pytest.mark.parametrize("how", ["vectorize", "parallel"])
def test_read_in_an_untaken_branch_orders_nothing(how, rng):
    # without the branch conditions, the f == 1 iterations would "read" G[1, j + 1], which the
    # next iteration along j writes: a dependence carried by j. That read's value is thrown
    # away there, so the legality model restricts it to f == 0 (schedule/legality/model.py)
    G, r = _two_planes()
    s = tl.Schedule(G)
    st = s[G].update(0)
    st.vectorize(r.x, 4) if how == "vectorize" else st.parallel(r.x)
    assert s.check().ok
    kern = tl.compile(G, s)
    for n in (1, 2, 7, 13, 33):
        x = rng.random((2, n + 1))
        np.testing.assert_allclose(kern(X=x), _two_planes_np(x), rtol=1e-12)


def test_read_in_a_taken_branch_still_orders():
    # the same read in the branch every iteration takes: carried by j, so refused
    (W,) = tl.sizes("W")
    X = tl.Input("X", (W,), tl.float64)
    (j,) = tl.vars("j")
    G = tl.Func("G", shape=(W,))
    G[j] = X[j]
    r = tl.RDom((0, W - 1))
    G[r.x] = tl.where(r.x >= 0, G[r.x] + G[r.x + 1], 0.0)
    s = tl.Schedule(G)
    with pytest.raises(tl.IllegalScheduleError):
        s[G].update(0).vectorize(r.x, 4)
        tl.compile(G, s)


@pytest.mark.parametrize("n", [1, 7, 131])
def test_an_inlined_func_in_an_update_index(n, rng):
    # the bin of a histogram computed by a Func that is inlined: its reads in the update's
    # index are substituted too (they were left as loads of a buffer that inlining never
    # allocates: a KeyError in codegen)
    (N,) = tl.sizes("N")
    inp = tl.Input("inp", (N,), tl.int32)
    x, b = tl.vars("x b")
    bin_ = tl.Func("bin")
    bin_[x] = tl.clamp(inp[x] // 3, 0, 7)
    hist = tl.Func("hist", shape=(8,), dtype=tl.int32)
    hist[b] = 0
    r = tl.RDom((0, N))
    at = tl.clamp(bin_[r], 0, 7)  # the bounds check wants the clamp at the read
    hist[at] = hist[at] + tl.where(inp[r] % 2 == 0, 1, 0)
    a = rng.integers(0, 30, n).astype(np.int32)
    want = np.bincount(np.clip(a[a % 2 == 0] // 3, 0, 7), minlength=8).astype(np.int32)
    s = tl.Schedule(hist)
    s[bin_].compute_inline()
    np.testing.assert_array_equal(tl.compile(hist, s)(inp=a), want)
    np.testing.assert_array_equal(tl.reference(hist, inp=a), want)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_partitioned_update_over_an_empty_rdom_writes_nothing(n, rng):
    # found with the Ice Lake-SP stencil width (tests/test_vector_width.py): at N = 1 the
    # sweep's RDom (1, N - 1) has extent -1, its whole-vector count (N - 2) // 8 was -1, and
    # the tail loop ran one iteration at r_x.o = -1: 7 stores before the buffer (heap corruption,
    # a crash when it was freed). The sweep writes the output itself here, a view with guard
    # cells on both sides that must stay untouched
    N, T = tl.sizes("N T")
    A = tl.Input("A", (N,), tl.float64)
    p, i = tl.vars("p i")
    out = tl.Func("out", shape=(2, N))
    out[p, i] = A[i]
    r = tl.RDom((1, N - 1), (0, 2), (0, T))
    out[1 - r.y, r.x] = (out[r.y, r.x - 1] + out[r.y, r.x + 1]) / 2
    s = tl.Schedule(out)
    s[out].update(0).vectorize("r_x", 8, tail="GuardWithIf")
    kern = tl.compile(out, s)
    assert "min(8, N" in str(kern.loop_nest())  # the partitioned tail
    a = rng.random(n)
    room = np.full(2 * n + 32, -7.0)
    view = room[16:16 + 2 * n].reshape(2, n)
    kern(A=a, T=2, out=view)
    np.testing.assert_allclose(view, tl.reference(out, A=a, T=2), rtol=1e-12)
    assert (room[:16] == -7.0).all() and (room[16 + 2 * n:] == -7.0).all()


@pytest.mark.parametrize("shape", [(7, 5), (1, 1), (2, 3)])
def test_an_unrolled_loop_of_no_iteration_compiles(shape, rng):
    # found by the schedule property test (dev profile): the rows unrolled by 2, then
    # vectorized by 4: the guarded version's whole-vector piece is `unrolled for y.i.o in
    # [0, 0)`, whose code generation deleted a loop variable it had never bound (KeyError)
    S, y, r = cumsum_rows()
    s = tl.Schedule(S)
    s[S].update(0).unroll("y", 2)
    s[S].update(0).reorder("r_x", "y.i", "y.o")
    s[S].update(0).vectorize("y.i", 4)
    kern = tl.compile(S, s)
    assert "unrolled for y.i.o in [0, 0)" in str(kern.loop_nest())
    x = rng.random(shape, dtype=np.float32)
    np.testing.assert_allclose(kern(X=x), np.cumsum(x, axis=1), rtol=1e-5)
