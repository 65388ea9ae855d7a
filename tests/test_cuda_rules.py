"""The rule-based GPU schedule (backends/cuda/rules.py), rule by rule: what each rule makes of
the built-in workloads and PolyBench kernels, and that the kernels compute what NumPy computes
in the emulator on odd sizes (as in test_cuda.py, whose helpers it shares)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import workloads as W
from tensorlang.backends.cuda.emulate import emulate
from tensorlang.backends.cuda.launches import plan
from tensorlang.backends.cuda.ptx import ptxas
from tensorlang.backends.cuda.rules import gpu_schedule
from tensorlang.schedule.ir import Store, walk_stmts
from tensorlang.schedule.lower import lower
from test_cuda import HAS_PTXAS, SHAPES, _arrays


def test_the_rule_based_gpu_gemm_stages_its_operands_and_keeps_register_tiles():
    # rule 3 of rules.py: the GEMM-like stage gets 16 x 16 threads of 4 x 4 register tiles
    # (cache_write scope="local") over k blocks staged in shared memory; other stages do not
    f = W.BUILTIN["matmul"].build()
    text = gpu_schedule(f).to_python()
    assert "cache_write('C', 'j.o', scope='local')" in text
    assert text.count("scope='shared'") == 2 and "split('k', 16)" in text
    # A's tile is staged transposed (k-major), so a thread's 4 rows of one k are adjacent (one
    # ld.shared.v4, as B's 4 columns are); B keeps its order; a convolution's weights likewise
    # put the output channel last
    assert "cache_read('A', s[\"C_local\"], 'k.o', layout=(1, 0)" in text
    assert "cache_read('B', s[\"C_local\"], 'k.o', scope='shared')" in text
    conv = gpu_schedule(W.BUILTIN["conv2d"].build()).to_python()
    assert "cache_read('Wt', s[\"O_local\"], 'ci.o', layout=(1, 2, 3, 0)" in conv
    assert "cache_write" not in gpu_schedule(W.BUILTIN["softmax"].build()).to_python()
    kern = emulate(f, gpu_schedule(f))
    for sizes in (dict(M=1, N=1, K=1), dict(M=70, N=37, K=19)):
        a = _arrays(f, sizes, 3)
        np.testing.assert_allclose(kern(**a), a["A"] @ a["B"], rtol=1e-5)


def test_the_gpu_gemm_tiles_follow_the_sizes_where_they_are_known():
    # rule 3 at known sizes (gemm_tiling): 8 x 8 outputs a thread (128 x 128 a block) where
    # that leaves at least GEMM_MIN_BLOCKS blocks, else 4 x 4, 2 x 2 or 1 x 1; along a loop
    # shorter than the tile, threads to span it; whole tiles shifted inwards; symbolic sizes
    # keep 64 x 64, guarded
    from tensorlang.backends.cuda.rules import GEMM_MIN_BLOCKS, GemmTiling, gemm_tiling
    from tensorlang.schedule.trace import TailStrategy

    f = W.BUILTIN["matmul"].build()

    def tile(f, **sizes):
        text = gpu_schedule(f, sizes=sizes or None).to_python()
        return re.search(r"\.tile\('\w+', '\w+', (\d+), (\d+)(, tail='(\w+)')?\)",
                         text).group(1, 2, 4)

    assert tile(f) == ("64", "64", None)
    assert tile(f, M=4096, N=4096, K=4096) == ("128", "128", "ShiftInwards")
    # (its reduction blocks of 16: 2048 elements of each operand a step)
    assert "split('k', 16)" in gpu_schedule(f, sizes=dict(M=4096, N=4096, K=4096)).to_python()
    assert tile(f, M=1000, N=1000, K=9) == ("64", "64", "ShiftInwards")  # 64 blocks, or 256
    assert tile(f, M=512, N=512, K=512) == ("32", "32", "ShiftInwards")
    assert tile(f, M=256, N=256, K=7) == ("16", "16", "ShiftInwards")
    assert (4096 // 128) ** 2 >= GEMM_MIN_BLOCKS > (1000 // 128 + 1) ** 2
    # the issue's convolution: 56 columns, one tile of 56 (14 threads of 4), where 64-column
    # tiles left every block a partial one, and 32-column ones at 0 and 24 computed 8 twice
    conv = W.BUILTIN["conv2d"].build()
    sizes = dict(Nb=32, CI=64, H=56, W=56, CO=64)
    assert tile(conv, **sizes) == ("64", "56", "ShiftInwards")
    # ... so its one launch at those sizes is the whole tiles' kernel (a block of 14 x 16
    # threads, 1 column tile x 1792 rows), where 64 x 64 tiles launched the partial tiles' one
    whole = tl.compile(conv, gpu_schedule(conv, sizes=sizes), target="cuda:sm_90")
    assert whole.launch_plan(sizes) == [("O_k0", (1, 1, 32 * 56), (14, 16, 1))]
    partial = tl.compile(conv, gpu_schedule(conv), target="cuda:sm_90")
    assert [name for name, _, _ in partial.launch_plan(sizes)] == ["O_k2"]
    # a tiny one: 1 x 1 outputs a thread, 5 x 3 threads, one whole tile
    assert gemm_tiling(tl.Schedule(conv), "O", {"n": (0, 1), "y": (0, 1), "co": (0, 5),
                                                "x": (0, 3)}, 4) \
        == GemmTiling((5, 3), 1, TailStrategy.ShiftInwards)
    for name, g, at, runs in (
            ("matmul", f, dict(M=1000, N=1000, K=9), (dict(M=130, N=70, K=33),
                                                      dict(M=10, N=100, K=5))),
            ("conv2d", conv, sizes, (dict(Nb=1, CI=8, H=3, W=56, CO=64),
                                     dict(Nb=2, CI=3, H=2, W=20, CO=70)))):
        kern = emulate(g, gpu_schedule(g, sizes=at))
        for run in runs:
            a = _arrays(g, run, 5)
            np.testing.assert_allclose(kern(**a), W.BUILTIN[name].numpy(a)(), rtol=1e-4,
                                       atol=1e-5)


@pytest.mark.parametrize("name, sizes, kernels", [
    ("matmul", dict(M=4096, N=4096, K=4096), [("C_k0", (32, 32, 1), (16, 16, 1))]),
    ("softmax", dict(R=8192, S=8192), [("softmax_k0", (8192, 1, 1), (256, 1, 1))]),
    ("blur", dict(H=8194, W=8194), [("out_k0", (256, 256, 1), (32, 8, 1))])])
def test_at_the_issues_sizes_one_whole_tile_kernel_runs(name, sizes, kernels):
    # issue 20's targets at their sizes, under "auto"'s rule: one launch each, of the kernel
    # with no partial tile (the GEMM: its K % 16 == 0 version; softmax: one block per row,
    # max, sum and output in it; the blur: its first pass staged in each block)
    f = W.BUILTIN[name].build()
    kern = tl.compile(f, gpu_schedule(f, sizes=sizes), target="cuda:sm_90")
    assert kern.launch_plan(sizes) == kernels


#: PolyBench kernels of every kind: GEMM-like (doitgen, batched: staged by rule 3), triangular
#: reductions, in-place updates, a stencil with time loops, dynamic programming, row reductions
#: (gemver: rule 4)
GPU_POLYBENCH = ("doitgen", "covariance", "lu", "jacobi-2d", "nussinov", "gemver")


@pytest.mark.parametrize("name", GPU_POLYBENCH)
def test_the_rule_based_gpu_schedule_of_polybench_kernels_computes_what_numpy_computes(name):
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from polybench.kernels import KERNELS

    kern = KERNELS[name]
    arrays = kern.inputs(kern.small, np.random.default_rng(7))
    h = kern.handle(kern.build())
    s = gpu_schedule(h)
    assert ("scope='shared'" in s.to_python()) == (name == "doitgen")
    got = emulate(h, s)(**kern.call_args(h, arrays, kern.small))
    for g, want in zip(got if isinstance(got, tuple) else (got,), kern.numpy(arrays, kern.small)):
        tol = 1e-4 if want.dtype == np.float32 else 1e-10
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol)


def test_a_convolution_is_an_implicit_gemm_on_the_gpu():
    # rule 3 on conv2d: output channels x columns in 16 x 16 threads of 4 x 4 registers, batch
    # and rows on blockIdx.z; input rows (the padding inlined into their copy) and weights
    # staged per 8 input channels (16 would take 49.5 KiB of shared memory)
    from tensorlang.backends.cuda.private import private_buffers
    from tensorlang.backends.cuda.rules import reduction_axes

    f = W.BUILTIN["conv2d"].build()
    assert reduction_axes(tl.Schedule(f), "O") == (["n", "y"], "co", "x", ["ci", "ry", "rx"])
    s = gpu_schedule(f)
    text = s.to_python()
    assert "tile('co', 'x', 64, 64)" in text and "split('ci', 8)" in text
    assert "cache_write('O', 'x.o', scope='local')" in text and 's["pad"].compute_inline()' in text
    # each copy's last step over the 256 threads shifted back, not guarded (its tiles, 8 x 3 x
    # 66 and 64 x 8 x 9, are no multiple of them)
    assert text.count(", 256, tail='ShiftInwards')") == 2
    launches = plan(lower(f, s), private_buffers(s)).launches
    # (the weights' tile is stored transposed, output channels last, its rows padded from 64
    # to 68 elements: GEMM_PAD_WORDS)
    assert all(lc.shared == {"pad_shared": 8 * 3 * 66, "Wt_shared": 68 * 8 * 9}
               for lc in launches)
    kern = emulate(f, s)
    for sizes in (dict(Nb=1, CI=1, H=1, W=1, CO=1), dict(Nb=2, CI=11, H=3, W=67, CO=66),
                  dict(Nb=1, CI=16, H=2, W=64, CO=64)):  # (the last: whole tiles)
        a = _arrays(f, sizes, 5)
        np.testing.assert_allclose(kern(**a), W.BUILTIN["conv2d"].numpy(a)(), rtol=2e-5,
                                   atol=1e-5)
    if HAS_PTXAS:
        report = ptxas(tl.compile(f, s, target="cuda").ptx(), "sm_90")
        # every kernel (one per version of the tiles) keeps its 16 outputs in registers
        frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores", report)
        assert len(frames) == len(launches) and set(frames) == {("0", "0")}


def test_a_stencil_producer_is_staged_in_its_consumers_block():
    # rule 2: the blur's first pass (three reads: not inlined) is computed per block of the
    # second, its tile and halo in shared memory, so no kernel writes it to GPU memory; the
    # second pass's threads compute 4 rows each (32 x 32 tiles on 8 x 32 threads), and stage
    # the 34 rows of the first pass's tile every 8th row each
    from tensorlang.backends.cuda.private import private_buffers

    f = W.BUILTIN["blur"].build()
    s = gpu_schedule(f)
    text = s.to_python()
    assert 's["bx"].compute_at(s["out"], \'x.o\')' in text
    assert "tile('y', 'x', 32, 32)" in text and "split('y.i', 4)" in text
    launches = plan(lower(f, s), private_buffers(s)).launches
    assert launches and all(lc.cooperative and lc.shared.get("bx") == 34 * 32
                            for lc in launches)  # (32 + 2) x 32: the tile's rows, halo
    kern = emulate(f, s)
    for h, w in ((3, 3), (11, 45), (17, 64), (70, 33)):
        a = _arrays(f, dict(H=h, W=w), 4)
        np.testing.assert_allclose(kern(**a), W.BUILTIN["blur"].numpy(a)(), rtol=1e-5)


def test_the_gpu_space_holds_rows_a_thread_and_the_rule_based_blur():
    # <stage>.thread_rows: the rows of a tile each thread computes; a producer staged in the
    # block spreads its rows over the block's rows of threads (the rule's blur is a point)
    import optuna

    from tensorlang.backends.cuda.space import GPUSearchSpace

    f = W.BUILTIN["blur"].build()
    space = GPUSearchSpace(f, dict(H=70, W=66))
    rule = space.sample(optuna.trial.FixedTrial(
        {"out.tile": "8x32", "out.thread_rows": 4, "bx.place": "block"}))
    assert rule.to_python() == gpu_schedule(f).to_python()
    wide = space.sample(optuna.trial.FixedTrial(
        {"out.tile": "4x64", "out.thread_rows": 8, "bx.place": "block"}))
    text = wide.to_python()  # (the staged rows' last step shifted inwards: no guard a row)
    assert "tile('y', 'x', 32, 64)" in text and "split('y', 4, tail='ShiftInwards')" in text
    assert "unroll('y.o')" in text
    kern = emulate(f, wide)
    for h, w in ((70, 66), (3, 5)):
        a = _arrays(f, dict(H=h, W=w), 6)
        np.testing.assert_allclose(kern(**a), W.BUILTIN["blur"].numpy(a)(), rtol=1e-5)


def _row_sums() -> tl.Func:
    R, S = tl.sizes("R S")
    X = tl.Input("X", (R, S), tl.float32)
    i, k = tl.vars("i k")
    rs = tl.Func("rs")
    rs[i] = X[i, k]
    return rs


def test_a_row_reduction_is_a_block_per_row_on_the_gpu():
    # rule 4 of rules.py: a row sum a block of 256 threads per row (rfactor: each thread a
    # strided, coalesced share; 16 threads combine the 256 partials in shared memory, then one
    # thread their 16: rfactor again); where the sizes say rows are shorter than the block, a
    # thread per row as before
    from tensorlang.backends.cuda.private import private_buffers

    f = _row_sums()
    s = gpu_schedule(f)
    text = s.to_python()
    assert "s.rfactor('rs', 'k.i')" in text and 's["rs"].gpu_blocks(\'i\')' in text
    launches = plan(lower(f, s), private_buffers(s)).launches
    assert {(lc.shared.get("rs_rf"), lc.shared.get("rs_rf2")) for lc in launches} == {(256, 16)}
    kern = emulate(f, s)
    for r, n in ((1, 1), (3, 601), (2, 256)):
        x = np.random.default_rng(8).random((r, n), dtype=np.float32)
        np.testing.assert_allclose(kern(X=x), x.sum(axis=1), rtol=2e-5)
    assert "rfactor" not in gpu_schedule(f, sizes=dict(R=4096, S=100)).to_python()
    assert "rfactor" in gpu_schedule(f, sizes=dict(R=8, S=8192)).to_python()
    if HAS_PTXAS:
        assert "1088 bytes smem" in ptxas(tl.compile(f, s, target="cuda").ptx(), "sm_90")


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_rows_normalised_by_their_reductions_are_one_kernel_a_block_per_row(name):
    # rule 5: softmax's max and sum (layernorm's mean and variance) computed, as rule 4 would,
    # inside the output's kernel at its block loop (a row per block), so that one kernel reads
    # each row (three passes, the later ones from the cache) instead of three kernels reading
    # the whole matrix each; its exp(X - mx) inlined; short rows keep a thread per row
    from tensorlang.backends.cuda.private import private_buffers

    f = W.BUILTIN[name].build()
    s = gpu_schedule(f)
    rows = ("mx", "sm") if name == "softmax" else ("mean", "var")
    text = s.to_python()
    for r in rows:
        assert f"s[\"{r}\"].compute_at(s[\"{name}\"], 'i')" in text
        assert f"s[\"{r}_rf\"].compute_at(s[\"{name}\"], 'i')" in text
    launches = plan(lower(f, s), private_buffers(s)).launches
    # every kernel (one per version of the column tiles) computes the output and its rows
    for lc in launches:
        assert lc.cooperative and {f"{r}_rf{n}" for r in rows for n in ("", "2")} \
            <= set(lc.shared)
        assert any(isinstance(n, Store) and n.buffer == name for n in walk_stmts(lc.body))
    kern = emulate(f, s)
    for sizes in (dict(R=1, S=1), dict(R=3, S=601), dict(R=2, S=256)):
        a = _arrays(f, {**SHAPES[name], **sizes}, 8)
        np.testing.assert_allclose(kern(**a), W.BUILTIN[name].numpy(a)(), rtol=2e-5, atol=1e-5)
    assert "compute_at" not in gpu_schedule(f, sizes=dict(R=4096, S=100)).to_python()
    assert "compute_at" in gpu_schedule(f, sizes=dict(R=8, S=8192)).to_python()

    # the search space holds the fused kernel as its "<out>.rows" choice
    class Fused:  # an Optuna trial choosing "fused" there and the first option elsewhere
        def suggest_categorical(self, param, options):
            return "fused" if param.endswith(".rows") else options[0]

    from tensorlang.backends.cuda.space import GPUSearchSpace

    point = GPUSearchSpace(f, SHAPES[name]).sample(Fused())
    assert point.to_python() == text


def test_a_pointwise_func_is_inlined_on_the_gpu_where_each_consumer_reads_it_once():
    # rule 1's pointwise_once: P[i, k] (two arrays) read by C[i, j] = sum_k P[i, k] B[k, j]
    # would be recomputed for every j; staged as a GEMM, C's copy of P's tile reads it once per
    # element, so P is inlined there (computed once per block and k step)
    from tensorlang.backends.cuda.rules import pointwise_once

    M, N, K = tl.sizes("M N K")
    A = tl.Input("A", (M, K), tl.float32)
    D = tl.Input("D", (K,), tl.float32)
    B = tl.Input("B", (K, N), tl.float32)
    i, j, k = tl.vars("i j k")
    P, C = tl.Func("P"), tl.Func("C")
    P[i, k] = A[i, k] * D[k]
    C[i, j] = P[i, k] * B[k, j]
    assert not pointwise_once(tl.Schedule(C), "P")
    s = gpu_schedule(C)
    assert pointwise_once(tl.Schedule(W.BUILTIN["softmax"].build()), "e")
    text = s.to_python()
    assert "cache_read('P'" in text and 's["P"].compute_inline()' in text
    rng = np.random.default_rng(2)
    a, d, b = (rng.random(n, dtype=np.float32) for n in ((5, 7), (7,), (7, 3)))
    np.testing.assert_allclose(emulate(C, s)(A=a, D=d, B=b), (a * d) @ b, rtol=1e-5)


def test_a_threads_register_tile_in_runs_of_columns_is_its_own():
    # x_groups=2 (rule 3's): a thread's 8 columns of a 128-column tile in two runs of 4, 64 apart (a
    # quarter warp's vector reads of B's tile then cover consecutive words); its register tile
    # is still its own (private.py packs the runs), and the result NumPy's on odd sizes
    from tensorlang.backends.cuda.private import private_buffers

    f = W.BUILTIN["matmul"].build()
    s = gpu_schedule(f, sizes=dict(M=4096, N=4096, K=4096))  # (rule 3: GEMM_X_GROUPS)
    text = s.to_python()
    assert "split('j', 4)" in text and "split('j.o', 16)" in text
    launches = plan(lower(f, s), private_buffers(s)).launches
    assert all("C_local" not in lc.shared for lc in launches)
    kern = emulate(f, s)
    for m, n, k in [(128, 128, 8), (131, 67, 37), (1, 1, 1)]:
        a = _arrays(f, dict(M=m, N=n, K=k), 9)
        np.testing.assert_allclose(kern(**a), a["A"] @ a["B"], rtol=1e-5)
    if HAS_PTXAS:
        report = ptxas(tl.compile(f, s, target="cuda").ptx(), "sm_90")
        whole = report[report.index("'C_k0'"):]  # the whole tiles' kernel
        assert re.search(r"^\s+0 bytes stack frame", whole, re.M)  # registers, no stack
    # the packing: l = v + 64 g (v < 4, g < 2) with threads 4 apart, 16 of them, is the
    # thread's own (v + 4 g); with threads 2 apart, v's run reaches the next thread's: refused
    from tensorlang.backends.cuda.private import _packed_groups, _Scope
    from tensorlang.expr import Const, Var

    sc = _Scope({}, loops={"v": (Const(0, tl.int64), Const(4, tl.int64)),
                           "g": (Const(0, tl.int64), Const(2, tl.int64))})
    form = ({"var:v": (Var("v"), 1), "var:g": (Var("g"), 64)}, 0)
    packed = _packed_groups(form, 4, 16, sc)
    assert packed is not None and {k: c for k, (_, c) in packed[0].items()} == {
        "var:v": 1, "var:g": 4} and packed[1] == 0
    assert _packed_groups(form, 2, 32, sc) is None
    # 8 threads 4 apart hold [0, 32) and [64, 96): the runs 64 apart pack as v + 8 g
    assert {k: c for k, (_, c) in _packed_groups(form, 4, 8, sc)[0].items()} == {
        "var:v": 1, "var:g": 8}
    # runs 48 apart: the second reaches other threads' columns
    assert _packed_groups(({**form[0], "var:g": (Var("g"), 48)}, 0), 4, 16, sc) is None


def test_shared_bytes_plans_a_schedule_once_and_tells_schedules_apart(monkeypatch):
    # rule 3 asks for the shared memory of the schedules it tries; asked again for an equal
    # schedule (a second gpu_schedule call, the search space's launchable) the answer is the
    # one remembered, and another schedule (another reduction block) is planned anew
    from tensorlang.backends.cuda import rules

    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0])
        return plan(*args, **kwargs)

    monkeypatch.setattr(rules, "plan", counted)
    monkeypatch.setattr(rules, "_PLANNED", type(rules._PLANNED)())
    f = W.BUILTIN["matmul"].build()
    s = gpu_schedule(f, sizes=dict(M=4096, N=4096, K=4096))
    first = len(calls)
    assert first >= 1 and rules.shared_bytes(s) == 4 * (16 * 132 + 16 * 128)
    assert gpu_schedule(f, sizes=dict(M=4096, N=4096, K=4096)).to_json() == s.to_json()
    assert len(calls) == first
    other = gpu_schedule(f, sizes=dict(M=512, N=512, K=512))
    assert len(calls) > first and rules.shared_bytes(other) != rules.shared_bytes(s)
