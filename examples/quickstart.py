"""tensorlang quickstart: define two algorithms, compile them, check them against NumPy, time them.

Run: python examples/quickstart.py
Prints, for matmul 512^3 and a two-stage 3x3 blur on 2048^2 (float32), the median time of the
compiled kernel beside NumPy's, measured in the same run, and the ratio: once with the default
schedule (every Func at root, loops in definition order: the naive loop nest) and once with a
schedule (tl.Schedule: tiles, vectorized and parallel loops), which is what makes kernels fast.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import tensorlang as tl


#: seconds to wait after timing NumPy: its BLAS threads keep spinning for about 0.1 s after a
#: call and would share the CPU with the next kernel timed (see docs/measurement.md)
SETTLE = 0.2


def median_seconds(fn, repeats: int = 7, min_total: float = 0.2) -> float:
    """Median wall time of ``fn()`` in seconds over >= ``repeats`` runs, after one warm-up."""
    fn()
    times: list[float] = []
    while len(times) < repeats or sum(times) < min_total:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 50:
            break
    return statistics.median(times)


def matmul() -> tl.Func:
    M, N, K = tl.sizes("M N K")
    A = tl.Input("A", (M, K), tl.float32)
    B = tl.Input("B", (K, N), tl.float32)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]  # k is only on the right: summed (the einsum rule)
    return C


def blur() -> tl.Func:
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float32)
    y, x = tl.vars("y x")
    blur_x = tl.Func("blur_x")
    blur_x[y, x] = (In[y, x - 1] + In[y, x] + In[y, x + 1]) / 3
    out = tl.Func("out")
    out[y, x] = (blur_x[y - 1, x] + blur_x[y, x] + blur_x[y + 1, x]) / 3
    return out  # "valid" domain: y in [1, H - 1), x in [1, W - 1)


def schedule_matmul(C: tl.Func) -> tl.Schedule:
    """8x32 register tiles: 8 rows unrolled x 32 columns in two AVX-512 vectors, parallel rows."""
    i, j = C.definition.args
    (k,) = C.definition.rvars
    s = tl.Schedule(C)
    io, ii = s[C].split(i, 8)
    jo, ji = s[C].split(j, 32, tail="ShiftInwards")
    s[C].reorder(io, jo, k, ii, ji).unroll(ii).vectorize(ji).parallel(io)
    return s


def schedule_blur(out: tl.Func) -> tl.Schedule:
    """blur_x inlined into out; 16-wide vectors along x; rows in parallel."""
    y, x = out.definition.args
    s = tl.Schedule(out)
    s["blur_x"].compute_inline()
    yo, yi = s[out].split(y, 16)
    xo, xi = s[out].split(x, 16, tail="ShiftInwards")
    s[out].vectorize(xi).parallel(yo)
    return s


def numpy_blur(a: np.ndarray) -> np.ndarray:
    third = np.float32(3)
    bx = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / third
    return (bx[:-2] + bx[1:-1] + bx[2:]) / third


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []

    C = matmul()
    a = rng.random((512, 512), dtype=np.float32)
    b = rng.random((512, 512), dtype=np.float32)
    ref = a @ b
    t_np = median_seconds(lambda: a @ b)
    time.sleep(SETTLE)
    for label, sched in (("default", None), ("scheduled", schedule_matmul(C))):
        t0 = time.perf_counter()
        kern = tl.compile(C, sched)
        tc = time.perf_counter() - t0
        np.testing.assert_allclose(kern(A=a, B=b), ref, rtol=1e-4, atol=1e-3)
        t_tl = median_seconds(lambda: kern(A=a, B=b))
        rows.append((f"matmul 512^3 ({label})", t_tl, t_np, 2 * 512**3 / t_tl / 1e9, tc))
        if sched is not None:
            scheduled_mm = kern

    out = blur()
    img = rng.random((2048, 2048), dtype=np.float32)
    t_np = median_seconds(lambda: numpy_blur(img))
    for label, sched in (("default", None), ("scheduled", schedule_blur(out))):
        t0 = time.perf_counter()
        kern = tl.compile(out, sched)
        tc = time.perf_counter() - t0
        np.testing.assert_allclose(kern(In=img), numpy_blur(img), rtol=1e-5, atol=1e-6)
        t_tl = median_seconds(lambda: kern(In=img))
        rows.append((f"blur 2048^2 ({label})", t_tl, t_np, 8 * 2046 * 2046 / t_tl / 1e9, tc))

    print("The scheduled matmul's loop nest:")
    print(scheduled_mm.loop_nest())
    print("All kernels match NumPy.\n")
    head = f"{'workload':<28}{'tensorlang':>13}{'numpy':>13}{'tl/numpy':>10}{'GFLOP/s':>9}" \
           f"{'compile':>10}"
    print(head)
    print("-" * len(head))
    for name, t_tl, t_np, gflops, tc in rows:
        print(f"{name:<28}{t_tl * 1e3:>10.3f} ms{t_np * 1e3:>10.3f} ms{t_tl / t_np:>9.2f}x"
              f"{gflops:>9.2f}{tc * 1e3:>7.0f} ms")
    print("\ntl/numpy = tensorlang time / NumPy time (< 1: tensorlang is faster). The default "
          "schedule is the\nnaive loop nest; the schedules split, vectorize, unroll and "
          "parallelize it.")


if __name__ == "__main__":
    main()
