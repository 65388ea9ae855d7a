"""The rule-based schedule is never a trap: it does not recompute a producer whose region is far
larger than its consumer's tile, and it stops inlining before an expression explodes."""

from __future__ import annotations

import os
import sys

import numpy as np

import tensorlang as tl
from tensorlang.autotuner.features import store_counts
from tensorlang.autotuner.heuristic import (
    MAX_INLINE_NODES,
    MAX_RECOMPUTE,
    heuristic_schedule,
    inlined_nodes,
    recompute_factor,
)
from tensorlang.schedule.lower import lower

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from halide_apps import stencil_chain, unsharp, unsharp_numpy  # noqa: E402


def gemver():
    """PolyBench gemver's three steps (float64): A_hat = A + u1 v1^T + u2 v2^T,
    x = beta A_hat^T y + z, w = alpha A_hat x."""
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    u1, v1, u2, v2, y, z = (tl.Input(n, (N,), tl.float64)
                            for n in ("u1", "v1", "u2", "v2", "y", "z"))
    i, j = tl.vars("i j")
    Ah = tl.Func("Ah")
    Ah[i, j] = A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]
    x = tl.Func("x")
    x[i] = 1.2 * tl.sum(Ah[j, i] * y[j]) + z[i]
    w = tl.Func("w")
    w[i] = 1.5 * tl.sum(Ah[i, j] * x[j])
    return w, x


def gemver_numpy(a):
    ah = a["A"] + np.outer(a["u1"], a["v1"]) + np.outer(a["u2"], a["v2"])
    x = 1.2 * ah.T @ a["y"] + a["z"]
    return 1.5 * ah @ x


def test_gemver_producers_read_whole_are_not_recomputed_per_row_block():
    w, x = gemver()
    n = 37
    sizes = {"N": n}
    s = heuristic_schedule(w, sizes)
    # x is read as x[j] by every row of w: computed at w's row loop it would be recomputed
    # (with its N^2 reduction) once per row block
    assert s.states["x"].compute.kind == "root"
    at_rows = s.copy()
    at_rows["x"].compute_at(at_rows[w], s.states["w"].loops[0])
    assert recompute_factor(w, x, s, at_rows, sizes) > MAX_RECOMPUTE
    rng = np.random.default_rng(0)
    a = {"A": rng.random((n, n)), **{k: rng.random(n) for k in ("u1", "v1", "u2", "v2", "y", "z")}}
    kern = tl.compile(w, s)
    np.testing.assert_allclose(kern(**a), gemver_numpy(a), rtol=1e-10)


def test_a_matrix_each_reduction_reads_once_is_inlined_into_them():
    # gemver's A_hat is read once per point by each of two matrix-vector sums: computed twice
    # per point instead of stored and read back (N x N doubles each way); a scaled operand of
    # a GEMM, read once per output row, stays a stage
    from tensorlang.autotuner.heuristic import inline_recompute
    from tensorlang.autotuner.workloads import BoundExtents

    w, _ = gemver()
    sizes = {"N": 37}
    p = tl.Pipeline(w)
    assert inline_recompute(p, tl.Schedule(w), p.func("Ah"), BoundExtents(w, sizes)) == 2
    s = heuristic_schedule(w, sizes)
    assert s.states["Ah"].compute.kind == "inline" and s.states["x"].compute.kind == "root"
    rng = np.random.default_rng(1)
    a = {"A": rng.random((37, 37)), **{k: rng.random(37) for k in ("u1", "v1", "u2", "v2", "y",
                                                                    "z")}}
    np.testing.assert_allclose(tl.compile(w, s)(**a), gemver_numpy(a), rtol=1e-10)

    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.float32), tl.Input("B", (K, N), tl.float32)
    i, j, k = tl.vars("i j k")
    B2 = tl.Func("B2")
    B2[k, j] = B[k, j] * 2.0
    C = tl.Func("C")
    C[i, j] = tl.sum(A[i, k] * B2[k, j])
    sizes = {"M": 67, "N": 45, "K": 23}
    q = tl.Pipeline(C)
    assert inline_recompute(q, tl.Schedule(C), q.func("B2"), BoundExtents(C, sizes)) == 67
    assert heuristic_schedule(C, sizes).states["B2"].compute.kind == "root"


