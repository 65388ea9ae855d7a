"""The CUDA backend (backends/cuda): schedules mapped to the GPU, checked three ways.

- On every machine: the kernels' logic and launch dimensions, run block by block and thread by
  thread on the CPU (``emulate``), against NumPy on odd sizes; the PTX assembled by ``ptxas``
  (the ``nvidia-cuda-nvcc`` wheel of the ``test`` extra); legality and the errors a user meets.
- Where a GPU and ``cuda-bindings`` are present: the same kernels run on it against NumPy
  (skipped elsewhere, with the reason).
"""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import workloads as W
from tensorlang.backends import get_backend
from tensorlang.backends.cuda.backend import bundle, unbundle
from tensorlang.backends.cuda.driver import visible_capability
from tensorlang.backends.cuda.emulate import emulate
from tensorlang.backends.cuda.launches import launch_error, plan
from tensorlang.backends.cuda.ptx import find_ptxas, ptxas
from tensorlang.backends.cuda.rules import gpu_schedule
from tensorlang.errors import CompileError, DeviceError, IllegalScheduleError, ShapeError
from tensorlang.schedule.lower import lower

HAS_PTXAS = find_ptxas() is not None
HAS_GPU = visible_capability() is not None
needs_ptxas = pytest.mark.skipif(not HAS_PTXAS, reason="ptxas not installed (pip install "
                                 "nvidia-cuda-nvcc, the test extra)")
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no usable CUDA GPU here (no NVIDIA driver "
                               "or GPU, or no cuda-bindings)")

#: the built-in workloads at odd sizes (primes, 1, sizes no tile divides)
SHAPES = {"matmul": dict(M=19, N=37, K=13), "softmax": dict(R=7, S=33),
          "blur": dict(H=11, W=45), "conv2d": dict(Nb=2, CI=3, H=7, W=9, CO=5),
          "layernorm": dict(R=5, S=17), "batch_matmul": dict(B=3, M=5, N=1, K=4)}


def _arrays(f, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.random(v).astype(np.float32) for k, v in W.input_shapes(f, sizes).items()}


def _hand(name: str, f: tl.Func) -> tl.Schedule:
    """A hand schedule per workload, as a user of Halide would write it."""
    s = tl.Schedule(f)
    if name == "matmul":
        s[f].gpu_tile("i", "j", 4, 16)
    elif name == "blur":
        p = tl.Pipeline(f)
        bx = next(g for g in p.funcs if g.name == "bx")
        yo, xo, yi, xi = s[f].gpu_tile("y", "x", 4, 8)
        s[bx].compute_at(s[f], xi)  # each thread computes the three bx it reads
    elif name == "softmax":
        p = tl.Pipeline(f)
        for g in p.funcs:
            if g.name in ("mx", "sm"):
                s[g].gpu_tile("i", 2)
            elif g.name == "e":
                s[g].gpu_tile("i", "j", 2, 16)
        s[f].gpu_tile("i", "j", 2, 16)
    elif name == "conv2d":
        p = tl.Pipeline(f)
        pad = next(g for g in p.funcs if g.name == "pad")
        s[pad].compute_inline()
        s[f].gpu_tile("y", "x", 2, 4)
        s[f].gpu_blocks("co", "y.o", "x.o")  # n stays a serial host loop around launches
    else:
        return gpu_schedule(f)
    return s


def _staged(name: str, f: tl.Func) -> tl.Schedule:
    """Cooperative schedules: tiles staged in shared memory by a block's threads, barriers
    between the stages (Halide's GPU schedules with compute_at a block loop)."""
    s = tl.Schedule(f)
    g = {h.name: h for h in tl.Pipeline(f).funcs}
    if name == "matmul":
        s[f].tile("i", "j", 8, 8)
        s[f].split("k", 4)
        s[f].reorder("i.o", "j.o", "k.o", "i.i", "j.i", "k.i")
        s[f].gpu_blocks("i.o", "j.o")
        s[f].gpu_threads("i.i", "j.i")
        for t in ("A", "B"):
            c = s.cache_read(t, s[f], "k.o", scope="shared")
            c.gpu_threads(*c.loops[-2:])
    elif name == "blur":
        s[f].gpu_tile("y", "x", 4, 16)
        s[g["bx"]].compute_at(s[f], "x.o")
        s[g["bx"]].gpu_threads("y", "x")
    elif name == "softmax":
        s[f].gpu_tile("i", "j", 2, 16)
        s[g["e"]].compute_inline()
        s[g["mx"]].compute_at(s[f], "j.o")
        s[g["mx"]].gpu_threads("i")
        s[g["sm"]].compute_at(s[f], "j.o")  # left serial: thread 0 of the block computes it
    elif name == "conv2d":
        s[f].gpu_tile("y", "x", 4, 8)
        s[f].gpu_blocks("co", "y.o", "x.o")
        s[f].reorder("co", "y.o", "x.o", "ci", "y.i", "x.i", "ry", "rx")
        s[g["pad"]].compute_at(s[f], "ci")  # one input channel's tile + halo per step
        s[g["pad"]].gpu_threads("y", "x")
    return s


STAGED = ["blur", "conv2d", "matmul", "softmax"]


