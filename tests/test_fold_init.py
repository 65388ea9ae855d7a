"""A reduction's initialisation folded into its first reduction iteration
(``schedule/fold_init.py``): the register tile starts from the identity in the first reduction
block instead of a pass that zeroes C first — results against NumPy (odd sizes, an empty
reduction, max), and where it is not done."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import gemm, max_plus

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.schedule import fold_init
from tensorlang.schedule.lower import lower


def _tile(C: tl.Func, ks: int | None = None) -> tl.Schedule:
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 4)
    jo, ji = s[C].split("j", 8)
    if ks is None:
        s[C].reorder(io, jo, "k", ii, ji)
    else:
        ko, ki = s[C].split("k", ks)
        s[C].reorder(io, ko, jo, ki, ii, ji)  # the k blocks outside the column tiles
    s[C].unroll(ii).vectorize(ji)
    return s


@pytest.mark.parametrize("m,n,k", [(37, 29, 53), (1, 1, 1), (9, 17, 16), (5, 8, 2)])
@pytest.mark.parametrize("ks", [None, 16])
def test_a_folded_tile_computes_what_numpy_computes(m, n, k, ks, rng):
    C = gemm(tl.float64)
    s = _tile(C, ks)
    text = str(lower(C, s))
    # the zeroing pass runs only for an empty reduction where it was a pass over the column
    # tiles inside the k blocks; one tile's zeroing right before its k loop stays
    assert ("if K <= 0:" in text) == (ks is not None)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out = np.full((m, n), np.nan)
    tl.compile(C, s)(A=a, B=b, out=out)  # (stale NaNs in C would show)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


def test_an_empty_reduction_still_writes_the_identity():
    C = gemm(tl.float64)
    kernel = tl.compile(C, _tile(C, 16))
    assert "if K <= 0:" in str(kernel.lowered)
    out = np.full((6, 9), np.nan)
    kernel(A=np.zeros((6, 0)), B=np.zeros((0, 9)), out=out)
    np.testing.assert_array_equal(out, 0.0)


def test_a_max_reduction_starts_from_its_identity(rng):
    # a max-plus product (the tropical semiring's matmul) of negative numbers: a tile that
    # started from zero would answer zero
    C, rk = max_plus()
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 4)
    jo, ji = s[C].split("j", 8)
    ko, ki = s[C].split(rk.x, 3)
    s[C].reorder(io, ko, jo, ki, ii, ji).unroll(ii).vectorize(ji)
    assert "if K <= 0:" in str(lower(C, s))
    a, b = -rng.random((11, 7), dtype=np.float32), -rng.random((7, 13), dtype=np.float32)
    want = (a[:, :, None] + b[None, :, :]).max(axis=1)
    np.testing.assert_allclose(tl.compile(C, s)(A=a, B=b), want, rtol=1e-6)


def test_where_every_cell_is_not_updated_at_first_the_pass_stays(monkeypatch):
    # a triangle (RDom.where): a cell's first update is not at k == 0
    N, K = tl.sizes("N K")
    A = tl.Input("A", (N, K), tl.float64)
    i, j = tl.vars("i j")
    r = tl.RDom((0, K))
    r.where(r.x <= i)
    C = tl.Func("C")
    C[i, j] = tl.sum(A[i, r.x] * A[j, r.x])
    s = tl.Schedule(C)
    io, ii = s[C].split(i, 4)
    jo, ji = s[C].split(j, 8)
    ko, ki = s[C].split(r.x, 4)
    s[C].reorder(io, ko, jo, ki, ii, ji).unroll(ii).vectorize(ji)
    assert "if K <= 0:" not in str(lower(C, s))
    # no register tile inside the reduction loop: nothing to start from the identity
    C2 = gemm(tl.float64)
    s2 = tl.Schedule(C2)
    assert "if K <= 0:" not in str(lower(C2, s2))
    # and the switch
    assert "if K <= 0:" in str(lower(C2, _tile(C2, 16)))
    monkeypatch.setattr(fold_init, "FOLD_INIT", 0)
    assert "if K <= 0:" not in str(lower(C2, _tile(C2, 16)))


def test_the_packed_rule_based_gemm_has_no_zeroing_pass(monkeypatch, rng):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    m, n, k = 263, 131, 600
    s = heuristic_schedule(C, {"M": m, "N": n, "K": k})
    assert "cache_read" in s.to_python()
    assert "if K <= 0:" in str(lower(C, s))
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    np.testing.assert_allclose(tl.compile(C, s)(A=a, B=b), a @ b, rtol=1e-10, atol=1e-10)
