"""Calling compiled kernels: arguments, ShapeErrors, out=, layouts, inspection."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys

import numpy as np
import pytest

import tensorlang as tl


@pytest.fixture(scope="module")
def mm():
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.float32), tl.Input("B", (K, N), tl.float32)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]
    return C, tl.compile(C)


def test_one_kernel_runs_every_shape_positional_and_by_name(mm, rng):
    _, kern = mm
    for m, n, k in [(1, 1, 1), (3, 5, 7), (13, 2, 11), (64, 64, 64)]:
        a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-5)
        np.testing.assert_allclose(kern(B=b, A=a), a @ b, rtol=1e-5)
        np.testing.assert_allclose(kern(a, B=b), a @ b, rtol=1e-5)
    assert kern.input_names == ("A", "B")


@pytest.mark.parametrize("args,kwargs,msg", [
    ((np.zeros((2, 3), np.float64), np.zeros((3, 2), np.float32)), {},
     r"Input A expects dtype float32 but the array has float64"),
    ((np.zeros((2, 3, 1), np.float32), np.zeros((3, 2), np.float32)), {},
     r"Input A has 2 dimensions .* array has 3"),
    ((np.zeros((2, 3), np.float32), np.zeros((4, 2), np.float32)), {},
     r"size K is 3 from A.shape\[1\] but 4 from B.shape\[0\]"),
    ((np.zeros((2, 3), np.float32),), {}, r"missing Input B"),
    ((np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32)), {"Q": 1},
     r"unknown argument 'Q'"),
    (([[1.0]], np.zeros((1, 1), np.float32)), {}, r"must be a numpy.ndarray"),
    ((np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), np.zeros(1)), {},
     r"3 positional arrays given but C has 2 inputs"),
])
def test_shape_errors(mm, args, kwargs, msg):
    C, kern = mm
    with pytest.raises(tl.ShapeError, match=msg):
        kern(*args, **kwargs)
    with pytest.raises(tl.ShapeError, match=msg):
        tl.reference(C, *args, **kwargs)


def test_inputs_too_small_for_valid_domain():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = X[i - 1] + X[i + 1]
    kern = tl.compile(F)
    assert kern(np.ones(2, np.float32)).shape == (0,)
    with pytest.raises(tl.ShapeError, match=r"i ranges over \[1, 0\) for N=1.*too small"):
        kern(np.ones(1, np.float32))


def test_fixed_shape_func_reading_out_of_bounds_is_refused_at_call_time():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    F = tl.Func("F", shape=(N,))
    F[i] = X[i + 1]
    with pytest.raises(tl.ShapeError, match=r"read X\[i \+ 1\] reaches index 5 .*clamp_edge"):
        tl.compile(F)(np.ones(5, np.float32))


def test_size_no_input_fixes_is_passed_by_keyword_or_out():
    (N,) = tl.sizes("N")
    (i,) = tl.vars("i")
    X = tl.Input("X", (3,), tl.int64)
    F = tl.Func("F", shape=(N,))
    F[i] = tl.clamp_edge(X)[i] + i
    kern = tl.compile(F)
    x = np.array([5, 6, 7])
    np.testing.assert_array_equal(kern(x, N=5), [5, 7, 9, 10, 11])
    out = np.empty(4, np.int64)
    assert kern(x, out=out) is out
    np.testing.assert_array_equal(out, [5, 7, 9, 10])
    with pytest.raises(tl.ShapeError,
                       match="size N is not fixed by any input array; pass it as N="):
        kern(x)
    with pytest.raises(tl.ShapeError, match="Input X dimension 0 must be 3"):
        kern(np.zeros(4, np.int64), N=2)
    with pytest.raises(tl.ShapeError, match="size N is -1; a size is an array.s extent"):
        kern(x, N=-1)


def test_out_argument(mm, rng):
    _, kern = mm
    a, b = rng.random((4, 3), dtype=np.float32), rng.random((3, 5), dtype=np.float32)
    out = np.full((4, 5), np.nan, np.float32)
    assert kern(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    with pytest.raises(tl.ShapeError, match=r"out= has shape \(5, 4\) but C has shape \(4, 5\)"):
        kern(a, b, out=np.empty((5, 4), np.float32))
    with pytest.raises(tl.ShapeError, match="out= has dtype float64"):
        kern(a, b, out=np.empty((4, 5), np.float64))
    with pytest.raises(tl.ShapeError, match="C-contiguous"):
        kern(a, b, out=np.empty((5, 4), np.float32).T)
    with pytest.raises(tl.ShapeError, match="out= must be a numpy.ndarray, got list"):
        kern(a, b, out=[[0.0] * 5] * 4)  # (was an AttributeError)


def test_out_overlapping_an_input_is_still_correct(rng):
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float64)
    (i,) = tl.vars("i")
    F = tl.Func("F")
    F[i] = X[i + 1] + X[i]
    kern = tl.compile(F)
    buf = rng.random(10)
    expected = buf[1:] + buf[:-1]
    kern(buf, out=buf[:9])
    np.testing.assert_allclose(buf[:9], expected)


def test_non_contiguous_inputs_are_copied(mm, rng):
    _, kern = mm
    a = rng.random((6, 8), dtype=np.float32)[:, ::2]
    b = rng.random((10, 4), dtype=np.float32).T
    assert not a.flags.c_contiguous and not b.flags.c_contiguous
    np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-5)


@pytest.mark.parametrize("cols", [1000, 1031])  # root buffer bx: 4.20 and 4.33 MB
def test_large_root_buffer_on_huge_pages_is_correct(rng, cols):
    """A compute_root buffer of >= 4 MB comes from ``tl.alloc``: 2 MB-aligned, advised onto
    huge pages, its size rounded up to whole 2 MB pages; smaller ones from plain malloc."""
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float32)
    y, x = tl.vars("y x")
    bx, out = tl.Func("bx"), tl.Func("out")
    bx[y, x] = In[y, x] + In[y, x + 1]
    out[y, x] = bx[y, x] * bx[y + 1, x]
    s = tl.Schedule(out)
    s[bx].compute_root().parallel(y)
    s[out].vectorize(x, 8).parallel(y)
    kern = tl.compile(out, s)
    ir = kern.llvm_ir()
    assert "@\"tl.alloc\"" in ir and ("@\"madvise\"" in ir) == sys.platform.startswith("linux")
    a = rng.random((1049, cols + 1), dtype=np.float32)
    b = a[:, :-1] + a[:, 1:]
    assert b.nbytes >= 4 << 20  # bx: 1049 rows
    np.testing.assert_allclose(kern(a), b[:-1] * b[1:], rtol=1e-6)
    small = rng.random((20, 31), dtype=np.float32)  # the same kernel, a 2 KB buffer
    c = small[:, :-1] + small[:, 1:]
    np.testing.assert_allclose(kern(small), c[:-1] * c[1:], rtol=1e-6)


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc's malloc on Linux")
def test_large_root_buffer_is_reused_across_calls(rng):
    """A 4-32 MB buffer comes from glibc's heap again on the next call, not from a fresh
    mapping faulted in page by page (or huge page by huge page) on every call: the third call
    of a serial kernel with a 9 MB root buffer takes fewer page faults than the buffer has
    2 MB pages (``aligned_alloc(2 MB, ..)``, before, took all of them on every call)."""
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float32)
    y, x = tl.vars("y x")
    bx, out = tl.Func("bx"), tl.Func("out")
    bx[y, x] = In[y, x] + In[y, x + 1]
    out[y, x] = bx[y, x] * bx[y + 1, x]
    s = tl.Schedule(out)
    s[bx].compute_root()
    kern = tl.compile(out, s)
    a = rng.random((1501, 1501), dtype=np.float32)  # bx: 1501 x 1500 floats, 9 MB
    got = kern(a)
    kern(a, out=got)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    kern(a, out=got)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 4, faults
    b = a[:, :-1] + a[:, 1:]
    np.testing.assert_allclose(got, b[:-1] * b[1:], rtol=1e-6)


def test_inspection(mm):
    _, kern = mm
    nest = kern.loop_nest()
    assert "for i in [0, M):" in nest and "C[i, j] += A[i, k] * B[k, j]" in nest
    ir = kern.llvm_ir()
    assert ir.count("noalias") >= 3 and "fadd reassoc contract" in ir
    assert "define" in kern.llvm_ir(optimized=True)
    asm = kern.assembly()
    assert "C:" in asm or "C" in asm


def test_dump_after_each_pass(tmp_path):
    code = (
        "import tensorlang as tl\n"
        "N, = tl.sizes('N'); X = tl.Input('X', (N,)); i, = tl.vars('i')\n"
        "F = tl.Func('F'); F[i] = X[i] * 1 + 0\n"
        "tl.compile(F)\n")
    env = dict(os.environ, TENSORLANG_DUMP="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       check=True)
    assert "--- after realize ---" in r.stderr and "--- after simplify ---" in r.stderr
    assert "F[i] = X[i] * 1.0f + 0.0f" in r.stderr  # floats are never folded


def test_cli_version_and_target():
    r = subprocess.run([sys.executable, "-m", "tensorlang.autotuner.cli", "--version"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.startswith("tensorlang ")
    r = subprocess.run([sys.executable, "-m", "tensorlang.autotuner.cli", "target"],
                       capture_output=True, text=True, check=True)
    assert "cpu:" in r.stdout and "llvm:" in r.stdout


def test_thread_count_is_read_at_call_time(monkeypatch, rng):
    # TENSORLANG_NUM_THREADS, then OMP_NUM_THREADS, then the affinity mask, at every call of a
    # parallel kernel (not baked in when it was compiled)
    import os

    from tensorlang.backends.llvm import runtime
    from tensorlang.backends.llvm.runtime import num_threads, omp_max_threads

    monkeypatch.setattr(runtime, "AFFINITY_SECONDS", 0.0)  # (re-read the mask at every call)

    M, N = tl.sizes("M N")
    A = tl.Input("A", (M, N), tl.float64)
    i, j = tl.vars("i j")
    B = tl.Func("B")
    B[i, j] = A[i, j] * 2.0
    s = tl.Schedule(B)
    s[B].parallel(i)
    monkeypatch.delenv("TENSORLANG_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    kern = tl.compile(B, s)
    a = rng.random((37, 5))
    for env, want in ((("TENSORLANG_NUM_THREADS", "1"), 1), (("TENSORLANG_NUM_THREADS", "3"), 3),
                      (("OMP_NUM_THREADS", "2"), 2)):
        monkeypatch.delenv("TENSORLANG_NUM_THREADS", raising=False)
        monkeypatch.setenv(*env)
        np.testing.assert_array_equal(kern(a), 2 * a)
        assert omp_max_threads() == want
    monkeypatch.setenv("OMP_NUM_THREADS", "1,1")  # a nested list: its first entry
    assert num_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mask)})
        assert num_threads() == 1
        np.testing.assert_array_equal(kern(a), 2 * a)
        assert omp_max_threads() == 1
    finally:
        os.sched_setaffinity(0, mask)
    assert num_threads() == len(mask)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "zero")
    with pytest.raises(tl.CompileError, match="TENSORLANG_NUM_THREADS='zero' must be a positive"):
        kern(a)


def test_a_kernel_compiled_again_reuses_the_machine_code_of_the_process_memo(rng, monkeypatch):
    from tensorlang.backends.llvm import jit

    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.float64), tl.Input("B", (K, N), tl.float64)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j] + 3.0  # a kernel no other test of this process compiles
    a, b = rng.random((7, 5)), rng.random((5, 3))
    before = dict(jit.STATS)
    first = tl.compile(C)
    again = tl.compile(C)  # the same IR text, target and levels: the memo's module
    assert jit.STATS["llvm_compiles"] == before["llvm_compiles"] + 1
    assert jit.STATS["memo_hits"] == before["memo_hits"] + 1
    del first  # the memo keeps the module alive for the second kernel
    np.testing.assert_allclose(again(a, b), a @ b + 3.0 * 5)  # the sum over k of A*B + 3
    s = tl.Schedule(C)
    s[C].split("j", 2)  # another loop nest, another module
    tl.compile(C, s)
    assert jit.STATS["llvm_compiles"] == before["llvm_compiles"] + 2
    monkeypatch.setattr(jit, "MEMO_SIZE", 1)  # one module kept: the last one compiled
    s[C].unroll("j.i")
    tl.compile(C, s)
    assert len(jit._MEMO) == 1
    np.testing.assert_allclose(tl.compile(C)(a, b), a @ b + 3.0 * 5)  # compiled again
    assert jit.STATS["llvm_compiles"] == before["llvm_compiles"] + 4


def test_a_kernel_for_a_cpu_with_instructions_this_one_lacks_is_refused_not_run(mm, rng):
    # code compiled for another CPU (tl.compile(..., target=...)) is for object code, llvm-mca
    # and caches; run here it would die of an illegal instruction, so the call is refused
    from tensorlang.backends.llvm.target import Target, host_target

    C, _ = mm
    h = host_target()
    have = {f[1:] for f in h.features.split(",") if f.startswith("+")}
    lacking = [f for f in ("avx512f", "avx512fp16", "amx-tile", "avx10.1-512") if f not in have]
    if not lacking:
        pytest.skip("this CPU has every feature tried")
    other = Target(h.triple, h.cpu, f"{h.features},+{lacking[0]}", h.llvm_version,
                   h.llvmlite_version)
    assert other.missing_features(h) == (lacking[0],) and h.missing_features(h) == ()
    kern = tl.compile(C, target=other)
    a, b = rng.random((3, 4), dtype=np.float32), rng.random((4, 5), dtype=np.float32)
    for _ in range(2):  # (and no native entry built for a second call to bypass the check)
        with pytest.raises(tl.DeviceError, match=f"lacks: {lacking[0]}; compile it without"):
            kern(a, b)
    assert "ret" in kern.assembly()  # (still inspectable)
