"""prefetch: the box of a tensor that a loop's next iteration touches, fetched at the top of the
current one (Halide's ``Func::prefetch``) — results against NumPy on odd sizes, the fetched box,
the code it becomes, the GPU leaving it out, its errors, and its place in the search space."""

from __future__ import annotations

import re

import numpy as np
import optuna
import pytest
from algorithms import (assert_a_point_of_the_space, assert_gemm_matches_numpy, described_target,
                        gemm)

import tensorlang as tl
from tensorlang.autotuner import heuristic, packed_reads
from tensorlang.autotuner import workloads as W
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.space import SearchSpace
from tensorlang.autotuner.workloads import BoundExtents
from tensorlang.backends.cuda.rules import gpu_schedule
from tensorlang.errors import ScheduleError
from tensorlang.schedule.ir import Prefetch, walk_stmts
from tensorlang.schedule.lower import lower
from tensorlang.schedule.prefetch import LINE_BYTES, without_prefetches


def _tiled(C: tl.Func) -> tl.Schedule:
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 4)
    jo, ji = s[C].split("j", 8)
    s[C].reorder(io, jo, "k", ii, ji).unroll(ii).vectorize(ji)
    return s


def _prefetches(lowered) -> list[Prefetch]:
    return [s for s in walk_stmts(lowered.body) if isinstance(s, Prefetch)]


@pytest.mark.parametrize("m,n,k", [(37, 29, 53), (1, 1, 1), (4, 8, 3), (13, 61, 7)])
@pytest.mark.parametrize("offset", [0, 1, 2])
def test_prefetching_changes_no_result(m, n, k, offset, rng):
    C = gemm(tl.float64)
    s = _tiled(C)
    s[C].prefetch(C, "j.o", offset=offset)  # its own tile, a few ahead
    s[C].prefetch("A", "i.o", offset=offset)
    s[C].prefetch("B", "k")
    s[C].parallel("i.o")
    kernel = tl.compile(C, s)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    np.testing.assert_allclose(kernel(A=a, B=b), a @ b, rtol=1e-12, atol=1e-12)
    assert len({p.buffer for p in _prefetches(lower(C, s))}) == 3
    assert "@llvm.prefetch" in kernel._compiled.optimized_ir


def test_the_box_is_the_next_iterations_tile_a_line_at_a_time():
    C = gemm(tl.float64)
    s = _tiled(C)
    s[C].prefetch(C, "j.o")
    text = str(lower(C, s))
    # at the top of j.o: C's 4 rows of the next 8-column tile, one line of 64 bytes (eight
    # float64) per step from its first column, the last step clamped to its last column
    assert "if j.o + 1 <" in text
    assert "max(8 * j.o + 8, 0)" in text and "min(8 * j.o + 15, " in text  # next tile's columns
    assert "for C.pf0.d0 in [" in text  # its rows, one at a time
    assert re.search(r"prefetch C\[C\.pf0\.d0, min\(\w+ \+ 8 \* C\.pf0\.line, \w+\)\]", text)
    f32 = gemm(tl.float32)
    s = _tiled(f32)
    s[f32].prefetch("A", "i.o")
    assert "16 * A.pf0.line" in str(lower(f32, s))  # (LINE_BYTES // 4)
    assert LINE_BYTES == 64  # sixteen float32 to a line


def test_an_update_definition_and_a_boundary_read_prefetch_too(rng):
    H, Wd = tl.sizes("H W")
    In = tl.Input("In", (H, Wd), tl.float32)
    y, x = tl.vars("y x")
    r = tl.RDom((0, 3))
    out = tl.Func("out", shape=(H, Wd))
    out[y, x] = tl.constant_exterior(In, 0.0)[y - 1, x] * 0.0
    out[y, x] = out[y, x] + tl.clamp_edge(In)[y + r.x - 1, x]
    s = tl.Schedule(out)
    s[out].prefetch(In, y)
    s[out].update(0).split(y, 3)
    s[out].update(0).prefetch(In, "y.o")
    s[out].update(0).prefetch(out, "y.o", offset=2)
    assert "s[\"out\"].update(0).prefetch('out', 'y.o', offset=2)" in s.to_python()
    again = tl.Schedule.from_json(out, s.to_json())
    assert again.to_python() == s.to_python()
    for h, w in [(1, 1), (7, 5), (17, 33)]:
        a = rng.random((h, w), dtype=np.float32)
        pad = np.pad(a, 1, mode="edge")
        want = pad[:-2, 1:-1] + pad[1:-1, 1:-1] + pad[2:, 1:-1]
        np.testing.assert_allclose(tl.compile(out, again)(In=a, H=h, W=w), want, rtol=1e-6)


