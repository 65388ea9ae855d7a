"""Every schedule primitive three ways: numerically (odd sizes), structurally (golden loop nests)
and on failure (the error names the loop and the fix); plus a JSON round-trip for each."""

from __future__ import annotations

import re

import numpy as np
import pytest
from algorithms import blur, conv2d, matmul, softmax

import tensorlang as tl

SIZES = [(1, 1, 1), (7, 13, 5), (17, 33, 11), (64, 64, 64)]


def check_schedule(out, s, arrays_fn, sizes=SIZES, rtol=1e-4, rng=None):
    """Compile with ``s``, compare with the reference on every size, round-trip the trace."""
    rng = rng or np.random.default_rng(7)
    kern = tl.compile(out, s)
    for size in sizes:
        arrs = arrays_fn(rng, *size)
        np.testing.assert_allclose(kern(**arrs), tl.reference(out, **arrs), rtol=rtol, atol=1e-5)
    replay = tl.Schedule.from_json(out, s.to_json())
    assert tl.compile(out, replay).loop_nest() == kern.loop_nest()
    return kern


def mm_schedule(build):
    C, arrays = matmul()
    s = tl.Schedule(C)
    i, j, k = C.definition.args + C.definition.rvars
    build(s, C, i, j, k)
    return C, s, arrays


PRIMITIVES = {
    "split": lambda s, C, i, j, k: s[C].split(i, 4),
    "split_reduction": lambda s, C, i, j, k: s[C].split(k, 3),
    "split_shift_inwards": lambda s, C, i, j, k: s[C].split(j, 8, tail="ShiftInwards"),
    "tile": lambda s, C, i, j, k: s[C].tile(i, j, 4, 8),
    "fuse": lambda s, C, i, j, k: s[C].fuse(i, j),
    "reorder": lambda s, C, i, j, k: s[C].reorder(k, j, i),
    "unroll": lambda s, C, i, j, k: s[C].unroll(j, 4),
    "vectorize": lambda s, C, i, j, k: s[C].reorder(i, k, j).vectorize(j, 16),
    "parallel": lambda s, C, i, j, k: s[C].parallel(i),
    "parallel_fused": lambda s, C, i, j, k: s[C].parallel(s[C].fuse(i, j)),
    "register_tile": lambda s, C, i, j, k: _register_tile(s, C, i, j, k),
}


def _register_tile(s, C, i, j, k):
    io, ii = s[C].split(i, 4)
    jo, ji = s[C].split(j, 32, tail="ShiftInwards")
    s[C].reorder(io, jo, k, ii, ji).unroll(ii).vectorize(ji).parallel(io)


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_matmul_primitive(name, golden):
    C, s, arrays = mm_schedule(PRIMITIVES[name])
    kern = check_schedule(C, s, arrays)
    golden(f"matmul_{name}", kern.loop_nest())


def test_blur_compute_at_and_inline(golden):
    out, arrays = blur()
    bx = tl.Pipeline(out).func("bx")
    y, x = out.definition.args
    s = tl.Schedule(out)
    yo, xo, yi, xi = s[out].tile(y, x, 8, 16)
    s[out].vectorize(xi, 8).parallel(yo)
    s[bx].compute_at(s[out], xo).vectorize(bx.definition.args[1], 8)
    kern = check_schedule(out, s, arrays)
    golden("blur_compute_at", kern.loop_nest())
    s = tl.Schedule(out)
    s[bx].compute_inline()
    s[out].vectorize(x, 8)
    kern = check_schedule(out, s, arrays)
    golden("blur_inline", kern.loop_nest())


def test_blur_store_at_outer_loop(golden):
    out, arrays = blur()
    bx = tl.Pipeline(out).func("bx")
    y, x = out.definition.args
    s = tl.Schedule(out)
    yo, yi = s[out].split(y, 4)
    s[bx].store_at(s[out], yo).compute_at(s[out], yi)
    kern = check_schedule(out, s, arrays)
    golden("blur_store_at", kern.loop_nest())


def test_conv2d_padding_compute_inline_and_tiles(golden):
    O, arrays = conv2d()
    pad = tl.Pipeline(O).func("pad")
    n, co, y, x = O.definition.args
    s = tl.Schedule(O)
    s[pad].compute_inline()
    s[O].reorder(n, co, y, *O.definition.rvars, x).vectorize(x, 8).parallel(co)
    kern = check_schedule(O, s, arrays, sizes=[(1, 1, 0), (5, 7, 2), (9, 16, 3)])
    golden("conv2d_inline_pad", kern.loop_nest())