def test_a_small_stage_runs_serially():
    from tensorlang.autotuner.heuristic import MIN_PARALLEL_POINTS
    from tensorlang.autotuner.workloads import softmax

    out = softmax()
    small = heuristic_schedule(out, {"R": 8, "S": 67})
    assert 8 * 67 < MIN_PARALLEL_POINTS and "parallel" not in small.to_python()
    assert "parallel" in heuristic_schedule(out, {"R": 512, "S": 67}).to_python()


def test_a_time_step_region_needs_more_work_to_run_in_parallel():
    # heat-3d's sweep starts a parallel region on every time step: at PolyBench's MEDIUM size
    # (38^3 points a sweep, between the two thresholds) it runs serially, at 70^3 in parallel
    from polybench.kernels import KERNELS
    from tensorlang.autotuner.heuristic import MIN_PARALLEL_POINTS
    from tensorlang.autotuner.update_rules import (MIN_REPEATED_PARALLEL_POINTS,
                                                   update_parallel_loops)
    from tensorlang.autotuner.workloads import BoundExtents
    from tensorlang.schedule import Schedule

    kern = KERNELS["heat-3d"]
    h = kern.handle(kern.build())
    buf = tl.Pipeline(h).func("buf")
    assert MIN_PARALLEL_POINTS < 38 ** 3 < MIN_REPEATED_PARALLEL_POINTS < 68 ** 3
    # candidates, outermost first (the time loop r_4 is one region per call, large enough; the
    # dependence analysis then refuses it)
    for n, loops in ((40, ["r_4"]), (70, ["r_4", "r_w", "r_z"])):
        sizes = {"N": n, "T": 3}
        assert update_parallel_loops(Schedule(h), buf, 0, BoundExtents(h, sizes)) == loops
        nest = str(lower(h, heuristic_schedule(h, sizes)))
        assert ("parallel for r_z" in nest) == (n == 70)
    sizes = {"N": 11, "T": 3}
    arrays = kern.inputs(sizes, np.random.default_rng(0))
    got = tl.compile(h, heuristic_schedule(h, sizes))(**kern.call_args(h, arrays, sizes))
    np.testing.assert_allclose(got, kern.numpy(arrays, sizes)[0], rtol=1e-12)


def test_an_update_row_shorter_than_512_bytes_is_left_to_llvm_on_avx2_too():
    # heat-3d's sweep at MEDIUM: rows of 38 float64 (304 bytes). On AVX-512 they are under 8
    # vectors; on AVX2 they made 9.5 vectors of 4 lanes, and the explicit vector loop with its
    # masked tail ran slower than the default schedule, which leaves them to LLVM (Zen 3:
    # 0.75-0.84x of the default). At 70 points (68-point rows, 544 bytes) both vectorize
    from algorithms import described_target, runnable
    from polybench.kernels import KERNELS

    kern = KERNELS["heat-3d"]
    h = kern.handle(kern.build())
    for cpu in ("haswell", "znver3", "icelake-server"):
        target = described_target(cpu)
        for n in (40, 70):
            text = heuristic_schedule(h, {"N": n, "T": 3}, target).to_python()
            assert ("update(0).vectorize('r_x'" in text) == (n == 70), (cpu, n, text)
    # the A/B switch of docs/rule-based-schedule.md (``--against UPDATE_MIN_BYTES=0``) reaches
    # the rule, in update_rules, and is undone after its block
    from common import rule_settings

    haswell = {"N": 40, "T": 3}, described_target("haswell")
    with rule_settings("UPDATE_MIN_BYTES=0"):
        assert "update(0).vectorize('r_x', 4)" in heuristic_schedule(h, *haswell).to_python()
    assert "update(0).vectorize" not in heuristic_schedule(h, *haswell).to_python()
    sizes = {"N": 71, "T": 2}  # (rows of 69: 17 vectors of AVX2 and one lane under a mask)
    arrays = kern.inputs(sizes, np.random.default_rng(1))
    target = described_target("haswell")
    got = tl.compile(h, heuristic_schedule(h, sizes, target), target=runnable(target))(
        **kern.call_args(h, arrays, sizes))
    np.testing.assert_allclose(got, kern.numpy(arrays, sizes)[0], rtol=1e-12)