@pytest.mark.parametrize("name", STAGED)
def test_tiles_staged_in_shared_memory_with_barriers(name):
    w = W.BUILTIN[name]
    f = w.build()
    s = _staged(name, f)
    program = plan(lower(f, s))
    assert any(lc.cooperative and lc.shared for lc in program.launches)
    ones = {k: 3 if name == "blur" else 1 for k in SHAPES[name]}  # blur's smallest image: 3x3
    for seed, sizes in enumerate((SHAPES[name], ones)):
        arrays = _arrays(f, sizes, seed)
        got = emulate(f, s)(**arrays)  # each block's threads an OpenMP team: real barriers
        np.testing.assert_allclose(got, w.numpy(arrays)(), rtol=2e-5, atol=1e-5)
    ptx = tl.compile(f, s, target="cuda").ptx()
    assert "bar.sync" in ptx and ".shared" in ptx
    if HAS_PTXAS:
        assert "used 1 barriers" in ptxas(ptx, "sm_90")


def _accumulated(f: tl.Func, scope: str | None, swap_copy: bool = False, rows: int = 1,
                 tile: int = 8, kblock: int = 4, copy_axes: int = 2) -> tl.Schedule:
    """matmul with C's ``tile`` x ``tile`` block tile (``rows`` times as many rows) computed per
    block (``cache_write`` at the block loop, in ``scope``), ``rows`` rows per thread
    (unrolled: a register tile), its k loop in blocks of ``kblock`` whose A and B tiles the
    threads stage in shared memory (their last ``copy_axes`` loops mapped to threads);
    ``swap_copy``: the copy out maps C's rows to threadIdx.x where the tile's stages map them
    to threadIdx.y."""
    s = tl.Schedule(f)
    s[f].tile("i", "j", tile * rows, tile)
    local = s.cache_write(f, "j.o", scope=scope)
    local.split("k", kblock)
    if rows > 1:
        local.split("i", rows)
        local.reorder("k.o", "i.o", "j", "k.i", "i.i")
        local.unroll("i.i")
        local.gpu_threads("i.o", "j")
        s[f].split("i.i", rows)
        s[f].reorder("i.o", "j.o", "i.i.o", "j.i", "i.i.i")
    else:
        local.reorder("k.o", "i", "j", "k.i")
        local.gpu_threads("i", "j")
    for t in ("A", "B"):
        c = s.cache_read(t, local, "k.o", scope="shared")
        c.gpu_threads(*c.loops[-2:][:copy_axes])
    tile_rows = "i.i.o" if rows > 1 else "i.i"
    if swap_copy:
        s[f].reorder("i.o", "j.o", "j.i", tile_rows)
    s[f].gpu_blocks("i.o", "j.o")
    s[f].gpu_threads(*(("j.i", tile_rows) if swap_copy else (tile_rows, "j.i")))
    return s


def test_a_block_tile_computed_per_block_with_its_operands_staged_per_k_step():
    # cache_write at the block loop: C's 8 x 8 tile (C_local, in shared memory) accumulates
    # over k steps whose A and B tiles are staged in shared memory by the block's threads.
    # Loop partitioning makes a whole-tile and a partial-tile version of the k loop, so each
    # staged copy is allocated twice in one kernel, in versions of which one runs: one static
    # array a buffer, sized by the larger
    f = W.BUILTIN["matmul"].build()
    s = _accumulated(f, None)
    for launch in plan(lower(f, s)).launches:  # the whole tiles' columns, then the last ones
        assert set(launch.shared) == {"C_local", "A_shared", "B_shared"}
    rng = np.random.default_rng(4)
    kern = emulate(f, s)
    for m, n, k in [(13, 17, 11), (1, 1, 1), (16, 24, 8)]:
        a = rng.random((m, k), dtype=np.float32)
        b = rng.random((k, n), dtype=np.float32)
        np.testing.assert_allclose(kern(A=a, B=b), a @ b, rtol=1e-5)
    ptx = tl.compile(f, s, target="cuda").ptx()
    kernels = tl.compile(f, s, target="cuda")
    ptx = kernels.ptx()
    # C_local, A's copy and B's copy: three arrays a kernel
    assert ptx.count(".shared .align 16 .b8") == 3 * len(kernels.launches)
    if HAS_PTXAS:
        ptxas(ptx, "sm_90")
    # 16 x 512 tiles of A and B take 64 KiB, 65 KiB with C's tile
    s = _accumulated(f, None, tile=16, kblock=512, copy_axes=1)
    with pytest.raises(CompileError, match="need up to 66560 bytes"):
        tl.compile(f, s, target="cuda")


