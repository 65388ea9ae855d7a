"""Hand-scheduled kernels against NumPy, measured in the same run (issue: schedules).

Run: python benchmarks/schedules.py [--quick]
Prints, for GEMM 1024^3 fp32, a two-stage 3x3 blur on 4096^2, softmax over 4096x4096 rows and
conv2d 64->64 channels 56x56 3x3 (NumPy: im2col + matmul), the median time of tensorlang and of
NumPy, the ratio (> 1: tensorlang faster) and GFLOP/s; then the 2-thread speedup of a 16M-element
pointwise kernel and the per-call cost of an empty parallel region. The schedules are what a Halide
expert would write: register tiles with ShiftInwards tails, compute_at for producer stages,
vectorized inner loops, a parallel outer loop.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import median_seconds, table  # noqa: E402

import tensorlang as tl  # noqa: E402
from tensorlang.autotuner.workloads import BUILTIN  # noqa: E402


def gemm(n: int):
    C = BUILTIN["matmul"].build()
    s = tl.Schedule(C)
    io, ii = s[C].split("i", 8)
    jo, ji = s[C].split("j", 32, tail="ShiftInwards")
    s[C].reorder(io, jo, "k", ii, ji).unroll(ii).vectorize(ji).parallel(io)
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    ref = BUILTIN["matmul"].numpy({"A": a, "B": b})
    kern = tl.compile(C, s)
    np.testing.assert_allclose(kern(a, b), ref(), rtol=1e-4)
    o = np.empty((n, n), np.float32)
    return (f"GEMM {n}^3 fp32", lambda: kern(a, b, out=o), lambda: kern(a, b), ref, 2 * n**3)


def blur(n: int):
    out = BUILTIN["blur"].build()
    s = tl.Schedule(out)
    s["bx"].compute_inline()  # 9 loads per point from L1 beat a round trip through a buffer
    yo, yi = s[out].split("y", 16)
    xo, xi = s[out].split("x", 16, tail="ShiftInwards")
    s[out].vectorize(xi).parallel(yo)
    img = np.random.default_rng(0).random((n, n), dtype=np.float32)
    ref = BUILTIN["blur"].numpy({"In": img})
    kern = tl.compile(out, s)
    np.testing.assert_allclose(kern(img), ref(), rtol=1e-5)
    o = np.empty((n - 2, n - 2), np.float32)
    return (f"blur 3x3 two-stage {n}^2", lambda: kern(img, out=o), lambda: kern(img), ref,
            8 * (n - 2) ** 2)


def softmax(n: int):
    out = BUILTIN["softmax"].build()
    s = tl.Schedule(out)
    for f in ("mx", "e", "sm"):
        s[f].compute_at(s[out], "i")
    s["e"].vectorize("j", 16)
    s[out].vectorize("j", 16).parallel("i")
    x = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    ref = BUILTIN["softmax"].numpy({"X": x})
    kern = tl.compile(out, s)
    np.testing.assert_allclose(kern(x), ref(), rtol=1e-4, atol=1e-7)
    o = np.empty((n, n), np.float32)
    return (f"softmax {n}x{n} rows", lambda: kern(x, out=o), lambda: kern(x), ref, 5 * n * n)


def conv2d(c: int, hw: int):
    Out = BUILTIN["conv2d"].build()
    s = tl.Schedule(Out)
    # the register tile: a whole image row (56 = 16 + 16 + 16 + 8 lanes) x 4 output channels, 16
    # accumulators; a 32-wide shifted tile x 8 channels computes 64 columns for every 56
    width, rows = (hw, 4) if hw <= 64 else (32, 8)
    coo, coi = s[Out].split("co", rows)
    xo, xi = s[Out].split("x", width, tail="ShiftInwards")
    s[Out].reorder("n", coo, "y", xo, "ci", "ry", "rx", coi, xi).unroll(coi).vectorize(xi)
    s[Out].parallel(coo)
    s["pad"].vectorize("x", 16, tail="ShiftInwards").parallel("ci")
    rng = np.random.default_rng(0)
    a = rng.random((1, c, hw, hw), dtype=np.float32)
    w = rng.random((c, c, 3, 3), dtype=np.float32)
    ref = BUILTIN["conv2d"].numpy({"In": a, "Wt": w})  # im2col + matmul
    kern = tl.compile(Out, s)
    np.testing.assert_allclose(kern(a, w), ref(), rtol=1e-4)
    o = np.empty((1, c, hw, hw), np.float32)
    return (f"conv2d {c}->{c} {hw}^2 3x3", lambda: kern(a, w, out=o), lambda: kern(a, w), ref,
            2 * c * c * 9 * hw * hw)


PARALLEL_PROBE = r"""
import sys, numpy as np, tensorlang as tl
sys.path.insert(0, sys.argv[1])
from common import median_seconds
(N,) = tl.sizes("N"); X = tl.Input("X", (N,), tl.float32); (i,) = tl.vars("i")
Y = tl.Input("Y", (N,), tl.float32)
x = np.random.rand(1 << 24).astype(np.float32); y = np.random.rand(1 << 24).astype(np.float32)
out = np.empty_like(x)
times = []
for expr in (X[i] * 2.5 + Y[i], tl.exp(X[i]) * 2.5):
    F = tl.Func("F"); F[i] = expr
    s = tl.Schedule(F); io, ii = s[F].split(i, 65536); s[F].vectorize(ii, 16).parallel(io)
    k = tl.compile(F, s)
    args = (x, y) if len(tl.Pipeline(F).inputs) == 2 else (x,)
    times.append(median_seconds(lambda: k(*args, out=out)))
