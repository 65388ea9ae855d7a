"""Proofs that an index stays inside its domain over the loops around it
(``schedule/bound_proofs.py``), and the boundary reads they leave unclamped (a packed panel's
copy in BLIS's order): sound on every value tried, and the kernels compute what NumPy does."""

from __future__ import annotations

import random

import numpy as np
import pytest
from algorithms import described_target, gemm, runnable
from test_peel_shared import _eval

import tensorlang as tl
import tensorlang.schedule.realize as realize
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Const, Var
from tensorlang.schedule.bound_proofs import index_within, provably_nonpositive
from tensorlang.schedule.lower import lower


def _c(v: int) -> Const:
    return Const(v, int64)


def _op(op: str, a, b) -> BinOp:
    return BinOp(op, a, b, int64)


N, M = Var("N"), Var("M")


def test_floor_divisions_are_bounded_by_their_dividends():
    # 16 * (N // 16) <= N, but 16 * ((N + 15) // 16) may pass N by up to 15
    assert provably_nonpositive(_op("sub", _op("mul", _c(16), _op("floordiv", N, _c(16))), N))
    up = _op("mul", _c(16), _op("floordiv", _op("add", N, _c(15)), _c(16)))
    assert not provably_nonpositive(_op("sub", up, N))
    assert provably_nonpositive(_op("sub", _op("sub", up, N), _c(15)))
    # (16 * (N // 16) - 1) // 16 is N // 16 - 1 exactly: the last whole panel's first column
    last = _op("floordiv", _op("sub", _op("mul", _c(16), _op("floordiv", N, _c(16))), _c(1)),
               _c(16))
    assert provably_nonpositive(_op("sub", _op("add", _op("mul", _c(16), last), _c(16)), N))
    # min by either operand; max by neither from above
    assert provably_nonpositive(_op("sub", _op("min", N, M), N))
    assert not provably_nonpositive(_op("sub", _op("max", N, M), N))
    assert provably_nonpositive(_op("sub", _op("mod", N, _c(8)), _c(7)))


def test_a_whole_panels_column_is_inside_and_a_ragged_ones_is_not():
    d0, d2 = Var("d0"), Var("d2")
    ix = _op("add", _op("mul", d0, _c(16)), d2)
    whole = {"d0": (_c(0), _op("sub", _op("floordiv", N, _c(16)), _c(1))), "d2": (_c(0), _c(15))}
    assert index_within(ix, _c(0), N, whole)
    ragged = {"d0": (_c(0), _op("sub", _op("floordiv", _op("add", N, _c(15)), _c(16)), _c(1))),
              "d2": (_c(0), _c(15))}
    assert not index_within(ix, _c(0), N, ragged)


def _random_expr(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.25:
        return rng.choice([N, M, _c(rng.randint(-20, 20))])
    op = rng.choice(["add", "sub", "mul", "floordiv", "mod", "min", "max"])
    if op in ("mul", "floordiv", "mod"):
        c = _c(rng.choice([1, 2, 3, 8, 16]) * (1 if op != "mul" else rng.choice([1, -1])))
        return _op(op, _random_expr(rng, depth - 1), c)
    return _op(op, _random_expr(rng, depth - 1), _random_expr(rng, depth - 1))


def test_every_proof_holds_on_every_value_tried():
    rng = random.Random(7)
    proven = 0
    for _ in range(3000):
        e = _random_expr(rng, 4)
        if provably_nonpositive(e):
            proven += 1
            for n in range(-40, 70):
                for m in (-17, 0, 1, 5, 64):
                    assert _eval(e, {"N": n, "M": m}) <= 0, (e, n, m)
    assert proven > 100  # (the generator reaches provable expressions)


@pytest.mark.parametrize("cpu,dtype,threads", [("skylake-avx512", tl.float64, "1"),
                                               ("haswell", tl.float32, "2")])
def test_blis_panels_copy_their_whole_panels_unclamped(cpu, dtype, threads, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(dtype)
    s = heuristic_schedule(C, {"M": 1000, "N": 1100, "K": 1200}, described_target(cpu))
    assert "'k.o', 'i.o.o', 'j.o'" in s.to_python()  # BLIS's order
    copies = [ln for ln in str(lower(C, s)).splitlines() if "B_local[B_local_d0" in ln]
    # the whole panels' copies read B's columns as they are; the ragged panel's clamps them
    assert any("max(min(" not in ln.split("B[")[1] for ln in copies), copies
    assert any("max(min(" in ln.split("B[")[1] for ln in copies), copies
    kern = tl.compile(C, s, target=runnable(described_target(cpu)))
    rng = np.random.default_rng(4)
    for m, n, k in [(1000, 1100, 1200), (37, 1024, 300), (9, 33, 257), (1, 1, 1), (5, 16, 513)]:
        a, b = rng.random((m, k)).astype(dtype.numpy), rng.random((k, n)).astype(dtype.numpy)
        np.testing.assert_allclose(kern(a, b), a @ b,
                                   rtol=2e-5 if dtype is tl.float32 else 1e-10)
    monkeypatch.setattr(realize, "BOUNDARY_PROOFS", 0)
    old = [ln for ln in str(lower(C, s)).splitlines() if "B_local[B_local_d0" in ln]
    assert all("max(min(" in ln.split("B[")[1] for ln in old), old