@pytest.mark.parametrize("rows", [1, 2])
def test_a_block_tile_kept_in_each_threads_registers_across_the_k_blocks(rows):
    # cache_write(..., scope="local") at the block loop: each thread keeps its elements of C's
    # tile (1, or a register tile of 2 rows) in its own memory across the k blocks (registers:
    # no stack frame), where "shared" (and no scope) keeps the whole tile in shared memory
    f = W.BUILTIN["matmul"].build()
    s = _accumulated(f, "local", rows=rows)
    assert "s.cache_write('C', 'j.o', scope='local')" in s.to_python()
    for launch in plan(lower(f, s), frozenset({"C_local"})).launches:
        assert set(launch.shared) == {"A_shared", "B_shared"}
    assert all("C_local" in lc.shared for lc in plan(lower(f, _accumulated(f, None))).launches)
    rng = np.random.default_rng(6)
    kern = emulate(f, s)
    for m, n, k in [(13, 17, 11), (1, 1, 1), (16, 24, 8), (9, 8, 33), (37, 41, 29)]:
        a = rng.random((m, k), dtype=np.float32)
        b = rng.random((k, n), dtype=np.float32)
        np.testing.assert_allclose(kern(A=a, B=b), a @ b, rtol=1e-5)
    ptx = tl.compile(f, s, target="cuda").ptx()
    assert "C_local" not in ptx and ".shared .align 16 .b8" in ptx
    if HAS_PTXAS:
        info = ptxas(ptx, "sm_90")
        assert "0 bytes stack frame" in info and "used 1 barriers" in info
    # a copy out that maps the tile to the threads otherwise would read other threads' elements
    s = _accumulated(f, "local", swap_copy=True, rows=rows)
    with pytest.raises(CompileError, match="C_local is each thread's own buffer .* maps it to "
                                           "the threads differently"):
        tl.compile(f, s, target="cuda")
    np.testing.assert_allclose(  # the same in shared memory is right
        emulate(f, _accumulated(f, "shared", swap_copy=True, rows=rows))(A=a, B=b), a @ b,
        rtol=1e-5)
    # a tile left serial in the block runs in thread 0 only: no thread's own buffer
    s = tl.Schedule(f)
    s[f].tile("i", "j", 8, 8)
    s.cache_write(f, "j.o", scope="local")
    s[f].gpu_blocks("i.o", "j.o")
    s[f].gpu_threads("i.i", "j.i")
    with pytest.raises(CompileError, match="C_local is each thread's own buffer .* outside "
                                           "the thread loops"):
        tl.compile(f, s, target="cuda")


def test_shared_buffers_need_a_constant_size_and_the_scope_is_checked():
    f = W.BUILTIN["conv2d"].build()
    g = {h.name: h for h in tl.Pipeline(f).funcs}
    s = tl.Schedule(f)
    s[f].gpu_tile("y", "x", 4, 8)
    s[g["pad"]].compute_at(s[f], "x.o")  # every input channel: CI is not known when compiling
    s[g["pad"]].gpu_threads("y", "x")
    with pytest.raises(CompileError, match="pad is shared .* no constant bound"):
        tl.compile(f, s, target="cuda")
    f = W.BUILTIN["matmul"].build()
    s = tl.Schedule(f)
    s[f].gpu_tile("i", "j", 8, 8)
    s.cache_read("A", s[f], "j.i", scope="shared")  # inside the thread loops: one thread's
    with pytest.raises(CompileError, match="A_shared was asked for in shared memory"):
        tl.compile(f, s, target="cuda")
    with pytest.raises(tl.ScheduleError, match="scope must be"):
        tl.Schedule(f).cache_read("A", tl.Schedule(f)[f], "j", scope="texture")


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("how", ["hand", "rule-based"])
def test_gpu_kernels_compute_what_numpy_computes(name, how):
    w = W.BUILTIN[name]
    f = w.build()
    s = _hand(name, f) if how == "hand" else gpu_schedule(f)
    arrays = _arrays(f, SHAPES[name])
    got = emulate(f, s)(**arrays)
    np.testing.assert_allclose(got, w.numpy(arrays)(), rtol=2e-5, atol=1e-5)


@needs_ptxas
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_ptx_of_every_workload_is_accepted_by_ptxas(name):
    f = W.BUILTIN[name].build()
    for s in (_hand(name, f), gpu_schedule(f)):
        kern = tl.compile(f, s, target="cuda:sm_90")
        ptx = kern.ptx()
        assert ".target sm_90" in ptx and ".entry" in ptx
        report = ptxas(ptx, "sm_90")
        # one device kernel per launch, each compiled by ptxas
        assert report.count("Compiling entry function") == len(kern.launches)
    if name == "matmul":  # an older architecture too (the A100's)
        ptxas(tl.compile(f, gpu_schedule(f), target="cuda:sm_80").ptx(), "sm_80")


@needs_ptxas
def test_kernels_state_their_block_size_so_ptxas_fits_registers_to_it():
    # 16 x 32 threads with 8 x 8 register tiles: ptxas keeps to 65536 / 512 = 128 registers a
    # thread (.maxntid), where without the bound it took more and the launch failed on an H200
    # (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    import optuna

    from tensorlang.backends.cuda.space import GPUSearchSpace

    f = W.BUILTIN["matmul"].build()
    s = GPUSearchSpace(f, dict(M=67, N=131, K=29)).sample(optuna.trial.FixedTrial(
        {"C.tile": "16x32", "C.kblock": 16, "C.regtile": 8, "C.accumulate": "registers",
         "C.unroll": False}))
    kern = tl.compile(f, s, target="cuda")
    ptx = kern.ptx()
    assert ptx.count(".maxntid") == ptx.count(".entry") == len(kern.launches)
    # blocks of at most 256 threads fit at any register count: no bound (it changes ptxas's
    # choices: a 256-thread kernel capped at 128 registers, spilling)
    assert ".maxntid" not in tl.compile(f, gpu_schedule(f), target="cuda").ptx()
    report = ptxas(ptx, "sm_90")
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", report)]
    blocks = [re.search(r"\.maxntid (\d+), (\d+), (\d+)", e).groups()
              for e in ptx.split(".entry")[1:]]
    assert max(int(x) * int(y) * int(z) for x, y, z in blocks) == 512
    assert all(r * int(x) * int(y) * int(z) <= 65536 for r, (x, y, z) in zip(regs, blocks))


