"""A register tile's vector dimension allocated to a power of two (``promote.PAD_VECTORS``), so
that code generation runs a row of 7 lanes as one masked vector of 8, not as 4 + 2 + 1
(``backends/llvm/loops.py``): the tile's extents, the constant lane mask in the code, NumPy's
answer on odd sizes (every cell written, none past the edge), and a tile whose dead lanes could
trap (an integer division by a value read from memory) left in powers of two."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from algorithms import ZEN4, gemm, runnable

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.schedule.ir import Allocate, walk_stmts
from tensorlang.schedule.lower import lower

promote = importlib.import_module("tensorlang.schedule.promote")

#: the optimized code's constant mask of 7 live lanes of 8
SEVEN_OF_EIGHT = "<8 x i1> <" + ", ".join(["i1 true"] * 7 + ["i1 false"]) + ">"


def _tiles(f, s) -> list[tuple[int, ...]]:
    """The constant extents of every register tile of ``f`` under ``s``."""
    return [tuple(tl.affine.const_value(e) for e in st.buffer.extents)
            for st in walk_stmts(lower(f, s).body)
            if isinstance(st, Allocate) and st.buffer.register]


def _row_tile(f, rows: int, columns: int) -> tl.Schedule:
    """``rows`` x ``columns`` register tiles, the reduction inside, the row one vector."""
    s = tl.Schedule(f)
    s[f].split("i", rows)
    s[f].split("j", columns, tail="ShiftInwards")
    s[f].reorder("i.o", "j.o", "k", "i.i", "j.i")
    s[f].unroll("i.i")
    s[f].vectorize("j.i")
    return s


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_a_row_of_seven_runs_as_one_masked_vector_of_eight(dtype, rng, monkeypatch):
    C = gemm(dtype)
    sizes = {"M": 31, "N": 7, "K": 101}
    s = heuristic_schedule(C, sizes, ZEN4)
    assert _tiles(C, s) and all(t[-1] == 8 for t in _tiles(C, s)), _tiles(C, s)
    # (the mask as the AVX-512 target keeps it; AVX2 code splits the vector in two)
    assert SEVEN_OF_EIGHT in tl.compile(C, s, target=ZEN4).llvm_ir(optimized=True)
    kern = tl.compile(C, s, target=runnable(ZEN4))
    tol = 2e-4 if dtype is tl.float32 else 1e-10
    for m, n, k in [(31, 7, 101), (1, 7, 3), (16, 7, 1), (17, 9, 13), (5, 7, 1000)]:
        a = rng.standard_normal((m, k)).astype(dtype.numpy)
        b = rng.standard_normal((k, n)).astype(dtype.numpy)
        out = np.full((m, n), np.nan, dtype.numpy)
        kern(a, b, out=out)
        np.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol)
    monkeypatch.setattr(promote, "PAD_VECTORS", 0)  # before: the loop's extent, 4 + 2 + 1
    assert all(t[-1] == 7 for t in _tiles(C, s))
    assert SEVEN_OF_EIGHT not in tl.compile(C, s).llvm_ir(optimized=True)


@pytest.mark.parametrize("columns", [3, 5, 6, 7, 12])
def test_padded_tiles_of_other_widths_match_numpy(columns, rng):
    C = gemm(tl.float32)
    s = _row_tile(C, 3, columns)
    assert {t[-1] for t in _tiles(C, s)} == {1 << (columns - 1).bit_length()}
    kern = tl.compile(C, s)
    for m, k in [(7, 13), (3, 1), (1, 29)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, columns + 2)).astype(np.float32)
        out = np.full((m, columns + 2), np.nan, np.float32)
        kern(a, b, out=out)
        np.testing.assert_allclose(out, a @ b, rtol=2e-4, atol=2e-4)


def test_a_tile_whose_dead_lanes_could_divide_by_zero_keeps_powers_of_two(rng):
    # a dead lane's masked read of B is 0: x // 0 there would trap, so the update's 7 lanes run
    # as 4 + 2 + 1 unmasked vectors (the tile's load and store, no division, as one of 8)
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.int64), tl.Input("B", (K, N), tl.int64)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] // B[k, j]
    s = _row_tile(C, 2, 7)
    kern = tl.compile(C, s)
    code = kern.llvm_ir(optimized=True)
    assert "sdiv <4 x i64>" in code and "sdiv <8 x i64>" not in code
    a = rng.integers(-50, 50, (5, 11))
    b = rng.integers(1, 9, (11, 7))
    want = (a[:, :, None] // b[None, :, :]).sum(axis=1)
    np.testing.assert_array_equal(kern(a, b), want)
