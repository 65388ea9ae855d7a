"""The ``promote_accumulators`` lowering pass: a register tile accumulates in a local buffer, on
every tile shape the schedules produce, and never when cells of the tile could alias."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import matmul

import tensorlang as tl
from tensorlang.schedule.lower import lower
from tensorlang.schedule.promote import _mixed_radix
from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Const, Var

SIZES = [(1, 1, 1), (7, 13, 5), (17, 37, 11), (29, 64, 3)]


def _accumulators(C, s) -> list[str]:
    return [b for b in lower(C, s).buffers if ".acc" in b]


def _check(C, s, arrays):
    kern = tl.compile(C, s)
    rng = np.random.default_rng(3)
    for size in SIZES:
        arrs = arrays(rng, *size)
        np.testing.assert_allclose(kern(**arrs), tl.reference(C, **arrs), rtol=1e-4, atol=1e-5)


def test_gemm_register_tile_is_promoted_and_correct():
    C, arrays = matmul()
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 4)
    jo, ji = s[C].split("j", 16)
    s[C].reorder(io, jo, "k", ii, ji).unroll(ii).vectorize(ji)
    assert len(_accumulators(C, s)) == 1
    _check(C, s, arrays)


@pytest.mark.parametrize("tail", ["GuardWithIf", "ShiftInwards"])
def test_a_tile_of_several_vectors_is_promoted(tail):
    # x.i of 32 as two unrolled vectors of 16: the store index is j.i.i + 16 * j.i.o
    C, arrays = matmul()
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 4)
    jo, ji = s[C].split("j", 32, tail=tail)
    s[C].reorder(io, jo, "k", ii, ji).vectorize(ji, 16)
    s[C].unroll("j.i.o").unroll(ii)
    if tail == "ShiftInwards":
        assert len(_accumulators(C, s)) == 1
    _check(C, s, arrays)


def test_a_serial_loop_in_the_tile_prevents_promotion():
    C, arrays = matmul()
    s = tl.Schedule(C)
    jo, ji = s[C].split("j", 32, tail="ShiftInwards")
    s[C].reorder("i", jo, "k", ji).vectorize(ji, 16)  # j.i.o stays a serial loop
    assert _accumulators(C, s) == []
    _check(C, s, arrays)


def _lin(*terms):
    e = None
    for c, v in terms:
        t = Var(v) if c == 1 else BinOp("mul", Const(c, int64), Var(v), int64)
        e = t if e is None else BinOp("add", e, t, int64)
    return e


def test_mixed_radix_accepts_only_one_to_one_combinations():
    ext = {"a": 8, "b": 4}
    assert _mixed_radix(_lin((1, "a"), (8, "b")), {"a", "b"}, ext)
    assert not _mixed_radix(_lin((1, "a"), (4, "b")), {"a", "b"}, ext)  # a=4,b=0 == a=0,b=1
    assert not _mixed_radix(BinOp("mul", Var("a"), Var("b"), int64), {"a", "b"}, ext)


def test_guarded_tail_is_partitioned_so_full_tiles_keep_the_register_tile():
    # GEMM 1021^3 with split("i", 8): the guarded tail once sent the whole stage to the slow
    # version (86 ms against 11 ms at 1024^3); now the full tiles run the fast nest
    C, arrays = matmul()
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 8)
    jo, ji = s[C].split("j", 32, tail="ShiftInwards")
    s[C].reorder(io, jo, "k", ii, ji).unroll(ii).vectorize(ji).parallel(io)
    kern = tl.compile(C, s)
    main, rest = kern.loop_nest().split("\nif M - M // 8 * 8 > 0:")
    assert main.startswith("if M // 8 * 8 > 0:") and "C.acc" in main
    assert "if i.i + " in rest  # the remainder is guarded row by row
    rng = np.random.default_rng(5)
    for size in [(37, 41, 13), (8, 32, 3), (7, 33, 2), (1, 40, 1)]:
        arrs = arrays(rng, *size)
        np.testing.assert_allclose(kern(**arrs), tl.reference(C, **arrs), rtol=1e-4, atol=1e-5)
