"""A GPU kernel's conditions decided by isl and the uniform ones moved to the host
(backends/cuda/specialize.py): what is removed, what is kept, and that the kernels still compute
what NumPy computes on sizes taking every version (emulated, as in test_cuda.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import workloads as W
from tensorlang.backends.cuda.emulate import emulate
from tensorlang.backends.cuda.launches import Launch, plan
from tensorlang.backends.cuda.ptx import find_ptxas, ptxas
from tensorlang.backends.cuda.rules import gpu_schedule
from tensorlang.backends.cuda.specialize import Context, decide
from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Cmp, Const, Size, Var, walk
from tensorlang.schedule.ir import (GPU_KINDS, Block, For, ForKind, IfThenElse, LetStmt, Store,
                                    walk_stmts)
from tensorlang.schedule.lower import lower

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install "
                                 "nvidia-cuda-nvcc, the test extra)")


def _c(v: int) -> Const:
    return Const(v, int64)


def _store(tag: int) -> Store:
    return Store("out", (_c(tag),), _c(tag))


def _block_level_ifs(s) -> list[IfThenElse]:
    """The ``if``s of a kernel outside its thread loops."""
    out = []

    def go(n):
        if isinstance(n, For) and n.kind is ForKind.GPU_THREAD:
            return
        if isinstance(n, IfThenElse):
            out.append(n)
        for c in ((n.then,) + (() if n.otherwise is None else (n.otherwise,))
                  if isinstance(n, IfThenElse) else
                  n.stmts if isinstance(n, Block) else
                  (n.body,) if hasattr(n, "body") else ()):
            go(c)

    go(s)
    return out


def _exprs(n):
    """Every subexpression of statement ``n``'s own expressions."""
    own = {For: lambda s: (s.min, s.extent), LetStmt: lambda s: (s.value,),
           Store: lambda s: (*s.indices, s.value), IfThenElse: lambda s: (s.cond,)}
    for root in own.get(type(n), lambda s: ())(n):
        yield from walk(root)


def test_a_condition_the_loops_imply_is_dropped_one_they_contradict_removes_its_branch():
    x = Var("x")
    n = Size("N")
    ctx = Context().bind(For("x", _c(0), BinOp("floordiv", n, _c(8), int64), ForKind.SERIAL,
                             Block(())))
    # 8 x + 7 < N whenever x < N // 8; 8 x >= N never; x < 3 depends on N
    implied = Cmp("lt", BinOp("add", BinOp("mul", x, _c(8), int64), _c(7), int64), n)
    never = Cmp("ge", BinOp("mul", x, _c(8), int64), n)
    open_ = Cmp("lt", x, _c(3))
    s = IfThenElse(BinOp("and", implied, open_, implied.dtype), _store(1), _store(2))
    out = decide(s, ctx)
    assert isinstance(out, IfThenElse) and out.cond is open_  # the implied conjunct dropped
    assert decide(IfThenElse(never, _store(1), _store(2)), ctx).indices[0].value == 2
    assert decide(IfThenElse(implied, _store(1), _store(2)), ctx).indices[0].value == 1
    # a condition isl cannot state (a product of variables) is kept as it is
    product = Cmp("lt", BinOp("mul", x, x, int64), n)
    assert decide(IfThenElse(product, _store(1)), ctx).cond is product


def test_a_branch_condition_is_known_inside_the_branch_and_a_rebound_name_forgets_it():
    k = Size("K")
    t = Var("t")
    rem = LetStmt("t", BinOp("mod", k, _c(16), int64), Block(()))
    inner = IfThenElse(Cmp("eq", BinOp("mod", k, _c(4), int64), _c(0)), _store(1), _store(2))
    outer = IfThenElse(Cmp("eq", t, _c(0)), inner, _store(3))
    out = decide(outer, Context().bind(rem))
    assert out.then is inner.then  # K % 16 == 0 => K % 4 == 0
    # the same name bound again: what was known through the old binding is gone
    ctx = Context().bind(rem).assume(Context().bind(rem).cond(Cmp("eq", t, _c(0))))
    again = ctx.bind(LetStmt("t", k, Block(())))
    assert not again.implies(again.cond(Cmp("eq", BinOp("mod", k, _c(4), int64), _c(0))))


def test_a_fused_loop_divided_by_one_of_its_sizes_stays_in_range():
    # n.y in [0, Nb * H): n.y // H in [0, Nb), n.y % H in [0, H) (a fused block loop)
    nb, h = Size("Nb"), Size("H")
    v = Var("ny")
    ctx = Context().bind(For("ny", _c(0), BinOp("mul", nb, h, int64), ForKind.GPU_BLOCK,
                             Block(())))
    q, r = BinOp("floordiv", v, h, int64), BinOp("mod", v, h, int64)
    assert ctx.implies(ctx.cond(Cmp("lt", q, nb)))
    assert ctx.implies(ctx.cond(Cmp("lt", r, h)))
    assert ctx.implies(ctx.cond(Cmp("ge", q, _c(0))))
    assert not ctx.implies(ctx.cond(Cmp("lt", q, _c(1))))