@pytest.mark.parametrize("m,n,k", [(263, 131, 600), (97, 61, 301)])
def test_the_packed_tile_with_its_prefetch_is_a_point_and_correct(m, n, k, monkeypatch, rng):
    # the rule-based packed tile (here on a described AVX2 CPU, whose small L2 also takes BLIS's
    # order at the first size) with PREFETCH_TILE: the next register tile's rows of C
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    monkeypatch.setattr(heuristic, "PREFETCH_TILE", 1)
    target = described_target("haswell")
    C = gemm(tl.float64)
    sizes = {"M": m, "N": n, "K": k}
    rule = heuristic_schedule(C, sizes, target)
    assert "s[\"C\"].prefetch('C', 'i.o.i')" in rule.to_python(), rule.to_python()
    space = SearchSpace(C, sizes, target)
    point = space.point(rule)
    assert point is not None and point[0]["C.prefetch"] is True
    assert space.signature(space.sample(optuna.trial.FixedTrial(point[0]))) == \
        space.signature(rule)
    monkeypatch.setattr(heuristic, "PREFETCH_TILE", 0)
    plain = heuristic_schedule(C, sizes, target)
    assert space.point(plain)[0]["C.prefetch"] is False
    monkeypatch.setattr(heuristic, "PREFETCH_TILE", 2)  # with AVX2's vectors only
    for cpu, want in [("haswell", True), ("sapphirerapids", False)]:
        text = heuristic_schedule(C, sizes, described_target(cpu)).to_python()
        assert (".prefetch('C', 'i.o.i')" in text) == want, (cpu, text)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    got = tl.compile(C, rule)(A=a, B=b)  # (a host without AVX2 is not described here)
    np.testing.assert_allclose(got, a @ b, rtol=1e-10, atol=1e-10)


def test_the_rule_prefetches_where_the_outputs_rows_straddle_cache_lines(monkeypatch):
    # PREFETCH_TILE = 3 (the default): float32 rows of 1100 (4400 bytes) straddle 64-byte
    # lines, rows of 1104 (4416 = 69 lines) do not; float64 rows of 1000 (8000 bytes) do not
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    monkeypatch.setattr(heuristic, "PREFETCH_TILE", 3)
    for cpu in ("haswell", "sapphirerapids"):
        for dtype, n, want in [(tl.float32, 1100, True), (tl.float32, 1104, False),
                               (tl.float64, 1100, True), (tl.float64, 1000, False)]:
            C = gemm(dtype)
            rule = heuristic_schedule(C, {"M": 1000, "N": n, "K": 1200}, described_target(cpu))
            assert (".prefetch('C', 'i.o.i')" in rule.to_python()) == want, (cpu, dtype, n)