def test_ptxas_is_installed_where_ci_runs():
    # the test extra installs nvidia-cuda-nvcc: CI must not skip the PTX checks silently
    if os.environ.get("CI"):
        assert HAS_PTXAS, "ptxas missing on CI: pip install -e '.[test]' installs it"


def test_mapped_loops_become_special_registers_and_fp32_exp_needs_no_libdevice():
    f = W.BUILTIN["softmax"].build()
    ptx = tl.compile(f, gpu_schedule(f), target="cuda").ptx()
    assert "%ctaid.x" in ptx and "%tid.x" in ptx and "%tid.y" in ptx
    assert "call" not in ptx.split(".entry", 1)[1].replace("call.uni", "")  # no libm calls
    # the read-only inputs are loaded through the non-coherent cache (noalias + readonly)
    assert "ld.global.nc" in tl.compile(W.BUILTIN["matmul"].build(),
                                        gpu_schedule(W.BUILTIN["matmul"].build()),
                                        target="cuda").ptx()


def test_default_schedule_runs_each_stage_in_one_thread():
    f = W.BUILTIN["blur"].build()
    program = plan(lower(tl.Pipeline(f), None))
    assert len(program.launches) == 2 and all(lc.single_thread for lc in program.launches)
    arrays = _arrays(f, dict(H=5, W=6))
    np.testing.assert_allclose(emulate(f)(**arrays), W.BUILTIN["blur"].numpy(arrays)(),
                               rtol=1e-6)


def test_the_launch_plan_of_a_call_is_known_without_a_gpu():
    # the host program run with stand-ins for the driver: which kernels a call at given sizes
    # launches, with their grid and block (16 x 4 threads; 3 x 2 whole tiles, then the tiles
    # of the last, partial column of tiles and of the partial row)
    f = W.BUILTIN["matmul"].build()
    s = tl.Schedule(f)
    s[f].gpu_tile("i", "j", 4, 16)
    kern = tl.compile(f, s, target="cuda:sm_90")
    assert kern.launch_plan(dict(M=8, N=32, K=5)) == [("C_k0", (2, 2, 1), (16, 4, 1))]
    plan_ = kern.launch_plan(dict(M=9, N=40, K=5))
    assert [(grid, block) for _, grid, block in plan_][0] == ((2, 2, 1), (16, 4, 1))
    assert sum(g[0] * g[1] * g[2] for _, g, _ in plan_) == 3 * 3  # ceil(9/4) x ceil(40/16)
    with pytest.raises(ShapeError):
        kern.launch_plan(dict(M=8))


def test_partial_tiles_launch_the_full_block_and_guard_the_threads():
    f = W.BUILTIN["matmul"].build()
    s = tl.Schedule(f)
    s[f].gpu_tile("i", "j", 4, 16)
    program = plan(lower(f, s))
    # the tail tiles of GuardWithIf: thread extents min(16, N - 16 j.o) launched as 16, guarded
    guarded = [lc for lc in program.launches if lc.guarded]
    assert guarded and all(str(lc.block[0]) == "16" for lc in guarded)
    kern = emulate(f, s)
    for m, n in ((1, 1), (4, 16), (5, 17), (3, 50)):
        arrays = _arrays(f, dict(M=m, N=n, K=3))
        np.testing.assert_allclose(kern(**arrays), arrays["A"] @ arrays["B"], rtol=1e-5)


def _doubling(block: int = 256, lanes: int = 4) -> tuple[tl.Func, tl.Schedule]:
    """f[i] = 2 A[i], float32: blocks of ``block`` elements, each thread a ``lanes`` vector."""
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N,), tl.float32)
    i = tl.Var("i")
    f = tl.Func("f")
    f[i] = A[i] * 2.0
    s = tl.Schedule(f)
    io, ii = s[f].split(i, block)
    s[f].gpu_blocks(io)
    t, v = s[f].split(ii, lanes)
    s[f].gpu_threads(t).vectorize(v, lanes)
    return f, s


@needs_ptxas
def test_a_vector_loop_of_a_partial_tile_is_masked_in_the_kernel():
    # each thread's 4-lane vector of a 256-wide block; the last block's lanes past N are masked
    f, s = _doubling()
    kern = tl.compile(f, s, target="cuda")
    assert "min(4, " in kern.loop_nest()
    ptxas(kern.ptx(), "sm_90")
    emulated = emulate(f, s)
    for n in (1, 5, 256, 1027):
        a = np.random.default_rng(n).random(n).astype(np.float32)
        np.testing.assert_array_equal(emulated(a), a * 2.0)


