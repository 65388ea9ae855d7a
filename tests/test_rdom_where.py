"""Non-rectangular reduction domains: ``RDom.where`` (Halide's semantics) in reductions and
update definitions, against NumPy on odd sizes, under schedules that move the bounded loops."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import trisolv
from conftest import check

import tensorlang as tl


def lower_row_sums():
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    (i,) = tl.vars("i")
    r = tl.RDom((0, N), name="r")
    r.where(r.x <= i)
    C = tl.Func("C")
    C[i] = tl.sum(A[i, r])
    return C, i, r


@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_triangular_reduction_default_schedule(n, rng):
    C, _, _ = lower_row_sums()
    a = rng.random((n, n))
    check(C, np.tril(a).sum(axis=1), a, rtol=1e-12)
    text = tl.compile(C).loop_nest()
    assert "for r_x in [0, i + 1)" in text  # the loop runs only the triangle


def _unroll_inner(s, C, i, r):
    _, inner = s[C].split(r.x, 4)
    s[C].unroll(inner)


def _parallel_tiles(s, C, i, r):
    outer, _ = s[C].split(i, 4)
    s[C].parallel(outer)


@pytest.mark.parametrize("schedule", [
    lambda s, C, i, r: s[C].split(r.x, 3),
    _unroll_inner,  # a constant extent: the condition becomes an if
    lambda s, C, i, r: s[C].reorder(r.x, i),  # the bound's loop is now outside: an if
    _parallel_tiles,
    lambda s, C, i, r: s[C].reorder(r.x, i).vectorize(i, 4),
])
def test_triangular_reduction_schedules(schedule, rng):
    C, i, r = lower_row_sums()
    s = tl.Schedule(C)
    schedule(s, C, i, r)
    for n in (1, 6, 11):
        a = rng.random((n, n))
        np.testing.assert_allclose(tl.compile(C, s)(a), np.tril(a).sum(axis=1), rtol=1e-12)


def test_lower_bound_and_equality_conditions(rng):
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.int64)
    (i,) = tl.vars("i")
    r = tl.RDom((0, N), name="r")
    r.where(r.x >= i + 1)  # strictly upper: the loop's minimum moves
    U = tl.Func("U")
    U[i] = tl.sum(A[i, r])
    d = tl.RDom((0, N), name="d")
    d.where(d.x == i)
    D = tl.Func("D")
    D[i] = tl.max(A[i, d])
    for n in (1, 5, 12):
        a = rng.integers(-9, 9, (n, n))
        check(U, np.triu(a, 1).sum(axis=1), a)
        check(D, np.diagonal(a).copy(), a)
    assert "for r_x in [i + 1, N)" in tl.compile(U).loop_nest()


def test_non_affine_condition_guards_the_store(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.int64)
    r = tl.RDom((0, N), name="r")
    r.where(r.x % 3 == 1)
    S = tl.Func("S")
    S[()] = tl.sum(X[r])
    k = tl.compile(S)
    assert "if " in k.loop_nest()
    for n in (1, 2, 10):
        x = rng.integers(-9, 9, n)
        check(S, np.array(x[1::3].sum()), x)


def test_empty_restriction_gives_the_identity(rng):
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float32)
    (i,) = tl.vars("i")
    r = tl.RDom((0, N), name="r")
    r.where(r.x < i)  # row 0 has no point
    M = tl.Func("M")
    M[i] = tl.max(A[i, r])
    a = rng.random((5, 5)).astype(np.float32)
    expected = np.array([-np.inf] + [a[k, :k].max() for k in range(1, 5)], np.float32)
    check(M, expected, a)


def syrk_lower():
    """PolyBench syrk: C = alpha A A^T + beta C on the lower triangle (j <= i) only."""
    N, M = tl.sizes("N M")
    A = tl.Input("A", (N, M), tl.float64)
    C0 = tl.Input("C0", (N, N), tl.float64)
    i, j = tl.vars("i j")
    C = tl.Func("C")
    C[i, j] = C0[i, j]
    t = tl.RDom((0, N), (0, N), name="t")
    t.where(t.x <= t.y)
    C[t.y, t.x] = C[t.y, t.x] * 1.2
    u = tl.RDom((0, M), (0, N), (0, N), name="u")
    u.where(u.y <= u.z)
    C[u.z, u.y] = C[u.z, u.y] + 1.5 * A[u.z, u.x] * A[u.y, u.x]
    return C, t, u


def syrk_numpy(a, c):
    out = c.copy()
    low = np.tril_indices(c.shape[0])
    out[low] = 1.2 * c[low] + 1.5 * (a @ a.T)[low]
    return out


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (9, 7)])
def test_syrk_over_a_triangle(shape, rng):
    C, _, _ = syrk_lower()
    n, m = shape
    a, c = rng.random((n, m)), rng.random((n, n))
    check(C, syrk_numpy(a, c), A=a, C0=c, rtol=1e-12)


def test_syrk_scheduled_update_loops(rng):
    C, t, u = syrk_lower()
    s = tl.Schedule(C)
    s[C].update(0).parallel(t.y).vectorize(t.x, 4)
    s[C].update(1).reorder(u.y, u.x).parallel(u.z)  # each row of C by one thread
    k = tl.compile(C, s)
    for n, m in ((1, 1), (6, 5), (11, 3)):
        a, c = rng.random((n, m)), rng.random((n, n))
        np.testing.assert_allclose(k(A=a, C0=c), syrk_numpy(a, c), rtol=1e-12)


def test_triangle_makes_a_dependence_disappear(rng):
    """B[y, x] = B[x, y] over x < y reads only the strict upper triangle, which the update never
    writes: isl sees the triangle exactly, so the loops carry no dependence."""
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    y, x = tl.vars("y x")
    B = tl.Func("B")
    B[y, x] = A[y, x]
    t = tl.RDom((0, N), (0, N), name="t")
    t.where(t.x < t.y)
    B[t.y, t.x] = B[t.x, t.y]
    s = tl.Schedule(B)
    s[B].update(0).parallel(t.y)
    a = rng.random((7, 7))
    expected = np.triu(a) + np.triu(a, 1).T
    np.testing.assert_allclose(tl.compile(B, s)(a), expected)
    check(B, expected, a)
    # the same update over the whole square does carry one
    B2 = tl.Func("B2")
    B2[y, x] = A[y, x]
    w = tl.RDom((0, N), (0, N), name="w")
    B2[w.y, w.x] = B2[w.x, w.y]
    s2 = tl.Schedule(B2)
    s2[B2].update(0).parallel(w.y)
    with pytest.raises(tl.IllegalScheduleError, match="carried by w_y"):
        tl.compile(B2, s2)


def test_trisolv_recurrence_over_a_triangle(rng):
    """PolyBench trisolv (L x = b, forward substitution) as one update over j <= i
    (``tests/algorithms.py``)."""
    X, _ = trisolv()
    for n in (1, 4, 9):
        lo = np.tril(rng.random((n, n))) + n * np.eye(n)
        bb = rng.random(n)
        check(X, np.linalg.solve(lo, bb), L=lo, b=bb, rtol=1e-10)
    # column by column is legal too, but only because the domain is a triangle: isl proves it
    s = tl.Schedule(X)
    s[X].update(0).reorder("r_x", "r_y")
    lo = np.tril(rng.random((8, 8))) + 8 * np.eye(8)
    bb = rng.random(8)
    np.testing.assert_allclose(tl.compile(X, s)(L=lo, b=bb), np.linalg.solve(lo, bb),
                               rtol=1e-10)
    s = tl.Schedule(X)
    s[X].update(0).parallel("r_y")  # rows depend on the rows before them
    with pytest.raises(tl.IllegalScheduleError, match="carried by r_y"):
        tl.compile(X, s)


def test_where_errors():
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N,), tl.float32)
    i, j = tl.vars("i j")
    r = tl.RDom((0, N), name="r")
    with pytest.raises(tl.DefinitionError, match="has type"):
        r.where(r.x + 1)
    with pytest.raises(tl.DefinitionError, match="reads A"):
        r.where(A[r] > 0)
    q = tl.RDom((0, N), name="q")
    with pytest.raises(tl.DefinitionError, match="another RDom"):
        r.where(q.x < r.x)
    r.where(r.x < j)
    F = tl.Func("F")
    with pytest.raises(tl.DefinitionError, match="uses Var j"):
        F[i] = tl.sum(A[r] * tl.cast(tl.float32, i))
    G = tl.Func("G", shape=(N,))
    G[j] = tl.sum(A[r])
    with pytest.raises(tl.DefinitionError, match="after a definition already iterates"):
        r.where(r.x > 0)


def test_where_changes_the_workload_key():
    def algo(restricted: bool):
        (N,) = tl.sizes("N")
        A = tl.Input("A", (N,), tl.float32)
        r = tl.RDom((0, N), name="r")
        if restricted:
            r.where(r.x > 2)
        S = tl.Func("S")
        S[()] = tl.sum(A[r])
        return tl.workload_key(S)

    assert algo(True) != algo(False)
    assert algo(True) == algo(True)


@pytest.mark.parametrize("factor", [1, 3, 4])
def test_split_loops_bounded_from_below_and_above(factor, rng):
    """An update over the strict upper triangle (its loop's minimum moves) and a lower one (its
    maximum moves), split and vectorized: the outer loop of the split is bounded too, and the
    tiles inside the triangle run whole."""
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    y, x = tl.vars("y x")
    B = tl.Func("B")
    B[y, x] = A[y, x]
    up = tl.RDom((0, N), (0, N), name="up")
    up.where(up.x > up.y)
    B[up.y, up.x] = B[up.y, up.x] + 10.0
    lo = tl.RDom((0, N), (0, N), name="lo")
    lo.where(lo.x <= lo.y)
    B[lo.y, lo.x] = B[lo.y, lo.x] * 2.0
    s = tl.Schedule(B)
    s[B].update(0).vectorize(up.x, factor) if factor > 1 else s[B].update(0).split(up.x, 1)
    s[B].update(1).vectorize(lo.x, factor) if factor > 1 else s[B].update(1).split(lo.x, 1)
    k = tl.compile(B, s)
    for n in (1, 2, 5, 9, 16):
        a = rng.random((n, n))
        expected = a + 10.0 * np.triu(np.ones((n, n)), 1)
        expected[np.tril_indices(n)] *= 2.0
        np.testing.assert_allclose(k(a), expected, err_msg=f"n={n}")
    if factor == 4:  # the lower triangle's whole tiles are a loop of their own
        assert k.loop_nest().count("vectorized for lo_x.i in [0, 4)") >= 1


def _tri_matmul(cond: str):
    """C[i, j] = sum over k of A[k, i] * B[k, j] where k > i (trmm's triangle) or k <= i."""
    M, N = tl.sizes("M N")
    A, B = tl.Input("A", (M, M), tl.float64), tl.Input("B", (M, N), tl.float64)
    i, j = tl.vars("i j")
    k = tl.RDom((0, M), name="k")
    k.where(k.x > i if cond == "above" else k.x <= i)
    C = tl.Func("C")
    C[i, j] = tl.sum(A[k, i] * B[k, j])
    return C, i, j, k


@pytest.mark.parametrize("cond", ["above", "below"])
@pytest.mark.parametrize("m,n,rows,kc", [(1, 1, 4, 2), (13, 7, 4, 5), (37, 11, 5, 8),
                                          (40, 16, 8, 10)])
def test_triangle_inside_a_register_tile_is_peeled(cond, m, n, rows, kc, rng):
    # rows of a register tile (unrolled) cross the diagonal: the reduction loop runs only the
    # tile's hull of the triangle, split in two, the corner with the condition and the steady
    # state without it (its accumulators then live in registers)
    C, i, j, k = _tri_matmul(cond)
    s = tl.Schedule(C)
    io, ii = s[C].split(i, rows)
    ko, ki = s[C].split(k.x, kc)
    jo, ji = s[C].split(j, 4, tail="GuardWithIf")
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].unroll(ii)
    a, b = rng.random((m, m)), rng.random((m, n))
    # mask[k, i]: k > i (below A's diagonal) or k <= i
    mask = np.tril(np.ones((m, m)), -1) if cond == "above" else np.triu(np.ones((m, m)))
    expected = (a * mask).T @ b  # C[i, j] = sum_k mask[k, i] A[k, i] B[k, j]
    np.testing.assert_allclose(tl.reference(C, a, b), expected, rtol=1e-12)
    kern = tl.compile(C, s)
    np.testing.assert_allclose(kern(a, b), expected, rtol=1e-12, atol=1e-12)
    text = kern.loop_nest()
    lines = [line.strip() for line in text.splitlines()]
    outer = sum(x.startswith("for k_x.o") for x in lines)
    inner = sum(x.startswith("for k_x.i") for x in lines)
    # the full-tile versions run each k block as corner + steady state (a ragged remainder of
    # rows, not unrolled to a constant, keeps one guarded loop)
    assert outer >= 1 and inner > outer, text