def test_softmax_compute_at_row(golden):
    out, arrays = softmax()
    p = tl.Pipeline(out)
    i, j = out.definition.args
    s = tl.Schedule(out)
    for name in ("mx", "e", "sm"):
        s[p.func(name)].compute_at(s[out], i)
    s[p.func("e")].vectorize(p.func("e").definition.args[1], 16)
    s[out].vectorize(j, 16).parallel(i)
    kern = check_schedule(out, s, arrays)
    golden("softmax_rows", kern.loop_nest())


def test_vector_width_in_assembly():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = X[i] * 2.0 + 1.0
    from algorithms import described_target

    for width, reg in ((16, "zmm"), (8, "ymm")):
        s = tl.Schedule(F)
        s[F].vectorize(i, width)
        # the assembly for an AVX-512 CPU whatever the host; the host's kernel runs
        asm = tl.compile(F, s, target=described_target("znver4")).assembly()
        assert re.search(rf"vfmadd\w*\s+%{reg}", asm) or re.search(rf"v\w+ps\s+.*%{reg}", asm), \
            f"no {reg} arithmetic in the assembly of a width-{width} vector loop"
        kern = tl.compile(F, s)
        for n in (1, 15, 16, 17, 100):
            x = np.arange(n, dtype=np.float32)
            np.testing.assert_allclose(kern(x), x * 2 + 1)


@pytest.mark.parametrize("lanes, chunks", [(56, (16, 16, 16, 8)), (13, (8, 4)), (60, (16, 8, 4))])
def test_vector_loop_wider_than_a_register_ends_in_power_of_two_chunks(lanes, chunks):
    # a register tile as wide as a 56-column image row: 3 zmm + 1 ymm, not a 64-wide tile
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = X[i] * 2.0 + 1.0
    from algorithms import described_target

    s = tl.Schedule(F)
    _, ii = s[F].split(i, lanes, tail="ShiftInwards")
    s[F].vectorize(ii)
    avx512 = tl.compile(F, s, target=described_target("znver4"))  # 16 float32 lanes
    widths = {int(w) for w in re.findall(r"<(\d+) x float>", avx512.llvm_ir())}
    assert set(chunks) <= widths <= {2, 4, 8, 16}
    kern = tl.compile(F, s)
    for n in (lanes, lanes + 1, 3 * lanes - 1):
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_allclose(kern(x), x * 2 + 1)


def test_trace_round_trip_and_python():
    C, s, _ = mm_schedule(PRIMITIVES["register_tile"])
    text = s.to_json()
    assert '"op": "split"' in text and '"tail": "ShiftInwards"' in text
    again = tl.Schedule.from_json(C, text)
    assert again.to_json() == text
    py = s.to_python()
    assert 's["C"].split(\'i\', 4)' in py and "tail='ShiftInwards'" in py
    ns = {"s": tl.Schedule(C)}
    exec(py, ns)
    assert ns["s"].to_json() == text


@pytest.mark.parametrize("build,exc,msg", [
    (lambda s, C, i, j, k: (s[C].split(i, 4), s[C].split(i, 2)), tl.ScheduleError,
     r"got loop i, which no longer exists: split\(C, loop='i', factor=4"),
    (lambda s, C, i, j, k: s[C].split("q", 4), tl.ScheduleError, r"unknown loop 'q'.*i, j, k"),
    (lambda s, C, i, j, k: s[C].split(i, 0), tl.ScheduleError, "factor must be a positive int"),
    (lambda s, C, i, j, k: s[C].fuse(i, k), tl.ScheduleError, "needs k directly inside i"),
    (lambda s, C, i, j, k: s[C].reorder(i, k, j).fuse(k, j), tl.ScheduleError,
     "pure loop with a reduction loop"),
    (lambda s, C, i, j, k: s[C].parallel(k), tl.IllegalScheduleError,
     r"parallel\(C, loop='k'\): cannot parallel k: the reduction dependence between "
     r"iterations \(i=0, j=0, k=0\) and \(i=0, j=0, k=1\) is carried by k"),
    (lambda s, C, i, j, k: s[C].vectorize(k, 8), tl.IllegalScheduleError,
     r"cannot vectorize k\.i: the reduction dependence .* is carried by k\.i"),
    (lambda s, C, i, j, k: s[C].compute_inline(), tl.ScheduleError, "output; it cannot be inlined"),
    (lambda s, C, i, j, k: s[C].split(k, 4, tail="ShiftInwards"), tl.IllegalScheduleError,
     "add their terms twice"),
    (lambda s, C, i, j, k: s[C].split(i, 4, tail="ShiftInwards")[0] and s[C].parallel("i.o"),
     tl.IllegalScheduleError, "parallel loop i.o would run them at once"),
    (lambda s, C, i, j, k: s[C].split(i, 4, tail="Sideways"), tl.ScheduleError,
     "unknown tail strategy"),
    (lambda s, C, i, j, k: s[C].unroll(i), tl.ScheduleError,
     "cannot unroll loop i: its extent M is not a constant"),
])
def test_schedule_errors(build, exc, msg):
    C, arrays = matmul()
    s = tl.Schedule(C)
    with pytest.raises(exc, match=msg) as err:
        build(s, C, *C.definition.args, *C.definition.rvars)
        tl.compile(C, s)
    assert str(err.value).startswith("In schedule for C: "), str(err.value)


