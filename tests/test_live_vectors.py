"""``version_live_vectors``: the loop around a register tile whose last vectors may be wholly dead
runs a version per count of live vectors — results against NumPy where the last column panel
holds 1, 2, 3 or 4 live vectors (or ends inside one), the versions' loops, and the loops the pass
leaves alone (hand-built loop nests)."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import gemm

import tensorlang as tl
from tensorlang.affine import const_value, sconst
from tensorlang.dtypes import float32, int64
from tensorlang.expr import BinOp, Const, Var
from tensorlang.schedule import live_vectors
from tensorlang.schedule.ir import Block, Buffer, For, ForKind, IfThenElse, LetStmt, Load, \
    LoweredFunc, Store, walk_stmts
from tensorlang.schedule.live_vectors import version_live_vectors
from tensorlang.schedule.lower import lower

VECTORS = 4


def _tiled(C, lanes: int) -> tl.Schedule:
    """3-row register tiles ``VECTORS`` vectors wide over B's packed panels, k blocked by 4."""
    s = tl.Schedule(C)
    s[C].split("i", 3)
    s[C].split("j", VECTORS * lanes)
    s[C].split("k", 4)
    s[C].reorder("k.o", "i.o", "j.o", "k.i", "i.i", "j.i")
    s.cache_read("A", s[C], "i.o", index=0)
    s.cache_read("B", s[C], "k.o", index=0, layout=(1, 0), panel=(1, VECTORS * lanes))
    s[C].unroll("i.i")
    s[C].vectorize("j.i", lanes)
    s[C].unroll("j.i.o")
    return s


def _tile_extents(f) -> set[int]:
    """The extents of the unrolled loops over a tile's vectors."""
    return {const_value(st.extent) for st in walk_stmts(f.body)
            if isinstance(st, For) and st.var == "j.i.o"}


@pytest.mark.parametrize("dtype,lanes", [(tl.float32, 8), (tl.float64, 4)])
def test_each_count_of_live_vectors_has_its_version_and_stays_right(dtype, lanes, rng):
    C = gemm(dtype)
    s = _tiled(C, lanes)
    assert _tile_extents(lower(C, s)) == {1, 2, 3, 4}
    kern = tl.compile(C, s)
    tol = 1e-5 if dtype is tl.float32 else 1e-12
    width = VECTORS * lanes
    # the last panel: 1 lane, a vector and 1 lane, ... whole; one panel or several; odd rows, k
    for n in [1, lanes + 1, 2 * lanes + 3, 3 * lanes - 1, width, width + 1, 2 * width - 1]:
        for m, kk in [(1, 1), (5, 7), (7, 13)]:
            a = rng.standard_normal((m, kk)).astype(dtype.numpy)
            b = rng.standard_normal((kk, n)).astype(dtype.numpy)
            c = np.full((m, n), np.nan, dtype.numpy)  # every cell written, none past the edge
            kern(A=a, B=b, out=c)
            np.testing.assert_allclose(c, a @ b, rtol=tol, atol=tol, err_msg=f"{m}x{n}x{kk}")


def test_the_switch_runs_every_vector(monkeypatch):
    C = gemm(tl.float32)
    monkeypatch.setattr(live_vectors, "VERSION_LIVE_VECTORS", 0)
    assert _tile_extents(lower(C, _tiled(C, 8))) == {4}


# -- hand-built nests: for k: unrolled u in [0, 4): vectorized x in [0, min(8, extent))
N, T = Var("N"), Var("t")
TILE = Buffer("acc", float32, (sconst(0), sconst(0)), (sconst(4), sconst(8)), "internal",
              register=True)
PANEL = Buffer("panel", float32, (sconst(0), sconst(0)), (Var("K"), sconst(32)), "internal")


def _sub(a, b):
    return BinOp("sub", a, b, int64)


def _eight_u(u: str = "u"):
    return BinOp("mul", Const(8, int64), Var(u), int64)


def _tile(extent, u: str = "u", cap: int = 8) -> For:
    x = Var("x")
    load = Load("panel", (Var("k"), BinOp("add", x, _eight_u(u), int64)), float32)
    store = Store("acc", (Var(u), x), load, reduce_op="add")
    vec = For("x", sconst(0), BinOp("min", Const(cap, int64), extent, int64),
              ForKind.VECTORIZED, store)
    return For(u, sconst(0), sconst(4), ForKind.UNROLLED, vec)


def _whole() -> For:
    """``unrolled u in [0, 4): vectorized x in [0, 8)``: the tile's vectors all run."""
    store = Store("acc", (Var("u"), Var("x")), Const(0.0, float32))
    return For("u", sconst(0), sconst(4), ForKind.UNROLLED,
               For("x", sconst(0), sconst(8), ForKind.VECTORIZED, store))


def _run(body) -> LoweredFunc:
    f = LoweredFunc("f", (), (), ("N", "K"), {"acc": TILE, "panel": PANEL},
                    For("k", sconst(0), Var("K"), ForKind.SERIAL, body))
    return version_live_vectors(f)


def test_a_tile_loop_gets_one_version_per_count():
    f = _run(_tile(_sub(_sub(N, T), _eight_u())))
    assert isinstance(f.body, IfThenElse)
    assert _versions(f.body) == [1, 2, 3, 4]
    assert "N - t - 8 <= 0" in str(f.body.cond)


def _versions(s) -> list[int]:
    """The unrolled extents of the if-chain's branches, in order."""
    out = []
    while isinstance(s, IfThenElse):
        out.append(const_value(next(t for t in walk_stmts(s.then) if isinstance(t, For)
                                    and t.kind is ForKind.UNROLLED).extent))
        s = s.otherwise
    out.append(const_value(next(t for t in walk_stmts(s) if isinstance(t, For)
                                and t.kind is ForKind.UNROLLED).extent))
    return out


@pytest.mark.parametrize("why,body", [
    ("later vectors have more live lanes",
     _tile(BinOp("add", _sub(N, T), _eight_u(), int64))),
    ("the extent depends on the loop itself",
     _tile(_sub(_sub(N, Var("k")), _eight_u()))),
    ("the extent names a value bound inside the loop",
     LetStmt("t", Var("k"), _tile(_sub(_sub(N, T), _eight_u())))),
    ("the unrolled variable in a term that is not affine",
     _tile(_sub(N, BinOp("mul", Var("u"), Var("u"), int64)))),
    ("another loop of the same variable runs whole vectors",
     Block((_tile(_sub(_sub(N, T), _eight_u())), _whole()))),
])
def test_loops_that_do_not_qualify_stay_as_they_are(why, body):
    f = _run(body)
    assert isinstance(f.body, For) and f.body.var == "k", why


def test_a_fixed_term_that_is_not_affine_still_qualifies():
    # N - N // 32 * 32: the last panel's columns, a floor division that is the same for all u
    rest = _sub(N, BinOp("mul", BinOp("floordiv", N, Const(32, int64), int64),
                         Const(32, int64), int64))
    f = _run(_tile(_sub(rest, _eight_u())))
    assert isinstance(f.body, IfThenElse) and _versions(f.body) == [1, 2, 3, 4]
