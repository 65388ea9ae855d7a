"""Small stages around a serial largest stage run serially (``autotune/serial_share.py``): which
stages the rule picks, that it leaves kernels whose largest stage is parallel alone, that the
kernels it makes match NumPy on odd sizes, and that the rule-based schedule stays a point of the
search space."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import serial_share
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.serial_share import minor_stages, runs_parallel, stage_points
from tensorlang.autotuner.workloads import BoundExtents
from tensorlang.schedule.schedule import Schedule

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from polybench.kernels import KERNELS  # noqa: E402
from algorithms import ZEN4, gemm  # noqa: E402


def _heat_3d() -> tl.Func:
    """PolyBench's heat-3d (benchmarks/polybench/kernels.py): two arrays copied into one
    buffer, swept twice per time step, the first copied out."""
    return KERNELS["heat-3d"].build()[0]


def _heat_3d_np(a: np.ndarray, b: np.ndarray, steps: int) -> np.ndarray:
    n = a.shape[0]
    return KERNELS["heat-3d"].numpy({"A": a, "B": b}, {"N": n, "T": steps})[0]


#: copies of 2 * 37^3 and 37^3 points (past ``MIN_PARALLEL_POINTS``, so parallel by themselves)
#: around a sweep of 35^3 points 80 times: 1.2% and 0.6% of it
SIZES = {"N": 37, "T": 40}


def _parallel_stages(s: Schedule) -> set[str]:
    return {name for name in s.states if runs_parallel(s, name)}


def test_stage_points_counts_pure_vars_and_rvars():
    out = _heat_3d()
    ext = BoundExtents(out, SIZES)
    buf = tl.Pipeline(out).func("buf")
    assert stage_points(buf, None, ext) == 2 * 37 ** 3
    assert stage_points(buf, 0, ext) == 35 ** 3 * 2 * 40
    assert stage_points(out, None, ext) == 37 ** 3


def test_copies_around_a_serial_sweep_run_serially(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    out = _heat_3d()
    with monkeypatch.context() as m:
        m.setattr(serial_share, "MINOR_SHARE", 0)
        before = heuristic_schedule(out, SIZES, ZEN4)
    # without the rule both copies run in parallel and the sweep serially (its time loop)
    assert _parallel_stages(before) == {"buf", "heat_3d"}
    funcs = tl.Pipeline(out).funcs
    assert minor_stages(before, funcs, BoundExtents(out, SIZES)) == {"buf", "heat_3d"}
    after = heuristic_schedule(out, SIZES, ZEN4)
    assert _parallel_stages(after) == set()
    assert "vectorize('k', 8" in after.to_python()  # (still vectorized)
    # more than MINOR_SHARE of the sweep's iterations: the copies stay parallel
    few = {"N": 37, "T": 1}
    assert _parallel_stages(heuristic_schedule(out, few, ZEN4)) == {"buf", "heat_3d"}


def test_a_parallel_largest_stage_leaves_small_stages_alone(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.float64), tl.Input("B", (K, N), tl.float64)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]
    D = tl.Func("D")
    D[i, j] = C[i, j] + 1.0  # 1/1024 of the product's iterations
    sizes = {"M": 512, "N": 512, "K": 1024}
    s = heuristic_schedule(D, sizes)
    assert minor_stages(s, tl.Pipeline(D).funcs, BoundExtents(D, sizes)) == frozenset()
    assert runs_parallel(s, "D")


def test_an_inlined_largest_func_is_not_a_serial_stage(monkeypatch):
    # e, as large as the output, is inlined into it: no loops of its own, so not the serial
    # largest stage that would make s1 (1/32 of it, parallel) run serially
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    N, K = tl.sizes("N K")
    X, A = tl.Input("X", (N, N), tl.float64), tl.Input("A", (N, K), tl.float64)
    i, j, k = tl.vars("i j k")
    e = tl.Func("e")
    e[i, j] = X[i, j] * 2.0
    s1 = tl.Func("s1")
    s1[j] = A[j, k] * A[j, k]
    out = tl.Func("out")
    out[i, j] = e[i, j] + s1[j]
    sizes = {"N": 2048, "K": 64}
    s = heuristic_schedule(out, sizes, ZEN4)
    assert s.states["e"].compute.kind == "inline"
    assert _parallel_stages(s) == {"s1", "out"}
    assert minor_stages(s, tl.Pipeline(out).funcs, BoundExtents(out, sizes)) == frozenset()


@pytest.mark.parametrize("n,steps", [(1, 2), (2, 1), (3, 3), (13, 2), (37, 40)])
def test_serial_copies_match_numpy_on_odd_sizes(n, steps):
    out = _heat_3d()
    kern = tl.compile(out, heuristic_schedule(out, SIZES))
    rng = np.random.default_rng(11)
    a, b = rng.random((n, n, n)), rng.random((n, n, n))
    np.testing.assert_allclose(kern(A=a, B=b, T=steps), _heat_3d_np(a, b, steps), rtol=1e-12)


def test_serial_copies_are_a_point_of_the_search_space(monkeypatch):
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    out = _heat_3d()
    hs = heuristic_schedule(out, SIZES)
    assert _parallel_stages(hs) == set()
    space = SearchSpace(out, SIZES)
    point = space.point(hs)
    assert point is not None, hs.to_python()
    again = space.sample(optuna.trial.FixedTrial(point[0]))
    assert space.signature(again) == space.signature(hs)


def test_a_small_reduction_runs_serially(monkeypatch):
    # 32^3 float32: 2048 vectors of multiply-adds, under MIN_PARALLEL_VECTORS; a product whose
    # points reduce 3 terms each (its time goes to stores) keeps MIN_PARALLEL_POINTS alone
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float32)
    small = {"M": 32, "N": 32, "K": 32}
    assert _parallel_stages(heuristic_schedule(C, small)) == set()
    assert _parallel_stages(heuristic_schedule(C, {"M": 20, "N": 2000, "K": 3})) == {"C"}
    assert _parallel_stages(heuristic_schedule(C, {"M": 128, "N": 128, "K": 128})) == {"C"}
    with monkeypatch.context() as m:
        m.setattr(serial_share, "MIN_PARALLEL_VECTORS", 0)
        assert _parallel_stages(heuristic_schedule(C, small)) == {"C"}
    s = heuristic_schedule(C, small)
    from tensorlang.autotuner.space import SearchSpace

    assert SearchSpace(C, small).point(s) is not None, s.to_python()
    kern = tl.compile(C, s)
    rng = np.random.default_rng(5)
    for m, n, k in [(32, 32, 32), (1, 1, 1), (7, 33, 5), (31, 17, 29)]:
        a = rng.random((m, k), dtype=np.float32)
        b = rng.random((k, n), dtype=np.float32)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-5)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_a_small_product_of_few_rows_runs_its_column_panels_serially(dtype, monkeypatch):
    # few rows over many columns and a short reduction (7 x 1000 x 17: 119,000 terms, under
    # MIN_PARALLEL_VECTORS) take the few-rows nest (few_rows.in_place_nest), which ran its
    # column panels in parallel whatever the product's size
    from tensorlang.autotuner import few_rows
    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(dtype)
    npd = np.float32 if dtype == tl.float32 else np.float64
    for m in (2, 7):
        sizes = {"M": m, "N": 1000, "K": 17}
        s = heuristic_schedule(C, sizes, ZEN4)
        assert "prefetch(" in s.to_python() and _parallel_stages(s) == set(), s.to_python()
        assert SearchSpace(C, sizes, ZEN4).point(s) is not None, s.to_python()
        with monkeypatch.context() as mp:
            mp.setattr(few_rows, "SERIAL_SMALL", 0)  # before: the panels in parallel
            assert _parallel_stages(heuristic_schedule(C, sizes, ZEN4)) == {"C"}
        kern = tl.compile(C, s)
        rng = np.random.default_rng(7)
        for m2, n2, k2 in [(m, 1000, 17), (m, 997, 13), (1, 1, 1), (5, 131, 29)]:
            a, b = rng.random((m2, k2)).astype(npd), rng.random((k2, n2)).astype(npd)
            np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4)