def test_a_vector_loop_loads_and_stores_four_floats_in_one_instruction():
    # buffer parameters are 16-byte aligned and each thread's 4 lanes start at a multiple of 4:
    # one ld.global.v4 and one st.global.v4 per thread in the full tiles' kernel, where LLVM
    # had split them into four 4-byte accesses; the partial tile's masked lanes stay scalar
    f, s = _doubling()
    ptx = tl.compile(f, s, target="cuda").ptx()
    assert "ld.global.nc.v4.b32" in ptx or "ld.global.nc.v4.f32" in ptx
    assert "st.global.v4.b32" in ptx or "st.global.v4.f32" in ptx
    assert ".ptr .align 16" in ptx  # the parameters' alignment, stated to ptxas too
    if HAS_PTXAS:
        ptxas(ptx, "sm_90")


def test_gpu_arrays_not_aligned_for_vector_loads_go_through_an_aligned_copy(monkeypatch):
    import fake_cuda
    from tensorlang.backends.cuda.arrays import DeviceArray

    f, s = _doubling()
    kern = tl.compile(f, s, target="cuda")
    dev = fake_cuda.install(monkeypatch, kern)
    n = 1027
    a = np.random.default_rng(0).random(n + 1).astype(np.float32)
    da, dout = DeviceArray.from_host(a), DeviceArray((n + 1,), np.float32)
    assert da.ptr % 16 == 0 and dout.ptr % 16 == 0

    class View:  # elements 1..n of a GPU array: 4 bytes past an aligned address
        def __init__(self, d):
            self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "version": 3,
                                             "data": (d.ptr + 4, False), "strides": None}
    dout.fill(-1.0)
    kern(View(da), out=View(dout))
    got = dout.copy_to_host()
    np.testing.assert_array_equal(got[1:], a[1:] * 2.0)
    assert got[0] == -1.0  # nothing written before the view
    assert dev.copies == 2  # the input copied in, the output copied out
    kern(da, out=DeviceArray((n + 1,), np.float32))  # aligned: in place, no copy
    assert dev.copies == 2


def test_serial_host_loop_around_launches():
    # an update over time steps whose pure loop is mapped: the host loops over t, launching
    # one kernel per step (the dependence between steps is carried by the host loop)
    N, T = tl.sizes("N T")
    A = tl.Input("A", (N,), tl.float32)
    x = tl.vars("x")[0]
    f = tl.Func("f", shape=(N,))
    f[x] = A[x]
    t = tl.RDom((0, T), name="t")
    f[x] = f[x] * 0.5 + 1.0 + tl.cast(tl.float32, t.x)
    s = tl.Schedule(f)
    s[f].update(0).reorder("t_x", "x")
    s[f].update(0).gpu_tile("x", 8)
    a = np.arange(13, dtype=np.float32)
    want = a.copy()
    for k in range(4):
        want = want * 0.5 + 1.0 + k
    np.testing.assert_allclose(emulate(f, s)(A=a, T=4), want, rtol=1e-6)
    ptx = tl.compile(f, s, target="cuda").ptx()
    if HAS_PTXAS:
        ptxas(ptx, "sm_90")


def test_gpu_loop_that_carries_a_dependence_is_refused_with_a_witness():
    N = tl.sizes("N")[0]
    A = tl.Input("A", (N,), tl.float32)
    x = tl.vars("x")[0]
    f = tl.Func("f", shape=(N,))
    f[x] = A[x]
    r = tl.RDom((1, N), name="r")
    f[r.x] = f[r.x - 1] + A[r.x]  # a scan: iteration r reads r - 1
    s = tl.Schedule(f)
    s[f].update(0).gpu_tile("r_x", 32)
    with pytest.raises(IllegalScheduleError, match=r"cannot run r_x\.\w as gpu_\w+.*witness|"
                       r"cannot run r_x\.\w as gpu_\w+: the flow dependence"):
        tl.compile(f, s, target="cuda")


def test_unsupported_shapes_of_mapping_are_refused_with_the_fix():
    f = W.BUILTIN["matmul"].build()
    s = tl.Schedule(f)
    s[f].gpu_threads("i")
    s[f].gpu_blocks("j")  # a block loop inside a thread loop
    with pytest.raises(CompileError, match="inside gpu_threads loop i"):
        tl.compile(f, s, target="cuda")
    s = tl.Schedule(f)
    s[f].split("j", 8)
    s[f].gpu_blocks("i")
    s[f].gpu_threads("j.i")  # a serial loop j.o of the block around the thread loop: fine
    a = _arrays(f, dict(M=3, N=19, K=2))
    np.testing.assert_allclose(emulate(f, s)(**a), a["A"] @ a["B"], rtol=1e-5)
    s = tl.Schedule(f)
    s[f].split("j", 8)
    s[f].gpu_threads("i", "j.i")  # a serial loop j.o between two thread loops
    with pytest.raises(CompileError, match="GPU loop j.i is inside a serial loop"):
        tl.compile(f, s, target="cuda")
    s = tl.Schedule(f)
    s[f].parallel("i")
    with pytest.raises(CompileError, match="parallel .*inside GPU kernel"):
        tl.compile(f, s, target="cuda")
    with pytest.raises(CompileError, match="mapped to the GPU .*target=\"cuda\""):
        s = tl.Schedule(f)
        s[f].gpu_tile("i", 4)
        tl.compile(f, s)  # the CPU backend