def test_compute_at_errors():
    out, _ = blur()
    bx = tl.Pipeline(out).func("bx")
    s = tl.Schedule(out)
    with pytest.raises(tl.ScheduleError, match="bx does not read bx"):
        s[bx].compute_at(s[bx], "x")
    with pytest.raises(tl.ScheduleError, match="mx is a reduction; only pointwise"):
        sm, _ = softmax()
        tl.Schedule(sm)["mx"].compute_inline()
    s = tl.Schedule(out)
    y, x = out.definition.args
    yo, yi = s[out].split(y, 4)
    s[out].parallel(yi)
    s[bx].store_at(s[out], yo).compute_at(s[out], yi)
    # one verdict: tl.check refuses what tl.compile refuses (it once said "proven" here)
    report = tl.check(out, s)
    assert not report.ok and report.stages["bx"] == "refuted"
    assert "threads would share one buffer" in str(report)
    with pytest.raises(tl.IllegalScheduleError, match="threads would share one buffer"):
        tl.compile(out, s)
    s = tl.Schedule(out)
    with pytest.raises(tl.ScheduleError, match="made for"):
        C, _ = matmul()
        tl.compile(C, s)


def test_cache_read_packs_a_panel(golden):
    C, arrays = matmul()
    i, j = C.definition.args
    (k,) = C.definition.rvars
    s = tl.Schedule(C)
    jo, ji = s[C].split(j, 32)
    ko, ki = s[C].split(k, 8)
    s[C].reorder(jo, ko, i, ki, ji).vectorize(ji, 16)
    b_local = s.cache_read("B", s[C], ko)
    b_local.vectorize(b_local.loops[-1], 16)
    assert [lp.name for lp in b_local.loops] == ["B_local_d0", "B_local_d1.o", "B_local_d1.i"]
    kern = check_schedule(C, s, arrays)
    assert "allocate B_local[float32, 8, 32]" in kern.loop_nest()
    golden("matmul_cache_read", kern.loop_nest())
    assert "s.cache_read('B', s[\"C\"], 'k.o')" in s.to_python()


def test_cache_write_register_tile(golden):
    C, arrays = matmul()
    i, j = C.definition.args
    s = tl.Schedule(C)
    io, jo, ii, ji = s[C].tile(i, j, 4, 16)
    c_local = s.cache_write(C, jo)
    ci, cj, ck = c_local.loops
    c_local.reorder(ck, ci, cj).unroll(ci).vectorize(cj)
    s[C].vectorize(ji).parallel(io)
    kern = check_schedule(C, s, arrays)
    assert "allocate C_local[float32, 4, 16]" in kern.loop_nest()
    golden("matmul_cache_write", kern.loop_nest())


def test_cache_errors():
    C, _ = matmul()
    i, j = C.definition.args
    (k,) = C.definition.rvars
    s = tl.Schedule(C)
    with pytest.raises(tl.ScheduleError, match="C does not read Q"):
        s.cache_read("Q", s[C], i)
    with pytest.raises(tl.ScheduleError, match="k iterates a reduction"):
        s.cache_write(C, k)
    s[C].split(k, 4)
    with pytest.raises(tl.ScheduleError, match="reduction loops of C were already scheduled"):
        s.cache_write(C, j)


