"""GEMM: the rule-based schedule (packed, blocked by the analytical CPU model) against the same
rules without packing ("old") and NumPy's BLAS, interleaved in one process.

Run: python benchmarks/gemm_packed.py MxNxK f32|f64 old,auto[,q8k128m16...]
     (TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread; ROUNDS=n, default 7;
     TARGET_CPU=haswell compiles every contender for that described CPU, AVX2 code an AVX-512
     host runs, against NumPy's BLAS with OPENBLAS_CORETYPE=Haswell)
Prints per contender n-round medians, IQR / median and GFLOP/s. ``q<rows>k<kc>m<tiles per
block>[u]`` is a hand-made packed nest (``u``: without the copy) for exploring the blocking;
``auto:NAME=VALUE`` is the rule-based schedule with ``heuristic.NAME`` set to VALUE (e.g.
``auto:BLOCKS_PER_THREAD=2``; several joined by ``+``; other modules' constants as
``common.rule_settings`` names them: ``auto:cpu_model.MAX_ACCUMULATORS=24``); ``ku<n>`` the
rule-based schedule with its ``k.i`` loop unrolled ``n`` times. ``b<rows>k<kc>m<tiles per block>``
is a hand-made nest in BLIS's order (``p``: the copy of B in parallel, ``v``: vectorized).
"""
import os
import sys
import time

import numpy as np

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.heuristic import lanes as heuristic_lanes
from tensorlang.autotuner.timing import MIN_RUN_SECONDS, Stats, interleaved

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cpu_name, numpy_blas, rule_settings  # noqa: E402

m, nn, kk = map(int, sys.argv[1].split("x")); dt = sys.argv[2]; variants = sys.argv[3].split(",")
dtype = tl.float32 if dt == "f32" else tl.float64
npd = np.float32 if dt == "f32" else np.float64
M, N, K = tl.sizes("M N K")
A, B = tl.Input("A", (M, K), dtype), tl.Input("B", (K, N), dtype)
i, j, k = tl.vars("i j k")
C = tl.Func("C"); C[i, j] = A[i, k] * B[k, j]
TARGET = None
if os.environ.get("TARGET_CPU"):  # a described CPU's code (benchmarks/mca.py's features)
    from mca import target_for
    TARGET = target_for(os.environ["TARGET_CPU"])
lanes = heuristic_lanes(C, TARGET)  # the target's native SIMD lanes of this dtype

def sched(v):
    if v == "auto":
        return heuristic_schedule(C, {"M": m, "N": nn, "K": kk}, TARGET)
    if v.startswith("auto:"):  # auto:NAME=VALUE[+NAME=VALUE] sets constants while scheduling
        with rule_settings(v[5:]):
            return heuristic_schedule(C, {"M": m, "N": nn, "K": kk}, TARGET)
    if v.startswith("ku"):  # ku<n>: the rule-based schedule with its k.i loop unrolled n times
        s = heuristic_schedule(C, {"M": m, "N": nn, "K": kk}, TARGET)
        s[C].split("k.i", int(v[2:]))
        s[C].unroll("k.i.i")
        return s
    if v == "old":
        import tensorlang.autotuner.heuristic as H
        from tensorlang.errors import ScheduleError
        keep = H._packed_tile
        def no(*a, **k): raise ScheduleError("off")
        H._packed_tile = no
        try:
            return heuristic_schedule(C, {"M": m, "N": nn, "K": kk}, TARGET)
        finally:
            H._packed_tile = keep
    if v.startswith("p"):
        rows = int(v[1:].split("k")[0]); kc = int(v.split("k")[1])
        s = tl.Schedule(C)
        io, ii = s[C].split("i", rows)
        xo, xi = s[C].split("j", 2 * lanes, tail="GuardWithIf")
        ko, ki = s[C].split("k", kc)
        s[C].reorder(xo, ko, io, ki, ii, xi)
        s.cache_read("B", s[C], ko)
        s[C].parallel(xo).unroll(ii).vectorize(xi, lanes).unroll(f"{xi.name}.o")
        return s
    # b<rows>k<kc>m<tiles per block>[p][v]: BLIS's order, B packed once per kc (p: its copy in
    # parallel, v: vectorized); q<rows>k<kc>m<tiles per block>[u]: B's panel per row block (u:
    # no copy)
    rows = int(v[1:].split("k")[0]); kc = int(v.split("k")[1].split("m")[0])
    flags = v.split("m")[1].lstrip("0123456789"); mb = int(v.split("m")[1][:-len(flags) or None])
    blis = v.startswith("b")
    s = tl.Schedule(C)
    io, ii = s[C].split("i", rows)
    ioo, ioi = s[C].split(io, mb)
    xo, xi = s[C].split("j", 2 * lanes, tail="GuardWithIf" if blis else "ShiftInwards")
    ko, ki = s[C].split("k", kc)
    if blis:
        s[C].reorder(ko, ioo, xo, ioi, ki, ii, xi)
        bl = s.cache_read("B", s[C], ko, layout=(1, 0), panel=(1, 2 * lanes))
        if "p" in flags:
            bl.parallel("B_local_d0")
        if "v" in flags:
            bl.vectorize("B_local_d2", lanes)
        s.cache_read("A", s[C], ioo, layout=(0, 1))
    else:
        s[C].reorder(ioo, xo, ko, ioi, ki, ii, xi)
        if "u" not in flags:
            s.cache_read("B", s[C], ko)
    s[C].parallel(ioo)
    s[C].unroll(ii)
    s[C].vectorize(xi, lanes).unroll(f"{xi.name}.o")
    return s

rng = np.random.default_rng(0)
a = rng.random((m, kk)).astype(npd); b = rng.random((kk, nn)).astype(npd)
ref = a @ b
o0 = np.empty((m, nn), npd)
cont = {"numpy": lambda: np.matmul(a, b, out=o0)}
for v in variants:
    s = sched(v)
    # (an auto:NAME=VALUE variant is compiled with its settings too: some are lowering switches)
    with rule_settings(v[5:] if v.startswith("auto:") else ""):
        t0 = time.time(); kern = tl.compile(C, s, target=TARGET) if TARGET else tl.compile(C, s); ct = time.time() - t0
    o = np.empty((m, nn), npd)
    kern(a, b, out=o)
    err = np.abs(o - ref).max() / np.abs(ref).max()
    assert err < 1e-4, (v, err)
    cont[v] = (lambda kern=kern, o=o: kern(a, b, out=o))
    print(v, "compile", round(ct,2), "s", flush=True)
    if os.environ.get("NEST", "0") != "0": print(kern.loop_nest())
res = {k: Stats.of(v) for k, v in interleaved(cont, rounds=int(os.environ.get('ROUNDS', '7')), runs=5, warmup=1, settle=["numpy"],
                                                min_run_seconds=MIN_RUN_SECONDS).items()}
flops = 2 * m * nn * kk
built = f", code for {TARGET.cpu}" if TARGET else ""
print(f"{m}x{nn}x{kk} {dt} on {cpu_name()}{built}, {os.environ.get('TENSORLANG_NUM_THREADS', os.cpu_count())} threads; NumPy calls {numpy_blas()}")
for name, st in res.items():
    print(f"{name:14s} median {st.median*1e3:8.3f} ms  IQR/med {st.iqr/st.median:5.1%}  {flops/st.median/1e9:7.1f} GFLOP/s  (q1 {flops/st.q1/1e9:.1f}, best {flops/st.min/1e9:.1f})")
