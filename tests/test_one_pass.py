"""The rule-based schedule's one pass over a matrix for a row reduction and a column reduction
that read it at the same indices (``autotune/one_pass.py``: PolyBench bicg, mvt and atax), against
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
    assert one_pass.block_rows(420, 8) == (6, 6)  # (fewer than MIN_BLOCK_ROWS: not taken)


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


def _atax(tmp_out: bool):
    """PolyBench's atax, ``y = A^T (A x)``; with ``tmp_out`` its row sums an output too."""
    M, N = tl.sizes("M N")
    A, x = tl.Input("A", (M, N), tl.float64), tl.Input("x", (N,), tl.float64)
    i, j = tl.vars("i j")
    tmp, y = tl.Func("tmp"), tl.Func("atax")
    tmp[i] = A[i, j] * x[j]
    y[j] = A[i, j] * tmp[i]
    return [y, tmp] if tmp_out else y


def test_chunk_rows_share_the_blocks_out_evenly():
    assert one_pass.chunk_rows(2100, 30, 2) == 1050  # (70 blocks: 35 a thread)
    assert one_pass.chunk_rows(1900, 20, 2) == 100  # (95 blocks: 5 chunks share out 3 / 2)
    assert one_pass.chunk_rows(2100, 30, 1) == 2100
    assert one_pass.chunk_rows(2100, 30, 16) == 30  # (35 or 70 chunks: 3 / 2.2, 5 / 4.4)
    assert one_pass.chunk_rows(420, 84, 2) == 84


@pytest.mark.parametrize("sizes", [dict(M=420, N=191), dict(M=240, N=1), dict(M=360, N=257),
                                   dict(M=1200, N=1999)])
@pytest.mark.parametrize("threads", [1, 2])
def test_atax_computes_a_blocks_row_sums_at_its_block(sizes, threads, monkeypatch, rng):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", str(threads))
    y = _atax(False)
    s = heuristic_schedule(y, sizes, HASWELL)
    at = s.states["tmp"].compute
    if sizes["N"] == 1:  # a matrix of one column fits the L2: two nests
        assert at.kind == "root", s.to_python()
    else:
        assert (at.kind, at.func) == ("at", "atax_rf"), s.to_python()
        assert s.states["tmp_rf"].compute.func == "atax_rf", s.to_python()
        assert not _fused(s), s.to_python()
    if sizes["M"] == 1200:  # blocks of 8 rows in chunks of 1200 / threads, one partial row each
        chunk = [st.params for st in s.steps if st.op == "split" and st.func == "atax"][0]
        assert dict(chunk)["factor"] == 1200 // threads, s.to_python()
        assert at.loop == "atax_rf_i_i.o", s.to_python()
    a = rng.standard_normal((sizes["M"], sizes["N"]))
    x = rng.standard_normal(sizes["N"])
    got = tl.compile(y, s, target=HASWELL)(A=a, x=x)
    np.testing.assert_allclose(got, a.T @ (a @ x), rtol=1e-10, atol=1e-9)


def test_atax_keeps_two_nests_where_its_row_sums_are_an_output(monkeypatch, rng):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    outs = _atax(True)
    sizes = dict(M=420, N=191)
    s = heuristic_schedule(outs, sizes, HASWELL)
    assert s.states["tmp"].compute.kind == "root", s.to_python()
    assert not any(step.op == "reorder_storage" for step in s.steps), s.to_python()
    a = rng.standard_normal((420, 191))
    x = rng.standard_normal(191)
    y, tmp = tl.compile(outs, s, target=HASWELL)(A=a, x=x)
    np.testing.assert_allclose(tmp, a @ x, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(y, a.T @ (a @ x), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("sizes,why", [(dict(N=421, M=191), "no block divides 421 rows"),
                                       (dict(N=60, M=50), "the matrix fits the L2"),
                                       (dict(N=420, M=1999), "blocks of 6 rows, no chunks")])
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


def _bicg_handle():
    kern = KERNELS["bicg"]
    return kern.handle(kern.build())


@pytest.mark.parametrize("build,sizes,decision,apart", [
    (_bicg_handle, dict(N=420, M=191), "bicg_s.one_pass_bicg_q",
     lambda s: "bicg_s_rf" not in _fused(s)),
    (lambda: _atax(False), dict(M=420, N=191), "atax.one_pass_tmp",
     lambda s: s.states["tmp"].compute.kind == "root")])
def test_the_one_pass_is_a_point_of_the_search_space(build, sizes, decision, apart,
                                                     monkeypatch):
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    h = build()
    hs = heuristic_schedule(h, sizes, HASWELL)
    space = SearchSpace(h, sizes, HASWELL)
    point = space.point(hs)
    assert point is not None, hs.to_python()
    params, choices = point
    assert params[decision] is True and choices[decision] == [False, True]
    again = space.sample(optuna.trial.FixedTrial(params))
    assert space.signature(again) == space.signature(hs)
    off = space.sample(optuna.trial.FixedTrial({**params, decision: False}))
    assert apart(off), off.to_python()


@pytest.mark.parametrize("threads", [1, 2])
def test_atax_row_sums_are_not_computed_again_by_a_columns_piece(threads, monkeypatch):
    """The row sums at the column sums' chunk of blocks (a reduction loop) read at the row only:
    a piece of the columns' remainder would compute them whole again, so the stage is versioned
    (one of two nests runs), not partitioned into pieces (both run)."""
    from tensorlang.schedule import realize

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", str(threads))
    y = _atax(False)
    s = heuristic_schedule(y, dict(M=1200, N=1999), HASWELL)
    top = [ln for ln in tl.compile(y, s, target=HASWELL).loop_nest().splitlines()
           if not ln.startswith(" ")]
    assert top[1:3] == ["if N % 4 == 0:", "else:"], top
    monkeypatch.setattr(realize, "SHRINKING_PRODUCERS", 0)
    top = [ln for ln in tl.compile(y, s, target=HASWELL).loop_nest().splitlines()
           if not ln.startswith(" ")]
    assert top[1:3] == ["if N // 4 * 4 > 0:", "if N - N // 4 * 4 > 0:"], top  # (the pieces)