def test_a_row_producer_is_still_computed_per_row():
    # softmax's exp per row: each row of the output needs its own row of e, computed once
    from tensorlang.autotuner.workloads import softmax

    out = softmax()  # rows enough for a parallel output loop (MIN_PARALLEL_POINTS)
    s = heuristic_schedule(out, {"R": 512, "S": 67})
    assert s.states["e"].compute.kind == "at"
    counts = store_counts(lower(out, s), {"R": 512, "S": 67})
    # each point once (a vector tail counted as its full 16-lane tile: 80 columns for 67)
    assert 512 * 67 <= counts["e"] <= 512 * 80


def test_inlining_stops_before_the_expression_explodes():
    out = stencil_chain(4)
    sizes = {"H": 40, "W": 41}
    s = heuristic_schedule(out, sizes)
    # one 5x5 stage inlined into another is already 25 x 75 nodes: each stays a stage
    assert inlined_nodes(tl.Pipeline(out), s) <= MAX_INLINE_NODES
    assert all(s.states[f"s{k}"].compute.kind != "inline" for k in range(3))
    a = np.random.default_rng(1).random((40, 41), dtype=np.float32)
    np.testing.assert_allclose(tl.compile(out, s)(In=a), tl.reference(out, In=a),
                               rtol=1e-5, atol=1e-6)


def test_cheap_producers_are_still_inlined():
    from tensorlang.autotuner.workloads import blur

    out = blur()
    s = heuristic_schedule(out, {"H": 30, "W": 31})
    assert s.states["bx"].compute.kind == "inline"


def test_store_counts_count_executed_stores_per_buffer():
    out = stencil_chain(2)
    counts = store_counts(lower(out), {"H": 20, "W": 30})
    # valid domains: s0 over [2, H-2) x [2, W-2), s1 over [4, H-4) x [4, W-4)
    assert counts == {"s0": 16 * 26, "s1": 12 * 22}


def test_the_register_tile_fits_the_targets_vector_registers():
    # AVX2 has 16 vector registers of 8 float32 lanes: the tile keeps at most 12 accumulators
    # (AVX-512: 16 of 32 registers); the schedule is made for the target, not for the host
    from tensorlang.autotuner.heuristic import ACCUMULATORS_AVX2
    from tensorlang.autotuner.workloads import matmul
    from tensorlang.backends.llvm.target import Target, host_target

    h = host_target()
    avx2 = Target(h.triple, "haswell", "+avx,+avx2,+fma", h.llvm_version, h.llvmlite_version)
    out = matmul()
    sizes = {"M": 96, "N": 96, "K": 32}
    s = heuristic_schedule(out, sizes, avx2)
    steps = s.to_json().split('"op"')
    assert any('"vectorize", "func": "C", "loop": "j.i", "factor": 8' in d for d in steps)
    rows = next(int(d.split('"factor": ')[1].split(",")[0]) for d in steps
                if '"split", "func": "C", "loop": "i"' in d)
    assert rows * 2 <= ACCUMULATORS_AVX2  # two 8-lane vectors per row
    # and it runs correctly on this machine
    a = np.random.default_rng(2).random((96, 32), dtype=np.float32)
    b = np.random.default_rng(3).random((32, 96), dtype=np.float32)
    k = tl.compile(out, s)
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-5)


def test_inlining_does_not_recompute_a_blur_per_tap_or_per_channel():
    """Halide's unsharp: a 7-tap blur inlined into a 7-tap blur would compute it 7 times per
    pixel, and the blurred image inlined into the per-channel output 3 times; both stay stages.
    The cheap per-pixel ratio is still inlined into the output."""
    from tensorlang.autotuner.heuristic import inline_recompute

    out = unsharp()
    sizes = {"H": 37, "W": 41}
    s = heuristic_schedule(out, sizes)
    kinds = {f: s.states[f].compute.kind for f in ("blur_y", "blur_x", "ratio")}
    assert kinds == {"blur_y": "root", "blur_x": "root", "ratio": "inline"}
    from tensorlang.autotuner.workloads import BoundExtents

    p = tl.Pipeline(out)
    base = tl.Schedule(out)
    assert inline_recompute(p, base, p.func("ratio"), BoundExtents(out, sizes)) == 3
    assert inline_recompute(p, base, p.func("blur_y"), BoundExtents(out, sizes)) == 7
    a = {"input": np.random.default_rng(2).random((3, 37, 41), dtype=np.float32) + 0.1}
    np.testing.assert_allclose(tl.compile(out, s)(**a), unsharp_numpy(a), rtol=1e-4, atol=1e-5)
