"""The ``hoist_update_reads`` lowering pass: an update's innermost loop that reads its own buffer
at a cell fixed over the loop is split around the iteration that writes that cell, the read is
loaded once per range, and ranges proven free of dependences between iterations are marked
independent for LLVM's vectorizer. The results must be bit-identical to the loops as written
(the pass reorders nothing), on odd sizes and on data where the fixed cell does change."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.schedule.lower import lower

_lower_module = importlib.import_module("tensorlang.schedule.lower")

SIZES = [1, 2, 7, 13, 17]


def _floyd_warshall():
    (N,) = tl.sizes("N")
    path = tl.Input("path", (N, N), tl.int32)
    i, j = tl.vars("i j")
    out = tl.Func("fw", shape=(N, N))
    out[i, j] = path[i, j]
    r = tl.RDom((0, N), (0, N), (0, N))  # j, i, k: k outermost
    out[r.y, r.x] = tl.minimum(out[r.y, r.x], out[r.y, r.z] + out[r.z, r.x])
    return out


def _floyd_warshall_loops(p: np.ndarray) -> np.ndarray:
    p = p.copy()
    n = len(p)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                p[i, j] = min(p[i, j], p[i, k] + p[k, j])
    return p


def _without_pass(out, schedule):
    """The kernel compiled without the pass (what the loops as written compute)."""
    saved = list(_lower_module.PASSES)
    try:
        _lower_module.PASSES[:] = [p for p in saved if p[0] != "hoist_update_reads"]
        _lower_module._RECENT.clear()
        return tl.compile(out, schedule)
    finally:
        _lower_module.PASSES[:] = saved
        _lower_module._RECENT.clear()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("rule_based", [False, True])
def test_floyd_warshall_with_negative_cycles_matches_the_c_loops(n, rule_based):
    # negative entries make path[k, k] < 0, so row and column k do change in step k: the
    # ranges before and after j == k must read path[i, k] before and after that write
    out = _floyd_warshall()
    s = heuristic_schedule(out, {"N": n}) if rule_based else None
    text = str(lower(out, s))
    assert ".fixed" in text and "independent for r_x" in text
    p = np.random.default_rng(n).integers(0, 100, (n, n))
    p[np.arange(0, n, 3), np.arange(0, n, 3)] = -1  # a negative cycle at every third k
    want = _floyd_warshall_loops(p)  # in int64: no int32 overflow to compare
    assert np.abs(want).max() < 2 ** 31
    assert (want != _floyd_warshall_loops(np.maximum(p, 0))).any()
    p = p.astype(np.int32)
    np.testing.assert_array_equal(tl.compile(out, s)(path=p), want)


def test_floyd_warshall_loop_is_cut_at_k_and_its_ranges_vectorize():
    out = _floyd_warshall()
    k = tl.compile(out)
    ir = k.llvm_ir()
    assert "llvm.loop.parallel_accesses" in ir and "llvm.access.group" in ir
    assert "= distinct !{}" in ir  # the access group LLVM requires
    assert "vector.body" in k.llvm_ir(optimized=True)


def _prefix_with_fixed_read():
    # a running sum along j plus a cell of the same row read at k: the read is hoisted per range,
    # but the ranges carry the dependence j - 1 -> j and must not be marked independent
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    i, j = tl.vars("i j")
    out = tl.Func("pre", shape=(N, N))
    out[i, j] = A[i, j]
    r = tl.RDom((1, N - 1), (0, N), (0, N))  # j >= 1, i, k
    out[r.y, r.x] = out[r.y, r.x - 1] * 0.5 + out[r.y, r.x] + out[r.y, r.z] * 0.25
    return out


@pytest.mark.parametrize("n", [2, 7, 13])
def test_a_range_that_carries_a_dependence_is_not_independent(n):
    out = _prefix_with_fixed_read()
    lines = str(lower(out)).splitlines()
    loads = [k for k, line in enumerate(lines) if line.strip().startswith("pre.fixed")]
    assert len(loads) == 2  # the ranges before and after j == k
    for k in loads:  # each range's loop follows its load, and stays in order
        assert lines[k + 1].strip().startswith("for r_x"), lines[k + 1]
    a = np.random.default_rng(n).standard_normal((n, n))
    got = tl.compile(out)(A=a)
    np.testing.assert_array_equal(got, _without_pass(out, None)(A=a))


def test_a_read_inside_a_where_branch_is_not_hoisted():
    # out[i, k] is read only where i > 0: a read the loop may never evaluate stays inside it
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    i, j = tl.vars("i j")
    out = tl.Func("g", shape=(N, N))
    out[i, j] = A[i, j]
    r = tl.RDom((0, N), (0, N), (0, N))
    out[r.y, r.x] = out[r.y, r.x] + tl.where(r.y > 0, out[r.y, r.z], 0.0)
    assert ".fixed" not in str(lower(out))
    a = np.random.default_rng(3).standard_normal((9, 9))
    np.testing.assert_array_equal(tl.compile(out)(A=a), _without_pass(out, None)(A=a))


@pytest.mark.parametrize("n", [1, 5, 12])
def test_float_results_are_bit_identical_to_the_loops_as_written(n):
    # the same operations in the same order: not even rounding may differ
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float32)
    i, j = tl.vars("i j")
    out = tl.Func("h", shape=(N, N))
    out[i, j] = A[i, j]
    r = tl.RDom((0, N), (0, N), (0, N))
    out[r.y, r.x] = out[r.y, r.x] * 0.75 + out[r.y, r.z] * out[r.z, r.x] + 0.1
    a = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)
    for s in (None, heuristic_schedule(out, {"N": n})):
        np.testing.assert_array_equal(tl.compile(out, s)(A=a), _without_pass(out, s)(A=a))


def test_a_loop_that_runs_at_most_once_is_left_as_it_is():
    # as lu's division by the pivot, the one iteration k == j of its loop: nothing to load once
    # (out[i, 0] is never written there, so it could be)
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    i, j = tl.vars("i j")
    out = tl.Func("d", shape=(N, N))
    out[i, j] = A[i, j]
    r = tl.RDom((0, N), (1, N - 1), (0, N))  # k, j >= 1, i
    r.where(r.x == r.y)
    out[r.z, r.x] = out[r.z, r.x] + out[r.z, 0]
    text = str(lower(out))
    assert ".fixed" not in text and "independent" not in text
    a = np.random.default_rng(0).standard_normal((6, 6)) + 4 * np.eye(6)
    np.testing.assert_array_equal(tl.compile(out)(A=a), _without_pass(out, None)(A=a))
