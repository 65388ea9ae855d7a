"""How a parallel loop is cut into chunks (``backends/llvm/parallel.py``): every iteration runs
exactly once, whatever the extent, the loop's min and the thread count, with chunks of sizes
that differ by one iteration at most (``BALANCED_CHUNKS``) and with the rounded-up grain."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm import parallel

EXTENTS = [1, 2, 3, 5, 7, 8, 9, 10, 11, 16, 17, 31, 97]


def _row_sums():
    """``S[i] = sum_r A[i, r]``, its update's rows in parallel: an iteration run twice adds its
    row twice, one never run leaves 0."""
    N, R = tl.sizes("N R")
    A = tl.Input("A", (N, R), tl.float64)
    i = tl.Var("i")
    r = tl.RDom((0, R), name="r")
    S = tl.Func("S", shape=(N,))
    S[i] = 0.0
    S[i] += A[i, r]
    s = tl.Schedule(S)
    s[S].parallel(i)
    s[S].update(0).parallel(i)
    return S, s


@pytest.mark.parametrize("balanced", [1, 0])
def test_every_iteration_runs_once_on_any_thread_count(balanced, monkeypatch, rng):
    monkeypatch.setattr(parallel, "BALANCED_CHUNKS", balanced)
    S, s = _row_sums()
    kern = tl.compile(S, s)
    for threads in ("1", "2", "3", "7"):
        monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
        for n in EXTENTS:
            a = rng.random((n, 3))
            np.testing.assert_allclose(kern(a), a.sum(axis=1), rtol=1e-12,
                                       err_msg=f"{n} rows on {threads} threads")


def test_a_parallel_loop_from_a_negative_min(monkeypatch, rng):
    # the producer's rows run from -1 (its consumer reads P[y - 1, x]), in parallel
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float64)
    y, x = tl.vars("y x")
    P, out = tl.Func("P"), tl.Func("out")
    P[y, x] = In[y + 1, x] * 2.0
    out[y, x] = P[y - 1, x] + P[y, x] + P[y + 1, x]
    s = tl.Schedule(out)
    s[P].compute_root().parallel(y)
    s[out].parallel(y)
    kern = tl.compile(out, s)
    for threads in ("2", "3"):
        monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
        for h in (3, 4, 12, 13, 40):
            a = rng.random((h, 5))
            want = 2.0 * (a[:-2] + a[1:-1] + a[2:])
            np.testing.assert_allclose(kern(a), want, rtol=1e-12, err_msg=f"{h} rows")