@pytest.mark.parametrize("n,m", [(1, 3), (13, 7), (37, 29), (240, 300)])
def test_a_condition_of_pure_vars_skips_whole_tiles_and_keeps_the_identity(n, m, rng,
                                                                           monkeypatch):
    # S[i, j] = sum_r A[i, r] A[j, r] where j <= i (syrk's triangle): under the rule-based
    # packed tile the tiles above the diagonal are skipped (the row tile loop is bounded and
    # peeled; the column panels past a row block are not visited), the diagonal tiles keep the
    # condition, and every point of S still starts at 0 — read whole here, above the diagonal
    # too, where the sum is empty
    from tensorlang.autotuner.heuristic import heuristic_schedule

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")  # (on many, 240 rows' blocks: too small)
    N, M = tl.sizes("N M")
    A = tl.Input("A", (N, M), tl.float64)
    i, j = tl.vars("i j")
    r = tl.RDom((0, M), name="r")
    r.where(j <= i)
    S, out = tl.Func("S"), tl.Func("out")
    S[i, j] = tl.sum(A[i, r] * A[j, r])
    out[i, j] = S[i, j] + 1.0
    a = rng.random((n, m))
    want = np.tril(a @ a.T) + 1.0
    s = heuristic_schedule(out, {"N": n, "M": m})
    kern = tl.compile(out, s)
    np.testing.assert_allclose(kern(a), want, rtol=1e-12)
    if n == 240:  # whole tiles: packed, and the steady state's accumulators in registers
        text = kern.loop_nest()
        assert "cache_read('A'" in s.to_python() and "S.acc" in text, s.to_python()
        lines = [x.strip() for x in text.splitlines()]
        assert any(x.startswith("S.acc") and "+=" in x for x in lines), text  # steady state
        assert any(x.startswith("if j") for x in lines), text  # the diagonal's tiles


