"""Every ported PolyBench kernel, at its SMALL dataset, under the default and the rule-based
schedule, against the NumPy reference written from the C source (benchmarks/polybench/)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from polybench.kernels import KERNELS  # noqa: E402


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("schedule", ["default", "rule-based"])
def test_polybench_kernel_matches_numpy(name, schedule):
    kern = KERNELS[name]
    arrays = kern.inputs(kern.small, np.random.default_rng(7))
    outs = kern.build()
    ref = kern.numpy(arrays, kern.small)
    assert len(outs) == len(ref)
    h = kern.handle(outs)  # several live-out arrays: one kernel returning a tuple
    s = None if schedule == "default" else heuristic_schedule(h, kern.small)
    got_all = tl.compile(h, s)(**kern.call_args(h, arrays, kern.small))
    got_all = got_all if isinstance(got_all, tuple) else (got_all,)
    assert len(got_all) == len(ref)
    for got, want in zip(got_all, ref):
        assert got.shape == want.shape and got.dtype == want.dtype
        tol = 1e-4 if want.dtype == np.float32 else 1e-10  # deriche is float32, as in C
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_polybench_references_follow_the_c_loops():
    # the references use NumPy's whole-array operations; check two against the C loop nests
    a = KERNELS["gemver"].inputs({"N": 5}, np.random.default_rng(0))
    A = a["A"].copy()
    x, w = a["x"].copy(), a["w"].copy()
    n = 5
    for i in range(n):
        for j in range(n):
            A[i, j] += a["u1"][i] * a["v1"][j] + a["u2"][i] * a["v2"][j]
    for i in range(n):
        for j in range(n):
            x[i] += 1.2 * A[j, i] * a["y"][j]
    x += a["z"]
    for i in range(n):
        for j in range(n):
            w[i] += 1.5 * A[i, j] * x[j]
    np.testing.assert_allclose(KERNELS["gemver"].numpy(a, {"N": 5})[0], w, rtol=1e-12)
    d = KERNELS["correlation"].inputs({"N": 6, "M": 4}, np.random.default_rng(1))["data"]
    d[:, 2] = 0.5  # a constant column: stddev 0 -> 1.0 (the C code's eps rule)
    n_, m = d.shape
    mean = [sum(d[i, j] for i in range(n_)) / n_ for j in range(m)]
    sd = [np.sqrt(sum((d[i, j] - mean[j]) ** 2 for i in range(n_)) / n_) for j in range(m)]
    sd = [1.0 if s <= 0.1 else s for s in sd]
    dn = [[(d[i, j] - mean[j]) / (np.sqrt(n_) * sd[j]) for j in range(m)] for i in range(n_)]
    corr = np.eye(m)
    for i in range(m - 1):
        for j in range(i + 1, m):
            corr[i, j] = corr[j, i] = sum(dn[k][i] * dn[k][j] for k in range(n_))
    got = KERNELS["correlation"].numpy({"data": d}, {"N": 6, "M": 4})[0]
    np.testing.assert_allclose(got, corr, rtol=1e-12)


def test_vectorized_references_follow_the_c_loops():
    """The references that reorder the C loops (seidel-2d by wavefronts, floyd-warshall by whole
    k steps) against the C loop nests, written out, on small sizes."""
    rng = np.random.default_rng(3)
    n, t = 7, 3
    a = rng.random((n, n))
    want = a.copy()
    for _ in range(t):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                want[i, j] = sum(want[i + di, j + dj] for di in (-1, 0, 1)
                                 for dj in (-1, 0, 1)) / 9.0
    got = KERNELS["seidel-2d"].numpy({"A": a}, {"N": n, "T": t})[0]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    p = rng.integers(1, 50, (n, n)).astype(np.int32)
    want = p.copy()
    for k in range(n):
        for i in range(n):
            for j in range(n):
                want[i, j] = min(want[i, j], want[i, k] + want[k, j])
    np.testing.assert_array_equal(KERNELS["floyd-warshall"].numpy({"path": p}, {"N": n})[0],
                                  want)
    L = np.tril(rng.random((n, n))) + np.eye(n)
    b = rng.random(n)
    np.testing.assert_allclose(KERNELS["trisolv"].numpy({"L": L, "b": b}, {"N": n})[0],
                               np.linalg.solve(L, b), rtol=1e-12)


def test_more_references_follow_the_c_loops():
    """lu (right-looking against the C's Doolittle order) and nussinov (the k loop as one vector
    max) against the C loops written out."""
    rng = np.random.default_rng(5)
    n = 6
    A = KERNELS["lu"].inputs({"N": n}, rng)["A"]
    want = A.copy()
    for i in range(n):
        for j in range(i):
            for k in range(j):
                want[i, j] -= want[i, k] * want[k, j]
            want[i, j] /= want[j, j]
        for j in range(i, n):
            for k in range(i):
                want[i, j] -= want[i, k] * want[k, j]
    np.testing.assert_allclose(KERNELS["lu"].numpy({"A": A}, {"N": n})[0], want, rtol=1e-12)
    n = 9
    seq = rng.integers(0, 4, n).astype(np.int32)
    t = np.zeros((n, n), np.int64)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            t[i, j] = max(t[i, j], t[i, j - 1])
            if i + 1 < n:
                t[i, j] = max(t[i, j], t[i + 1, j])
                bonus = int(seq[i] + seq[j] == 3) if i < j - 1 else 0
                t[i, j] = max(t[i, j], t[i + 1, j - 1] + bonus)
            for k in range(i + 1, j):
                t[i, j] = max(t[i, j], t[i, k] + t[k + 1, j])
    np.testing.assert_array_equal(KERNELS["nussinov"].numpy({"seq": seq}, {"N": n})[0], t)
    r = 0.5 * rng.random(7)
    y, z = np.zeros(7), np.zeros(7)
    y[0] = alpha = -r[0]
    beta = 1.0
    for k in range(1, 7):
        beta = (1 - alpha * alpha) * beta
        total = sum(r[k - i - 1] * y[i] for i in range(k))
        alpha = -(r[k] + total) / beta
        for i in range(k):
            z[i] = y[i] + alpha * y[k - i - 1]
        y[:k] = z[:k]
        y[k] = alpha
    np.testing.assert_allclose(KERNELS["durbin"].numpy({"r": r}, {"N": 7})[0], y, rtol=1e-12)


def test_gramschmidt_and_adi_references_follow_the_c_loops():
    """gramschmidt and adi, whose references run the C code's loops over i as vector operations,
    against the C loop nests written out."""
    rng = np.random.default_rng(11)
    m, n = 5, 4
    A = rng.random((m, n))
    a, r, q = A.copy(), np.zeros((n, n)), np.zeros((m, n))
    for k in range(n):
        nrm = 0.0
        for i in range(m):
            nrm += a[i, k] * a[i, k]
        r[k, k] = np.sqrt(nrm)
        for i in range(m):
            q[i, k] = a[i, k] / r[k, k]
        for j in range(k + 1, n):
            r[k, j] = 0.0
            for i in range(m):
                r[k, j] += q[i, k] * a[i, j]
            for i in range(m):
                a[i, j] = a[i, j] - q[i, k] * r[k, j]
    for got, want in zip(KERNELS["gramschmidt"].numpy({"A": A}, {"M": m, "N": n}), (a, r, q)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    n, steps = 6, 3
    u0 = rng.random((n, n))
    u, v, p, qq = u0.copy(), np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n))
    dx = dy = 1.0 / n
    dt = 1.0 / steps
    mul1, mul2 = 2.0 * dt / (dx * dx), 1.0 * dt / (dy * dy)
    ca, cb, cd, ce = -mul1 / 2.0, 1.0 + mul1, -mul2 / 2.0, 1.0 + mul2
    cc, cf = ca, cd
    for _ in range(steps):
        for i in range(1, n - 1):
            v[0, i], p[i, 0] = 1.0, 0.0
            qq[i, 0] = v[0, i]
            for j in range(1, n - 1):
                p[i, j] = -cc / (ca * p[i, j - 1] + cb)
                qq[i, j] = (-cd * u[j, i - 1] + (1.0 + 2.0 * cd) * u[j, i] - cf * u[j, i + 1]
                            - ca * qq[i, j - 1]) / (ca * p[i, j - 1] + cb)
            v[n - 1, i] = 1.0
            for j in range(n - 2, 0, -1):
                v[j, i] = p[i, j] * v[j + 1, i] + qq[i, j]
        for i in range(1, n - 1):
            u[i, 0], p[i, 0] = 1.0, 0.0
            qq[i, 0] = u[i, 0]
            for j in range(1, n - 1):
                p[i, j] = -cf / (cd * p[i, j - 1] + ce)
                qq[i, j] = (-ca * v[i - 1, j] + (1.0 + 2.0 * ca) * v[i, j] - cc * v[i + 1, j]
                            - cd * qq[i, j - 1]) / (cd * p[i, j - 1] + ce)
            u[i, n - 1] = 1.0
            for j in range(n - 2, 0, -1):
                u[i, j] = p[i, j] * u[i, j + 1] + qq[i, j]
    got = KERNELS["adi"].numpy({"u": u0}, {"N": n, "T": steps})[0]
    np.testing.assert_allclose(got, u, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,cells", [("cholesky", 1), ("trisolv", 1), ("gramschmidt", 1),
                                        ("durbin", 1)])
def test_sequential_kernels_reduce_their_sums_in_registers(name, cells):
    """The rule-based schedule marks updates atomic(): each sum of these recurrences runs as a
    register reduction (schedule/cell_reduction.py), at least ``cells`` per kernel."""
    from tensorlang.schedule.lower import lower

    kern = KERNELS[name]
    h = kern.handle(kern.build())
    got = [b for b in lower(h, heuristic_schedule(h, kern.small)).buffers if ".cell" in b]
    assert len(got) >= cells, got


@pytest.mark.parametrize("name", ["lu", "ludcmp"])
def test_lu_eliminates_along_rows(name):
    """The rule-based schedule runs lu's update in its ikj order (autotune/update_order.py): the
    loop over j innermost, the pivot row's factor lu[i, k] loaded once per range of j and the
    range handed to LLVM's vectorizer as independent (schedule/invariant_reads.py)."""
    from tensorlang.schedule.lower import lower

    kern = KERNELS[name]
    h = kern.handle(kern.build())
    s = heuristic_schedule(h, kern.small)
    assert "update(0).reorder('r_z', 'r_x', 'r_y')" in s.to_python()
    text = str(lower(h, s))
    assert "lu.fixed" in text and "independent for r_y" in text