def test_cache_read_of_one_read_in_another_layout(rng):
    """``index`` copies one read of an array read twice, ``layout`` stores the copy transposed
    (C = A A^T packs A[j, k] as A_local[k, j]); the step survives to_python and JSON."""
    N, M = tl.sizes("N M")
    A = tl.Input("A", (N, M), tl.float64)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = tl.sum(A[i, k] * A[j, k])
    s = tl.Schedule(C)
    jo, ji = s[C].split(j, 4)
    s[C].reorder(jo, i, k, ji)
    local = s.cache_read(A, s[C], jo, index=1, layout=(1, 0))
    local.vectorize(local.loops[-1])
    text = s.to_python()
    assert "s.cache_read('A', s[\"C\"], 'j.o', index=1, layout=(1, 0))" in text
    kern = tl.compile(C, s)
    nest = kern.loop_nest()
    assert "A_local[A_local_d0, A_local_d1] = A[A_local_d1, A_local_d0]" in nest
    assert "A[i, k] * A_local[k, j" in nest
    a = rng.random((13, 7))
    np.testing.assert_allclose(kern(a), a @ a.T, rtol=1e-12)
    again = tl.Schedule.from_json(C, s.to_json())
    assert again.to_python() == text
    np.testing.assert_allclose(tl.compile(C, again)(a), a @ a.T, rtol=1e-12)
    with pytest.raises(tl.ScheduleError, match="reads A 2 time"):
        tl.Schedule(C).cache_read(A, s[C], "i", index=2)
    with pytest.raises(tl.ScheduleError, match="not a permutation"):
        t = tl.Schedule(C)
        t.cache_read(A, t[C], "i", layout=(0, 0))
    X = tl.Func("X", shape=(N, M))
    X[i, j] = tl.clamp_edge(A)[i + 1, j] * 2.0
    with pytest.raises(tl.ScheduleError, match="boundary condition"):
        t = tl.Schedule(X)
        t.cache_read(A, t[X], "i", layout=(1, 0))


@pytest.mark.parametrize("m,n,k", [(64, 32, 64), (37, 19, 41), (1, 1, 1), (13, 17, 5)])
def test_cache_read_in_panels_interleaves_the_rows_of_each_sliver(m, n, k, rng):
    """``panel=(0, 8)`` stores A's row block as 8-row slivers with the 8 rows of each ``k``
    adjacent (BLIS's micro-panels of A); a row count that 8 does not divide copies zeros past
    the last row; the step survives to_python and JSON."""
    from algorithms import gemm

    C = gemm(tl.float64)
    s = tl.Schedule(C)
    h = s[C]
    h.split("i", 8)
    h.split("j", 16)
    h.split("k", 4)
    h.reorder("i.o", "k.o", "j.o", "k.i", "i.i", "j.i")
    s.cache_read("A", h, "k.o", panel=(0, 8))
    h.unroll("i.i").vectorize("j.i", 8)
    text = s.to_python()
    assert "s.cache_read('A', s[\"C\"], 'k.o', panel=(0, 8))" in text
    kern = tl.compile(C, s)
    nest = kern.loop_nest()
    # per k.o: the slivers of the rows i.o covers (one), k.i, the sliver's 8 rows innermost
    assert re.search(r"allocate A_local\[float64, \w+, 4, 8\]", nest)
    a, b = rng.random((m, k)), rng.random((k, n))
    np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-12)
    again = tl.Schedule.from_json(C, s.to_json())
    assert again.to_python() == text
    np.testing.assert_allclose(tl.compile(C, again)(a, b), a @ b, rtol=1e-12)


def test_cache_read_panels_are_checked():
    from algorithms import gemm

    C = gemm(tl.float64)
    for panel, why in (((2, 8), "panel \\(2, 8\\) must be"), ((0, 0), "size >= 1"),
                       ((0, -1), "pair of non-negative ints"), ((0,), "pair")):
        with pytest.raises(tl.ScheduleError, match=why):
            t = tl.Schedule(C)
            t.cache_read("A", t[C], "i", panel=panel)
    N = tl.sizes("N")[0]
    A = tl.Input("A", (N,), tl.float64)
    x = tl.Var("x")
    F = tl.Func("F")
    F[x] = A[x - 1] + A[x + 1]  # domain [1, N - 1)
    G = tl.Func("G")
    G[x] = F[x] * 2.0
    with pytest.raises(tl.ScheduleError, match="does not start at 0"):
        t = tl.Schedule(G)
        t.cache_read(F, t[G], "x", panel=(0, 4))
    X = tl.Func("X", shape=(N,))
    X[x] = tl.clamp_edge(A)[x + 1] * 2.0
    with pytest.raises(tl.ScheduleError, match="boundary condition"):
        t = tl.Schedule(X)
        t.cache_read(A, t[X], "x", panel=(0, 4))


