"""A register tile that starts from its cells' initial value instead of reading back the
initialisation stored right before it (``schedule/forward_init.py``) — results against NumPy
(odd sizes, an empty reduction, max, masked tails), and where it is not done."""

from __future__ import annotations

import re

import numpy as np
import pytest
from algorithms import assert_gemm_matches_numpy, gemm, max_plus

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.schedule import forward_init
from tensorlang.schedule.lower import lower


def _tile(C: tl.Func, rows: int = 4, cols: int = 8) -> tl.Schedule:
    s = tl.Schedule(C)
    io, ii = s[C].split("i", rows)
    jo, ji = s[C].split("j", cols)
    s[C].reorder(io, jo, "k", ii, ji).unroll(ii).vectorize(ji)
    return s


def _initialises_c(text: str) -> bool:
    """Whether the lowered ``text`` stores a value other than the tile into ``C``."""
    stores = re.findall(r"^\s*C\[[^\]]*\] = (.*)$", text, re.M)
    return any(not v.startswith("C.acc") for v in stores)


@pytest.mark.parametrize("m,n,k", [(37, 29, 53), (1, 1, 1), (9, 17, 16), (5, 8, 2), (6, 3, 0)])
def test_a_tile_starts_from_zero_and_computes_what_numpy_computes(m, n, k, rng):
    C = gemm(tl.float64)
    s = _tile(C)
    text = str(lower(C, s))
    assert "C.acc" in text and not _initialises_c(text)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out = np.full((m, n), np.nan)
    tl.compile(C, s)(A=a, B=b, out=out)  # (a cell the tile did not store would stay NaN)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


def test_a_max_reduction_starts_from_its_identity(rng):
    # a max-plus product of negative numbers: a tile that started from zero would answer zero
    C, rk = max_plus()
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 4)
    jo, ji = s[C].split("j", 8)
    s[C].reorder(io, jo, rk.x, ii, ji).unroll(ii).vectorize(ji)
    assert not _initialises_c(str(lower(C, s)))
    a, b = -rng.random((11, 7), dtype=np.float32), -rng.random((7, 13), dtype=np.float32)
    want = (a[:, :, None] + b[None, :, :]).max(axis=1)
    np.testing.assert_allclose(tl.compile(C, s)(A=a, B=b), want, rtol=1e-6)


def test_switched_off_the_tile_reads_back_the_zeroed_cells(monkeypatch, rng):
    C = gemm(tl.float64)
    monkeypatch.setattr(forward_init, "FORWARD_INIT", 0)
    s = _tile(C)
    assert _initialises_c(str(lower(C, s)))
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 10))
    np.testing.assert_allclose(tl.compile(C, s)(A=a, B=b), a @ b, rtol=1e-12)


def test_an_initialisation_scheduled_apart_stays(rng):
    # an explicit pure definition (a bias) and update: the pure definition is a loop nest of
    # its own over all of C, not a tile's initialisation, and stays
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.float64), tl.Input("B", (K, N), tl.float64)
    bias = tl.Input("bias", (N,), tl.float64)
    i, j = tl.vars("i j")
    rk = tl.RDom((0, K))
    C = tl.Func("C", shape=(M, N))
    C[i, j] = bias[j]
    C[i, j] = C[i, j] + A[i, rk] * B[rk, j]
    s = tl.Schedule(C)
    u = s[C].update(0)
    io, ii = u.split(i, 4)
    jo, ji = u.split(j, 8)
    u.reorder(io, jo, rk.x, ii, ji).unroll(ii).vectorize(ji)
    text = str(lower(C, s))
    assert re.search(r"^\s*C\[i, j\] = bias\[j\]$", text, re.M)
    a, b, c = rng.standard_normal((9, 6)), rng.standard_normal((6, 11)), rng.standard_normal(11)
    np.testing.assert_allclose(tl.compile(C, s)(A=a, B=b, bias=c), a @ b + c, rtol=1e-12)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_the_rule_based_schedule_of_a_short_reduction_never_zeroes_c(dtype):
    # the case the pass is for: K = 17, every tile's zeroing and read-back as costly as a
    # third of its FMAs
    C = gemm(dtype)
    s = heuristic_schedule(C, {"M": 33, "N": 1000, "K": 17})
    assert not _initialises_c(str(lower(C, s)))
    assert_gemm_matches_numpy(tl.compile(C, s), dtype,
                              [(33, 1000, 17), (7, 61, 17), (1, 1, 1), (34, 129, 3)], seed=81)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_a_tile_before_the_reductions_remainder_starts_from_zero(dtype, monkeypatch):
    # rows of 3 columns in vector lanes: the lanes' reduction loop is partitioned into whole
    # vectors (the tile) and a masked remainder that updates the partial sums in memory; the
    # two pieces are a block of their own after the zeroing nest
    C = gemm(dtype)
    s = heuristic_schedule(C, {"M": 100, "N": 3, "K": 1000})
    text = str(lower(C, s))
    assert "C_rf.acc" in text and not re.search(r"^\s*C_rf\[[^\]]*\] = 0", text, re.M)
    monkeypatch.setattr(forward_init, "SPLICE_BLOCKS", 0)
    assert re.search(r"^\s*C_rf\[[^\]]*\] = 0", str(lower(C, s)), re.M)
    monkeypatch.undo()
    assert_gemm_matches_numpy(tl.compile(C, s), dtype,
                              [(100, 3, 1000), (9, 3, 1001), (1, 3, 17), (17, 3, 250)], seed=81)