def test_launch_limits_and_math_without_device_implementation():
    assert "at most 1024" in launch_error("k", (1, 1, 1), (64, 32, 1))
    assert "grid dimension y" in launch_error("k", (1, 70000, 1), (32, 1, 1))
    assert launch_error("k", (10**6, 1, 1), (256, 4, 1)) is None
    N = tl.sizes("N")[0]
    A = tl.Input("A", (N,), tl.float64)
    x = tl.vars("x")[0]
    f = tl.Func("f")
    f[x] = tl.sin(A[x])
    s = tl.Schedule(f)
    s[f].gpu_tile("x", 64)
    with pytest.raises(CompileError, match="sin of float64 has no GPU implementation"):
        tl.compile(f, s, target="cuda")


@pytest.mark.parametrize("name,a", [("exp", np.linspace(-745.0, 709.0, 1001)),
                                    ("log", np.geomspace(1e-310, 1e308, 1001))])
def test_float64_exp_and_log_are_polynomials_on_the_gpu_too(name, a):
    N = tl.sizes("N")[0]
    A = tl.Input("A", (N,), tl.float64)
    x = tl.vars("x")[0]
    f = tl.Func("f")
    f[x] = getattr(tl, name)(A[x])
    s = tl.Schedule(f)
    s[f].gpu_tile("x", 64)
    ptx = tl.compile(f, s, target="cuda").ptx()
    assert "call" not in ptx  # no libdevice, no libm
    if HAS_PTXAS:
        ptxas(ptx, "sm_90")
    np.testing.assert_allclose(emulate(f, s)(A=a), getattr(np, name)(a), rtol=6.7e-16,
                               atol=1e-320)


def test_targets_and_cached_object_code():
    f = W.BUILTIN["blur"].build()
    s = gpu_schedule(f)
    with pytest.raises(CompileError, match="unknown CUDA target"):
        tl.compile(f, s, target="cuda:volta")
    kern = tl.compile(f, s, target="cuda:sm_80", emit_object=True)
    assert ".target sm_80" in kern.ptx()
    ptx, host, launches = unbundle(kern.object_code)
    assert ptx == kern.ptx() and launches == kern.launches and host[:4] == b"\x7fELF"
    again = get_backend("cuda").load(f, s, kern.object_code, kern.signature,
                                     target="cuda:sm_80")
    assert again.ptx() == kern.ptx()
    with pytest.raises(CompileError, match="not a CUDA kernel bundle"):
        unbundle(bundle(ptx, host, launches)[:-5])


@pytest.mark.skipif(HAS_GPU, reason="checks the error on machines without a GPU")
def test_calling_a_cuda_kernel_without_a_gpu_says_what_is_missing():
    f = W.BUILTIN["matmul"].build()
    kern = tl.compile(f, gpu_schedule(f), target="cuda")
    a = np.ones((3, 4), np.float32)
    with pytest.raises(DeviceError, match="GPU|cuda-bindings"):
        kern(A=a, B=a.T.copy())
    with pytest.raises(ShapeError, match="dtype"):
        kern(A=a.astype(np.float64), B=a.T.copy())


