"""A remainder peeled inside the shared loops (``realize._Realizer._peeled_in_shared_loops``):
where a piece of its own would compute a producer whole again (BLIS's order: B's packed panels
at the reduction block loop, outside the rows), the rows' remainder runs as the last
iterations of the tile loop instead, and computes what NumPy computes."""

from __future__ import annotations

import numpy as np
import pytest
from test_cpu_model import _target, gemm

import tensorlang as tl
import tensorlang.schedule.nest as nest
import tensorlang.schedule.realize as realize
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.expr import BinOp, Const, Var
from tensorlang.dtypes import int64
from tensorlang.schedule.ir import ForKind
from tensorlang.schedule.lower import lower
from tensorlang.schedule.nest import Leaf, _tail_peel

SIZES = {"M": 1024, "N": 1024, "K": 1024}


def _blis_rule(dtype, monkeypatch, threads: str = "1"):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(dtype)
    s = heuristic_schedule(C, SIZES, _target("haswell"))
    text = s.to_python()
    # haswell's float64 6-row tile leaves 4 of 1024 rows; its small L2 makes BLIS's order
    assert "'k.o', 'i.o.o', 'j.o'" in text, text
    return C, s


def test_the_row_remainder_shares_bs_panels(monkeypatch):
    C, s = _blis_rule(tl.float64, monkeypatch)
    peeled = str(lower(C, s))
    # B's panels copied in each column piece (the full panels, the ragged last one) only ...
    copies = peeled.count("allocate B_local")
    # ... and the whole tiles first, then the last ones, in the same iterations of j.o
    loops = [ln.strip() for ln in peeled.splitlines() if ln.strip().startswith("for i.o.i")]
    assert any(not ln.startswith("for i.o.i in [0,") for ln in loops), loops
    monkeypatch.setattr(realize, "PEEL_SHARED", 0)
    pieces = str(lower(C, s))
    # a piece of its own for the rows' remainder copied B's panels again
    assert pieces.count("allocate B_local") > copies


@pytest.mark.parametrize("dtype,threads", [(tl.float64, "1"), (tl.float64, "2"),
                                           (tl.float32, "1")])
def test_the_peeled_remainder_matches_numpy(dtype, threads, monkeypatch):
    C, s = _blis_rule(dtype, monkeypatch, threads)
    kern = tl.compile(C, s, target=_target("haswell"))
    npd = dtype.numpy
    rng = np.random.default_rng(11)
    for m, n, k in [(1024, 1024, 1024), (1021, 1019, 1013), (67, 9, 600), (1, 1, 1),
                    (5, 17, 257), (7, 8, 1)]:
        a, b = rng.random((m, k)).astype(npd), rng.random((k, n)).astype(npd)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=2e-5 if npd == np.float32 else 1e-10)


def test_tail_peel_of_a_tile_inside_a_row_block():
    # 60 * o2 + 6 * o1 + i < M, i unrolled over 6 inside serial o1 inside o2: o1's first
    # (M - 60 * o2) // 6 iterations have every row inside
    leaves = [Leaf("o2", "o2", Const(0, int64), Var("a"), ForKind.PARALLEL, False),
              Leaf("o1", "o1", Const(0, int64), Const(10, int64), ForKind.SERIAL, False),
              Leaf("i", "i", Const(0, int64), Const(6, int64), ForKind.UNROLLED, False)]
    pos = {lf.var: n for n, lf in enumerate(leaves)}
    e = BinOp("add", BinOp("add", BinOp("mul", Const(60, int64), Var("o2"), int64),
                           BinOp("mul", Const(6, int64), Var("o1"), int64), int64),
              Var("i"), int64)
    peeled = _tail_peel(e, Var("M"), 6, "i", leaves, pos, set(pos))
    assert peeled is not None and peeled[1] == "o1"
    for m in (0, 5, 6, 59, 60, 61, 125, 1024):
        for o2 in range(3):
            whole = [o1 for o1 in range(200) if all(60 * o2 + 6 * o1 + i < m for i in range(6))]
            # (the peel clamps the count to the loop's range)
            assert max(0, _eval(peeled[0], {"M": m, "o2": o2})) == len(whole)
            assert whole == list(range(len(whole)))
    # the tile loop outside another loop the guard mentions: no peel
    assert _tail_peel(e, Var("M"), 6, "i", [leaves[1], leaves[0], leaves[2]],
                      {"o1": 0, "o2": 1, "i": 2}, set(pos)) is None


