"""compute_with matches the shared loops by position, as Halide's does: the guest's outermost loops
stand for the host's whatever their names (a Func of other Vars, an rfactor stage's pure
dimension); every result is checked against NumPy on odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl

from algorithms import bicg


def _pair():
    """Two Funcs over one (H, W) domain written with different Vars; ``t`` transposed: its first
    Var is named ``x`` and its second ``y``, so its inner loop has the name of ``f``'s outer one."""
    H, W = tl.sizes("H W")
    img = tl.Input("img", (H, W), tl.float32)
    y, x = tl.vars("y x")
    u, v = tl.vars("u v")
    f, g, t = tl.Func("f"), tl.Func("g"), tl.Func("t")
    f[y, x] = img[y, x] * 2.0 + 1.0
    g[u, v] = img[u, v] - tl.cast(tl.float32, v)
    t[x, y] = img[x, y] * img[x, y]
    return f, g, t


def _nested(nest: str, host: str, guest: str) -> bool:
    """Whether every ``produce guest`` of the loop nest is inside a loop of ``produce host``."""
    depth, seen = None, False
    for line in nest.splitlines():
        indent = len(line) - len(line.lstrip())
        if line.strip() == f"produce {host}:":
            depth = indent
        elif line.strip() == f"produce {guest}:":
            seen = True
            if depth is None or indent < depth + 4:
                return False
    return seen


@pytest.mark.parametrize("h,w", [(1, 1), (5, 11), (17, 29)])
def test_loops_of_other_names_are_shared_by_position(h, w, rng):
    f, g, _ = _pair()
    s = tl.Schedule([f, g])
    s[f].split("x", 8)
    s[f].parallel("y").vectorize("x.i")
    s[g].split("v", 8)
    s[g].parallel("u").vectorize("v.i")
    s[g].compute_with(s[f], "x.o")  # u is f's y, v.o is f's x.o
    assert s.check().ok
    kern = tl.compile([f, g], s)
    assert _nested(kern.loop_nest(), "f", "g"), kern.loop_nest()
    a = rng.standard_normal((h, w)).astype(np.float32)
    out_f, out_g = kern(a)
    np.testing.assert_allclose(out_f, a * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(out_g, a - np.arange(w, dtype=np.float32), rtol=1e-6)


@pytest.mark.parametrize("h,w", [(1, 3), (7, 13)])
def test_a_guest_loop_named_as_a_shared_loop_of_the_host_is_its_own(h, w, rng):
    f, _, t = _pair()
    s = tl.Schedule([f, t])
    s[t].compute_with(s[f], "y")  # t's x stands for f's y; t's own inner loop is named y
    kern = tl.compile([f, t], s)
    assert _nested(kern.loop_nest(), "f", "t"), kern.loop_nest()
    a = rng.standard_normal((h, w)).astype(np.float32)
    out_f, out_t = kern(a)
    np.testing.assert_allclose(out_f, a * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(out_t, a * a, rtol=1e-6)


def _one_pass(s_f, q_f, rows: int, parallel: bool, by_rows: bool = False) -> tl.Schedule:
    """``A`` read once: each block of ``rows`` rows computes its share of ``q`` (row sums in
    vector lanes) and then its partial row of ``s`` (``rfactor`` over the blocks), the block
    loop shared by position (``q_rf``'s ``i.o``, ``s_rf``'s pure dimension); ``by_rows``: the
    partial rows stored one after another (``reorder_storage``)."""
    sch = tl.Schedule([s_f, q_f])
    sch[q_f].split("j", 4)
    qrf = sch.rfactor(q_f, "j.i")
    lane, red = sch.states[qrf.func].loops[1], sch.states[qrf.func].loops[2]
    qrf.split("i", rows)
    qrf.reorder("i.o", red, "i.i", lane).vectorize(lane)
    sch[s_f].split("i", rows)
    srf = sch.rfactor(s_f, "i.o")
    block, inner = sch.states[srf.func].loops[1], sch.states[srf.func].loops[2]
    srf.split("j", 4)
    srf.reorder(block, inner, "j.o", "j.i").vectorize("j.i")
    if parallel:
        qrf.parallel("i.o")
        srf.parallel(block)
    srf.compute_with(qrf, "i.o")
    if by_rows:
        srf.reorder_storage(block, "j")
    return sch


@pytest.mark.parametrize("n,m,rows", [(1, 1, 3), (37, 23, 5), (40, 9, 8), (13, 64, 16)])
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("by_rows", [False, True])
def test_one_pass_bicg_through_rfactor_matches_numpy(n, m, rows, parallel, by_rows, rng):
    s_f, q_f = bicg()
    sch = _one_pass(s_f, q_f, rows, parallel, by_rows)
    assert sch.check().ok
    kern = tl.compile([s_f, q_f], sch)
    nest = kern.loop_nest()
    assert _nested(nest, "q_rf", "s_rf"), nest
    if by_rows:
        assert "allocate s_rf[float64, (N + %d) // %d, M]" % (rows - 1, rows) in nest, nest
    a = rng.standard_normal((n, m))
    p, r = rng.standard_normal(m), rng.standard_normal(n)
    out_s, out_q = kern(A=a, p=p, r=r)
    np.testing.assert_allclose(out_s, a.T @ r, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out_q, a @ p, rtol=1e-10, atol=1e-12)


def test_blocks_of_other_sizes_are_refused_when_lowering():
    s_f, q_f = bicg()
    sch = tl.Schedule([s_f, q_f])
    sch[q_f].split("i", 8)
    sch[s_f].split("i", 4)
    srf = sch.rfactor(s_f, "i.o")
    srf.reorder(sch.states[srf.func].loops[1], sch.states[srf.func].loops[2], "j")
    srf.compute_with(sch[q_f], "i.o")  # ceil(N / 4) partial rows against ceil(N / 8) blocks
    with pytest.raises(tl.ScheduleError, match=r"compute_with\(q, i\.o\): the shared loop "
                                               r"s_rf_i_o runs over .* need the same bounds"):
        tl.compile([s_f, q_f], sch)


@pytest.mark.parametrize("pieces", [0, 1])
def test_a_guest_tail_of_its_own_runs_as_a_piece_of_its_own(pieces, rng, monkeypatch):
    """``s_rf``'s columns in vectors of 4 leave a tail where 4 does not divide M: with
    ``GUEST_PIECES`` the full vectors run in the fast version and the tail as a second piece
    inside each block; without, the whole fused nest takes its guarded version."""
    import tensorlang.schedule.realize as realize

    monkeypatch.setattr(realize, "GUEST_PIECES", pieces)
    s_f, q_f = bicg()
    kern = tl.compile([s_f, q_f], _one_pass(s_f, q_f, 5, True, True))
    nest = kern.loop_nest()
    fast = nest.split("else:")[0]  # the version taken where every tail of q_rf is whole
    assert fast.count("produce s_rf:") == 1 + pieces, nest
    if pieces:
        assert "vectorized for j.i in [0, 4):" in fast.split("produce s_rf:")[1], nest
    for n, m in ((35, 23), (35, 24), (1, 3)):
        a = rng.standard_normal((n, m))
        p, r = rng.standard_normal(m), rng.standard_normal(n)
        out_s, out_q = kern(A=a, p=p, r=r)
        np.testing.assert_allclose(out_s, a.T @ r, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out_q, a @ p, rtol=1e-10, atol=1e-12)