def test_auto_on_cuda_uses_the_rule_based_gpu_schedule(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE", str(tmp_path / "cache"))
    f = W.BUILTIN["conv2d"].build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kern = tl.compile(f, "auto", shapes=SHAPES["conv2d"], target="cuda")
    assert kern.schedule_source == "heuristic"
    # rule 3: the convolution as an implicit GEMM, its window's operands staged
    text = kern.schedule.to_python()
    assert "gpu_blocks" in text and "scope='shared'" in text


@needs_gpu
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_on_the_gpu_kernels_match_numpy(name):
    w = W.BUILTIN[name]
    f = w.build()
    schedules = [_hand(name, f), gpu_schedule(f), None]
    if name in STAGED:
        schedules.append(_staged(name, f))
    for s in schedules:
        arrays = _arrays(f, SHAPES[name])
        got = tl.compile(f, s, target="cuda")(**arrays)
        np.testing.assert_allclose(got, w.numpy(arrays)(), rtol=2e-5, atol=1e-5)


# -- the runtime path (host program, callbacks, copies) on a stand-in for the CUDA driver -------
@pytest.mark.parametrize("name", ["softmax", "conv2d", "matmul", "blur"])
def test_cuda_kernel_runs_its_host_program_through_the_driver_interface(name, monkeypatch):
    import fake_cuda

    w = W.BUILTIN[name]
    f = w.build()
    kernels = [tl.compile(f, s, target="cuda") for s in (gpu_schedule(f), _staged(name, f))]
    dev = fake_cuda.install(monkeypatch, *kernels)
    arrays = _arrays(f, SHAPES[name], seed=3)
    for kern in kernels:
        np.testing.assert_allclose(kern(**arrays), w.numpy(arrays)(), rtol=2e-5, atol=1e-5)
        assert not dev.buffers  # inputs, outputs and root buffers all freed
    assert dev.launched and all(len(g) == 3 for _, g, _ in dev.launched)


def test_arrays_on_the_gpu_are_used_in_place(monkeypatch):
    import fake_cuda
    from tensorlang.backends.cuda.arrays import DeviceArray

    w = W.BUILTIN["matmul"]
    f = w.build()
    kern = tl.compile(f, gpu_schedule(f), target="cuda")
    dev = fake_cuda.install(monkeypatch, kern)
    a = _arrays(f, dict(M=5, N=7, K=3))
    da, db = DeviceArray.from_host(a["A"]), DeviceArray.from_host(a["B"])
    c = kern(A=da, B=db)  # inputs on the GPU: the output stays there
    assert isinstance(c, DeviceArray) and c.shape == (5, 7)
    np.testing.assert_allclose(np.asarray(c), a["A"] @ a["B"], rtol=1e-5)
    out = DeviceArray((5, 7), np.float32)
    assert kern(a["A"], db, out=out) is out  # mixed: a NumPy input is copied, out= in place
    np.testing.assert_allclose(out.copy_to_host(), a["A"] @ a["B"], rtol=1e-5)
    times = kern.benchmark(A=da, B=db, repeat=4, warmup=1)
    assert len(times) == 4 and all(t > 0 for t in times)

    class Strided:  # a transposed view on the GPU: refused, with the fix
        __cuda_array_interface__ = {"shape": (3, 5), "typestr": "<f4", "data": (da.ptr, False),
                                    "strides": (4, 12), "version": 3}
    with pytest.raises(ShapeError, match="not C-contiguous"):
        kern(A=Strided(), B=db)
    with pytest.raises(ShapeError, match="dtype"):
        kern(A=DeviceArray((5, 3), np.float64), B=db)
    sq = DeviceArray.from_host(np.eye(4, dtype=np.float32))
    np.testing.assert_allclose(np.asarray(kern(A=sq, B=sq)), np.eye(4))  # inputs may alias
    with pytest.raises(ShapeError, match=r"out \(C\) and A share GPU memory"):
        kern(A=sq, B=sq, out=sq)  # in place: an output must not overlap the inputs
    n = len(dev.buffers)
    del da, db, c, out
    assert len(dev.buffers) < n  # DeviceArrays free their memory


_DLTENSOR = b"dltensor"  # PyCapsule keeps a pointer to its name: it must outlive the capsule


class _DLPackOnGPU:
    """An array on the (fake) GPU that exposes only DLPack, as a JAX array does: device type
    kDLCUDA, a legacy ``dltensor`` capsule over a DLManagedTensor built here."""

    def __init__(self, d, shape=None, strides=None, code=2):
        import ctypes

        from tensorlang.backends.cuda.arrays import _DLDataType, _DLDevice, _DLTensor

        self.base = d  # keeps the memory
        shape = d.shape if shape is None else shape
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * len(shape))(*strides)

        class Managed(ctypes.Structure):
            _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                        ("deleter", ctypes.c_void_p)]

        self._managed = Managed(_DLTensor(
            d.ptr, _DLDevice(2, 0), len(shape),
            _DLDataType(code, 8 * d.dtype.itemsize, 1), self._shape,
            self._strides, 0), None, None)
        self.streams = []

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return _capsule(self, _DLTENSOR)


_USED = b"used_dltensor"  # the name a consumer gives a capsule it took


def _capsule(arr: _DLPackOnGPU, name: bytes):
    import ctypes

    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                   ctypes.c_void_p]
    return new(ctypes.addressof(arr._managed), name, None)  # name: a module constant


def test_dlpack_arrays_on_the_gpu_are_used_in_place(monkeypatch):
    import fake_cuda
    from tensorlang.backends.cuda.arrays import DeviceArray, cuda_array

    f = W.BUILTIN["matmul"].build()
    kern = tl.compile(f, gpu_schedule(f), target="cuda")
    dev = fake_cuda.install(monkeypatch, kern)
    a = _arrays(f, dict(M=5, N=7, K=3))
    da, db = _DLPackOnGPU(DeviceArray.from_host(a["A"])), _DLPackOnGPU(
        DeviceArray.from_host(a["B"]))
    assert cuda_array(da) == (da.base.ptr, (5, 3), np.dtype(np.float32))
    assert da.streams == [1]  # the legacy default stream, which the kernels run on
    allocated = len(dev.buffers)
    c = kern(A=da, B=db)  # no copies of the inputs: the output stays on the GPU
    assert isinstance(c, DeviceArray) and len(dev.buffers) == allocated + 1
    np.testing.assert_allclose(np.asarray(c), a["A"] @ a["B"], rtol=1e-5)
    out = _DLPackOnGPU(DeviceArray((5, 7), np.float32))
    da.streams.clear()
    kern(A=da, B=db, out=out)
    np.testing.assert_allclose(np.asarray(out.base), a["A"] @ a["B"], rtol=1e-5)
    assert len(da.streams) == len(out.streams) == 1  # each array's capsule made once per call
    # a transposed view is refused with the fix; a dimension of extent 1 may have any stride
    with pytest.raises(ShapeError, match="not C-contiguous"):
        kern(A=_DLPackOnGPU(da.base, shape=(3, 5), strides=(1, 3)), B=db)
    row = _DLPackOnGPU(DeviceArray.from_host(a["A"][:1]), strides=(99, 1))
    np.testing.assert_allclose(np.asarray(kern(A=row, B=db)), a["A"][:1] @ a["B"], rtol=1e-5)
    with pytest.raises(ShapeError, match="no NumPy dtype"):  # complex (kDLComplex)
        kern(A=_DLPackOnGPU(da.base, code=5), B=db)
    used = _DLPackOnGPU(da.base)
    used.__dlpack__ = lambda stream=None: _capsule(used, _USED)  # consumed before
    with pytest.raises(ShapeError, match="not a fresh 'dltensor'"):
        kern(A=used, B=db)


