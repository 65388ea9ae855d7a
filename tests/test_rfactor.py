"""rfactor: a reduction loop becomes a pure dimension of a new stage ``<f>_rf`` (which may then
run it in parallel or as vector lanes) and ``f`` reduces that stage; against NumPy on odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl


def row_sums(op=tl.sum):
    M, K = tl.sizes("M K")
    A = tl.Input("A", (M, K), tl.float64)
    i, k = tl.vars("i k")
    C = tl.Func("C")
    C[i] = op(A[i, k])
    return C, i, k


def _whole(s, C, i, k):
    rf = s.rfactor(C, k)
    rf.parallel(rf.loops[1])


def _inner_vectorized(s, C, i, k):
    ko, ki = s[C].split(k, 4)
    rf = s.rfactor(C, ki)
    row, lane, rest = rf.loops  # the new pure dimension, then what is left to reduce
    rf.reorder(row, rest, lane).vectorize(lane)


def _outer_parallel(s, C, i, k):
    ko, ki = s[C].split(k, 3)
    rf = s.rfactor(C, ko)
    row, part, rest = rf.loops
    rf.reorder(part, row).parallel(part)
    s[C].parallel(i)


@pytest.mark.parametrize("schedule", [_whole, _inner_vectorized, _outer_parallel])
@pytest.mark.parametrize("op,np_op", [(tl.sum, np.sum), (tl.max, np.max)])
def test_rfactor_row_reductions(schedule, op, np_op, rng):
    C, i, k = row_sums(op)
    s = tl.Schedule(C)
    schedule(s, C, i, k)
    kern = tl.compile(C, s)
    for m, kk in ((1, 1), (3, 7), (5, 16), (2, 33)):
        a = rng.random((m, kk))
        np.testing.assert_allclose(kern(a), np_op(a, axis=1), rtol=1e-12)
    again = tl.Schedule.from_json(C, s.to_json())
    assert tl.compile(C, again).loop_nest() == kern.loop_nest()
    assert "rfactor('C'" in s.to_python()


def test_rfactor_of_a_two_dimensional_reduction(rng):
    M, K, L = tl.sizes("M K L")
    A = tl.Input("A", (M, K, L), tl.float32)
    i, k, q = tl.vars("i k q")
    C = tl.Func("C")
    C[i] = tl.sum(A[i, k, q])
    s = tl.Schedule(C)
    rf = s.rfactor(C, q)  # k is still reduced inside C_rf
    rf.vectorize(rf.loops[1], 8)
    a = rng.random((3, 5, 11), dtype=np.float32)
    np.testing.assert_allclose(tl.compile(C, s)(a), a.sum(axis=(1, 2)), rtol=1e-5)


def test_rfactor_legality():
    C, i, k = row_sums()
    s = tl.Schedule(C)
    ko, ki = s[C].split(k, 4)
    rf = s.rfactor(C, ki)
    rf.parallel(rf.loops[2])  # C_rf's remaining reduction loop carries its reduction
    with pytest.raises(tl.IllegalScheduleError, match="reduction"):
        tl.compile(C, s)


def test_rfactor_errors():
    C, i, k = row_sums()
    s = tl.Schedule(C)
    with pytest.raises(tl.ScheduleError, match="not a reduction loop"):
        s.rfactor(C, i)
    ko, ki = s[C].split(k, 4)
    s[C].split(ki, 2)
    with pytest.raises(tl.ScheduleError, match="right after that split"):
        s.rfactor(C, ko)
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (j,) = tl.vars("j")
    F = tl.Func("F", shape=(N,))
    F[j] = X[j]
    r = tl.RDom((1, N))
    F[r] = F[r - 1] + X[r]
    with pytest.raises(tl.ScheduleError):
        tl.Schedule(F).rfactor(F, r.x)
    q = tl.RDom((0, N), name="q")
    q.where(q.x < j)
    G = tl.Func("G", shape=(N,))
    G[j] = tl.sum(X[q])
    with pytest.raises(tl.ScheduleError, match="RDom.where"):
        tl.Schedule(G).rfactor(G, q.x)


def test_rule_based_schedule_rfactors_a_big_total(rng, monkeypatch):
    from tensorlang.autotuner import heuristic, rfactor_rules

    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    monkeypatch.setattr(rfactor_rules, "num_threads", lambda: 2)
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    r = tl.RDom((0, N))
    S = tl.Func("S")
    S[()] = tl.sum(X[r])
    big = heuristic.heuristic_schedule(S, {"N": 1 << 22})
    assert "rfactor('S', 'r_x.o')" in big.to_python() and "parallel" in big.to_python()
    assert "rfactor" not in heuristic.heuristic_schedule(S, {"N": 1000}).to_python()
    kern = tl.compile(S, big)
    for n in (1, 17, 100_003):
        x = rng.random(n)
        np.testing.assert_allclose(kern(x), x.sum(), rtol=1e-10)


def test_the_search_space_draws_rfactor_and_places_the_rule_based_one(rng, monkeypatch):
    import optuna

    from tensorlang.autotuner import heuristic, rfactor_rules, space as space_mod

    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    monkeypatch.setattr(rfactor_rules, "num_threads", lambda: 2)
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    r = tl.RDom((0, N))
    S = tl.Func("S")
    S[()] = tl.sum(X[r])
    sizes = {"N": 1 << 22}
    sp = space_mod.SearchSpace(S, sizes)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    drawn = []
    for on in (False, True):
        study.enqueue_trial({"S.rfactor": on})
        drawn.append(sp.sample(study.ask()).to_python())
    assert "rfactor" not in drawn[0] and "rfactor('S', 'r_x.o')" in drawn[1]
    hs = heuristic.heuristic_schedule(S, sizes)
    point = sp.point(hs)
    assert point is not None and point[0]["S.rfactor"] is True
    again = sp.sample(optuna.trial.FixedTrial(point[0]))
    x = rng.random(100_003)
    np.testing.assert_allclose(tl.compile(S, again)(x), x.sum(), rtol=1e-10)


def histogram(dtype=tl.uint8):
    H, W = tl.sizes("H W")
    image = tl.Input("image", (H, W), dtype)
    (b,) = tl.vars("b")
    hist = tl.Func("hist", shape=(256,), dtype=tl.int32)
    hist[b] = 0
    r = tl.RDom((0, W), (0, H))
    v = tl.cast(tl.int32, image[r.y, r.x])
    hist[v] = hist[v] + 1
    return hist, r


@pytest.mark.parametrize("factor", [1, 3, 8])
@pytest.mark.parametrize("h,w", [(1, 1), (13, 7), (37, 29)])
def test_rfactor_of_a_histogram_scatter_runs_its_parts_in_parallel(factor, h, w, rng):
    hist, r = histogram()
    s = tl.Schedule(hist)
    ro, ri = s[hist].update(0).split(r.y, factor)
    rf = s.rfactor(s[hist].update(0), ro)
    assert str(rf.func) == "hist_rf.update(0)"
    rf.parallel(rf.loops[0])  # one partial histogram per chunk of rows
    assert s.check().ok
    kern = tl.compile(hist, s)
    img = rng.integers(0, 256, (h, w), dtype=np.uint8)
    np.testing.assert_array_equal(kern(img), np.bincount(img.ravel(), minlength=256))
    # the trace replays (the step names the update stage)
    again = tl.Schedule.from_json(hist, s.to_json())
    np.testing.assert_array_equal(tl.compile(hist, again)(img), kern(img))


def test_rfactor_of_an_update_keeps_its_scatter_dependence_inside_a_part():
    hist, r = histogram()
    s = tl.Schedule(hist)
    rf = s.rfactor(s[hist].update(0), r.y)  # a part per row
    rf.parallel(rf.loops[0])
    assert s.check().ok
    t = tl.Schedule(hist)
    rf = t.rfactor(t[hist].update(0), r.y)
    rf.parallel("r_x")  # two pixels of one row may hit the same bin
    report = t.check()
    assert not report.ok and report.problems[0].stage == "hist_rf.update(0)"


def test_rfactor_of_a_max_update_and_of_a_per_row_histogram(rng):
    N, M = tl.sizes("N M")
    X = tl.Input("X", (N, M), tl.float64)
    (i,) = tl.vars("i")
    F = tl.Func("F", shape=(N,), dtype=tl.float64)
    F[i] = -1.0
    r = tl.RDom((0, M))
    F[i] = tl.maximum(F[i], X[i, r])
    s = tl.Schedule(F)
    ro, ri = s[F].update(0).split(r.x, 4)
    rf = s.rfactor(s[F].update(0), ri)  # four partial maxima per row
    rf.parallel(i)
    s[F].update(0).parallel(i)
    assert s.check().ok
    x = rng.standard_normal((9, 23))
    np.testing.assert_array_equal(tl.compile(F, s)(x), np.maximum(x.max(axis=1), -1.0))
    # a histogram per row (a pure Var in the scatter's index)
    H, W = tl.sizes("H W")
    img = tl.Input("img", (H, W), tl.uint8)
    y, b = tl.vars("y b")
    rows = tl.Func("rows", shape=(H, 256), dtype=tl.int32)
    rows[y, b] = 0
    rx = tl.RDom((0, W))
    v = tl.cast(tl.int32, img[y, rx])
    rows[y, v] = rows[y, v] + 1
    s = tl.Schedule(rows)
    xo, xi = s[rows].update(0).split(rx.x, 5)
    s.rfactor(s[rows].update(0), xo).parallel(y)
    assert s.check().ok
    a = rng.integers(0, 256, (6, 17), dtype=np.uint8)
    want = np.stack([np.bincount(row, minlength=256) for row in a])
    np.testing.assert_array_equal(tl.compile(rows, s)(a), want)


@pytest.mark.parametrize("rhs,why", [
    ("twice", "op value"), ("reads_other_cell", "op value"), ("where", "RDom.where")])
def test_rfactor_refuses_an_update_it_cannot_reassociate(rhs, why):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (i,) = tl.vars("i")
    F = tl.Func("F", shape=(8,), dtype=tl.float64)
    F[i] = 0.0
    d = tl.RDom((0, N))
    r = d.x
    if rhs == "twice":
        F[r % 8] = F[r % 8] * 2.0 + X[r]  # not F op value
    elif rhs == "reads_other_cell":
        F[r % 8] = F[r % 8] + F[(r + 1) % 8]
    else:
        d.where(r < 5)
        F[r % 8] = F[r % 8] + X[r]
    s = tl.Schedule(F)
    with pytest.raises(tl.ScheduleError, match=why):
        s.rfactor(s[F].update(0), r)


def test_rule_based_schedule_and_search_space_rfactor_a_big_histogram(rng, monkeypatch):
    import optuna

    from tensorlang.autotuner import heuristic, rfactor_rules, space as space_mod

    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    monkeypatch.setattr(rfactor_rules, "num_threads", lambda: 2)
    monkeypatch.setattr(space_mod, "num_threads", lambda: 2)
    hist, r = histogram()
    big = {"H": 2048, "W": 2048}
    hs = heuristic.heuristic_schedule(hist, big)
    text = hs.to_python()
    assert "rfactor('hist.update(0)', 'r_y.o')" in text and \
        's["hist_rf"].update(0).parallel' in text
    assert "rfactor" not in heuristic.heuristic_schedule(hist, {"H": 16, "W": 16}).to_python()
    img = rng.integers(0, 256, (203, 97), dtype=np.uint8)  # the kernel runs every shape
    np.testing.assert_array_equal(tl.compile(hist, hs)(img),
                                  np.bincount(img.ravel(), minlength=256))
    sp = space_mod.SearchSpace(hist, big)
    point = sp.point(hs)
    assert point is not None and point[0]["hist.update0.rfactor"] is True
    again = sp.sample(optuna.trial.FixedTrial(point[0]))
    assert sp.signature(again) == sp.signature(hs)


@pytest.mark.parametrize("threads", [1, 2])
def test_rule_based_schedule_and_search_space_reduce_rows_in_vector_lanes(rng, monkeypatch,
                                                                           threads):
    # tmp[i] = A[i, k] * x[k] (PolyBench atax's first product): partial sums in vector lanes of
    # tmp_rf, one vector per row, LANE_ROWS rows read together, blocks of rows in parallel; tmp
    # adds them up. Odd sizes: k not a multiple of the lanes (a guarded last block), rows not a
    # multiple of LANE_ROWS, one row, one column
    import optuna

    from tensorlang.autotuner import heuristic, rfactor_rules, space as space_mod

    monkeypatch.setattr(heuristic, "num_threads", lambda: threads)
    monkeypatch.setattr(rfactor_rules, "num_threads", lambda: threads)
    monkeypatch.setattr(space_mod, "num_threads", lambda: threads)
    M, N = tl.sizes("M N")
    A, x = tl.Input("A", (M, N), tl.float64), tl.Input("x", (N,), tl.float64)
    i, k = tl.vars("i k")
    tmp = tl.Func("tmp")
    tmp[i] = A[i, k] * x[k]
    sizes = {"M": 1900, "N": 2100}
    hs = heuristic.heuristic_schedule(tmp, sizes)
    text = hs.to_python()
    assert "s.rfactor('tmp', 'k.i')" in text and 's["tmp_rf"].vectorize(' in text, text
    assert f"s[\"tmp_rf\"].split('i', {rfactor_rules.LANE_ROWS})" in text, text
    assert ('s["tmp_rf"].parallel(\'i.o\')' in text) == (threads == 2), text
    kern = tl.compile(tmp, hs)
    for m, n in [(37, 131), (1, 1), (3, 64), (2, 1000), (19, 29)]:
        a, v = rng.random((m, n)), rng.random(n)
        np.testing.assert_allclose(kern(a, v), a @ v, rtol=1e-12)
    sp = space_mod.SearchSpace(tmp, sizes)
    point = sp.point(hs)
    assert point is not None and point[0]["tmp.rfactor_lanes"] is True
    again = sp.sample(optuna.trial.FixedTrial(point[0]))
    assert sp.signature(again) == sp.signature(hs)
    assert list(point[1]["tmp.rfactor_lanes"]) == [False, True]  # the tuner may do without
    # a short row, and A^T x (the pure Var contiguous): other rules
    assert "rfactor" not in heuristic.heuristic_schedule(tmp, {"M": 1900, "N": 40}).to_python()
    y = tl.Func("y")
    y[k] = A[i, k] * x[i]
    assert "rfactor" not in heuristic.heuristic_schedule(y, {"M": 2100, "N": 1900}).to_python()


def test_a_row_reduction_sharing_its_matrix_with_a_column_reduction_reduces_in_lanes(rng):
    # PolyBench bicg: s[j] = r[i] * A[i, j] (a column reduction) and q[i] = A[i, j] * p[j] (a
    # row reduction) read A at the same indices but walk it in different orders, so they are
    # not fused as siblings: q still gets the vector-lane form (a row sum and a row max of one
    # matrix, which are fused, do not; tests/test_multiple_outputs.py), in the two nests or in
    # the one pass over blocks of rows (tests/test_one_pass.py)
    from tensorlang.autotuner import heuristic

    from algorithms import bicg

    s, q = bicg()
    hs = heuristic.heuristic_schedule([s, q], {"N": 2100, "M": 1900})
    assert "s.rfactor('q', " in hs.to_python()
    a, pv, rv = rng.random((37, 131)), rng.random(131), rng.random(37)
    got = tl.compile([s, q], hs)(A=a, p=pv, r=rv)
    np.testing.assert_allclose(got[0], rv @ a, rtol=1e-12)
    np.testing.assert_allclose(got[1], a @ pv, rtol=1e-12)
