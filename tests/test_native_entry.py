"""The native kernel entry (``backends/llvm/entry.py``): a repeated shape runs without ctypes,
and every call it must not run (another shape, dtype, layout, an overlapping or bad ``out``)
takes the general path, with its result or its error."""

import threading

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm import entry as native


@pytest.fixture
def mm():
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.float32), tl.Input("B", (K, N), tl.float32)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]
    s = tl.Schedule(C)
    s[C].split("j", 8, tail="GuardWithIf")
    s[C].parallel("i")
    return tl.compile(C, s)


class _Sub(np.ndarray):
    pass


def _no_ctypes(kern):
    """Make the ctypes path fail loudly: a call that still works ran through the entry."""
    def refuse(*args):
        raise AssertionError("the ctypes path ran")
    kern._fn = refuse


def test_the_layout_is_found_and_the_entry_built():
    assert native.probe_layout() is not None
    assert native._builder() is not None


def test_a_repeated_shape_runs_natively_and_right(mm, rng):
    a = rng.random((7, 5), dtype=np.float32)
    b = rng.random((5, 13), dtype=np.float32)
    first = mm(a, b)
    np.testing.assert_allclose(first, a @ b, rtol=1e-5)
    _no_ctypes(mm)
    out = np.full((7, 13), np.nan, np.float32)
    assert mm(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    a2 = rng.random((7, 5), dtype=np.float32)
    np.testing.assert_allclose(mm(a2, b), a2 @ b, rtol=1e-5)  # out=None: a new array
    assert mm(a2, b) is not mm(a2, b)


def test_inputs_by_name_run_natively_too(mm, rng):
    a = rng.random((9, 4), dtype=np.float32)
    b = rng.random((4, 3), dtype=np.float32)
    np.testing.assert_allclose(mm(B=b, A=a), a @ b, rtol=1e-5)  # publishes the plan
    _no_ctypes(mm)
    np.testing.assert_allclose(mm(A=a, B=b), a @ b, rtol=1e-5)
    out = np.empty((9, 3), np.float32)
    assert mm(B=b, A=a, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    with pytest.raises(AssertionError, match="ctypes path"):
        mm(A=a, B=b, K=4)  # a size by keyword: the general path
    with pytest.raises(tl.ShapeError, match="unknown argument"):
        mm(A=a, X=b)


def test_another_shape_takes_the_general_path_and_is_published(mm, rng):
    a, b = rng.random((1, 1), dtype=np.float32), rng.random((1, 9), dtype=np.float32)
    np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-5)
    a3, b3 = rng.random((11, 3), dtype=np.float32), rng.random((3, 17), dtype=np.float32)
    np.testing.assert_allclose(mm(a3, b3), a3 @ b3, rtol=1e-5)
    _no_ctypes(mm)  # the last shape is now the entry's plan
    np.testing.assert_allclose(mm(a3, b3), a3 @ b3, rtol=1e-5)
    with pytest.raises(AssertionError, match="ctypes path"):
        mm(a, b)  # the first shape is no longer the plan: the general path


def test_what_the_entry_refuses_still_gets_the_general_answer(mm, rng):
    a, b = rng.random((6, 4), dtype=np.float32), rng.random((4, 10), dtype=np.float32)
    mm(a, b)
    ref = a @ b
    # a non-contiguous input (copied), a subclass, an out that overlaps an input
    np.testing.assert_allclose(mm(np.asfortranarray(a), b), ref, rtol=1e-5)
    np.testing.assert_allclose(mm(a.view(_Sub), b), ref, rtol=1e-5)
    sq = rng.random((10, 10), dtype=np.float32)
    mm(sq, sq)
    want = sq @ sq
    mm(sq, sq, out=sq)  # the output is the input: a temporary, then copied
    np.testing.assert_allclose(sq, want, rtol=1e-5)


def test_bad_calls_after_a_published_plan_raise_the_general_errors(mm, rng):
    a, b = rng.random((6, 4), dtype=np.float32), rng.random((4, 10), dtype=np.float32)
    out = np.empty((6, 10), np.float32)
    mm(a, b, out=out)
    with pytest.raises(tl.ShapeError, match="dtype"):
        mm(a.astype(np.float64), b)
    with pytest.raises(tl.ShapeError, match="dtype"):
        mm(a, b, out=np.empty((6, 10), np.float64))
    with pytest.raises(tl.ShapeError, match="has shape"):
        mm(a, b, out=np.empty((10, 6), np.float32))
    frozen = np.empty((6, 10), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(tl.ShapeError, match="writeable"):
        mm(a, b, out=frozen)
    with pytest.raises(tl.ShapeError, match="C-contiguous"):
        mm(a, b, out=np.empty((10, 6), np.float32).T)
    with pytest.raises(tl.ShapeError):
        mm(a)
    with pytest.raises(tl.ShapeError):
        mm(a, np.ones((5, 10), np.float32))  # K disagrees
    with pytest.raises(tl.ShapeError):
        mm(a, b, out=[0.0] * 60)
    np.testing.assert_allclose(mm(a, b, out=out), a @ b, rtol=1e-5)


def test_a_size_only_out_fixes_is_never_taken_from_a_plan():
    (N,) = tl.sizes("N")
    (i,) = tl.vars("i")
    X = tl.Input("X", (3,), tl.int64)
    F = tl.Func("F", shape=(N,))
    F[i] = tl.clamp_edge(X)[i] + i
    kern = tl.compile(F)
    x = np.array([5, 6, 7])
    out = np.empty(4, np.int64)
    kern(x, out=out)
    kern(x, out=out)
    with pytest.raises(tl.ShapeError, match="size N is not fixed"):
        kern(x)


def test_calls_from_threads_with_different_shapes(mm):
    rng = np.random.default_rng(1)
    shapes = [(3, 2, 5), (17, 9, 1), (1, 1, 1), (8, 16, 24)]
    data = [(rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32))
            for m, k, n in shapes]
    errors = []

    def work(t):
        try:
            for step in range(200):
                a, b = data[(t + step) % len(data)]
                np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-5)
        except Exception as exc:  # reported below, with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_switched_off_every_call_goes_through_ctypes(monkeypatch, rng):
    monkeypatch.setattr(native, "NATIVE_ENTRY", 0)
    (n,) = tl.sizes("n")
    X = tl.Input("X", (n,), tl.float64)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = X[i] * 2.0
    kern = tl.compile(F)
    x = rng.random(5)
    np.testing.assert_array_equal(kern(x), 2 * x)
    assert kern._entry is None
    monkeypatch.setattr(native, "NATIVE_ENTRY", 1)  # a kernel decides when it is made
    np.testing.assert_array_equal(kern(x), 2 * x)
    assert kern._entry is None


