"""Pipelines with several outputs (``tl.compile([F, G])`` returns a tuple) and ``compute_with``
(two stages sharing outer loops), against NumPy on odd sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.schedule.schedule import steps_to_python


def bicg():
    """PolyBench bicg: s = A^T r and q = A p, two reductions over one matrix."""
    N, M = tl.sizes("N M")
    A = tl.Input("A", (N, M), tl.float64)
    p = tl.Input("p", (M,), tl.float64)
    r = tl.Input("r", (N,), tl.float64)
    i, j = tl.vars("i j")
    s, q = tl.Func("s"), tl.Func("q")
    s[j] = tl.sum(r[i] * A[i, j])
    q[i] = tl.sum(A[i, j] * p[j])
    return s, q


def gradients():
    """Two stencils of one image (a Sobel pair): independent, over the same domain."""
    H, W = tl.sizes("H W")
    img = tl.Input("img", (H, W), tl.float32)
    y, x = tl.vars("y x")
    b = tl.clamp_edge(img)
    gx, gy = tl.Func("gx", shape=(H, W)), tl.Func("gy", shape=(H, W))
    gx[y, x] = b[y - 1, x + 1] + 2 * b[y, x + 1] + b[y + 1, x + 1] \
        - b[y - 1, x - 1] - 2 * b[y, x - 1] - b[y + 1, x - 1]
    gy[y, x] = b[y + 1, x - 1] + 2 * b[y + 1, x] + b[y + 1, x + 1] \
        - b[y - 1, x - 1] - 2 * b[y - 1, x] - b[y - 1, x + 1]
    return gx, gy, x, y


def _np_gradients(a):
    p = np.pad(a, 1, mode="edge")
    c = lambda dy, dx: p[1 + dy:1 + dy + a.shape[0], 1 + dx:1 + dx + a.shape[1]]  # noqa: E731
    gx = c(-1, 1) + 2 * c(0, 1) + c(1, 1) - c(-1, -1) - 2 * c(0, -1) - c(1, -1)
    gy = c(1, -1) + 2 * c(1, 0) + c(1, 1) - c(-1, -1) - 2 * c(-1, 0) - c(-1, 1)
    return gx, gy


@pytest.mark.parametrize("n,m", [(1, 1), (7, 13), (31, 17)])
def test_two_reductions_return_a_tuple_in_the_listed_order(n, m, rng):
    s, q = bicg()
    A, p, r = rng.standard_normal((n, m)), rng.standard_normal(m), rng.standard_normal(n)
    for outs, want in (([s, q], (r @ A, A @ p)), ([q, s], (A @ p, r @ A))):
        got = tl.compile(outs)(A=A, p=p, r=r)
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        for g, w in zip(tl.reference(outs, A=A, p=p, r=r), want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_an_output_read_by_another_output_is_computed_over_its_whole_domain(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (i,) = tl.vars("i")
    F, G = tl.Func("F"), tl.Func("G")
    F[i] = X[i] * 2.0
    G[i] = F[i + 2] - F[i]  # reads F[2:], so F alone would not need F[0:2] for G
    x = rng.standard_normal(11)
    f, g = tl.compile([F, G])(x)
    np.testing.assert_allclose(f, 2 * x)
    np.testing.assert_allclose(g, 2 * x[2:] - 2 * x[:-2])
    s = tl.Schedule([F, G])
    with pytest.raises(tl.ScheduleError, match="F is an output; it cannot be inlined"):
        s[F].compute_inline()
    with pytest.raises(tl.ScheduleError, match="F is an output; it is always computed at root"):
        s[F].compute_at(s[G], i)
    s[G].vectorize(i, 4)
    f, g = tl.compile([F, G], s)(x)
    np.testing.assert_allclose(g, 2 * x[2:] - 2 * x[:-2])


def test_out_takes_one_array_per_output_and_never_aliases(rng):
    s, q = bicg()
    kern = tl.compile([s, q])
    A, p, r = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal(5)
    so, qo = np.empty(3), np.empty(5)
    got = kern(A=A, p=p, r=r, out=(so, qo))
    assert got[0] is so and got[1] is qo
    np.testing.assert_allclose(so, r @ A)
    np.testing.assert_allclose(qo, A @ p)
    with pytest.raises(tl.ShapeError, match=r"out= must be a tuple of 2 arrays, one per output "
                                            r"\(s, q\)"):
        kern(A=A, p=p, r=r, out=so)
    with pytest.raises(tl.ShapeError, match=r"out\[1\] \(q\) has shape \(3,\)"):
        kern(A=A, p=p, r=r, out=(so, np.empty(3)))
    r_in = r.copy()
    got = kern(A=A, p=p, r=r_in, out=(so, r_in))  # q written over an input: computed aside
    np.testing.assert_allclose(got[1], A @ p)


def test_the_list_of_outputs_is_part_of_the_workload_key():
    s, q = bicg()
    keys = {tl.workload_key([s, q]), tl.workload_key([q, s]), tl.workload_key(s),
            tl.workload_key(q)}
    assert len(keys) == 4
    assert tl.workload_key([s]) == tl.workload_key(s)


@pytest.mark.parametrize("bad,msg", [
    ([], "non-empty list"), ("s", "got str"), (["x"], "must be a tl.Func, not str")])
def test_a_bad_list_of_outputs_is_refused(bad, msg):
    with pytest.raises(tl.DefinitionError, match=msg):
        tl.compile(bad)
    s, _ = bicg()
    with pytest.raises(tl.DefinitionError, match="output s is listed twice"):
        tl.Schedule([s, s])


def test_the_rule_based_schedule_and_the_tuner_space_take_several_outputs(rng):
    s, q = bicg()
    kern = tl.compile([s, q], "auto", shapes={"N": 67, "M": 45})
    A, p, r = rng.standard_normal((67, 45)), rng.standard_normal(45), rng.standard_normal(67)
    got = kern(A=A, p=p, r=r)
    np.testing.assert_allclose(got[0], r @ A, rtol=1e-10)
    np.testing.assert_allclose(got[1], A @ p, rtol=1e-10)
    from tensorlang.autotuner.space import SearchSpace
    import optuna

    space = SearchSpace([s, q], {"N": 67, "M": 45})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    compiled = 0
    for _ in range(8):  # (a sample may be illegal: the tuner's verdict refuses it)
        sched = space.sample(study.ask())
        if not sched.check().ok:
            continue
        got = tl.compile([s, q], sched)(A=A, p=p, r=r)
        np.testing.assert_allclose(got[0], r @ A, rtol=1e-10)
        np.testing.assert_allclose(got[1], A @ p, rtol=1e-10)
        compiled += 1
    assert compiled > 0


def _fused(kind: str):
    gx, gy, x, y = gradients()
    s = tl.Schedule([gx, gy])
    if kind == "rows":
        s[gx].compute_with(s[gy], y)
    elif kind == "tiles":
        for f in (gx, gy):
            s[f].tile(y, x, 4, 8)
        s[gx].compute_with(s[gy], "x.o")
    elif kind == "parallel_vector":
        for f in (gx, gy):
            s[f].parallel(y).vectorize(x, 8)
        s[gx].compute_with(s[gy], "x.o")
    elif kind == "innermost":
        s[gy].compute_with(s[gx], x)
    return s, gx, gy


@pytest.mark.parametrize("kind", ["rows", "tiles", "parallel_vector", "innermost"])
@pytest.mark.parametrize("h,w", [(1, 1), (5, 11), (17, 29)])
def test_compute_with_shares_the_outer_loops_and_matches_numpy(kind, h, w, rng):
    s, gx, gy = _fused(kind)
    assert s.check().ok
    kern = tl.compile([gx, gy], s)
    a = rng.standard_normal((h, w)).astype(np.float32)
    want = _np_gradients(a)
    for g, wnt in zip(kern(a), want):
        np.testing.assert_allclose(g, wnt, rtol=1e-5, atol=1e-5)
    host, guest = ("gx", "gy") if kind == "innermost" else ("gy", "gx")
    # one loop nest (per version and partition piece): each of the guest's produce is inside
    # the host's, in a loop of it
    depth = None
    for line in kern.loop_nest().splitlines():
        indent = len(line) - len(line.lstrip())
        if line.strip() == f"produce {host}:":
            depth = indent
        elif line.strip() == f"produce {guest}:":
            assert depth is not None and indent >= depth + 4, kern.loop_nest()


def test_compute_with_round_trips_through_json_and_python():
    s, gx, gy = _fused("tiles")
    text = s.to_json()
    assert json.loads(text)["output"] == ["gx", "gy"]
    t = tl.Schedule.from_json([gx, gy], text)
    assert t.to_json() == text
    assert 's["gx"].compute_with(s["gy"], \'x.o\')' in steps_to_python(json.loads(text)["steps"])


def test_compute_with_refuses_stages_that_read_each_other():
    gx, gy, x, y = gradients()
    H, W = tl.sizes("H W")
    m = tl.Func("m", shape=(H, W))
    m[y, x] = gx[y, x] * gy[y, x]
    s = tl.Schedule([gx, m])
    with pytest.raises(tl.ScheduleError, match="m reads gx .* independent stages only"):
        s[m].compute_with(s[gx], y)
    with pytest.raises(tl.ScheduleError, match="m reads gx"):
        s[gx].compute_with(s[m], y)


def test_compute_with_refuses_loops_that_differ():
    gx, gy, x, y = gradients()
    s = tl.Schedule([gx, gy])
    s[gy].split(x, 8)
    s[gx].compute_with(s[gy], "x.o")  # gx's x stands for gy's x.o (by position): W against
    with pytest.raises(tl.ScheduleError, match=r"the shared loop x runs over .* but x\.o "
                                               r"over .* need the same bounds"):
        tl.compile([gx, gy], s)  # ceil(W / 8) iterations
    s = tl.Schedule([gx, gy])
    s[gy].split(x, 8)
    s[gx].split(x, 4)
    with pytest.raises(tl.ScheduleError, match="different splits"):
        s[gx].compute_with(s[gy], "x.o")
    t = tl.Schedule([gx, gy])
    t[gy].parallel(y)
    with pytest.raises(tl.ScheduleError, match="loop y is parallel in gy but serial in gx"):
        t[gx].compute_with(t[gy], y)
    t[gx].split(y, 2)  # gx's y.o (by position) iterates fewer times than gy's y
    with pytest.raises(tl.ScheduleError, match=r"loop y \(shared with gx's y\.o\) is parallel "
                                               r"in gy but serial in gx"):
        t[gx].compute_with(t[gy], y)
    with pytest.raises(tl.ScheduleError, match="gy's loops down to x, 2 loops, but gx has "
                                               "only 1"):
        w = tl.Schedule([gx, gy])
        w[gx].fuse(y, x)
        w[gx].compute_with(w[gy], x)
    # a change after compute_with is caught by the one verdict (check and compile agree)
    u = tl.Schedule([gx, gy])
    u[gx].compute_with(u[gy], y)
    u[gy].split(y, 2)
    report = u.check()
    assert not report.ok and "gy has no loop y" in report.problems[0].message()
    with pytest.raises(tl.ScheduleError, match="gy has no loop y"):
        tl.compile([gx, gy], u)
    v = tl.Schedule([gx, gy])
    v[gx].compute_with(v[gy], y)
    with pytest.raises(tl.ScheduleError, match="gx shares its loops with gy"):
        v[gx].compute_inline()
    with pytest.raises(tl.ScheduleError, match="already computed with gy"):
        v[gx].compute_with(v[gy], y)


def test_compute_with_refuses_shared_loops_with_different_bounds():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    F, G = tl.Func("F"), tl.Func("G")
    F[i] = X[i] + 1
    G[i] = X[i + 1] - X[i]  # one point fewer than F
    s = tl.Schedule([F, G])
    s[G].compute_with(s[F], i)
    with pytest.raises(tl.ScheduleError, match="the shared loop i runs over .* need the same "
                                               "bounds"):
        tl.compile([F, G], s)


def row_stats():
    """The sum and the max of each row of one matrix: two reductions reading it alike."""
    R, C = tl.sizes("R C")
    A = tl.Input("A", (R, C), tl.float32)
    i, j = tl.vars("i j")
    total, peak = tl.Func("total"), tl.Func("peak")
    total[i] = tl.sum(A[i, j])
    peak[i] = tl.max(A[i, j])
    return total, peak


def test_the_rule_based_schedule_fuses_reductions_of_the_same_rows(rng):
    total, peak = row_stats()
    from tensorlang.autotuner.heuristic import heuristic_schedule

    s = heuristic_schedule([total, peak], {"R": 4099, "C": 1031})
    assert [str(st) for st in s.steps if st.op == "compute_with"] == [
        "compute_with(peak, host='total', loop='i')"]
    a = rng.standard_normal((4099, 1031)).astype(np.float32)
    got = tl.compile([total, peak], s)(A=a)
    np.testing.assert_allclose(got[0], a.sum(axis=1), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got[1], a.max(axis=1))
    # a pointwise pair (measured: no gain) stays apart
    gx, gy, x, y = gradients()
    assert not any(st.op == "compute_with"
                   for st in heuristic_schedule([gx, gy], {"H": 512, "W": 512}).steps)


def test_the_search_space_draws_the_rule_based_fusion(rng):
    import optuna

    from tensorlang.autotuner.heuristic import heuristic_schedule
    from tensorlang.autotuner.space import SearchSpace

    total, peak = row_stats()
    sizes = {"R": 4099, "C": 1031}
    hs = heuristic_schedule([total, peak], sizes)
    sp = SearchSpace([total, peak], sizes)
    point = sp.point(hs)
    assert point is not None and point[0]["peak.with_total"] is True
    again = sp.sample(optuna.trial.FixedTrial(point[0]))
    assert sp.signature(again) == sp.signature(hs)
    a = rng.standard_normal((7, 5)).astype(np.float32)
    got = tl.compile([total, peak], again)(A=a)
    np.testing.assert_array_equal(got[1], a.max(axis=1))
    unfused = sp.sample(optuna.trial.FixedTrial({**point[0], "peak.with_total": False}))
    assert sp.signature(unfused) != sp.signature(hs)
