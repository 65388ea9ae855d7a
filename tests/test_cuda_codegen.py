"""What the CUDA code generator emits besides the computation: the barriers of a cooperative
kernel (``launches.barriers``: after a thread nest only where what may run after it in the block
conflicts with its accesses; checked on hand-built blocks, on the rule-based softmax and a
staged GEMM, and run in the emulator, each block's threads an OpenMP team, against NumPy on odd
sizes), the integer divisions it narrows to 32 bits (``codegen.DeviceGen``) and the clamps of
a boundary condition's read it drops (``bounds.unclamped_load``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensorlang.autotuner import workloads as W
from tensorlang.backends.cuda.emulate import emulate
from tensorlang.backends.cuda.launches import barriers, plan
from tensorlang.backends.cuda.private import (double_buffered, private_buffers, pure_stages,
                                              shared_copies)
from tensorlang.backends.cuda.rules import gpu_schedule
from tensorlang.dtypes import float32, int64
from tensorlang.expr import Const, Var
from tensorlang.schedule.ir import Allocate, Block, Buffer, For, ForKind, Load, Store
from tensorlang.schedule.lower import lower

TID = Var("t")


def _nest(var: str, store: Store) -> For:
    """A thread nest of 32 threads running ``store``."""
    return For(var, Const(0, int64), Const(32, int64), ForKind.GPU_THREAD, store)


def _store(buf: str, read: str) -> Store:
    """``buf[t] = read[t]``."""
    return Store(buf, (TID,), Load(read, (TID,), float32))


def _shared(name: str, body) -> Allocate:
    return Allocate(Buffer(name, float32, (Const(0, int64),), (Const(32, int64),), "internal"),
                    body)


def test_a_nest_gets_a_barrier_only_where_a_later_access_conflicts():
    # s: shared; out: the output (a pure stage, global); p: a thread's own buffer
    body = _shared("s", _shared("p", Block((
        _nest("a", _store("s", "X")),          # RAW: b reads s
        _nest("b", _store("out", "s")),        # WAR: c writes s
        _nest("c", _store("s", "X")),          # RAW: d reads s
        _nest("d", _store("p", "s")),          # writes only p (private), reads s: nothing after
    ))))
    got = barriers(body, frozenset("abcd"), frozenset({"p"}), frozenset({"out", "s"}))
    assert got == {"a", "b", "c"}


def test_a_serial_loop_of_the_block_runs_its_body_again_after_each_nest():
    loop = For("k", Const(0, int64), Const(4, int64), ForKind.SERIAL, Block((
        _nest("copy", _store("s", "X")),
        _nest("use", _store("out", "s")),      # the next iteration's copy overwrites s
    )))
    assert barriers(_shared("s", loop), frozenset({"copy", "use"}), frozenset(),
                    frozenset({"out", "s"})) == {"copy", "use"}
    # a nest reading only what nothing in the block writes, writing a pure stage's global
    # buffer: its iterations need no barrier between them
    alone = For("j", Const(0, int64), Const(4, int64), ForKind.SERIAL,
                _nest("out_nest", _store("out", "X")))
    assert barriers(alone, frozenset({"out_nest"}), frozenset(), frozenset({"out"})) == set()


def test_two_writes_of_one_buffer_keep_a_barrier_unless_the_stage_is_pure_and_global():
    body = Block((_nest("a", _store("out", "X")), _nest("b", _store("out", "Y"))))
    assert barriers(body, frozenset("ab"), frozenset(), frozenset()) == {"a"}  # not pure
    assert barriers(body, frozenset("ab"), frozenset(), frozenset({"out"})) == set()
    # a buffer of the block (its storage reused by the block's tiles) keeps it, pure or not
    assert barriers(_shared("out", body), frozenset("ab"), frozenset(),
                    frozenset({"out"})) == {"a"}


def _planned(f, s):
    return plan(lower(f, s), private_buffers(s), shared_copies(s), pure_stages(s),
                double_buffered(s))


def test_softmax_writes_its_rows_columns_without_a_barrier_between_them():
    f = W.BUILTIN["softmax"].build()
    s = gpu_schedule(f, sizes=dict(R=64, S=1024))
    coop = [lc for lc in _planned(f, s).launches if lc.cooperative]
    assert coop
    for lc in coop:  # every reduction stage still synchronises; the output's columns do not
        assert set(lc.nests) - lc.barriers == {"j.i"}


@pytest.mark.parametrize("unroll", [1, 4])
def test_softmax_without_barriers_in_its_output_loop_is_correct(unroll):
    w = W.BUILTIN["softmax"]
    f = w.build()
    s = gpu_schedule(f, sizes=dict(R=64, S=1024))
    if unroll > 1:  # thread nests in an unrolled loop of the block
        s[f].split("j.o", unroll)
        s[f].unroll("j.o.i")
    rng = np.random.default_rng(3)
    for sizes in (dict(R=3, S=1031), dict(R=2, S=1024), dict(R=1, S=1)):
        x = rng.standard_normal((sizes["R"], sizes["S"])).astype(np.float32)
        got = emulate(f, s)(X=x)
        np.testing.assert_allclose(got, w.numpy({"X": x})(), rtol=2e-5, atol=1e-6)


def test_a_staged_gemm_synchronises_once_after_its_copies_and_once_after_its_product():
    # the copies of A's and B's tiles touch different buffers: one barrier after both (their
    # loads in flight together), one after the product (the next step's copies overwrite the
    # tiles it reads)
    f = W.BUILTIN["matmul"].build()
    s = gpu_schedule(f, sizes=dict(M=256, N=256, K=256))
    lc = _planned(f, s).launches[0]  # the whole tiles' kernel
    a = [v for v in lc.nests if v.startswith("A_")]
    b = [v for v in lc.nests if v.startswith("B_")]
    assert len(a) == len(b) == 1 and b[0] in lc.barriers and a[0] not in lc.barriers
    assert len(lc.barriers) == 2  # B's copy and the product


def test_the_barrier_after_a_nest_merges_into_the_next_nests_where_they_do_not_conflict():
    body = _shared("s", _shared("u", Block((
        _nest("a", _store("s", "X")),          # b does not touch s: a's barrier is b's
        _nest("b", _store("u", "Y")),          # c reads u: a barrier
        _nest("c", _store("out", "u")),
        _nest("d", _store("out", "s")),        # (reads s after b's barrier)
    ))))
    assert barriers(body, frozenset("abcd"), frozenset(), frozenset({"out"})) == {"b"}
    body = _shared("s", Block((
        _nest("a", _store("s", "X")),          # b reads s: a keeps its own
        _nest("b", _store("out", "s")),
        _nest("c", _store("s", "Y")),          # ... and b's (WAR with c)
    )))
    assert barriers(body, frozenset("abc"), frozenset(), frozenset({"out"})) == {"a", "b"}


def _device_ir(f, s) -> str:
    from tensorlang.backends.cuda.codegen import device_module
    from tensorlang.backends.cuda.target import parse_target
    from tensorlang.backends.llvm.codegen import module_text
    return module_text(device_module(_planned(f, s), parse_target("cuda")))


def test_a_staged_copy_divides_its_coordinates_in_32_bits():
    # conv2d's rule stages 8 input channels x 3 rows x 58 columns of the padded input per
    # block and step, one fused loop over the tile split onto 224 threads: its coordinates
    # are the fused index // 58 // 3 and % 58, % 3, % 8 of a value below 224 * 7, which the
    # code generator divides in 32 bits (a 64-bit division by a constant is a dozen
    # instructions on a GPU); a value it cannot bound stays 64-bit (the block's n.y // H)
    f = W.BUILTIN["conv2d"].build()
    s = gpu_schedule(f, sizes=dict(Nb=32, CI=64, H=56, W=56, CO=64))
    text = _device_ir(f, s)
    assert re.search(r"udiv i32 %\S+, 58", text) and re.search(r"udiv i32 %\S+, 3\b", text)
    assert not re.search(r"[su]div i64 %\S+, 58", text)
    assert re.search(r"sdiv i64 %\S+, %", text)  # by a size


def test_a_stage_left_in_one_gpu_thread_is_warned_about():
    import warnings

    import tensorlang as tl
    from tensorlang.errors import SerialKernelWarning
    f = W.BUILTIN["matmul"].build()
    with pytest.warns(SerialKernelWarning,
                      match=r"C runs on the GPU in one thread.*i, j, k") as rec:
        tl.compile(f, tl.Schedule(f), target="cuda")  # the default schedule: nothing mapped
    assert rec[0].filename == __file__  # the warning points at the call, not at tensorlang
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialKernelWarning)
        tl.compile(f, gpu_schedule(f), target="cuda")  # every loop nest mapped


#: float32 arguments of exp: its whole range past both ends, then NaN, +-inf, 0, -0 and the
#: ends of the normal results
EXP_ARGUMENTS = np.concatenate([np.linspace(-110, 95, 40_003, dtype=np.float32), np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 88.73, -87.3, -87.4], np.float32)])


def exp_kernel():
    """``E[i] = exp(X[i])`` of float32, 64 threads a block."""
    import tensorlang as tl
    n = tl.sizes("N")[0]
    x = tl.Input("X", (n,), tl.float32)
    i = tl.vars("i")[0]
    e = tl.Func("E")
    e[i] = tl.exp(x[i])
    s = tl.Schedule(e)
    s[e].gpu_tile("i", 64)
    return e, s


def check_exp(got: np.ndarray, v: np.ndarray, ulps: int) -> None:
    """``got`` is exp of ``v`` within ``ulps`` (relative, float32) where the result is normal,
    0 below, inf above, NaN for NaN, 1 for +-0 (``v`` ends as ``EXP_ARGUMENTS``)."""
    with np.errstate(over="ignore", under="ignore"):
        ref = np.exp(v.astype(np.float64))
    normal = (ref > 2.0 ** -126) & (ref < 3.4e38)
    np.testing.assert_allclose(got[normal], ref[normal], rtol=ulps * 2.0 ** -24)
    assert np.all(got[ref < 1.17e-38] == 0) and np.all(np.isinf(got[ref > 3.41e38]))
    assert np.isnan(got[-9]) and got[-7] == 0 and got[-6] == 1 and got[-5] == 1


def test_exp_of_float32_on_the_gpu_takes_the_special_function_unit():
    # exp(x) = 2**p * (1 + e ln 2), p = x log2 e rounded and e its rounding error (fused
    # multiply-adds), the power one ex2.approx.ftz.f32 on the GPU; the emulator computes the
    # same formula with LLVM's exp2, flushed alike
    import tensorlang as tl
    e, s = exp_kernel()
    check_exp(emulate(e, s)(X=EXP_ARGUMENTS), EXP_ARGUMENTS, 4)
    ptx = tl.compile(e, s, target="cuda").ptx()
    kernels = ptx.count(".entry")  # (one exp each)
    assert ptx.count("ex2.approx.ftz.f32") == kernels and ptx.count("fma.rn") == 3 * kernels
    assert ptx.count("mul.rn.f32") == kernels  # (x log2 e not contracted into a use)


def test_double_buffered_gemm_tiles_prefetch_the_next_step_without_a_barrier():
    import tensorlang as tl
    from tensorlang.errors import CompileError, ScheduleError
    from tensorlang.schedule.schedule import Schedule
    w = W.BUILTIN["matmul"]
    f = w.build()
    s = gpu_schedule(f, sizes=dict(M=256, N=256, K=256))
    single = _planned(f, s).launches[0]
    s["A_shared"].double_buffer()
    s["B_shared"].double_buffer()
    assert 's["A_shared"].double_buffer()' in s.to_python()
    s = Schedule.from_json(f, s.to_json())  # (a step of the schedule like any other)
    lc = _planned(f, s).launches[0]  # the whole tiles' kernel: two slots a buffer
    assert {k: 2 * v for k, v in single.shared.items()} == lc.shared
    prefetch = {v for v in lc.nests if v.endswith(".next")}
    assert len(prefetch) == 2 and not prefetch & lc.barriers
    # the prologue's copies (A's merged into B's) and the product: one barrier a step
    assert len(lc.barriers) == 2
    rng = np.random.default_rng(7)
    for sizes in (dict(M=128, N=128, K=64), dict(M=19, N=37, K=13), dict(M=64, N=64, K=8),
                  dict(M=64, N=64, K=0)):  # (no step: no prologue either)
        a = {k: rng.standard_normal(v).astype(np.float32)
             for k, v in W.input_shapes(f, sizes).items()}
        np.testing.assert_allclose(emulate(f, s)(**a), w.numpy(a)(), rtol=1e-4, atol=1e-4)
    tl.compile(f, s, target="cuda").ptx()
    with pytest.raises(ScheduleError, match="double_buffer applies to a copy in GPU shared"):
        gpu_schedule(f)["C"].double_buffer()
    g = W.BUILTIN["conv2d"].build()  # its two staged tiles take 25 KiB: doubled, too many
    t = gpu_schedule(g, sizes=dict(Nb=32, CI=64, H=56, W=56, CO=64))
    t["pad_shared"].double_buffer()
    t["Wt_shared"].double_buffer()
    with pytest.raises(CompileError, match="double buffered: twice their tiles"):
        tl.compile(g, t, target="cuda")


def test_a_boundary_conditions_read_on_the_gpu_drops_the_clamps_its_condition_states():
    # conv2d's padded input, copied into shared memory: where(x in bounds, In[clamp(x)], 0);
    # the GPU loads In[x] from an address selected by the condition (no clamps, no branch)
    from tensorlang.backends.cuda.bounds import unclamped_load
    from tensorlang.expr import BinOp, Cmp, Select
    from tensorlang.schedule.ir import walk_stmts

    f = W.BUILTIN["conv2d"].build()
    sizes = dict(Nb=32, CI=64, H=56, W=56, CO=64)
    s = gpu_schedule(f, sizes=sizes)
    lc = plan(lower(f, s), private_buffers(s), shared_copies(s)).launches[0]
    copies = [n.value for n in walk_stmts(lc.body) if isinstance(n, Store)
              and n.buffer == "pad_shared"]
    assert copies and all(isinstance(v, Select) for v in copies)
    for v in copies:
        load = unclamped_load(v)
        assert load is not None and load.buffer == "In"
        assert not any(isinstance(ix, BinOp) and ix.op == "max" for ix in load.indices)
        assert sum(isinstance(ix, BinOp) and ix.op == "max" for ix in v.t.indices) == 4
    # a clamp its condition does not state is kept
    x, hi = Var("x"), Var("hi")
    clamped = Load("In", (BinOp("max", BinOp("min", x, hi, int64), Const(0, int64), int64),),
                   float32)
    half = Select(Cmp("ge", x, Const(0, int64)), clamped, Const(0.0, float32), float32)
    assert unclamped_load(half) is None
    both = Select(BinOp("and", Cmp("ge", x, Const(0, int64)), Cmp("le", x, hi), half.cond.dtype),
                  clamped, Const(0.0, float32), float32)
    assert unclamped_load(both).indices[0].same_as(x)
    kern = emulate(f, s)  # the copies at the image's edges (the condition false) are zero
    from test_cuda import _arrays
    for small in (dict(Nb=1, CI=3, H=2, W=5, CO=2), dict(Nb=2, CI=9, H=7, W=57, CO=65)):
        a = _arrays(f, small, 3)
        np.testing.assert_allclose(kern(**a), W.BUILTIN["conv2d"].numpy(a)(), rtol=1e-5,
                                   atol=1e-5)


def test_an_emulated_register_tile_stays_a_loop_and_matches_numpy():
    # the GPU's code unrolls the register tile (each thread's accumulators in registers); the
    # emulator runs the same iterations as a loop, so its module holds a fraction of the
    # multiply-adds, and computes the same product
    from tensorlang.backends.cuda.codegen import device_module, host_module
    from tensorlang.backends.cuda.target import parse_target
    from tensorlang.backends.llvm.codegen import module_text
    from tensorlang.backends.llvm.target import host_target

    f = W.BUILTIN["matmul"].build()
    s = gpu_schedule(f, sizes=dict(M=256, N=256, K=256))
    program = _planned(f, s)
    gpu = module_text(device_module(program, parse_target("cuda:sm_90")))
    emulated = module_text(host_module(program, host_target(), emulate=True))
    assert emulated.count("fmul") * 8 < gpu.count("fmul"), (emulated.count("fmul"),
                                                             gpu.count("fmul"))
    rng = np.random.default_rng(5)
    a, b = rng.random((37, 19), dtype=np.float32), rng.random((19, 71), dtype=np.float32)
    np.testing.assert_allclose(emulate(f, s)(a, b), a @ b, rtol=1e-5)
