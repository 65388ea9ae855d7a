"""A stencil along the contiguous dimension in L1 at 256 bits on Ice Lake-SP
(``autotune/vector_width.py``): which definitions count as one, which sizes and CPUs narrow the
vectors, the kernel's other stages that accumulate nothing narrowed with it, the kernels right
on odd sizes, and the rule-based schedule a point of the space."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorlang as tl
from algorithms import described_target
from tensorlang.autotuner import vector_width
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.vector_width import (accumulates, footprint, narrow_kernel,
                                               shifted_reads, stage_lanes)
from tensorlang.autotuner.workloads import BoundExtents


def _jacobi_1d(dtype=tl.float64) -> tl.Func:
    """PolyBench's jacobi-1d as an in-place update over two rows (``buf[1 - y] <- buf[y]``)."""
    N, T = tl.sizes("N T")
    A = tl.Input("A", (N,), dtype)
    p, i = tl.vars("p i")
    buf = tl.Func("buf", shape=(2, N))
    buf[p, i] = A[i]
    r = tl.RDom((1, N - 1), (0, 2), (0, T))
    buf[1 - r.y, r.x] = 0.33333 * (buf[r.y, r.x - 1] + buf[r.y, r.x] + buf[r.y, r.x + 1])
    out = tl.Func("out")
    out[i] = buf[0, i]
    return out


def _jacobi_1d_np(a: np.ndarray, steps: int) -> np.ndarray:
    rows = [a.copy(), a.copy()]
    for _ in range(steps):
        for y in (0, 1):
            src, dst = rows[y], rows[1 - y]
            dst[1:-1] = 0.33333 * (src[:-2] + src[1:-1] + src[2:])
    return rows[0]


def test_shifted_reads_finds_stencils_along_the_last_dimension_only():
    A = tl.Input("A", (30, 30), tl.float32)
    B = tl.Input("B", (30,), tl.float32)
    i, x = tl.vars("i x")
    r = tl.RDom((0, 3))
    assert shifted_reads(A[i, x - 1] + A[i, x + 1])
    assert shifted_reads(A[i, x] * 2 + A[i - 1, x + 2])  # (another row, still shifted along x)
    assert not shifted_reads(A[i - 1, x] + A[i + 1, x])  # along the rows: each load aligned
    assert not shifted_reads(A[i, x] + B[x + 1])  # two arrays, one read each
    assert not shifted_reads(A[i, x + r.x] * B[r.x])  # a convolution's RVar, not constants
    assert not shifted_reads(A[i, 2 * x] + A[i, x])  # different strides: not one index
    assert not shifted_reads(A[i, 3] + A[i, 4])  # constants: no vector Var


def test_footprint_counts_every_array_of_the_definition_once():
    out = _jacobi_1d()
    buf = next(f for f in tl.Pipeline(out).funcs if f.name == "buf")
    ext = BoundExtents(out, {"N": 2000, "T": 5})
    assert footprint(buf, 0, ext) == 2 * 2000 * 8  # the update reads and writes buf only
    assert footprint(buf, None, ext) == 2 * 2000 * 8 + 2000 * 8  # buf and A
    assert footprint(out, None, ext) == 2000 * 8 + 2 * 2000 * 8


@pytest.mark.parametrize("cpu, n, bits, lanes", [
    ("icelake-server", 2000, 0, 4),  # 32 KB: in Ice Lake-SP's 48 KB L1
    ("icelake-server", 20000, 0, 8),  # 320 KB: L2, native vectors
    ("icelake-server", 2000, 512, 8),  # the A/B switch gives native vectors back
    ("znver4", 2000, 0, 8),  # Zen 4 keeps its width (a 512-bit access is two halves)
    ("znver4", 2000, 256, 4),  # ... unless the switch asks
    ("skylake-avx512", 2000, 0, 8),  # not measured: no stencil width in its model
    ("haswell", 2000, 0, 4),  # AVX2: native is 256 bits already
])
def test_stage_lanes_narrows_an_l1_stencil_on_ice_lake_sp(cpu, n, bits, lanes, monkeypatch):
    monkeypatch.setattr(vector_width, "STENCIL_VECTOR_BITS", bits)
    out = _jacobi_1d()
    buf = next(f for f in tl.Pipeline(out).funcs if f.name == "buf")
    ext = BoundExtents(out, {"N": n, "T": 5})
    target = described_target(cpu)
    assert stage_lanes(buf, 0, ext, target) == lanes
    native = target.vector_bits // 64
    assert stage_lanes(buf, None, ext, target) == native  # the copy of A: no stencil
    s = heuristic_schedule(out, {"N": n, "T": 5}, target)
    assert f"update(0).vectorize('r_x', {lanes})" in s.to_python()


