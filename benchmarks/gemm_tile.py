"""The GEMM's register tile alone: ``C[512, 1024] = A[512, 256] @ B[256, 1024]`` with ``A`` (1 MB
in float64) in L2 and each 256 x (vectors x lanes) panel of ``B`` copied where it stays in L1, so
what is timed is the micro-kernel's loop (``rows`` broadcasts of ``A``, ``vectors`` loads of
``B``, ``rows x vectors`` FMAs a step) and not the blocking around it; against NumPy's whole
GEMM of the same shape, interleaved in one process.

Run: python benchmarks/gemm_tile.py f32|f64 n8x2[,p8x2,r8x2,...]
     (TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread; ROUNDS=n, default 15)
``<n|p|r><rows>x<vectors>``: ``n`` reads ``A`` where it is, ``r`` copies ``A``'s block once,
``p`` copies it in micro-panels of ``rows`` rows (``cache_read(..., panel=(0, rows))``).
Prints per contender the median, IQR / median, GFLOP/s at the median, the first quartile and
the best run, and the CPU.
"""
import os
import sys

import numpy as np

import tensorlang as tl
from tensorlang.autotuner.heuristic import lanes as heuristic_lanes
from tensorlang.autotuner.timing import Stats, interleaved

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cpu_name, numpy_blas  # noqa: E402

dt, variants = sys.argv[1], sys.argv[2].split(",")
dtype = tl.float32 if dt == "f32" else tl.float64
npd = np.float32 if dt == "f32" else np.float64
m, nn, kk = 512, 1024, 256
M, N, K = tl.sizes("M N K")
A, B = tl.Input("A", (M, K), dtype), tl.Input("B", (K, N), dtype)
i, j, k = tl.vars("i j k")
C = tl.Func("C")
C[i, j] = A[i, k] * B[k, j]
lanes = heuristic_lanes(C)


def schedule(v: str) -> tl.Schedule:
    rows, vectors = (int(x) for x in v[1:].split("x"))
    s = tl.Schedule(C)
    io, ii = s[C].split("i", rows)
    xo, xi = s[C].split("j", vectors * lanes)
    ioo, ioi = s[C].split(io, m // rows)  # one row block: A's block copied once
    s[C].reorder(ioo, xo, ioi, k, ii, xi)
    s.cache_read("B", s[C], xo)
    if v[0] == "p":
        s.cache_read("A", s[C], ioo, panel=(0, rows))
    elif v[0] == "r":
        s.cache_read("A", s[C], ioo)
    s[C].unroll(ii).vectorize(xi, lanes).unroll(f"{xi.name}.o")
    return s


rng = np.random.default_rng(0)
a, b = rng.random((m, kk)).astype(npd), rng.random((kk, nn)).astype(npd)
ref = a @ b
o0 = np.empty((m, nn), npd)
contenders = {"numpy": lambda: np.matmul(a, b, out=o0)}
for v in variants:
    kern = tl.compile(C, schedule(v))
    o = np.empty((m, nn), npd)
    kern(a, b, out=o)
    assert np.abs(o - ref).max() / np.abs(ref).max() < 1e-4, v
    contenders[v] = (lambda kern=kern, o=o: kern(a, b, out=o))
times = interleaved(contenders, rounds=int(os.environ.get("ROUNDS", "15")), runs=5, warmup=1,
                    settle=["numpy"])
flops = 2 * m * nn * kk
print(f"{m}x{nn}x{kk} {dt} register tile on {cpu_name()}, "
      f"{os.environ.get('TENSORLANG_NUM_THREADS', os.cpu_count())} threads; NumPy calls "
      f"{numpy_blas()}")
for name, ts in times.items():
    st = Stats.of(ts)
    print(f"{name:8s} median {st.median * 1e3:7.3f} ms  IQR/med {st.iqr / st.median:5.1%}  "
          f"{flops / st.median / 1e9:6.1f} GFLOP/s  (q1 {flops / st.q1 / 1e9:.1f}, best "
          f"{flops / st.min / 1e9:.1f})")