@pytest.mark.parametrize("cpu", ["icelake-server", "haswell"])
def test_the_rule_prefetches_where_the_tiles_reduction_is_short(cpu, monkeypatch, rng):
    # packed_reads.SHORT_REDUCTION: a GEMM of small K writes C once, each tile's stores missing
    # in cache over a reduction too short to hide them; rows of whole cache lines (float64,
    # N = 1000) prefetch the next tile there only, with AVX-512's vectors: K = 64 and 128 do,
    # K = 256 and a K split in blocks of at least 256 do not; AVX2 code never
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    target = described_target(cpu)
    for k, want in [(64, True), (128, True), (256, False), (1200, False)]:
        want = want and cpu != "haswell"
        rule = heuristic_schedule(C, {"M": 1000, "N": 1000, "K": k}, target)
        assert (".prefetch('C', 'i.o.i')" in rule.to_python()) == want, (k, rule.to_python())
    sizes = {"M": 263, "N": 1000, "K": 29}  # (a K that no k block splits)
    rule = heuristic_schedule(C, sizes, target)
    assert (".prefetch('C', 'i.o.i')" in rule.to_python()) == (cpu != "haswell"), rule.to_python()
    assert SearchSpace(C, sizes, target).point(rule)[0]["C.prefetch"] is (cpu != "haswell")
    a, b = rng.standard_normal((263, 29)), rng.standard_normal((29, 1000))
    # (the described CPU's nest, compiled for this host)
    np.testing.assert_allclose(tl.compile(C, rule)(A=a, B=b), a @ b, rtol=1e-10, atol=1e-10)
    monkeypatch.setattr(packed_reads, "SHORT_REDUCTION", 0)  # as before: rows of whole lines
    assert ".prefetch('C'" not in heuristic_schedule(C, sizes, target).to_python()


@pytest.mark.parametrize("cpu", ["icelake-server", "haswell"])
def test_panel_copies_prefetch_the_rows_of_b_they_read(cpu, monkeypatch):
    # packed_reads.PANEL_PREFETCH: a copy of B's panels reads nr elements from each row of B,
    # rows N elements apart; it prefetches the rows 32 lines ahead at its loop over k, in whole
    # rows: in BLIS's order (all panels per kc block, k its second dimension) 8 rows of 4
    # lines (32 float64 columns), 32 of one (AVX2's 8); in the few-rows nest (k first) 4 rows
    # of 8 lines (a copy of 512 bytes a row, few_rows.COPY_ROW_BYTES); A's row block,
    # contiguous along k, does not
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    target = described_target(cpu)
    blis = 32 if cpu == "haswell" else 8
    for sizes, loop, ahead in [({"M": 17, "N": 4099, "K": 1031}, "B_local_d0", 4),
                               ({"M": 1000, "N": 1100, "K": 1200}, "B_local_d1", blis)]:
        rule = heuristic_schedule(C, sizes, target)
        text = rule.to_python()
        assert f"s[\"B_local\"].prefetch('B', '{loop}', offset={ahead})" in text, text
        assert ".prefetch('A'" not in text and "A_local\"].prefetch" not in text, text
        assert_a_point_of_the_space(C, sizes, target, rule)
    sizes = {"M": 17, "N": 4099, "K": 1031}
    # (the described CPU's nest, compiled for this host; odd sizes: ragged panels, a shorter
    # last k block and remainder rows, the prefetched rows clipped to B)
    kern = tl.compile(C, heuristic_schedule(C, sizes, target))
    assert_gemm_matches_numpy(kern, tl.float64, [(17, 4099, 1031), (1, 37, 5), (23, 97, 1031)],
                              seed=3)
    monkeypatch.setattr(packed_reads, "PANEL_PREFETCH", 0)  # as before: no prefetch
    assert ".prefetch('B'" not in heuristic_schedule(C, sizes, target).to_python()


def test_a_transposed_panel_copy_does_not_prefetch_rows():
    # C[i, j] = A[i, k] * A[j, k] (syrk without its triangle): the panel A[j, k] is contiguous
    # along k, its copy a transposition the hardware prefetchers follow
    M, K = tl.sizes("M K")
    A = tl.Input("A", (M, K), tl.float64)
    i, j, k = tl.vars("i j k")
    S = tl.Func("S")
    S[i, j] = A[i, k] * A[j, k]
    op = packed_reads.packed_operands(S, 32)[0]
    assert (op.name, op.index, packed_reads.panel_rows(S, op)) == ("A", 1, None)
    C = gemm(tl.float64)
    assert [packed_reads.panel_rows(C, p) for p in packed_reads.packed_operands(C, 32)] == [1]
    assert [packed_reads.panel_rows(C, p) for p in packed_reads.packed_operands(C)] == [0]