def test_a_copy_of_a_schedule_has_its_own_view(rng):
    """cache_read on a copy (the rule-based schedule tries variants on copies) must leave the
    original's algorithm view as it was: it once redirected the original's reads too."""
    from algorithms import gemm

    C = gemm(tl.float64)
    s = tl.Schedule(C)
    t = s.copy()
    t.cache_read("B", t[C], "k")
    assert [f.name for f in s.view.funcs] == ["C"] and s.view.reads("C") == ["A", "B"]
    assert "B_local" in [f.name for f in t.view.funcs]
    a, b = rng.random((5, 7)), rng.random((7, 3))
    np.testing.assert_allclose(tl.compile(C, s)(a, b), a @ b, rtol=1e-12)
    np.testing.assert_allclose(tl.compile(C, t)(a, b), a @ b, rtol=1e-12)


def test_a_producer_computed_inside_a_fused_loop_is_computed_for_that_point_only():
    # bounds inference of a fused loop held fixed: its parts (fused // W, fused % W) are one
    # point each, so g is computed 1 x 1 per iteration (it was the whole H x W array each time)
    H, W = tl.sizes("H W")
    A = tl.Input("A", (H, W), tl.float32)
    y, x = tl.vars("y x")
    g, f = tl.Func("g"), tl.Func("f")
    g[y, x] = A[y, x] * 2.0
    f[y, x] = g[y, x] + g[y, x] * 3.0
    s = tl.Schedule(f)
    s[g].compute_at(s[f], s[f].fuse("y", "x"))
    kern = tl.compile(f, s)
    assert "allocate g[float32, 1, 1]" in kern.loop_nest()
    rng = np.random.default_rng(3)
    for shape in [(1, 1), (5, 7), (13, 2)]:
        a = rng.random(shape, dtype=np.float32)
        np.testing.assert_allclose(kern(A=a), a * 8, rtol=1e-6)


def test_cache_read_with_readers_copies_a_row_once_for_every_stage_that_reads_it():
    # softmax's max, its sum (through the inlined e) and its output all read X's row i from
    # one copy computed at i (TVM's cache_read readers)
    out, arrays = softmax()
    g = {f.name: f for f in tl.Pipeline(out).funcs}
    s = tl.Schedule(out)
    s[g["e"]].compute_inline()
    s[g["mx"]].compute_at(s[out], "i")
    s[g["sm"]].compute_at(s[out], "i")
    s.cache_read("X", s[out], "i", readers=("mx", g["e"]))
    kern = check_schedule(out, s, arrays)
    nest = kern.loop_nest()
    # X read once, by the copy; X_local allocated, written, and read by the three stages
    assert nest.count("X[") == 1 and nest.count("X_local[") == 5
    # a reader must read the tensor and be computed inside the loop
    for readers, why in ((("sm",), "reader sm does not read X"),
                         (("softmax",), "the consumer itself"),
                         (("nope",), "not one")):
        t = tl.Schedule(out)
        t[g["e"]].compute_inline()
        t[g["mx"]].compute_at(t[out], "i")
        with pytest.raises(tl.ScheduleError, match=why):
            t.cache_read("X", t[out], "i", readers=readers)
    t = tl.Schedule(out)  # mx at root: outside the loop where the copy is
    t[g["e"]].compute_inline()
    with pytest.raises(tl.ScheduleError, match="mx is not computed inside softmax's loop i"):
        t.cache_read("X", t[out], "i", readers=("mx", "e"))
    t = tl.Schedule(out)  # mx at i, the copy at j.o inside it: mx would run before the copy
    t[out].split("j", 4)
    t[g["e"]].compute_inline()
    t[g["mx"]].compute_at(t[out], "i")
    with pytest.raises(tl.ScheduleError, match="mx is not computed inside softmax's loop j.o"):
        t.cache_read("X", t[out], "j.o", readers=("mx", "e"))
    with pytest.raises(tl.ScheduleError, match="not with index, layout or panel"):
        t.cache_read("X", t[g["mx"]], "i", index=0, readers=("e",))
    with pytest.raises(tl.ScheduleError, match="not with index, layout or panel"):
        t.cache_read("X", t[g["mx"]], "i", layout=(1, 0), readers=("e",))