E = tl.Func("E"); E[i] = X[i] + 1.0
s = tl.Schedule(E); s[E].parallel(i)
ke = tl.compile(E, s)
tiny = np.zeros(2, np.float32); o2 = np.empty_like(tiny)
te = median_seconds(lambda: ke(tiny, out=o2), repeats=2000, min_seconds=0.2, max_runs=20000)
S = tl.Func("S"); S[i] = X[i] + 1.0
ks = tl.compile(S)
ts = median_seconds(lambda: ks(tiny, out=o2), repeats=2000, min_seconds=0.2, max_runs=20000)
print(times[0], times[1], te, ts)
"""


def parallel_rows() -> list[tuple]:
    here = os.path.dirname(os.path.abspath(__file__))
    res = {}
    for threads in ("1", "2"):
        env = dict(os.environ, TENSORLANG_NUM_THREADS=threads)
        outp = subprocess.run([sys.executable, "-c", PARALLEL_PROBE, here], env=env,
                              capture_output=True, text=True, check=True).stdout.split()
        res[threads] = [float(v) for v in outp]
    rows = []
    for k, name in ((0, "a*2.5+b 16M fp32 (memory-bound)"), (1, "exp(a)*2.5 16M fp32")):
        t1, t2 = res["1"][k], res["2"][k]
        rows.append((name, f"{t1 * 1e3:.2f} ms", f"{t2 * 1e3:.2f} ms", f"{t1 / t2:.2f}x"))
    te, ts = res["2"][2], res["2"][3]
    rows.append(("empty parallel region", f"serial call {ts * 1e6:.1f} us",
                 f"parallel call {te * 1e6:.1f} us", f"region ~{(te - ts) * 1e6:.1f} us"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    args = ap.parse_args()
    q = args.quick
    cases = [gemm(256 if q else 1024), blur(512 if q else 4096), softmax(512 if q else 4096),
             conv2d(16 if q else 64, 28 if q else 56)]
    rows = []
    for name, tl_out, tl_new, np_fn, flops in cases:
        t_tl, t_new, t_np = median_seconds(tl_out), median_seconds(tl_new), median_seconds(np_fn)
        rows.append((name, f"{t_tl * 1e3:.3f} ms", f"{t_new * 1e3:.3f} ms",
                     f"{t_np * 1e3:.3f} ms", f"{t_np / t_tl:.2f}x", f"{t_np / t_new:.2f}x",
                     f"{flops / t_tl / 1e9:.1f}"))
    print(table(rows, ("workload", "tl (out=)", "tl (new array)", "numpy", "speedup",
                       "speedup (new)", "GFLOP/s")))
    print()
    print(table(parallel_rows(), ("parallel runtime", "1 thread", "2 threads", "speedup")))
    print("\nspeedup = numpy time / tensorlang time into a preallocated out= array (how Halide "
          "benchmarks realize);\n'speedup (new)' includes allocating the result (page faults "
          "of a fresh array). Medians of >= 7 runs after\nwarm-up, same process; conv2d's numpy "
          "is im2col + matmul (OpenBLAS).")


if __name__ == "__main__":
    main()
