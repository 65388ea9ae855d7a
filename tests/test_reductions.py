"""Reductions: the einsum rule, explicit reducers, lifted (nested) reducers, tl.einsum."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import gemm
from conftest import check

import tensorlang as tl

SIZES = [(1, 1, 1), (7, 13, 5), (17, 3, 11), (2, 31, 1)]


@pytest.mark.parametrize("m,n,k", SIZES)
def test_matmul_einsum_rule(m, n, k, rng):
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    check(gemm(), a @ b, A=a, B=b, rtol=1e-5)


@pytest.mark.parametrize("m,n,k", SIZES)
def test_matmul_int32_exact(m, n, k, rng):
    a = rng.integers(-50, 50, (m, k), dtype=np.int32)
    b = rng.integers(-50, 50, (k, n), dtype=np.int32)
    check(gemm(tl.int32), a @ b, a, b)


@pytest.mark.parametrize("op,npf", [(tl.sum, np.sum), (tl.prod, np.prod), (tl.max, np.max),
                                    (tl.min, np.min)])
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (13, 2)])
def test_explicit_reducers(op, npf, shape, rng):
    R, S = tl.sizes("R S")
    X = tl.Input("X", (R, S), tl.float64)
    i, k = tl.vars("i k")
    F = tl.Func("F")
    F[i] = op(X[i, k] * 0.5 + 0.75)
    x = rng.random(shape)
    check(F, npf(x * 0.5 + 0.75, axis=1), X=x, rtol=1e-12)


def test_max_propagates_nan():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N, 4), tl.float32)
    i, k = tl.vars("i k")
    F = tl.Func("F")
    F[i] = tl.max(X[i, k])
    x = np.array([[1, np.nan, 3, 2], [1, 5, 3, 2]], np.float32)
    check(F, np.max(x, axis=1), x)


def test_reduction_over_two_vars_and_int_sum_dtype(rng):
    A_ = tl.Input("A", tl.sizes("P Q R"), tl.int32)
    i, j, k = tl.vars("i j k")
    F = tl.Func("F")
    F[j] = tl.sum(A_[i, j, k])
    a = rng.integers(-9, 9, (3, 4, 5), dtype=np.int32)
    check(F, a.sum(axis=(0, 2), dtype=np.int32), a)


def test_empty_reduction_gives_identity():
    M, K = tl.sizes("M K")
    X = tl.Input("X", (M, K), tl.float32)
    i, k = tl.vars("i k")
    S, Mx = tl.Func("S"), tl.Func("Mx")
    S[i] = X[i, k]
    Mx[i] = tl.max(X[i, k])
    x = np.zeros((3, 0), np.float32)
    check(S, np.zeros(3, np.float32), x)
    check(Mx, np.full(3, -np.inf, np.float32), x)


def test_softmax_nested_reducers_are_lifted(rng):
    R, S = tl.sizes("R S")
    X = tl.Input("X", (R, S), tl.float32)
    i, j, k = tl.vars("i j k")
    E = tl.Func("E")
    E[i, j] = tl.exp(X[i, j] - tl.max(X[i, k]))
    Sm = tl.Func("Sm")
    Sm[i, j] = E[i, j] / tl.sum(E[i, k])
    names = [f.name for f in tl.Pipeline(Sm).funcs]
    assert names == ["E_max0", "E", "Sm_sum0", "Sm"]
    for shape in [(1, 1), (3, 17), (11, 4)]:
        x = rng.standard_normal(shape, dtype=np.float32) * 4
        e = np.exp(x - x.max(axis=1, keepdims=True))
        check(Sm, e / e.sum(axis=1, keepdims=True), x, rtol=1e-5)


@pytest.mark.parametrize("subs,shapes", [
    ("ik,kj->ij", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(5, 5)]),
    ("ii->", [(7, 7)]),
    ("i,i->", [(13,), (13,)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("ij->ji", [(1, 6)]),
    ("ij,ij->ij", [(3, 3), (3, 3)]),
    ("i,j->ij", [(4,), (3,)]),
    ("ijk->j", [(2, 5, 3)]),
])
def test_einsum_matches_numpy(subs, shapes, rng):
    ops, arrays = [], []
    for n, shape in enumerate(shapes):
        sym = tl.sizes(" ".join(f"S{n}_{d}" for d in range(len(shape))))
        # distinct size symbols per operand: "valid" domains intersect them
        ops.append(tl.Input(f"X{n}", sym, tl.float64))
        arrays.append(rng.random(shape))
    F = tl.einsum(subs, *ops)
    check(F, np.asarray(np.einsum(subs, *arrays)), *arrays, rtol=1e-12)


@pytest.mark.parametrize("subs,msg", [
    ("ij...->ij", "broadcasting"),
    ("ij->ii", "repeated"),
    ("ij->iz", "appears in no operand"),
    ("ijk->i", "rank 2"),
    ("ij,jk->ik", "names 2 operands"),
    ("i1->i", "not a subscript"),
])
def test_einsum_errors(subs, msg):
    X = tl.Input("X", tl.sizes("P Q"))
    with pytest.raises(tl.DefinitionError, match=msg):
        tl.einsum(subs, X)
