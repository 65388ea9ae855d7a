"""Where the rule-based schedule is a trap: GEMM (``C = A B``) over a grid of shapes, odd, narrow,
skinny and small ones among them, each the rule-based schedule against NumPy's BLAS, interleaved
in one process; prints every shape's medians and its ratio, worst first.

Run: python benchmarks/gemm_shapes.py [--dtype f64|f32] [--rounds 5]
     [--shapes 1000x2x1000,32x7x5...] [--worst 15] [--against NAME=VALUE]
     (TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread; ``--against``: the rules
     with a switch set, ``common.rule_settings``, timed in the same rounds; shapes whose two
     schedules are the same are timed once, unless the switch is a lowering one, named
     ``tensorlang.<module>.NAME``)
The default grid crosses M and N of 1, 2, 3, 7, 16, 33, 100, 1000 with K of 1, 17, 256, 1000
(the product at most 2e9 flops: 1000 x 1000 x 1000 is left out); a ratio is NumPy's median
over the kernel's (above 1: faster than NumPy). Slow: a few minutes (one compilation per
shape).
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import numpy as np

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.timing import MIN_RUN_SECONDS, Stats, interleaved

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cpu_name, numpy_blas, rule_settings, table  # noqa: E402

SIDES = (1, 2, 3, 7, 16, 33, 100, 1000)
DEPTHS = (1, 17, 256, 1000)
MAX_FLOPS = 2e9


def grid() -> list[tuple[int, int, int]]:
    return [(m, n, k) for m, n, k in itertools.product(SIDES, SIDES, DEPTHS)
            if 2 * m * n * k < MAX_FLOPS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="f64", choices=["f64", "f32"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default="", help="MxNxK,... (default: the grid)")
    ap.add_argument("--worst", type=int, default=0, help="print only the N worst shapes")
    ap.add_argument("--against", default="", help="NAME=VALUE: the rules with that switch too")
    args = ap.parse_args()
    dtype, npd = (tl.float64, np.float64) if args.dtype == "f64" else (tl.float32, np.float32)
    shapes = ([tuple(map(int, s.split("x"))) for s in args.shapes.split(",")] if args.shapes
              else grid())
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), dtype), tl.Input("B", (K, N), dtype)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]
    tol = 1e-10 if npd is np.float64 else 1e-4
    # a switch of a module outside autotune (``tensorlang.schedule.realize.PEEL_SHARED``)
    # changes the lowering, not the schedule: its kernels are compiled and timed every time
    lowering = any(part.startswith("tensorlang.") for part in args.against.split("+"))
    rng = np.random.default_rng(0)
    rows = []
    start = time.time()
    for m, n, kk in shapes:
        sizes = {"M": m, "N": n, "K": kk}
        schedule = heuristic_schedule(C, sizes)
        kern = tl.compile(C, schedule)
        other = None
        if args.against:  # (compiled under the settings too: some are lowering switches)
            with rule_settings(args.against):
                alt = heuristic_schedule(C, sizes)
                if alt.to_python() != schedule.to_python() or lowering:
                    other = tl.compile(C, alt)
        a, b = rng.random((m, kk)).astype(npd), rng.random((kk, n)).astype(npd)
        out, ref = np.empty((m, n), npd), a @ b
        contenders = {"numpy": lambda: np.matmul(a, b, out=ref),
                      "rule": lambda: kern(a, b, out=out)}
        if other is not None:
            contenders["against"] = lambda: other(a, b, out=out)
        for name in list(contenders)[1:]:
            contenders[name]()
            np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * kk)
        times = interleaved(contenders, rounds=args.rounds, settle=["numpy"],
                            min_run_seconds=MIN_RUN_SECONDS)
        st = {name: Stats.of(t) for name, t in times.items()}
        alt_ms = f"{st['against'].median * 1e3:.4f}" if other is not None else "same"
        rows.append((f"{m}x{n}x{kk}", st["numpy"].median * 1e3, st["rule"].median * 1e3,
                     st["rule"].iqr / st["rule"].median, alt_ms,
                     st["numpy"].median / st["rule"].median))
    rows.sort(key=lambda r: r[-1])
    threads = os.environ.get("TENSORLANG_NUM_THREADS", str(os.cpu_count()))
    print(f"GEMM {args.dtype} on {cpu_name()}, {threads} threads; NumPy calls {numpy_blas()}; "
          f"{len(rows)} shapes, {args.rounds} interleaved rounds, medians "
          f"({time.time() - start:.0f} s)" + (f"; against: {args.against}" if args.against else ""))
    shown = rows[:args.worst] if args.worst else rows
    head = ["MxNxK", "NumPy ms", "rule ms", "rule IQR/med", "against ms", "NumPy / rule"]
    body = [[s, f"{a:.4f}", f"{r:.4f}", f"{q:.0%}", alt, f"{x:.2f}x"]
            for s, a, r, q, alt, x in shown]
    if not args.against:  # (no against column)
        head, body = head[:4] + head[5:], [row[:4] + row[5:] for row in body]
    print(table([tuple(row) for row in body], tuple(head)))
    ratios = np.array([r[-1] for r in rows])
    print(f"geometric mean {np.exp(np.log(ratios).mean()):.2f}x; under 0.9x: "
          f"{int((ratios < 0.9).sum())} of {len(rows)}; under 0.5x: {int((ratios < 0.5).sum())}")


if __name__ == "__main__":
    main()
