"""storage_align: a Func's buffer padded so that a dimension's stride is ``factor * n + offset``
(TVM's ``storage_align``), on the CPU and in GPU shared memory, against NumPy on odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import workloads as W
from tensorlang.backends.cuda.ptx import find_ptxas, ptxas
from tensorlang.backends.cuda.rules import gpu_schedule, shared_bytes
from tensorlang.errors import ScheduleError


def _pair() -> tuple[tl.Func, tl.Func]:
    H, Wd = tl.sizes("H W")
    A = tl.Input("A", (H, Wd), tl.float32)
    y, x = tl.vars("y x")
    P = tl.Func("P")
    P[y, x] = A[y, x] * 2
    Q = tl.Func("Q")
    Q[y, x] = P[y, x] + P[y, x + 1]
    return P, Q


def _allocations(kernel) -> list[str]:
    return [line.strip() for line in kernel.loop_nest().splitlines() if "allocate" in line]


@pytest.mark.parametrize("root", [False, True])
def test_a_padded_buffer_computes_what_numpy_computes(root):
    P, Q = _pair()
    s = tl.Schedule(Q)
    s[Q].tile("y", "x", 4, 8)
    if root:
        s[P].compute_root()
        s[P].storage_align(0, 8, 1)  # a row of W: padded to 8n + 1 (symbolic)
    else:
        s[P].compute_at(s[Q], "x.o")
        s[P].storage_align(0, 16, 3)  # a tile's row of 9 elements: padded to 19
    assert "storage_align(0, " in s.to_python()
    k = tl.compile(Q, s)
    allocs = _allocations(k)
    assert allocs and all(("4, 19]" in a) != root for a in allocs), allocs
    if root:
        assert "// 8 * 8 + 1]" in allocs[0]
    rng = np.random.default_rng(0)
    for h, w in [(7, 13), (1, 2), (9, 17), (4, 9)]:
        a = rng.random((h, w), dtype=np.float32)
        np.testing.assert_allclose(k(a), 2 * a[:, :-1] + 2 * a[:, 1:], rtol=1e-6)
    replayed = tl.Schedule.from_json(Q, s.to_json())
    assert replayed.to_python() == s.to_python()


def test_an_outer_dimension_is_aligned_through_constant_inner_extents():
    # a 3-D buffer: the stride of dimension 0 is extents[1] * extents[2]; padding extents[1]
    # by p moves it by p * extents[2]
    H, Wd, C = tl.sizes("H W C")
    A = tl.Input("A", (H, Wd, C), tl.float32)
    y, x, c = tl.vars("y x c")
    P = tl.Func("P")
    P[y, x, c] = A[y, x, c] + 1
    Q = tl.Func("Q")
    Q[y, x, c] = P[y, x, c] * P[y, x, c]
    s = tl.Schedule(Q)
    s[Q].tile("y", "x", 2, 3)
    s[Q].split("c", 2)
    s[Q].reorder("y.o", "x.o", "c.o", "y.i", "x.i", "c.i")
    s[P].compute_at(s[Q], "c.o")  # a 2 x 3 x 2 tile
    s[P].storage_align(0, 8, 2)  # (3 + p) * 2 = 2 (mod 8): p = 2
    k = tl.compile(Q, s)
    assert all(a.endswith("2, 5, 2]") for a in _allocations(k)), _allocations(k)
    a = np.random.default_rng(1).random((5, 7, 3), dtype=np.float32)
    np.testing.assert_allclose(k(a), (a + 1) ** 2, rtol=1e-6)
    s[P].storage_align(0, 8, 1)  # (3 + p) * 2 is even: never 1 (mod 8)
    with pytest.raises(ScheduleError, match="no padding makes 1 modulo 8"):
        tl.compile(Q, s)


def test_storage_align_refuses_what_it_cannot_lay_out():
    P, Q = _pair()
    s = tl.Schedule(Q)
    with pytest.raises(ScheduleError, match="Q is an output"):
        s[Q].storage_align(0, 32, 4)
    with pytest.raises(ScheduleError, match=r"only a dimension with one inside it \(0 ... 0\)"):
        s[P].storage_align(1, 32, 4)
    with pytest.raises(ScheduleError, match="offset 32 must be less than its factor 32"):
        s[P].storage_align(0, 32, 32)
    with pytest.raises(ScheduleError, match="factor must be a positive int"):
        s[P].storage_align(0, 0, 0)
    with pytest.raises(ScheduleError, match="dim must be a non-negative int"):
        s[P].storage_align(-1, 32, 0)
    R = tl.Func("R")
    i, j = tl.vars("i j")
    r = tl.RDom((0, 3))
    R[i, j] = P[i, j]
    R[i, j] += P[i, j + r]
    s = tl.Schedule(R)
    with pytest.raises(ScheduleError, match=r"call it on s\['R'\]"):
        s[R].update(0).storage_align(0, 32, 4)


def test_the_gpu_gemm_with_its_transposed_tile_padded_in_shared_memory():
    # A's tile is staged transposed (A_shared[k, i]): threads that read a row of A write down a
    # column; rows 132 floats apart (4 mod 32) put eight consecutive k in eight banks
    f = W.BUILTIN["matmul"].build()
    sizes = dict(M=4096, N=4096, K=4096)  # 128 x 128 tiles, k blocks of 16
    assert shared_bytes(gpu_schedule(f, sizes=sizes, pad_words=0)) == 4 * (16 * 128 + 16 * 128)
    s = gpu_schedule(f, sizes=sizes)  # rule 3 pads A's tile (GEMM_PAD_WORDS)
    assert "s[\"A_shared\"].storage_align(0, 32, 4)" in s.to_python()
    assert shared_bytes(s) == 4 * (16 * 132 + 16 * 128)
    # (its results against NumPy, emulated on odd sizes: test_cuda_rules.py's
    # test_a_threads_register_tile_in_runs_of_columns_is_its_own runs this rule-based schedule)
    ptx = tl.compile(f, s, target="cuda").ptx()
    assert "ld.shared.v4.b32" in ptx  # the padded rows stay 16-byte aligned
    if find_ptxas() is not None:
        ptxas(ptx, "sm_90")