@pytest.mark.parametrize("name,sizes,stage,form", [
    ("jacobi-2d", dict(N=400, T=2), "buf.update0", "vector+parallel:r_y"),
    ("deriche", dict(W=8, H=300), "z1.update0", "scan"),
])
def test_the_rule_based_update_forms_are_points_of_the_search_space(name, sizes, stage, form):
    # a time-stepped sweep (vectorized along a row, rows in parallel) and a column scan (chunks
    # of columns in parallel): the search space draws the rule-based schedule's form of an
    # update (<F>.update<i>.form), so the tuner starts from it; the replayed point is correct
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    kern = KERNELS[name]
    h = kern.handle(kern.build())
    hs = heuristic_schedule(h, sizes)
    space = SearchSpace(h, sizes)
    point = space.point(hs)
    assert point is not None, hs.to_python()
    params, choices = point
    assert params[f"{stage}.form"] == form and "none" in choices[f"{stage}.form"]
    again = space.sample(optuna.trial.FixedTrial(params))
    assert space.signature(again) == space.signature(hs)
    arrays = kern.inputs(sizes, np.random.default_rng(3))
    got = tl.compile(h, again)(**kern.call_args(h, arrays, sizes))
    want = kern.numpy(arrays, sizes)[0]
    tol = 1e-4 if want.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("threads", [2, 16])
