"""Every DefinitionError is raised when the definition is written, naming the Func and index."""

from __future__ import annotations

import pytest

import tensorlang as tl


@pytest.fixture
def alg():
    M, N = tl.sizes("M N")
    A = tl.Input("A", (M, N), tl.float32)
    i, j, k = tl.vars("i j k")
    return A, i, j, k


def test_repeated_var_on_left(alg):
    A, i, j, k = alg
    F = tl.Func("F")
    with pytest.raises(tl.DefinitionError, match=r"F\[i, i\].*Var i appears twice"):
        F[i, i] = A[i, i]


def test_non_var_on_left(alg):
    A, i, j, k = alg
    F = tl.Func("F")
    with pytest.raises(tl.DefinitionError, match=r"left index 0 \(i \+ 1\) is not a Var"):
        F[i + 1, j] = A[i, j]


@pytest.mark.parametrize("index", [
    lambda i, j, idx: (i * j, j),
    lambda i, j, idx: (i // 2, j),
    lambda i, j, idx: (i, j % 3),
    lambda i, j, idx: (idx[i], j),
])
def test_non_affine_indices_are_accepted(alg, index):
    # (they are proven in bounds when called: tests/test_indices.py)
    A, i, j, k = alg
    idx = tl.Input("idx", tl.sizes("M"), tl.int64)
    a = A[index(i, j, idx)]
    assert len(a.indices) == 2


def test_float_index(alg):
    A, i, j, k = alg
    with pytest.raises(tl.DefinitionError, match="index 1 .* has type tl.float64"):
        A[i, j * 0.5]


@pytest.mark.parametrize("n", [1, 3])
def test_rank_mismatch(alg, n):
    A, i, j, k = alg
    with pytest.raises(tl.DefinitionError, match=rf"A has 2 dimensions but is read with {n}"):
        A[(i, j, k)[:n]]


def test_rank_mismatch_on_func(alg):
    A, i, j, k = alg
    F = tl.Func("F")
    F[i, j] = A[i, j]
    with pytest.raises(tl.DefinitionError, match="F has 2 dimensions but is read with 1"):
        F[i]


def test_empty_inferred_range():
    In = tl.Input("In", (3,), tl.float32)
    (x,) = tl.vars("x")
    F = tl.Func("F")
    with pytest.raises(tl.DefinitionError, match=r"inferred range of x in F\[x\] is empty"):
        F[x] = In[x] + In[x + 5]


def test_second_definition_is_an_update_with_halides_rules(alg):
    A, i, j, k = alg
    F = tl.Func("F")
    F[i, j] = A[i, j]
    F[i, j] = F[i, j] * 2  # a legal update: every (i, j) once
    assert len(F.updates) == 1
    with pytest.raises(tl.DefinitionError, match="index 0 is Var j, but the pure Var of "
                                                 "dimension 0 is i"):
        F[j, i] = A[i, j]
    with pytest.raises(tl.DefinitionError, match=r"the read F\[i - 1, j\] uses i - 1"):
        F[i, j] = F[i - 1, j]
    with pytest.raises(tl.DefinitionError, match="Var k is free on the right side"):
        F[i, j] = F[i, j] + A[i, k]
    with pytest.raises(tl.DefinitionError, match="index 0 is the reduction variable"):
        G = tl.Func("G")
        G[tl.RDom((0, 3))] = 1.0


def test_undefined_func_used_as_input(alg):
    A, i, j, k = alg
    G = tl.Func("G")
    with pytest.raises(tl.DefinitionError, match="Func G is read but has no definition"):
        G[i, j]


def test_recursive_pure_definition(alg):
    A, i, j, k = alg
    F = tl.Func("F", shape=tl.sizes("M N"))
    with pytest.raises(tl.DefinitionError, match="no definition yet"):
        F[i, j] = F[i, j] + 1


def test_uninferable_range_needs_shape(alg):
    A, i, j, k = alg
    F = tl.Func("F")
    with pytest.raises(tl.DefinitionError, match=r"cannot infer the range of variable i .* shape="):
        F[i] = tl.clamp_edge(A)[i, 0]
    G = tl.Func("G")
    with pytest.raises(tl.DefinitionError, match="cannot infer the range of variable i"):
        G[i] = 1.0


def test_bad_names_shapes_dtypes():
    with pytest.raises(tl.DefinitionError, match="not a valid identifier"):
        tl.Input("a b", (3,))
    with pytest.raises(tl.DefinitionError, match="dimension 0 is -1"):
        tl.Input("A", (-1,))
    with pytest.raises(tl.DefinitionError, match="unsupported dtype complex64"):
        tl.Input("A", (3,), "complex64")


def test_misuse_of_expressions(alg):
    A, i, j, k = alg
    with pytest.raises(TypeError, match="truth value"):
        bool(A[i, j] < 1)
    with pytest.raises(tl.DefinitionError, match="read it with indices"):
        A[i, j] + A
    with pytest.raises(tl.DefinitionError, match=r"arithmetic 'add' on two bool"):
        (A[i, j] < 1) + (A[i, j] > 2)
    with pytest.raises(tl.DefinitionError, match="cannot be defined"):
        A[i, j] = 1.0


def test_duplicate_names_in_pipeline():
    (N,) = tl.sizes("N")
    A1, A2 = tl.Input("A", (N,)), tl.Input("A", (N,))
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = A1[i] + A2[i]
    with pytest.raises(tl.DefinitionError, match="both named 'A'"):
        tl.compile(F)
