"""What a stencil's vector width costs on this CPU: a two-row 1-D sweep (PolyBench jacobi-1d's
form, ``buf[1 - y, x] = c * (sum of buf[y, x + offset])``) vectorized at 256 and 512 bits for
several sets of read offsets, then PolyBench's jacobi-1d with the rule-based schedule at its
stencil width and at native width against the default schedule, at sizes from L1 to memory.

Run: python benchmarks/stencil_width.py [--offsets "0,8;0,1;-1,1;-1,0,1;0,8,16"]
     [--sizes 2000,20000,200000,2000000] [--rounds 7]

float64 throughout. Part 1 (N = 2016, T = 500: the two rows, 32 KB, stay in L1): an offset
that is a multiple of 8 elements (64 bytes, a cache line) is a load that starts where the store's
line does (the rows are 64-byte aligned and start the loop at element 8), any other offset one
that straddles two lines at 512 bits in every iteration, and at 256 bits in every other; the
sum of the reads scaled by 0.33333 stays in range for two or three reads (one read would decay
into subnormal numbers and time those instead). Part 2: jacobi-1d at each size N (T steps,
N * T about a million points), the default schedule, the rule-based one
(``vector_width.stage_lanes``: 256 bits on a CPU whose model says so where the rows fit in L1)
and the rule-based one with ``STENCIL_VECTOR_BITS=512`` (native width everywhere). Each part is
timed in interleaved rounds of three runs (``autotune.timing.interleaved``); prints medians and
IQR / median per contender. See docs/performance.md, "Stencils at 256 bits on Ice Lake-SP".
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import tensorlang as tl
from tensorlang.autotuner import vector_width
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.timing import Stats, interleaved

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cpu_name  # noqa: E402
from polybench.kernels import KERNELS  # noqa: E402


def sweep(offsets: list[int]) -> tl.Func:
    """``buf[1 - y, x] = 0.33333 * sum(buf[y, x + o] for o in offsets)`` over x in [8, N - 24),
    both rows, T times; the output is row 0."""
    N, T = tl.sizes("N T")
    A = tl.Input("A", (N,), tl.float64)
    p, i = tl.vars("p i")
    buf = tl.Func("buf", shape=(2, N))
    buf[p, i] = A[i]
    r = tl.RDom((8, N - 32), (0, 2), (0, T))
    value = buf[r.y, r.x + offsets[0]]
    for o in offsets[1:]:
        value = value + buf[r.y, r.x + o]
    buf[1 - r.y, r.x] = 0.33333 * value
    out = tl.Func("out")
    out[i] = buf[0, i]
    return out


def _report(times: dict[str, list[float]]) -> None:
    for label, v in times.items():
        st = Stats.of(v)
        print(f"  {label:<28}{st.median * 1e3:>10.3f} ms   IQR {st.iqr / st.median:4.0%}"
              f"   (n={st.n})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--offsets", default="0,8;0,1;-1,1;-1,0,1;0,8,16",
                    help="sets of read offsets (elements), ';'-separated")
    ap.add_argument("--sizes", default="2000,20000,200000,2000000")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(f"{cpu_name()}; {args.rounds} interleaved rounds of 3 runs, medians")
    sets = [[int(o) for o in s.split(",")] for s in args.offsets.split(";") if s]
    if any(o < -8 or o > 24 for s in sets for o in s) or any(len(s) < 2 for s in sets):
        ap.error("each set needs two or more offsets in [-8, 24]")
    a = np.random.default_rng(0).random(2016)
    calls = {}
    for offsets in sets:
        for bits in (256, 512):
            out = sweep(offsets)
            s = tl.Schedule(out)
            s["buf"].update(0).vectorize("r_x", bits // 64)
            kern = tl.compile(out, s)
            res = kern(A=a, T=500)
            calls[f"{','.join(map(str, offsets))} at {bits} bits"] = \
                lambda k=kern, res=res: k(A=a, T=500, out=res)
    print("part 1: reads at these offsets, N = 2016, T = 500 (L1)")
    _report(interleaved(calls, rounds=args.rounds, runs=3))
    kern = KERNELS["jacobi-1d"]
    h = kern.handle(kern.build())
    print("part 2: PolyBench jacobi-1d (float64)")
    for n in [int(v) for v in args.sizes.split(",") if v]:
        sizes = {"N": n, "T": max(1, 10**6 // n)}
        arrays = kern.inputs(sizes, np.random.default_rng(0))
        call = kern.call_args(h, arrays, sizes)
        want = kern.numpy(arrays, sizes)[0]
        calls = {}
        schedules = {"default": None, "rule-based": heuristic_schedule(h, sizes)}
        keep = vector_width.STENCIL_VECTOR_BITS
        try:
            vector_width.STENCIL_VECTOR_BITS = 512
            schedules["rule-based, 512 bits"] = heuristic_schedule(h, sizes)
        finally:
            vector_width.STENCIL_VECTOR_BITS = keep
        for label, s in schedules.items():
            k = tl.compile(h) if s is None else tl.compile(h, s)
            res = k(**call)
            if not np.allclose(res, want, rtol=1e-8, atol=1e-8):
                print(f"jacobi-1d N={n}: {label} differs from NumPy", file=sys.stderr)
                return 1
            calls[label] = lambda k=k, res=res: k(**call, out=res)
        rule = schedules["rule-based"].to_python().split("vectorize('r_x', ")[1].split(")")[0]
        print(f" N = {n}, T = {sizes['T']} (rows {2 * n * 8 // 1024} KB; rule's width "
              f"{int(rule) * 64} bits)")
        _report(interleaved(calls, rounds=args.rounds, runs=3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