def test_too_many_arguments_for_the_entry():
    assert native.make_entry(0, [np.dtype(np.float64)] * (native.MAX_ARGS + 1),
                             [1] * (native.MAX_ARGS + 1), 0) is None


@pytest.mark.filterwarnings("ignore:no tuning record")
def test_auto_without_shapes_runs_a_repeated_shape_natively(tmp_path, rng):
    from tensorlang.autotuner.auto import compile_auto
    from tensorlang.autotuner.cache import KernelCache
    from tensorlang.autotuner.workloads import BUILTIN

    kern = compile_auto(BUILTIN["matmul"].build(), cache=KernelCache(tmp_path / "k.sqlite"))
    shapes = [(5, 3, 7), (33, 17, 65), (6, 3, 7), (5, 3, 7), (33, 17, 65), (33, 17, 65),
              (6, 3, 7), (6, 3, 7), (5, 3, 7)]
    data = {sh: (rng.random(sh[:2], dtype=np.float32), rng.random(sh[1:], dtype=np.float32))
            for sh in shapes}
    for sh in shapes:  # shapes alternate between two kernels, sometimes in the same bucket
        a, b = data[sh]
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4, atol=1e-5)
        out = np.empty((sh[0], sh[2]), np.float32)
        assert kern(a, b, out=out) is out
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-5)
    for v in kern._variants:
        _no_ctypes(v["kernel"])
    a, b = data[shapes[-1]]
    np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(kern(B=b, A=a), a @ b, rtol=1e-4, atol=1e-5)
    with pytest.raises(AssertionError, match="ctypes path"):
        kern(*data[(6, 3, 7)])  # the same bucket's kernel, another plan: the general path


def test_several_outputs_run_natively(rng):
    # PolyBench bicg: s = A^T r and q = A p, two outputs of different shapes
    N, M = tl.sizes("N M")
    A = tl.Input("A", (N, M), tl.float64)
    p, r = tl.Input("p", (M,), tl.float64), tl.Input("r", (N,), tl.float64)
    i, j = tl.vars("i j")
    s, q = tl.Func("s"), tl.Func("q")
    s[j] = tl.sum(r[i] * A[i, j])
    q[i] = tl.sum(A[i, j] * p[j])
    kern = tl.compile([s, q])
    a, pv, rv = rng.random((7, 5)), rng.random(5), rng.random(7)
    by_name = {"A": a, "p": pv, "r": rv}
    args = tuple(by_name[n] for n in kern.input_names)
    got = kern(*args)
    np.testing.assert_allclose(got[0], rv @ a)
    np.testing.assert_allclose(got[1], a @ pv)
    _no_ctypes(kern)
    s2, q2 = kern(A=a, p=pv, r=rv)
    np.testing.assert_allclose(s2, rv @ a)
    np.testing.assert_allclose(q2, a @ pv)
    outs = [np.empty(5), np.empty(7)]
    done = kern(*args, out=outs)
    assert type(done) is tuple and done[0] is outs[0] and done[1] is outs[1]
    np.testing.assert_allclose(outs[1], a @ pv)
    with pytest.raises(AssertionError, match="ctypes path"):
        kern(*args, out=(outs[0], rv))  # an output that is an input: the general path
    with pytest.raises(tl.ShapeError, match="tuple of 2"):
        kern(*args, out=outs[0])
    with pytest.raises(tl.ShapeError, match="has shape"):
        kern(*args, out=(outs[1], outs[0]))