def test_the_rule_based_schedules_of_the_level2_and_packed_kernels_are_points(threads,
                                                                              monkeypatch):
    # these were not points of the search space, so the tuner could not start from them: the
    # level-2 kernels' A^T x segment of ROW_VECTORS unrolled vectors (the space unrolled at most
    # MAX_VECTOR_UNROLL), covariance's column means likewise, symm's second packed sum (its
    # copies named A_local2: the order's guess looked for A_local only), and syrk / syr2k on
    # 16 threads (the rule's fewer, larger row blocks); each replayed point is the same schedule
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", str(threads))
    for name in ("atax", "bicg", "mvt", "gemver", "covariance", "correlation", "symm", "syrk",
                 "syr2k"):
        kern = KERNELS[name]
        h = kern.handle(kern.build())
        hs = heuristic_schedule(h, kern.large)
        space = SearchSpace(h, kern.large)
        point = space.point(hs)
        assert point is not None, (name, hs.to_python())
        again = space.sample(optuna.trial.FixedTrial(point[0]))
        assert space.signature(again) == space.signature(hs), name


def test_point_changes_one_decision_of_every_stage_alike():
    # symm's two packed sums on Sapphire / Emerald Rapids, 2 threads: the rule takes 10 rows
    # (1000 rows in 4 blocks), "regs" 8, in both; the pair of changes lay past point's 64 tries
    from tensorlang.autotuner.space import _mirrored

    alts = [("a.i.rows", [10, 4]), ("b.i.rows", [10]), ("a.prefetch", [True]),
            ("c.i.rows", [4]), ("b.vectorize", [16])]
    assert _mirrored(alts) == [{"a.i.rows": 10, "b.i.rows": 10}, {"a.i.rows": 4, "c.i.rows": 4}]


