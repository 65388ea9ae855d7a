"""Pipelines with several outputs: one kernel computing two outputs against two kernels, and
``compute_with`` (the two stages sharing their outer loops) against separate loop nests, with
NumPy measured in the same run.

Run: python benchmarks/multiple_outputs.py [--size 4096] [--rounds 7] [--pieces-off]

Three programs: row statistics (the sum and the max of each row of one float32 matrix), a Sobel
pair (``gx``, ``gy`` of one float32 image, clamped edges) and PolyBench's bicg (``s = A^T r``,
``q = A p``, float64, LARGE: N=2100, M=1900). Contenders: NumPy; the rule-based schedule of each
output compiled as its own kernel (two calls); the rule-based schedule of the two-output
pipeline (one call; for the row statistics it computes the max with the sum per row,
``compute_with``, and "one kernel, unfused" is the same schedule without that step); for
the Sobel pair, a schedule with ``gx`` computed with ``gy`` per row of a strip; for bicg, "one
pass": the rule's one-pass recipe at fixed blocks of 30 rows (``one_pass_bicg``; the rule-based
schedule takes it too, "one kernel"; ``--pieces-off`` adds it without ``realize.GUEST_PIECES``). Every result is
checked against NumPy first; times are interleaved (``autotune.timing.interleaved``), medians
with the interquartile range.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorlang as tl  # noqa: E402
from common import cpu_name, rule_settings  # noqa: E402
from tensorlang.autotuner.heuristic import heuristic_schedule, lanes  # noqa: E402
from tensorlang.autotuner.one_pass import one_pass_stages  # noqa: E402
from tensorlang.autotuner.timing import Stats, interleaved  # noqa: E402
from polybench.kernels import KERNELS  # noqa: E402


def sobel():
    H, W = tl.sizes("H W")
    img = tl.Input("img", (H, W), tl.float32)
    y, x = tl.vars("y x")
    b = tl.clamp_edge(img)
    gx, gy = tl.Func("gx", shape=(H, W)), tl.Func("gy", shape=(H, W))
    gx[y, x] = b[y - 1, x + 1] + 2 * b[y, x + 1] + b[y + 1, x + 1] \
        - b[y - 1, x - 1] - 2 * b[y, x - 1] - b[y + 1, x - 1]
    gy[y, x] = b[y + 1, x - 1] + 2 * b[y + 1, x] + b[y + 1, x + 1] \
        - b[y - 1, x - 1] - 2 * b[y - 1, x] - b[y - 1, x + 1]
    return gx, gy


def sobel_numpy(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.pad(a, 1, mode="edge")
    h, w = a.shape

    def c(dy: int, dx: int) -> np.ndarray:
        return p[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]

    gx = c(-1, 1) + 2 * c(0, 1) + c(1, 1) - c(-1, -1) - 2 * c(0, -1) - c(1, -1)
    gy = c(1, -1) + 2 * c(1, 0) + c(1, 1) - c(-1, -1) - 2 * c(-1, 0) - c(-1, 1)
    return gx, gy


def row_stats():
    R, C = tl.sizes("R C")
    A = tl.Input("A", (R, C), tl.float32)
    i, j = tl.vars("i j")
    total, peak = tl.Func("total"), tl.Func("peak")
    total[i] = tl.sum(A[i, j])
    peak[i] = tl.max(A[i, j])
    return total, peak


def without_compute_with(s: tl.Schedule, outs) -> tl.Schedule:
    """``s`` replayed without its compute_with steps."""
    t = tl.Schedule(list(outs))
    for step in s.steps:
        if step.op != "compute_with":
            t.apply(step)
    return t


def fused_rows(gx, gy, sizes: dict[str, int], strip: int = 8) -> tl.Schedule:
    """Both stencils over strips of ``strip`` rows, in parallel, vectorized along x; gx computed
    with gy per row of a strip."""
    s = tl.Schedule([gx, gy])
    lanes = 8
    for f in (gx, gy):
        yo, yi = s[f].split("y", strip)
        s[f].parallel(yo).vectorize("x", lanes)
    s[gx].compute_with(s[gy], "y.i")
    return s


def one_pass_bicg(s_f, q_f, block: int = 30, rows: int = 6) -> tl.Schedule:
    """PolyBench bicg with ``A`` read once, in blocks of ``block`` rows and tiles of ``rows``
    rows, whatever the rule-based schedule chooses: ``one_pass.one_pass_stages``, the rule's
    recipe (docs/language.md, "Several outputs and compute_with")."""
    sch = tl.Schedule([s_f, q_f])
    one_pass_stages(sch, q_f, s_f, block, rows, lanes(q_f))
    return sch


def _contenders(outs, sizes, arrays, numpy_fn, extra=None):
    singles = [tl.compile(o, heuristic_schedule(o, sizes)) for o in outs]
    pair = tl.compile(list(outs), heuristic_schedule(list(outs), sizes))
    calls = {"numpy": lambda: numpy_fn(arrays)}
    kernels = {"two kernels": None, "one kernel": pair}
    kernels.update(extra or {})
    want = numpy_fn(arrays)
    own = [{i.name: arrays[i.name] for i in k.pipeline.inputs} for k in singles]
    outs_single = [k(**a) for k, a in zip(singles, own)]
    for got, w in zip(outs_single, want):
        assert np.allclose(got, w, rtol=1e-4, atol=1e-2), "two kernels differ from NumPy"
    calls["two kernels"] = lambda: [k(**a, out=o) for k, a, o in zip(singles, own, outs_single)]
    for label, k in kernels.items():
        if k is None:
            continue
        res = k(**arrays)
        for got, w in zip(res, want):
            assert np.allclose(got, w, rtol=1e-4, atol=1e-2), f"{label} differs from NumPy"
        calls[label] = lambda k=k, res=res: k(**arrays, out=res)
    return calls


def _report(name: str, times: dict[str, list[float]]) -> None:
    stats = {k: Stats.of(v) for k, v in times.items()}
    base = stats["numpy"].median
    for label, st in stats.items():
        print(f"  {name:<8} {label:<22} {st.median * 1e3:9.3f} ms  IQR {st.iqr / st.median:5.1%}"
              f"  NumPy/this {base / st.median:5.2f}x  (n={st.n})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=4096, help="Sobel image side")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pieces-off", action="store_true",
                    help="bicg's one pass also without GUEST_PIECES (its columns' tail guarded)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"several outputs on {cpu_name()} ({os.cpu_count()} CPUs); {args.rounds} interleaved "
          f"rounds of 3 runs, medians")
    total, peak = row_stats()
    sizes = {"R": 2 * args.size, "C": args.size}
    a = np.random.default_rng(0).standard_normal((sizes["R"], sizes["C"]), dtype=np.float32)
    rule = heuristic_schedule([total, peak], sizes)
    unfused = tl.compile([total, peak], without_compute_with(rule, (total, peak)))
    calls = _contenders((total, peak), sizes, {"A": a},
                        lambda x: (x["A"].sum(axis=1), x["A"].max(axis=1)),
                        {"one kernel, unfused": unfused})
    _report("rows", interleaved(calls, rounds=args.rounds, runs=3, settle=("numpy",)))
    gx, gy = sobel()
    n = args.size
    sizes = {"H": n, "W": n}
    img = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    fused = tl.compile([gx, gy], fused_rows(gx, gy, sizes))
    calls = _contenders((gx, gy), sizes, {"img": img}, lambda a: sobel_numpy(a["img"]),
                        {"compute_with rows": fused})
    _report(f"sobel {n}", interleaved(calls, rounds=args.rounds, runs=3, settle=("numpy",)))
    kern = KERNELS["bicg"]
    sizes = kern.large
    arrays = kern.inputs(sizes, np.random.default_rng(0))
    outs = kern.build()
    one_pass = tl.compile(list(outs), one_pass_bicg(*outs))
    extra = {"one pass": one_pass}
    if args.pieces_off:
        with rule_settings("tensorlang.schedule.realize.GUEST_PIECES=0"):
            extra["one pass, one piece"] = tl.compile(list(outs), one_pass_bicg(*outs))
    calls = _contenders(outs, sizes, arrays, lambda a: kern.numpy(a, sizes), extra)
    _report("bicg", interleaved(calls, rounds=args.rounds, runs=3, settle=("numpy",)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
