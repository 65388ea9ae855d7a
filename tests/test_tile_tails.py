"""``widen_tile_tails``: a register tile's masked tail over packed panels runs whole vectors —
results against NumPy on odd sizes (a tail that ends inside the first vector leaves the second
wholly dead), and which loops widen and which stay masked."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import gemm

import tensorlang as tl
from tensorlang.affine import sconst
from tensorlang.expr import BinOp, Size, Var
from tensorlang.schedule import tile_tails
from tensorlang.schedule.ir import Buffer, For, ForKind, Store, walk_stmts
from tensorlang.schedule.lower import lower

SHAPES = [(1, 1, 1), (7, 13, 5), (5, 19, 9), (3, 16, 4), (11, 29, 7), (2, 40, 3)]


def _tiled(C, packed: bool, lanes: int) -> tl.Schedule:
    """3 x 2-vector register tiles, k blocked by 4; where ``packed``, B in panels two vectors
    wide and A's rows of the tile copied (the rule-based schedule's packed tile, small)."""
    s = tl.Schedule(C)
    s[C].split("i", 3)
    s[C].split("j", 2 * lanes)
    s[C].split("k", 4)
    s[C].reorder("k.o", "i.o", "j.o", "k.i", "i.i", "j.i")
    if packed:
        s.cache_read("A", s[C], "i.o", index=0)
        s.cache_read("B", s[C], "k.o", index=0, layout=(1, 0), panel=(1, 2 * lanes))
    s[C].unroll("i.i")
    s[C].vectorize("j.i", lanes)
    s[C].unroll("j.i.o")
    return s


def _update_extents(C, s) -> list:
    """The extents of the vector loops that accumulate into a register tile."""
    f = lower(C, s)
    out = []
    for st in walk_stmts(f.body):
        if isinstance(st, For) and st.kind is ForKind.VECTORIZED and isinstance(st.body, Store) \
                and st.body.reduce_op is not None and f.buffers[st.body.buffer].register:
            out.append(st.extent)
    return out


def _assert_widened_and_right(C, s, dtype, lanes: int, rng) -> None:
    """Every accumulating vector loop of ``C`` under ``s`` runs ``lanes`` whole lanes, and the
    kernel matches NumPy on ``SHAPES``."""
    extents = _update_extents(C, s)
    assert extents and all(tl.affine.const_value(e) == lanes for e in extents)
    kern = tl.compile(C, s)
    tol = 1e-5 if dtype is tl.float32 else 1e-12
    for m, n, kk in SHAPES:
        a = rng.standard_normal((m, kk)).astype(dtype.numpy)
        b = rng.standard_normal((kk, n)).astype(dtype.numpy)
        c = np.full((m, n), np.nan, dtype.numpy)  # every cell written, none past the edge
        kern(A=a, B=b, out=c)
        np.testing.assert_allclose(c, a @ b, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,lanes", [(tl.float32, 8), (tl.float64, 4)])
def test_a_packed_tiles_tail_accumulates_whole_vectors_and_stays_right(dtype, lanes, rng):
    C = gemm(dtype)
    _assert_widened_and_right(C, _tiled(C, packed=True, lanes=lanes), dtype, lanes, rng)


def test_the_switch_leaves_the_tail_masked(monkeypatch):
    C = gemm(tl.float32)
    s = _tiled(C, packed=True, lanes=8)
    monkeypatch.setattr(tile_tails, "WIDEN_TILE_TAILS", 0)
    assert any(tl.affine.const_value(e) is None for e in _update_extents(C, s))


def test_a_tail_reading_an_input_stays_masked(rng):
    # without the panel copy the tile reads B itself: a dead lane's column is past B's row
    # (past the array, on the last row), so the loop keeps its mask
    C = gemm(tl.float64)
    s = _tiled(C, packed=False, lanes=4)
    assert any(tl.affine.const_value(e) is None for e in _update_extents(C, s))
    kern = tl.compile(C, s)
    for m, n, kk in SHAPES:
        a, b = rng.standard_normal((m, kk)), rng.standard_normal((kk, n))
        np.testing.assert_allclose(kern(A=a, B=b), a @ b, rtol=1e-12, atol=1e-12)


def _panels_per_piece(C, lanes: int, rows_in_place: bool = False) -> tl.Schedule:
    """The rule-based schedule's nest, small: A's block copied per ``k`` block, B's panel per
    column panel (``cache_read`` at ``j.o``, no panel layout), so the columns' remainder, a
    piece of its own, reads a panel whose allocation starts at ``max(N // w * w + w * j.o, 0)``;
    ``rows_in_place``: as for a short reduction, no ``k`` blocks and A read in place (an input,
    the same element in every lane of the tile)."""
    s = tl.Schedule(C)
    s[C].split("i", 3)
    s[C].split("j", 2 * lanes)
    if rows_in_place:
        s[C].reorder("i.o", "j.o", "k", "i.i", "j.i")
    else:
        s[C].split("k", 4)
        s[C].reorder("k.o", "j.o", "i.o", "k.i", "i.i", "j.i")
        s.cache_read("A", s[C], "k.o", index=0)
    s.cache_read("B", s[C], "j.o", index=0)
    s[C].unroll("i.i")
    s[C].vectorize("j.i", lanes)
    s[C].unroll("j.i.o")
    return s


@pytest.mark.parametrize("dtype,lanes", [(tl.float32, 8), (tl.float64, 4)])
def test_a_panel_whose_minimum_varies_widens_its_tail_and_stays_right(dtype, lanes, rng):
    C = gemm(dtype)
    _assert_widened_and_right(C, _panels_per_piece(C, lanes), dtype, lanes, rng)


def test_the_varying_minimum_switch_leaves_that_tail_masked(monkeypatch):
    C = gemm(tl.float32)
    s = _panels_per_piece(C, 8)
    monkeypatch.setattr(tile_tails, "VARYING_MINS", 0)
    assert any(tl.affine.const_value(e) is None for e in _update_extents(C, s))


def test_a_minimum_the_index_may_fall_below_is_not_trusted():
    # the minimum max(a, X) of a size X the index's least value a need not reach: not proved
    int64 = tl.int64
    j, jo = Var("j"), Var("j.o")
    at = BinOp("add", BinOp("mul", sconst(8), jo, int64), j, int64)
    scope = tile_tails._Scope({}, {"j.o": 0})
    for low, proved in ((sconst(0), True), (Size("X"), False)):
        buf = Buffer("P", tl.float32, (sconst(0), BinOp("max", BinOp(
            "mul", sconst(8), jo, int64), low, int64)), (sconst(4), sconst(8)), "internal")
        assert tile_tails._inside_varying(at, {"j": (0, 7)}, buf, 1, scope) is proved
        assert not tile_tails._inside_varying(at, {"j": (0, 8)}, buf, 1, scope)


@pytest.mark.parametrize("dtype,lanes", [(tl.float32, 8), (tl.float64, 4)])
def test_a_tail_reading_an_input_in_place_widens_where_its_tile_is_live(dtype, lanes, rng,
                                                                          monkeypatch):
    # A[i, k] is read by every lane of the tile: in bounds wherever some lane is, so the tail
    # runs whole vectors under the condition that its first lane is live (masked elsewhere)
    C = gemm(dtype)
    s = _panels_per_piece(C, lanes, rows_in_place=True)

    def whole() -> int:
        return sum(tl.affine.const_value(e) == lanes for e in _update_extents(C, s))

    widened = whole()
    monkeypatch.setattr(tile_tails, "EXTERNAL_READS", 0)
    assert widened > whole()
    monkeypatch.setattr(tile_tails, "EXTERNAL_READS", 1)
    text = str(lower(C, s))
    assert " > 0:" in text, text
    kern = tl.compile(C, s)
    tol = 1e-5 if dtype is tl.float32 else 1e-12
    for m, n, kk in [*SHAPES, (4, 2 * lanes + 1, 3), (3, 2 * lanes - 1, 1)]:
        a = rng.standard_normal((m, kk)).astype(dtype.numpy)
        b = rng.standard_normal((kk, n)).astype(dtype.numpy)
        c = np.full((m, n), np.nan, dtype.numpy)
        kern(A=a, B=b, out=c)
        np.testing.assert_allclose(c, a @ b, rtol=tol, atol=tol)
