"""Row base pointers of a register tile (``backends/llvm/row_bases.py``): which reads of a loop
get them, that the kernels compute what NumPy computes with and without them, and that the
tile's inner loop then addresses each row from a register of its own (no address arithmetic
per iteration)."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest
from algorithms import described_target

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.workloads import BUILTIN
from tensorlang.backends.llvm import row_bases
from tensorlang.dtypes import int64
from tensorlang.expr import Const
from tensorlang.schedule.ir import For, walk_stmts
from tensorlang.schedule.lower import lower

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import mca  # noqa: E402

SIZES = {"B": 8, "M": 256, "N": 256, "K": 256}
BARRIER = re.compile(r'asm\s+""')


def _k_loop(low):
    """The first loop over ``k`` of lowered nest ``low``."""
    return next(st for st in walk_stmts(low.body) if isinstance(st, For) and st.var == "k")


def _rows(loop, low):
    """``row_reads`` of ``loop`` with the strides of ``low``'s buffers."""
    return row_bases.row_reads(loop, lambda n: low.buffers[n].extents[-1]
                               if n in low.buffers else None)


def _a_at():
    """``C[i, j] = sum_k A[i, k] * A[j, k]`` over float64: two rows of A per ``k`` step."""
    M, K = tl.sizes("M K")
    A = tl.Input("A", (M, K), tl.float64)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * A[j, k]
    return C


def _tile_loop(cpu: str = "haswell"):
    """The batched GEMM's float32 lowered nest (the rules' schedule for ``cpu``) and its first
    ``k`` loop: the register tile's reduction, whose rows read ``A[b, t + i.i, k]``."""
    C = BUILTIN["batch_matmul"].build_as("float32")
    s = heuristic_schedule(C, SIZES, described_target(cpu))
    low = lower(C, s)
    return C, s, low, _k_loop(low)


def test_the_rows_of_a_strided_operand_are_the_tiles_row_reads(monkeypatch):
    _, _, low, loop = _tile_loop()
    keys = _rows(loop, low)
    # haswell's float32 tile: six rows of A (one key: the unrolled row is a row each), and not
    # B's panel, whose rows are the loop's own (its index mentions k before the last)
    assert {name for name, _ in keys} == {"A"}, keys
    (_, prefix), = keys
    assert "i.i" in str(prefix[-1]), prefix
    # too many rows for the registers, the switch off, a constant row stride: none
    monkeypatch.setattr(row_bases, "MAX_ROWS", 5)
    assert not _rows(loop, low)
    monkeypatch.setattr(row_bases, "MAX_ROWS", 10)
    assert not row_bases.row_reads(loop, lambda n: Const(256, int64))
    assert not row_bases.row_reads(loop, lambda n: None)
    monkeypatch.setattr(row_bases, "ROW_BASES", 0)
    assert not _rows(loop, low)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cpu", ["haswell", "host"])
@pytest.mark.parametrize("shape", [(3, 13, 19, 7), (1, 1, 17, 5), (2, 7, 8, 1)])
def test_the_tile_matches_numpy_with_and_without_row_bases(monkeypatch, dtype, cpu, shape):
    # odd sizes: a row tile the rows do not fill (13 = 2 x 6 + 1), one row, one k
    b, m, n, k = shape
    C = BUILTIN["batch_matmul"].build_as(dtype)
    target = described_target(cpu) if cpu != "host" else None
    s = heuristic_schedule(C, SIZES, target)  # the big shape's tile, run on small ones
    rng = np.random.default_rng(7)
    a = rng.standard_normal((b, m, k)).astype(dtype)
    bb = rng.standard_normal((b, k, n)).astype(dtype)
    want = np.matmul(a, bb)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for on in (1, 0):
        monkeypatch.setattr(row_bases, "ROW_BASES", on)
        kern = tl.compile(C, s, target=target)
        assert bool(BARRIER.search(kern.llvm_ir())) == bool(on)
        np.testing.assert_allclose(kern(A=a, B=bb), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("cpu, rows", [("haswell", 6), ("skylake-avx512", 8)])
def test_the_tiles_inner_loop_loads_each_row_from_its_own_register(cpu, rows):
    # the batched float32 tile: rows x 2 vectors, 2 * rows FMAs per k step (haswell 6 rows of
    # 8 lanes, skylake-avx512 8 of 16); each row one broadcast from a register of its own
    # indexed by the k counter, no lea per row
    C, s, _, _ = _tile_loop(cpu=cpu)
    body = mca.innermost_fma_loop(tl.compile(C, s, target=described_target(cpu)).assembly())
    fmas = [x for x in body if x.startswith(mca.FMA_STEMS)]
    broadcasts = [x for x in body if x.startswith("vbroadcastss")]
    assert len(fmas) == 2 * rows and len(broadcasts) == rows, body
    assert not [x for x in body if x.startswith("lea")], body
    bases = {re.search(r"\((%\w+),", x).group(1) for x in broadcasts}
    assert len(bases) == rows, broadcasts


def test_rows_that_no_unrolled_loop_makes_keep_llvms_addressing():
    # C[i, j] = sum_k A[i, k] * A[j, k], default schedule: the k loop reads two rows of A (a
    # dot product LLVM's loop vectorizer takes), not a register tile's unrolled rows
    C = _a_at()
    low = lower(C)
    assert not _rows(_k_loop(low), low)
    a = np.random.default_rng(1).standard_normal((5, 3))
    np.testing.assert_allclose(tl.compile(C)(a), a @ a.T, rtol=1e-12)


@pytest.mark.parametrize("scalar", [0, 1])
def test_jammed_dot_products_get_row_bases_only_when_asked(monkeypatch, scalar):
    # C[i, j] = sum_k A[i, k] * A[j, k] with four rows i.i unrolled inside k: jammed dot
    # products (cholesky's), a scalar loop LLVM's vectorizer takes; row bases only with
    # SCALAR_TILES (the row A[j, k] is no unrolled loop's and never gets one)
    monkeypatch.setattr(row_bases, "SCALAR_TILES", scalar)
    C = _a_at()
    s = tl.Schedule(C)
    s["C"].split("i", 4)
    s["C"].reorder("i.o", "j", "k", "i.i")
    s["C"].unroll("i.i")
    low = lower(C, s)
    keys = _rows(_k_loop(low), low)
    assert len(keys) == scalar and all("i.i" in str(p[-1]) for _, p in keys), keys
    a = np.random.default_rng(5).standard_normal((13, 7))
    kern = tl.compile(C, s)
    assert bool(BARRIER.search(kern.llvm_ir())) == bool(scalar)
    np.testing.assert_allclose(kern(a), a @ a.T, rtol=1e-12, atol=1e-12)
