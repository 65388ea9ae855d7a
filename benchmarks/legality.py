"""Time of the isl legality check per schedule (issue: legality).

Run: python benchmarks/legality.py
For each kernel: the first check of a new algorithm (builds and caches the dependence analysis) and
the median of 30 further checks of the same schedule (what every tl.compile and every autotuning
candidate pays), plus a refused variant (witness search included). Target: < 20 ms median.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from algorithms import blur, conv2d, matmul, scan, skewed, softmax  # noqa: E402
from common import table  # noqa: E402

import tensorlang as tl  # noqa: E402


def gemm_3level(bad: bool):
    C, _ = matmul()
    s = tl.Schedule(C)
    io, jo, ii, ji = s[C].tile("i", "j", 64, 256)
    iio, jio, iii, jii = s[C].tile(ii, ji, 8, 32)
    ko, ki = s[C].split("k", 256)
    s[C].reorder(io, jo, ko, iio, jio, ki, iii, jii).unroll(iii).vectorize(jii).parallel(io)
    s.cache_read("B", s[C], ko)
    if bad:
        s[C].parallel(ko)
    return C, s


def blur_at(bad: bool):
    out, _ = blur()
    s = tl.Schedule(out)
    yo, xo, yi, xi = s[out].tile("y", "x", 32, 256)
    s[out].vectorize(xi, 16).parallel(yo)
    s["bx"].compute_at(s[out], xo).vectorize("x", 16)
    return out, s


def conv(bad: bool):
    Out, _ = conv2d()
    s = tl.Schedule(Out)
    coo, coi = s[Out].split("co", 8)
    xo, xi = s[Out].split("x", 32, tail="ShiftInwards")
    s[Out].reorder("n", coo, "y", xo, "ci", "ry", "rx", coi, xi).unroll(coi).vectorize(xi)
    s[Out].parallel("ry" if bad else coo)
    return Out, s


def softmax_rows(bad: bool):
    out, _ = softmax()
    s = tl.Schedule(out)
    for f in ("mx", "e", "sm"):
        s[f].compute_at(s[out], "i")
    s[out].vectorize("j", 16).parallel("i")
    if bad:
        s["sm"].vectorize("k", 8)
    return out, s


def scan_rows(bad: bool):
    out, _ = scan()
    s = tl.Schedule(out)
    st = s["S"].update(0)
    yo, yi = st.split("y", 8)
    st.reorder(yo, "r_x", yi).vectorize(yi).parallel(yo)
    if bad:
        s["S"].update(0).parallel("r_x")
    return out, s


def skewed_rec(bad: bool):
    F, _ = skewed()
    s = tl.Schedule(F)
    u = s[F].update(0)
    u.split("r_y", 4)
    u.split("r_x", 8)
    if bad:
        u.reorder("r_x.o", "r_y.o", "r_y.i", "r_x.i")
    else:
        u.parallel("r_x.o")
    return F, s


CASES = [("GEMM 3-level tiles + cache_read", gemm_3level), ("blur compute_at", blur_at),
         ("conv2d 3x3 register tile", conv), ("softmax per row", softmax_rows),
         ("scan rows (update)", scan_rows), ("skewed recurrence (update)", skewed_rec)]


def main() -> None:
    rows = []
    for name, build in CASES:
        out, s = build(False)
        t0 = time.perf_counter()
        first = s.check()
        t_first = time.perf_counter() - t0
        assert first.ok, str(first)
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            s.check()
            times.append(time.perf_counter() - t0)
        out_b, s_b = build(True)
        t0 = time.perf_counter()
        bad = s_b.check()
        t_bad = time.perf_counter() - t0
        verdict = "refused" if not bad.ok else "accepted (legal variant)"
        rows.append((name, f"{t_first * 1e3:.1f} ms", f"{statistics.median(times) * 1e3:.2f} ms",
                     f"{t_bad * 1e3:.1f} ms", verdict))
    print(table(rows, ("kernel", "first check", "median check", "illegal variant",
                       "illegal variant is")))
    print("\nfirst check: dependence analysis of a new algorithm (then cached per workload key); "
          "median of 30 checks of the\nsame schedule; illegal variant: check including the witness "
          "search and the primitive attribution.")


if __name__ == "__main__":
    main()
