"""The ``promote_accumulators`` lowering pass: a register tile accumulates in a local buffer, on
every tile shape the schedules produce, and never when cells of the tile could alias."""

from __future__ import annotations

import re

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


def _updates_of_c(nest: str) -> list[str]:
    """The update statements of a printed loop nest that still accumulate into C itself (not
    into a register tile)."""
    return [ln for ln in nest.splitlines() if re.match(r"\s*C\[.*\] \+=", ln)]


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
    # one per piece of the partitioned nest: full tiles, the column tail (a masked vector loop),
    # the row tail (rows under a guard)
    assert len(_accumulators(C, s)) == 3
    assert _updates_of_c(tl.compile(C, s).loop_nest()) == []
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
    assert _accumulators(C, s)
    if tail == "GuardWithIf":  # (ShiftInwards leaves N < 32 to a scalar loop)
        assert _updates_of_c(tl.compile(C, s).loop_nest()) == []
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
    # the version of whole column tiles (N >= 32); the remainder's rows are the parallel
    # loop's last iterations (parallel_pieces), the whole row tiles its first
    fast = kern.loop_nest().split("\nelse:\n")[0]
    assert fast.startswith("if N >= 32:") and fast.count("parallel for") == 1, fast
    main, rest = fast.split("\n      else:\n")
    assert "if i.o < " in main and "C.acc" in main and "i.i <" not in main
    assert re.search(r"if \S+ \+ i\.i < ", rest), rest  # the remainder is guarded row by row
    assert "C.acc" in rest and _updates_of_c(rest) == []  # its rows too accumulate in registers
    rng = np.random.default_rng(5)
    for size in [(37, 41, 13), (8, 32, 3), (7, 33, 2), (1, 40, 1)]:
        arrs = arrays(rng, *size)
        np.testing.assert_allclose(kern(**arrs), tl.reference(C, **arrs), rtol=1e-4, atol=1e-5)


def _gemm_tile(guard=None, extent=None, otherwise=None):
    """``for k: unrolled for i.i in [0, 4): [if guard:] vectorized for j in [0, extent):
    C[i.i, j] += A[i.i, k] * B[k, j]`` as loop-nest IR (extent default ``min(8, N - 8)``)."""
    from tensorlang.dtypes import float64
    from tensorlang.expr import Size
    from tensorlang.schedule.ir import Buffer, For, ForKind, IfThenElse, Load, Store

    ii, j, k, n = Var("i.i"), Var("j"), Var("k"), Size("N")
    zero = Const(0, int64)
    extent = extent if extent is not None else BinOp(
        "min", Const(8, int64), BinOp("sub", n, Const(8, int64), int64), int64)
    prod = BinOp("mul", Load("A", (ii, k), float64), Load("B", (k, j), float64), float64)
    body = For("j", zero, extent, ForKind.VECTORIZED, Store("C", (ii, j), prod, "sum"))
    if guard is not None:
        body = IfThenElse(guard, body, otherwise)
    loop = For("k", zero, Size("K"), ForKind.SERIAL,
               For("i.i", zero, Const(4, int64), ForKind.UNROLLED, body))
    buffers = {name: Buffer(name, float64, (zero, zero), (n, n), kind)
               for name, kind in (("A", "input"), ("B", "input"), ("C", "output"),
                                  ("X", "input"))}
    return loop, buffers


def test_masked_vector_loops_and_row_guards_keep_a_register_tile():
    from tensorlang.dtypes import float64
    from tensorlang.expr import Size
    from tensorlang.schedule.ir import Load, Store
    from tensorlang.schedule.promote import _try_promote

    def promoted(**kw):
        loop, buffers = _gemm_tile(**kw)
        out = _try_promote(loop, buffers, [0])
        return out is not None and out.buffer.register and [
            int(e.value) for e in out.buffer.extents] == [4, 8]

    lt = lambda a, b: BinOp("lt", a, b, tl.bool_)  # noqa: E731
    m = Size("M")
    assert promoted()  # the lane cap 8 of min(8, N - 8) is the tile's extent
    assert promoted(guard=lt(Var("i.i"), m))  # a tail row's guard: copied into the copy nests
    # a guard on the reduction alone stays around the update
    assert promoted(guard=lt(Var("k"), m))
    # a guard on both the reduction and the tile, or an extent that changes inside the
    # reduction loop, or a guard that reads memory, or one with an else branch: the copy nests
    # could not reproduce it
    assert not promoted(guard=lt(BinOp("add", Var("i.i"), Var("k"), int64), m))
    assert not promoted(guard=lt(Const(0.0, float64), Load("X", (Var("i.i"), Var("i.i")), float64)))
    assert not promoted(extent=BinOp("min", Const(8, int64), BinOp("sub", m, Var("k"), int64),
                                     int64))
    assert not promoted(guard=lt(Var("i.i"), m),
                        otherwise=Store("X", (Var("i.i"), Var("j")), Const(0.0, float64)))


def test_a_reduction_split_again_inside_the_tile_keeps_the_register_tile():
    # kc blocks of 16 with k.i split again by 4 and unrolled: where the row tail sends the nest
    # to its general version, each step of k.i.i is guarded (``if k.i.i + 4 * k.i.o + t < K``);
    # that guard mentions no loop of the tile, so it stays around the update and the tile
    # still accumulates in registers (it once stored C at every step: 5x slower)
    C, arrays = matmul()
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 3)
    jo, ji = s[C].split("j", 8)
    ko, ki = s[C].split("k", 16)
    s[C].reorder(ko, io, jo, ki, ii, ji)
    s[C].split(ki, 4)
    s[C].unroll("k.i.i").unroll(ii).vectorize(ji)
    kern = tl.compile(C, s)
    nest = kern.loop_nest()
    assert re.search(r"if k\.i\.i \+ 4 \* k\.i\.o .*< K:", nest)
    assert _updates_of_c(nest) == []
    rng = np.random.default_rng(7)
    for size in [(1, 1, 1), (7, 13, 5), (17, 37, 35), (29, 64, 64), (10, 16, 33)]:
        arrs = arrays(rng, *size)
        np.testing.assert_allclose(kern(**arrs), tl.reference(C, **arrs), rtol=1e-4, atol=1e-5)