@pytest.mark.parametrize("upper", [False, True])
def test_a_condition_on_the_vector_lanes_predicates_them(upper, rng):
    # the diagonal's tiles of a triangle over pure Vars: the `if` inside the vector loop varies
    # across its lanes; it becomes a lane mask (masked loads and stores), the loop stays vector
    # code (no scalar j.i loop left for LLVM), and the register tile stays promoted
    N, K = tl.sizes("N K")
    A = tl.Input("A", (N, K), tl.float64)
    i, j = tl.vars("i j")
    k = tl.RDom((0, K), name="k")
    k.where(j >= i if upper else j <= i)
    S = tl.Func("S")
    S[i, j] = A[i, k] * A[j, k]
    s = tl.Schedule(S)
    jo, ji = s[S].split("j", 8)
    s[S].reorder(i, jo, "k_x", ji).vectorize(ji)
    kern = tl.compile(S, s)
    nest = kern.loop_nest()
    assert "S.acc" in nest and any(ln.strip().startswith("if ") and "j.i" in ln
                                   for ln in nest.splitlines())
    assert "j.i.header" not in kern.llvm_ir() and "llvm.masked.store" in kern.llvm_ir()
    tri = np.triu if upper else np.tril
    for n, kk in [(1, 1), (7, 3), (16, 5), (37, 11)]:
        a = rng.random((n, kk))
        np.testing.assert_allclose(kern(a), tri(a @ a.T), rtol=1e-12)


