"""``simplify``'s folding of divisions and modulos in the ranges of the loops around them
(``schedule/simplify.py: fold_in_loop_ranges``): exact where it folds, left alone where a
range is unknown, and a packed panel's column read inside a register tile becomes a unit-stride
access in every piece of a partitioned nest."""

from __future__ import annotations

import numpy as np
import pytest
from test_cpu_model import _target, gemm
from test_peel_shared import _eval

import tensorlang as tl
import tensorlang.schedule.simplify as simplify
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Const, Var
from tensorlang.schedule.lower import lower
from tensorlang.schedule.simplify import fold_in_loop_ranges


def _div(op: str, e, d: int):
    return BinOp(op, e, Const(d, int64), int64)


def _lin(*terms):
    out = Const(terms[-1], int64) if isinstance(terms[-1], int) else None
    for c, v in (t for t in terms if not isinstance(t, int)):
        t = BinOp("mul", Const(c, int64), Var(v), int64)
        out = t if out is None else BinOp("add", out, t, int64)
    return out


@pytest.mark.parametrize("terms,ranges,d", [
    (((1, "x"), (8, "y"), 0), {"x": (0, 7), "y": (0, 1)}, 16),   # a panel column: folds
    (((1, "x"), (8, "y"), 16), {"x": (0, 7), "y": (0, 1)}, 16),  # one multiple up
    (((1, "x"), (-8, "y"), -3), {"x": (0, 7), "y": (0, 1)}, 32),  # negative values, floor
    (((1, "x"), (8, "y"), 0), {"x": (0, 7), "y": (0, 2)}, 16),   # crosses 16: stays
    (((1, "x"), (8, "y"), 0), {"x": (0, 7)}, 16),                # y's range unknown: stays
])
def test_folds_exactly_where_the_range_stays_in_one_multiple(terms, ranges, d):
    e = _lin(*terms)
    names = [v for _, v in (t for t in terms if not isinstance(t, int))]
    for op in ("floordiv", "mod"):
        folded = fold_in_loop_ranges(_div(op, e, d), ranges)
        known = all(v in ranges for v in names)
        lo_hi = [ranges.get(v, (0, 3)) for v in names]
        grid = np.stack(np.meshgrid(*[np.arange(a, b + 1) for a, b in lo_hi]), -1)
        for point in grid.reshape(-1, len(names)):
            env = dict(zip(names, map(int, point)))
            assert _eval(folded, env) == _eval(_div(op, e, d), env)
        ops = {"floordiv", "mod"} & {getattr(n, "op", None) for n in _nodes(folded)}
        crosses = known and len({_eval(e, dict(zip(names, map(int, p)))) // d
                                 for p in grid.reshape(-1, len(names))}) > 1
        assert bool(ops) == (crosses or not known), folded


def _nodes(e):
    yield e
    for c in (getattr(e, "a", None), getattr(e, "b", None)):
        if c is not None:
            yield from _nodes(c)


def test_the_column_pieces_panel_reads_are_unit_stride(monkeypatch):
    # skylake-avx512, float64 1000 x 1100 x 1200 on one thread: BLIS's order, B in 16-column
    # panels, 1100 columns leave a 12-column piece whose masked vector loads read
    # B_local[.., (j.i.i + 8 * j.i.o) % 16]; folded, no division is left in the tile's reads
    # (a gather before: the piece took a fifth of the kernel's time)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "1")
    C = gemm(tl.float64)
    s = heuristic_schedule(C, {"M": 1000, "N": 1100, "K": 1200}, _target("skylake-avx512"))
    assert "panel=(1, 16)" in s.to_python()
    reads = [ln for ln in str(lower(C, s)).splitlines() if "+= A_local" in ln]
    assert len(reads) >= 3 and not any("//" in ln or "%" in ln for ln in reads), reads
    monkeypatch.setattr(simplify, "RANGE_FOLD", 0)
    reads = [ln for ln in str(lower(C, s)).splitlines() if "+= A_local" in ln]
    assert all("% 16" in ln for ln in reads)


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_folded_panel_reads_match_numpy(dtype, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "1")
    C = gemm(dtype)
    target = _target("haswell")
    s = heuristic_schedule(C, {"M": 1000, "N": 1100, "K": 1200}, target)
    kern = tl.compile(C, s, target=target)
    npd = dtype.numpy
    rng = np.random.default_rng(4)
    for m, n, k in [(1000, 1100, 1200), (37, 1100, 300), (61, 13, 257), (1, 5, 1)]:
        a, b = rng.random((m, k)).astype(npd), rng.random((k, n)).astype(npd)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=2e-5 if npd == np.float32 else 1e-10)
