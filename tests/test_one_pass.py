"""The rule-based schedule's one pass over a matrix for a row reduction and a column reduction
that read it at the same indices (``autotune/one_pass.py``: PolyBench bicg and mvt), against
NumPy, where it applies and where it does not; and the search space's decision for it."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import one_pass
from tensorlang.autotuner.heuristic import heuristic_schedule

from algorithms import described_target

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from polybench.kernels import KERNELS  # noqa: E402

#: Haswell's 256 KiB L2: a few hundred rows of float64 make a matrix the one pass is for (larger
#: than the L2s of two threads)
HASWELL = described_target("haswell")


def _fused(s: tl.Schedule) -> dict[str, str]:
    return {n: st.fused.func for n, st in s.states.items() if st.fused is not None}


def test_block_rows_divide_the_rows_into_whole_tiles():
    assert one_pass.block_rows(2100, 34) == (30, 6)
    assert one_pass.block_rows(2000, 32) == (20, 4)
    assert one_pass.block_rows(64, 32) == (32, 8)
    assert one_pass.block_rows(2003, 32) is None  # (a prime: every block would leave a tail)
    assert one_pass.block_rows(100, 3) is None


@pytest.mark.parametrize("name,sizes", [("bicg", dict(N=420, M=191)), ("bicg", dict(N=240, M=1)),
                                        ("mvt", dict(N=300))])
@pytest.mark.parametrize("threads", [1, 2])
def test_bicg_and_mvt_read_their_matrix_in_one_pass(name, sizes, threads, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", str(threads))
    kern = KERNELS[name]
    outs = kern.build()
    h = kern.handle(outs)
    s = heuristic_schedule(h, sizes, HASWELL)
    fused = _fused(s)
    row, col = ("bicg_q", "bicg_s") if name == "bicg" else ("mvt_x1_sum0", "mvt_x2_sum0")
    if sizes.get("M") == 1:  # a matrix of one column fits the L2: two nests
        assert f"{col}_rf" not in fused, s.to_python()
    else:
        assert fused == {f"{col}_rf": f"{row}_rf"}, s.to_python()
        assert s.states[f"{col}_rf"].storage_order == tuple(
            reversed(s.states[f"{col}_rf"].pure)), s.to_python()
    arrays = kern.inputs(sizes, np.random.default_rng(7))
    got = tl.compile(h, s, target=HASWELL)(**kern.call_args(h, arrays, sizes))
    for g, w in zip(got if isinstance(got, tuple) else (got,), kern.numpy(arrays, sizes)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("sizes,why", [(dict(N=421, M=191), "no block divides 421 rows"),
                                       (dict(N=60, M=50), "the matrix fits the L2")])
def test_the_pair_keeps_two_nests_where_a_pass_would_not_pay(sizes, why, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    kern = KERNELS["bicg"]
    h = kern.handle(kern.build())
    s = heuristic_schedule(h, sizes, HASWELL)
    assert "bicg_s_rf" not in _fused(s), why
    assert not any(step.op == "reorder_storage" for step in s.steps), why
    arrays = kern.inputs(sizes, np.random.default_rng(8))
    got = tl.compile(h, s, target=HASWELL)(**kern.call_args(h, arrays, sizes))
    for g, w in zip(got, kern.numpy(arrays, sizes)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_the_switch_turns_the_one_pass_off(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    kern = KERNELS["bicg"]
    h = kern.handle(kern.build())
    sizes = dict(N=420, M=191)
    assert "bicg_s_rf" in _fused(heuristic_schedule(h, sizes, HASWELL))
    monkeypatch.setattr(one_pass, "ONE_PASS", 0)
    assert "bicg_s_rf" not in _fused(heuristic_schedule(h, sizes, HASWELL))


def test_the_one_pass_is_a_point_of_the_search_space(monkeypatch):
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    kern = KERNELS["bicg"]
    h = kern.handle(kern.build())
    sizes = dict(N=420, M=191)
    hs = heuristic_schedule(h, sizes, HASWELL)
    space = SearchSpace(h, sizes, HASWELL)
    point = space.point(hs)
    assert point is not None, hs.to_python()
    params, choices = point
    assert params["bicg_s.one_pass_bicg_q"] is True and choices["bicg_s.one_pass_bicg_q"] == [
        False, True]
    again = space.sample(optuna.trial.FixedTrial(params))
    assert space.signature(again) == space.signature(hs)
    off = space.sample(optuna.trial.FixedTrial({**params, "bicg_s.one_pass_bicg_q": False}))
    assert "bicg_s_rf" not in _fused(off)