@pytest.mark.parametrize("invariant, lanes", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gesummvs_two_sums_sharing_only_a_vector_run_apart(invariant, lanes, monkeypatch):
    # gesummv's A[i, j] * x[j] and B[i, j] * x[j] share only x, which every row reads whole:
    # computed together they ran slower than apart (rfactor_rules.FUSE_INVARIANT_READS); a row
    # sum and a row max of one matrix are still computed together (test_multiple_outputs.py).
    # Apart, each takes vector lanes where SIBLING_LANES (the CPU model) says so; computed
    # together, neither does
    from tensorlang.autotuner import rfactor_rules

    monkeypatch.setattr(rfactor_rules, "FUSE_INVARIANT_READS", invariant)
    monkeypatch.setattr(rfactor_rules, "SIBLING_LANES", lanes)
    kern = KERNELS["gesummv"]
    h = kern.handle(kern.build())
    s = heuristic_schedule(h, kern.large)
    assert ("compute_with" in str(s)) == bool(invariant), str(s)
    assert str(s).count("rfactor(") == (2 if lanes and not invariant else 0), str(s)
    compiled = tl.compile(h, s)
    for n in (1, 13, 131):
        sizes = {"N": n}
        arrays = kern.inputs(sizes, np.random.default_rng(n))
        got = compiled(**kern.call_args(h, arrays, sizes))
        np.testing.assert_allclose(got, kern.numpy(arrays, sizes)[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cpu", ["haswell", "skylake-avx512", "icelake-server", "sapphirerapids",
                                 "znver3", "znver4", "znver5"])
def test_gesummvs_sums_take_vector_lanes_except_on_amd_zen_4(cpu):
    # CpuModel.sibling_lanes: the lanes ran faster on Ice Lake-SP, Zen 3 and Zen 5, the plain
    # row loops on Zen 4
    from algorithms import described_target

    from tensorlang.autotuner.cpu_model import cpu_model

    target = described_target(cpu)
    plain = cpu == "znver4"
    assert cpu_model(target).sibling_lanes == (not plain)
    kern = KERNELS["gesummv"]
    h = kern.handle(kern.build())
    s = heuristic_schedule(h, kern.large, target)
    assert str(s).count("rfactor(") == (0 if plain else 2), str(s)


@pytest.mark.parametrize("fuse", [1, 0])
@pytest.mark.parametrize("threads", [1, 2])
def test_symms_two_triangles_run_in_one_parallel_loop(fuse, threads, monkeypatch):
    # symm's sums over k <= i and k > i differ in work per row in opposite ways; run as two
    # parallel loops over two row blocks, a third of the two threads' time idle in each
    # (heuristic.FUSE_UNEVEN). The schedule made for LARGE runs sizes its factors do not divide
    from tensorlang.autotuner import heuristic

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", str(threads))
    monkeypatch.setattr(heuristic, "FUSE_UNEVEN", fuse)
    kern = KERNELS["symm"]
    h = kern.handle(kern.build())
    s = heuristic_schedule(h, kern.large)
    assert ('s["symm_sum1"].compute_with(s["symm_sum0"], \'i.o.o\')' in str(s)) == bool(fuse)
    compiled = tl.compile(h, s)
    for m, n in [(1, 1), (67, 41), (503, 37)]:
        sizes = {"M": m, "N": n}
        arrays = kern.inputs(sizes, np.random.default_rng(m))
        got = compiled(**kern.call_args(h, arrays, sizes))
        np.testing.assert_allclose(got, kern.numpy(arrays, sizes)[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["symm", "gemm"])
def test_ice_lake_sps_wide_tile_is_a_point_of_the_search_space(name, monkeypatch):
    # the space's "regs" rows of a packed tile take the CPU's accumulators (Ice Lake-SP's 24,
    # cpu_model.tile_accumulators): symm's two packed sums each take 5 x 4 (the rows of its
    # triangle divide 1000) and were a point only where two guesses changed together, past
    # point()'s attempts; gemm's 6 x 4 leaves 4 of 1000 rows as a piece. Made for the described
    # CPU, so the test holds on any host
    import optuna

    from algorithms import described_target
    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    target = described_target("icelake-server")
    kern = KERNELS[name]
    h = kern.handle(kern.build())
    hs = heuristic_schedule(h, kern.large, target)
    assert "cache_read('B'" in hs.to_python() and ", 32)" in hs.to_python()
    space = SearchSpace(h, kern.large, target)
    point = space.point(hs)
    assert point is not None, hs.to_python()
    again = space.sample(optuna.trial.FixedTrial(point[0]))
    assert space.signature(again) == space.signature(hs)