def _eval(e, env: dict[str, int]) -> int:
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[e.name]
    a, b = _eval(e.a, env), _eval(e.b, env)
    ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
           "floordiv": lambda: a // b, "mod": lambda: a % b, "min": lambda: min(a, b),
           "max": lambda: max(a, b)}
    return ops[e.op]()


def test_peeled_where_the_reduction_runs_inside_the_tile_loop(monkeypatch):
    # B's panel copied at the column loop, outside the rows, read without them; the reduction
    # loop k runs inside the row tile loop i.o, where the initialisation goes: each of i.o's
    # two loops (whole tiles, then the last one guarded) initialises its own rows, and B's
    # panel is copied once per column panel, not again by a piece of its own for the rows'
    # remainder (a GEMM of a few rows with K unsplit: few_rows_nest)
    C = gemm(tl.float64)
    s = tl.Schedule(C)
    s[C].split("i", 6)
    s[C].split("j", 8)
    s[C].reorder("j.o", "i.o", "k", "i.i", "j.i")
    s.cache_read("B", s[C], "j.o")
    s[C].unroll("i.i").vectorize("j.i")
    text = str(lower(C, s))
    assert "M - M // 6 * 6 > 0" not in text
    loops = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("for i.o")]
    assert any(not ln.startswith("for i.o in [0,") for ln in loops), loops
    # the whole tiles' loop, its initialisation included, carries no guard on the rows
    whole = text[text.index(loops[1]):text.index(loops[2])] if len(loops) > 2 else ""
    assert "0.0" in whole and "< M" not in whole, whole
    monkeypatch.setattr(realize, "PEEL_SHARED", 0)
    pieces = str(lower(C, s))
    assert "M - M // 6 * 6 > 0" in pieces  # (a piece of its own, copying B's panels again)
    monkeypatch.setattr(realize, "PEEL_SHARED", 1)
    monkeypatch.setattr(nest, "PEEL_WITH_INIT", 0)  # (the loop with the initialisation kept)
    assert "M - M // 6 * 6 > 0" in str(lower(C, s))
    monkeypatch.setattr(nest, "PEEL_WITH_INIT", 1)
    kern = tl.compile(C, s)
    rng = np.random.default_rng(2)
    for m, n, k in [(13, 17, 5), (6, 8, 1), (1, 3, 2), (5, 9, 7), (32, 41, 500), (37, 8, 3)]:
        a, b = rng.random((m, k)), rng.random((k, n))
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-12)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_rows_with_a_remainder_run_blis_order_so_it_is_peeled(threads, monkeypatch):
    # znver3's float32 tile (6 rows, a 576-row mc: two row blocks, which alone would keep the
    # rule's own order) leaves 4 of 1024 rows: BLIS's order (heuristic.BLIS_ORDER_REMAINDER),
    # where the remainder is peeled inside the row blocks instead of a piece of its own that
    # copies B's panels again on one thread
    from tensorlang.autotuner import heuristic

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(tl.float32)
    s = heuristic_schedule(C, SIZES, _target("znver3"))
    assert "split('i', 6)" in s.to_python() and "'k.o', 'i.o.o', 'j.o'" in s.to_python()
    assert "M - M // 6 * 6 > 0" not in str(lower(C, s))
    kern = tl.compile(C, s, target=_target("znver3"))
    rng = np.random.default_rng(5)
    for m, n, k in [(1024, 1024, 1024), (1021, 1019, 1013), (7, 33, 515), (1, 1, 1)]:
        a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=2e-5)
    # without the rule: the rule's own order, the remainder a piece of its own
    monkeypatch.setattr(heuristic, "BLIS_ORDER_REMAINDER", 0)
    own = heuristic_schedule(C, SIZES, _target("znver3"))
    assert "'i.o.o', 'k.o', 'j.o'" in own.to_python()
    assert "M - M // 6 * 6 > 0" in str(lower(C, own))
    # 1020 rows (170 whole tiles): no remainder, the rule's own order either way
    monkeypatch.setattr(heuristic, "BLIS_ORDER_REMAINDER", 1)
    whole = heuristic_schedule(C, {**SIZES, "M": 1020}, _target("znver3"))
    assert "'i.o.o', 'k.o', 'j.o'" in whole.to_python()


def test_the_remainder_rules_blis_order_is_a_point_of_the_search_space(monkeypatch):
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float32)
    hs = heuristic_schedule(C, SIZES, _target("znver3"))
    space = SearchSpace(C, SIZES, _target("znver3"))
    point = space.point(hs)
    assert point is not None
    assert space.signature(space.sample(optuna.trial.FixedTrial(point[0]))) == \
        space.signature(hs)