def test_accumulates_tells_reductions_from_stages_that_only_write():
    A = tl.Input("A", (30, 30), tl.float64)
    i, j = tl.vars("i j")
    r = tl.RDom((0, 30))
    total, copy, scan = tl.Func("total"), tl.Func("copy"), tl.Func("scan")
    total[i] = tl.sum(A[i, r.x])
    copy[i, j] = A[i, j] * 2
    scan[i, j] = A[i, j]
    scan[i, r.x] = scan[i, r.x] + scan[i, r.x - 1]  # reads the cell it writes
    rows = _jacobi_1d()
    buf = next(f for f in tl.Pipeline(rows).funcs if f.name == "buf")
    assert accumulates(total, None) and accumulates(scan, 0)
    assert not accumulates(copy, None) and not accumulates(scan, None)
    assert not accumulates(buf, 0)  # writes row 1 - y, reads row y


@pytest.mark.parametrize("cpu, n, switch, width", [
    ("icelake-server", 2000, 1, 4),  # the sweep is a stencil in L1: every stage at 256 bits
    ("icelake-server", 20000, 1, 8),  # no stencil in L1: native vectors everywhere
    ("icelake-server", 2000, 0, 8),  # the A/B switch off: only the sweep narrowed
    ("icelake-server", 20000, 2, 4),  # ... or on for every kernel
    ("znver4", 2000, 1, 8),  # no narrower stencil width on Zen 4
])
def test_stages_around_an_l1_stencil_take_its_width(cpu, n, switch, width, monkeypatch):
    monkeypatch.setattr(vector_width, "NARROW_NON_REDUCTIONS", switch)
    out, sizes, target = _jacobi_1d(), {"N": n, "T": 5}, described_target(cpu)
    p = tl.Pipeline(out)
    assert narrow_kernel(p.funcs, BoundExtents(out, sizes), target) == (width == 4)
    code = heuristic_schedule(out, sizes, target).to_python()
    pure = {int(w) for w in re.findall(r"""s\["(?:buf|out)"\]\.vectorize\('i', (\d+)""", code)}
    assert pure == {width}, code


def test_a_reduction_keeps_native_vectors_in_a_narrowed_kernel():
    A = tl.Input("A", (64, 2000), tl.float64)
    i, x = tl.vars("i x")
    r = tl.RDom((0, 64))
    total = tl.Func("total")
    total[x] = tl.sum(A[r.x, x])
    target = described_target("icelake-server")
    ext = BoundExtents(total, {})
    assert stage_lanes(total, None, ext, target, everywhere=True) == 8


def test_narrowed_stencil_is_right_on_odd_sizes():
    # made for Ice Lake-SP (4 float64 lanes, 8 float32 ones), run on this host
    target = described_target("icelake-server")
    rng = np.random.default_rng(5)
    for dtype, tol in ((tl.float64, 1e-12), (tl.float32, 1e-5)):
        out = _jacobi_1d(dtype)
        s = heuristic_schedule(out, {"N": 997, "T": 3}, target)
        lanes = 4 if dtype == tl.float64 else 8
        assert f"update(0).vectorize('r_x', {lanes})" in s.to_python()
        kern = tl.compile(out, s)
        for n, steps in ((1, 2), (2, 1), (3, 4), (13, 3), (997, 3)):
            a = rng.random(n).astype(dtype.numpy)
            np.testing.assert_allclose(kern(A=a, T=steps), _jacobi_1d_np(a, steps), rtol=tol)


def test_narrowed_stencil_is_a_point_of_the_search_space(monkeypatch):
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    target = described_target("icelake-server")
    out, sizes = _jacobi_1d(), {"N": 2000, "T": 500}
    hs = heuristic_schedule(out, sizes, target)
    assert "vectorize('r_x', 4)" in hs.to_python()
    space = SearchSpace(out, sizes, target)
    point = space.point(hs)
    assert point is not None, hs.to_python()
    again = space.sample(optuna.trial.FixedTrial(point[0]))
    assert space.signature(again) == space.signature(hs)