def test_a_launch_over_the_limits_is_refused_before_it_runs(monkeypatch):
    import fake_cuda

    f = W.BUILTIN["matmul"].build()
    s = tl.Schedule(f)
    s[f].gpu_tile("i", "j", 64, 32)  # 2048 threads a block
    kern = tl.compile(f, s, target="cuda")
    dev = fake_cuda.install(monkeypatch, kern)
    a = _arrays(f, dict(M=64, N=32, K=2))
    with pytest.raises(DeviceError, match="at most 1024"):
        kern(**a)
    assert not dev.launched and not dev.buffers


# -- the GPU search space (tl.autotune(..., backend="cuda")) --------------------------------------
@pytest.mark.parametrize("name", ["matmul", "softmax", "blur", "conv2d", "layernorm"])
def test_random_points_of_the_gpu_search_space_compute_what_numpy_computes(name):
    import optuna

    from tensorlang.backends.cuda.space import GPUSearchSpace

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    w = W.BUILTIN[name]
    f = w.build()
    space = GPUSearchSpace(f, SHAPES[name])
    assert space.shapes == W.input_shapes(f, SHAPES[name])
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
    for seed in range(4):
        trial = study.ask()
        s = space.sample(trial)
        assert s.check().ok  # every step the space takes is proven
        kern = emulate(f, s)  # and launchable: no staged tile without a constant size
        arrays = _arrays(f, SHAPES[name], seed)
        np.testing.assert_allclose(kern(**arrays), w.numpy(arrays)(), rtol=2e-5, atol=1e-5)
        study.tell(trial, 1.0)
        if HAS_PTXAS and seed == 0:
            ptxas(tl.compile(f, s, target="cuda").ptx(), "sm_90")


@pytest.mark.skipif(HAS_GPU, reason="checks the refusal on machines without a GPU")
def test_tuning_for_the_gpu_without_one_says_why_before_measuring():
    f = W.BUILTIN["matmul"].build()
    with pytest.raises(tl.TuningError, match="backend 'cuda' cannot run kernels here"):
        tl.autotune(f, {"M": 8, "N": 8, "K": 8}, trials=1, backend="cuda", cache=False)


@pytest.mark.skipif(HAS_GPU, reason="checks the refusal on machines without a GPU")
def test_cli_tune_for_the_gpu_without_one_exits_with_the_reason(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "tensorlang.autotuner.cli", "tune", "matmul",
                        "--shape", "M=8,N=8,K=8", "--trials", "1", "--target", "cuda",
                        "--log", str(tmp_path / "m.jsonl")], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "backend 'cuda' cannot run kernels here" in r.stderr


@pytest.mark.parametrize("accumulate", ["output", "registers"])
def test_a_register_tiled_staged_gemm_point_of_the_space(accumulate):
    # the register tile accumulates in C at every k block, or in each thread's registers over
    # the whole reduction (cache_write scope="local"), copied out by the same threads
    import optuna

    from tensorlang.backends.cuda.space import GPUSearchSpace

    f = W.BUILTIN["matmul"].build()
    sizes = dict(M=37, N=70, K=19)
    s = GPUSearchSpace(f, sizes).sample(optuna.trial.FixedTrial(
        {"C.tile": "8x16", "C.kblock": 8, "C.regtile": 4, "C.accumulate": accumulate,
         "C.unroll": True}))
    text = s.to_python()
    if accumulate == "output":
        assert "gpu_threads('i.i.o', 'j.i.o')" in text and "unroll('j.i.i')" in text
    else:
        assert "cache_write('C', 'j.o', scope='local')" in text
        assert "s[\"C\"].gpu_threads('i.i.o', 'j.i.o')" in text
        assert "s[\"C_local\"].gpu_threads('i.o', 'j.o')" in text
        from tensorlang.backends.cuda.private import private_buffers

        launches = plan(lower(f, s), private_buffers(s)).launches
        assert launches and all("C_local" not in lc.shared for lc in launches)
    assert "scope='shared'" in text
    kern = emulate(f, s)
    for a in (_arrays(f, sizes), _arrays(f, dict(M=1, N=5, K=3), 2)):
        np.testing.assert_allclose(kern(**a), a["A"] @ a["B"], rtol=1e-5)
    if HAS_PTXAS:
        report = ptxas(tl.compile(f, s, target="cuda").ptx(), "sm_90")
        assert "0 bytes spill stores" in report


def test_the_backend_clock_reads_the_gpu_timeline(monkeypatch):
    import fake_cuda

    fake_cuda.install(monkeypatch)
    clock = get_backend("cuda").clock()
    a, b = clock(), clock()
    assert 0 <= a <= b


def test_constant_bounds_of_launch_extents():
    # a split tile's count, (extent + 1) // 2 minus the block's start, is bounded by floor
    # division of its dividend's bound (the register tiles of a thread's own buffer need it)
    import doctest

    from tensorlang.backends.cuda import bounds

    assert doctest.testmod(bounds).failed == 0