@pytest.mark.parametrize("factor", [1, 3])
def test_a_bounded_split_outer_loop_keeps_its_whole_initialisation(factor, rng):
    # r.x <= i with the reduction loop outermost and i split: the condition bounds i.i and then
    # i.o (from r_x on); the initialisation, which runs before the reduction loop, must still
    # cover every i (it read r_x outside its loop: a code-generation KeyError, found by the
    # random-schedule property test at 200 examples)
    C, i, r = lower_row_sums()
    s = tl.Schedule(C)
    s[C].reorder("r_x", "i")
    s[C].split("i", factor, tail="GuardWithIf")
    kern = tl.compile(C, s)
    for n in (1, 2, 5, 13):
        a = rng.random((n, n))
        np.testing.assert_allclose(kern(A=a), np.tril(a).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("cond", ["ne", "or"])
def test_model_domain_states_ne_and_or_exactly(cond):
    # RDom.where with != or |: the stage's isl domain leaves the excluded points out (they
    # were a box over-approximation before), so they add no dependences
    import islpy as isl

    from tensorlang.schedule.legality.model import stage_model

    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (c,) = tl.vars("c")
    F = tl.Func("F", shape=(N,))
    F[c] = X[c]
    r = tl.RDom((0, N))
    r.where(r.x != 3 if cond == "ne" else (r.x < 3) | (r.x > 3))
    F[r.x] = F[r.x] * 2.0
    m = stage_model(F, F.definition, F.updates[0], ("N",))
    params = ", ".join(m.params)

    def has(x: int) -> bool:
        return not isl.Set(f"[{params}] -> {{ S[{x}] : N = 10 }}").intersect(m.domain).is_empty()

    assert has(2) and has(4) and not has(3)
    x = np.arange(10.0)
    want = x * 2.0
    want[3] = 3.0
    np.testing.assert_allclose(tl.compile(F)(X=x), want)


@pytest.mark.parametrize("project", [0, 1])
@pytest.mark.parametrize("kc", [3, 8])
def test_a_split_reduction_bounds_the_loops_outside_it(monkeypatch, project, kc):
    """cholesky's ``k <= j`` with ``k`` split into blocks of ``kc`` outside ``j``: bounded by
    what some ``k`` of the block allows (``nest.PROJECT_BOUNDS``), ``j`` starts at the block's
    first ``k`` instead of running empty trips from 0; the results match either way."""
    from algorithms import cholesky
    from tensorlang.schedule import nest

    monkeypatch.setattr(nest, "PROJECT_BOUNDS", project)
    ch = cholesky()
    s = tl.Schedule(ch)
    u = s[ch].update(0)
    u.split("r_x", kc)
    u.reorder("r_z", "r_x.o", "r_y", "r_x.i")
    u.atomic()
    assert s.check().ok
    k = tl.compile(ch, s)
    starts = f"for r_y in [{kc} * r_x.o, " in k.loop_nest()
    assert starts == bool(project), k.loop_nest()
    for n in (1, 2, 7, 13, 2 * kc + 1):
        b = np.random.default_rng(n).random((n, n))
        a = b @ b.T / n + np.eye(n)
        np.testing.assert_allclose(k(A=a), np.tril(np.linalg.cholesky(a)) + np.triu(a, 1),
                                   rtol=1e-10, atol=1e-12, err_msg=f"n={n}")