def test_only_panels_of_far_rows_beyond_the_cache_prefetch():
    # far_reads: B's rows at least a page apart, and B's region larger than the cache (L2)
    C = gemm(tl.float64)
    B = 1031 * 4099 * 8  # bytes of B at K = 1031, N = 4099
    wide = BoundExtents(C, {"M": 17, "N": 4099, "K": 1031})
    # rows ahead: PANEL_PREFETCH (32) lines in whole rows of the panel's width
    assert packed_reads.far_reads(C, wide, B - 1, 32) == {("B", 0): 8}
    assert packed_reads.far_reads(C, wide, B - 1, 12) == {("B", 0): 16}
    assert packed_reads.far_reads(C, wide, B - 1, 8) == {("B", 0): 32}
    assert packed_reads.far_reads(C, wide, B, 32) == {}  # (it stays in that cache)
    narrow = BoundExtents(C, {"M": 17, "N": 511, "K": 100_003})  # rows 4088 bytes apart
    assert packed_reads.far_reads(C, narrow, 1 << 20, 32) == {}
    S = tl.Func("S")  # (a transposed panel: contiguous along k)
    M, K = tl.sizes("M K")
    A = tl.Input("A", (M, K), tl.float64)
    i, j, k = tl.vars("i j k")
    S[i, j] = A[i, k] * A[j, k]
    assert packed_reads.far_reads(S, BoundExtents(S, {"M": 4099, "K": 1031}), 0, 32) == {}


def test_the_gpu_leaves_prefetches_out():
    C = gemm(tl.float32)
    s = _tiled(C)
    s[C].prefetch(C, "j.o")
    lowered = lower(C, s)
    assert _prefetches(lowered)
    bare = without_prefetches(lowered)
    assert not _prefetches(bare)
    # the nests went whole: no loop left whose body does nothing
    assert "pf0" not in str(bare)
    assert str(without_prefetches(lower(C, _tiled(C)))) == str(lower(C, _tiled(C)))
    # the CUDA backend compiles a schedule with one (no device needed for PTX)
    f = W.BUILTIN["matmul"].build()
    s = gpu_schedule(f, sizes=dict(M=256, N=256, K=256))
    s["C"].prefetch("C", s["C"].loops[2])
    assert "prefetch" not in tl.compile(f, s, target="cuda").ptx()


def test_prefetch_refuses_what_it_cannot_fetch():
    C = gemm(tl.float32)
    M, N = tl.sizes("M N")
    X = tl.Input("X", (M, N), tl.float32)
    s = _tiled(C)
    with pytest.raises(ScheduleError, match="neither reads nor writes X"):
        s[C].prefetch(X, "j.o")
    with pytest.raises(ScheduleError, match="unknown loop 'q'"):
        s[C].prefetch("A", "q")
    with pytest.raises(ScheduleError, match="offset must be a non-negative int"):
        s[C].prefetch("A", "j.o", offset=-1)
    s[C].prefetch("A", "j.o")
    s[C].split("j.o", 2)  # consumes the loop the prefetch is at
    with pytest.raises(ScheduleError, match="j.o, which no longer exists"):
        tl.compile(C, s)
    # a Func computed inside another's loops has no whole buffer to fetch from
    H, Wd = tl.sizes("H W")
    In = tl.Input("In", (H, Wd), tl.float32)
    y, x = tl.vars("y x")
    P, Q = tl.Func("P"), tl.Func("Q")
    P[y, x] = In[y, x] * 2
    Q[y, x] = P[y, x] + P[y, x + 1]
    s = tl.Schedule(Q)
    s[P].compute_at(s[Q], y)
    s[Q].prefetch(P, y)
    with pytest.raises(ScheduleError, match="P is computed at, not stored whole"):
        tl.compile(Q, s)
    # an index read from data: no box to fetch
    T = tl.Input("T", (64,), tl.float32)
    idx = tl.Input("I", (H, Wd), tl.int32)
    L = tl.Func("L")
    L[y, x] = T[tl.clamp(idx[y, x], 0, 63)]
    s = tl.Schedule(L)
    s[L].prefetch(T, y)
    with pytest.raises(ScheduleError, match="a gather"):
        tl.compile(L, s)