def test_a_shifted_tile_s_extent_and_base_fold_where_the_loops_prove_them():
    # a tile shifted inwards (ShiftInwards) starts at min(64 x, N - 64): where N >= 64 bounds
    # inference's clamp max(., 0) of it is idle and dropped, and its extent is 64; a min with
    # a constant (a partial tile's thread count) stays
    n = Size("N")
    x = Var("x")
    base = BinOp("min", BinOp("mul", _c(64), x, int64), BinOp("sub", n, _c(64), int64), int64)
    ctx = Context().assume(Context().cond(Cmp("ge", n, _c(64)))).bind(
        For("x", _c(0), BinOp("floordiv", BinOp("add", n, _c(63), int64), _c(64), int64),
            ForKind.GPU_BLOCK, Block(())))
    assert ctx.fold(BinOp("max", base, _c(0), int64)) is base
    end = BinOp("min", BinOp("add", base, _c(63), int64), BinOp("sub", n, _c(1), int64), int64)
    extent = BinOp("add", BinOp("sub", end, base, int64), _c(1), int64)
    assert ctx.fold(extent).same_as(_c(64))
    # over the tiles of 32, [0, (N + 31) // 32): the last one may be partial
    tiles = Context().bind(For("x", _c(0), BinOp("floordiv", BinOp("add", n, _c(31), int64),
                                                   _c(32), int64), ForKind.GPU_BLOCK, Block(())))
    threads = BinOp("min", _c(32), BinOp("sub", n, BinOp("mul", _c(32), x, int64), int64), int64)
    assert tiles.fold(threads) is threads
    assert ctx.fold(threads).same_as(_c(32))  # (over the tiles of 64, each half is whole)
    assert Context().fold(BinOp("max", base, _c(0), int64)).op == "max"  # (N unknown)


def _matmul_program():
    f = W.BUILTIN["matmul"].build()
    s = gpu_schedule(f)
    return f, s, plan(lower(f, s))


def test_the_whole_tile_gemm_kernel_keeps_no_version_of_its_tiles():
    # loop versioning's condition (whole tiles and K % 16 == 0) is decided per launch: the
    # whole tiles' launch keeps only its K % 16 test, which the host makes, launching one of
    # two kernels; the one for K % 16 == 0 has no if left outside its thread loops
    f, s, program = _matmul_program()
    host_ifs = [n for n in walk_stmts(program.host) if isinstance(n, IfThenElse)
                and isinstance(n.then, Launch) and isinstance(n.otherwise, Launch)]
    assert host_ifs and not {"i.o", "j.o"} & set(str(host_ifs[0].cond).split())
    fast = host_ifs[0].then
    assert _block_level_ifs(fast.body) == []
    # each launch still holds GPU loops (nothing else is moved to the host)
    assert all(any(isinstance(n, For) and n.kind in GPU_KINDS for n in walk_stmts(lc.body))
               for lc in program.launches)


def test_every_version_computes_what_numpy_computes():
    # whole tiles and K % 16 == 0; K % 16 != 0; partial tiles; a single element
    f, s, _ = _matmul_program()
    kern = emulate(f, s)
    rng = np.random.default_rng(1)
    for m, n, k in ((128, 64, 32), (128, 64, 37), (67, 129, 16), (1, 1, 1)):
        a = rng.random((m, k), dtype=np.float32)
        b = rng.random((k, n), dtype=np.float32)
        np.testing.assert_allclose(kern(A=a, B=b), a @ b, rtol=1e-5)


def test_a_convolution_over_a_fused_block_loop_is_unswitched_on_its_channel_blocks():
    f = W.BUILTIN["conv2d"].build()
    s = gpu_schedule(f)
    program = plan(lower(f, s))
    fast = [n.then for n in walk_stmts(program.host) if isinstance(n, IfThenElse)
            and isinstance(n.then, Launch) and isinstance(n.otherwise, Launch)]
    assert fast and _block_level_ifs(fast[0].body) == []
    # the staged input's tile extents (1 x 8 x 3 x 66) are constants in that kernel, so its
    # copy, one fused loop spread over the threads, divides by constants only (LLVM multiplies)
    lets = {n.var: n.value for n in walk_stmts(fast[0].body) if isinstance(n, LetStmt)}
    threads = [n for n in walk_stmts(fast[0].body)
               if isinstance(n, For) and n.kind is ForKind.GPU_THREAD]
    divisors = [e.b for t in threads for n in walk_stmts(t) for e in _exprs(n)
                if isinstance(e, BinOp) and e.op in ("floordiv", "mod")]
    assert divisors and all(isinstance(d, Const) or isinstance(lets.get(getattr(d, "name", "")),
                                                                Const) for d in divisors)
    rng = np.random.default_rng(2)
    kern = emulate(f, s)
    for sizes in (dict(Nb=2, CI=8, H=3, W=64, CO=64), dict(Nb=1, CI=3, H=5, W=70, CO=65)):
        arrays = {k: rng.random(v, dtype=np.float32)
                  for k, v in W.input_shapes(f, sizes).items()}
        np.testing.assert_allclose(kern(**arrays), W.BUILTIN["conv2d"].numpy(arrays)(),
                                   rtol=1e-4, atol=1e-5)


@needs_ptxas
def test_the_gemm_kernel_reads_its_shared_tiles_four_floats_at_a_time():
    # shared buffers are addressed in the shared space (not through generic pointers), so LLVM
    # sees their alignment and merges a thread's four consecutive loads: ld.shared.v4
    f, s, _ = _matmul_program()
    ptx = tl.compile(f, s, target="cuda:sm_90").ptx()
    assert "ld.shared.v4.b32" in ptx
    ptxas(ptx, "sm_90")
