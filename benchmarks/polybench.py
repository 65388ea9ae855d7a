"""PolyBench/C 4.2 kernels: tensorlang's default and rule-based schedules (and tuned ones with
``--tune``) against NumPy, measured in the same run.

Run: python benchmarks/polybench.py [--size large|small] [--kernels gemm,atax] [--tune SECONDS]
     [--rounds 3] [--no-default] [--against NAME=VALUE[+NAME=VALUE]] [--cpu haswell]

For each kernel (``benchmarks/polybench/kernels.py``): every output is checked against the NumPy
reference, then NumPy, the default schedule (every Func at root, the naive loop nest), the
rule-based schedule (what ``tl.compile(F, "auto")`` uses without tuning records) and, with
``--tune``, ``tl.autotune``'s best (that many seconds per kernel, no cache writes) are timed in
interleaved rounds (``autotune.timing.interleaved``: one warm-up and one timed run per block,
a run of a kernel under 1 ms repeating it until it lasts ``timing.MIN_RUN_SECONDS``, NumPy's
BLAS threads given time to settle). The table gives the median seconds, the spread
(interquartile range / median) of NumPy and the rule-based schedule, the ratio
NumPy / tensorlang (> 1: tensorlang is faster), rule-based / default (the no-trap check: it must
not be below 0.9) and the geometric means over the kernels run. ``--against`` adds a column
"variant": the rule-based schedule made with those constants set (``common.rule_settings``:
``FEWER_BLOCKS=0`` is ``heuristic.FEWER_BLOCKS``), for an A/B of a rule in one process.
``--cpu`` compiles every schedule for a described CPU (``mca.FEATURES``: ``haswell`` is AVX2
code, which an AVX-512 host runs; ``OPENBLAS_CORETYPE=Haswell`` gives NumPy the matching
kernels), as ``gemm_packed.py``'s ``TARGET_CPU`` does.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorlang as tl  # noqa: E402
from common import cpu_name, numpy_blas, rule_settings  # noqa: E402
from tensorlang.autotuner.heuristic import heuristic_schedule  # noqa: E402
from tensorlang.autotuner.timing import MIN_RUN_SECONDS, Stats, interleaved  # noqa: E402
from tensorlang.backends.llvm.runtime import num_threads  # noqa: E402
from mca import target_for  # noqa: E402
from polybench.kernels import KERNELS  # noqa: E402


def _runner(kern, outs: list, compiled, arrays: dict[str, np.ndarray],
            sizes: dict[str, int]):
    """One callable running the kernel of every output on ``arrays`` into preallocated
    outputs, and those outputs (one list entry per output)."""
    args = kern.call_args(kern.handle(outs), arrays, sizes)
    out = compiled(**args)

    def run() -> None:
        compiled(**args, out=out)

    return run, list(out) if isinstance(out, tuple) else [out]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=("small", "large"), default="large")
    ap.add_argument("--kernels", default="", help="comma-separated names (default: all)")
    ap.add_argument("--tune", type=float, default=0.0,
                    help="seconds of tl.autotune per kernel (0: no tuned column)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (timed runs each)")
    ap.add_argument("--no-default", action="store_true",
                    help="skip the default schedule (minutes per kernel at LARGE) and the "
                         "no-trap column")
    ap.add_argument("--cpu", default="", help="a described CPU to compile for (mca.FEATURES)")
    ap.add_argument("--against", default="",
                    help="NAME=VALUE[+...]: time the rule-based schedule made with these "
                         "constants too (column 'variant')")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    names = [n for n in args.kernels.split(",") if n] or list(KERNELS)
    unknown = [n for n in names if n not in KERNELS]
    if unknown:
        print(f"unknown kernels {unknown}; known: {', '.join(KERNELS)}", file=sys.stderr)
        return 2
    if args.cpu and args.tune:
        print("--tune measures code for this machine; leave out --cpu", file=sys.stderr)
        return 2
    target = target_for(args.cpu) if args.cpu else None
    print(f"PolyBench/C 4.2, {args.size.upper()} datasets, float64, on {cpu_name()} "
          + (f"(code for {args.cpu}) " if args.cpu else "")
          + f"({os.cpu_count()} CPUs, tensorlang on {num_threads()} threads); {args.rounds} "
          f"interleaved rounds, medians; NumPy calls "
          f"{numpy_blas()}")
    default = not args.no_default
    cols = ["numpy"] + (["default"] if default else []) + ["rule-based"] \
        + (["tuned"] if args.tune else []) + (["variant"] if args.against else [])
    print(f"{'kernel':<15}" + "".join(f"{c:>13}" for c in cols)
          + (f"{'np/default':>11}" if default else "") + f"{'np/rule':>9}"
          + (f"{'np/tuned':>10}" if args.tune else "")
          + (f"{'np/variant':>11}" if args.against else "")
          + (f"{'rule/def':>10}" if default else "") + f"{'IQR/median np, rule':>21}")
    ratios: dict[str, list[float]] = {c: [] for c in cols[1:]}
    no_trap: list[float] = []
    for name in names:
        kern = KERNELS[name]
        sizes = kern.small if args.size == "small" else kern.large
        arrays = kern.inputs(sizes, np.random.default_rng(0))
        ref = kern.numpy(arrays, sizes)
        outs = kern.build()
        h = kern.handle(outs)  # one kernel computing every live-out array
        variants = {"default": tl.compile(h, target=target)} if default else {}
        variants["rule-based"] = tl.compile(h, heuristic_schedule(h, sizes, target),
                                            target=target)
        if args.tune:
            variants["tuned"] = tl.compile(h, tl.autotune(
                h, sizes, trials=10**6, timeout=args.tune, cache=False,
                arrays={i.name: arrays[i.name] for i in tl.Pipeline(h).inputs}).best_schedule)
        if args.against:
            with rule_settings(args.against):
                variants["variant"] = tl.compile(h, heuristic_schedule(h, sizes, target),
                                                 target=target)
        calls = {"numpy": lambda a=arrays, f=kern.numpy, s=sizes: f(a, s)}
        for label, ks in variants.items():
            run, results = _runner(kern, outs, ks, arrays, sizes)
            for got, want, o in zip(results, ref, outs):
                tol = 1e-4 if want.dtype == np.float32 else 1e-8
                if not np.allclose(got, want, rtol=tol, atol=tol):
                    print(f"{name}: {label} output {o.name} differs from NumPy", file=sys.stderr)
                    return 1
            calls[label] = run
        t0 = time.perf_counter()
        times = interleaved(calls, rounds=args.rounds, runs=1, settle=("numpy",),
                            min_run_seconds=MIN_RUN_SECONDS)
        stats = {k: Stats.of(v) for k, v in times.items()}
        med = {k: st.median for k, st in stats.items()}
        label = name if args.size == "small" or kern.dataset == "LARGE" else f"{name}*"
        row = f"{label:<15}" + "".join(f"{med[c] * 1e3:>10.2f} ms" for c in cols)
        for c in cols[1:]:
            ratios[c].append(med["numpy"] / med[c])
        if default:
            no_trap.append(med["default"] / med["rule-based"])
            row += f"{ratios['default'][-1]:>10.2f}x"
        row += f"{ratios['rule-based'][-1]:>8.2f}x"
        if args.tune:
            row += f"{ratios['tuned'][-1]:>9.2f}x"
        if args.against:
            row += f"{ratios['variant'][-1]:>10.2f}x"
        if default:
            row += f"{no_trap[-1]:>9.2f}x"
        spread = "  ".join(f"{stats[c].iqr / stats[c].median:.0%}" for c in ("numpy", "rule-based"))
        print(row + f"{spread:>21}   (n={stats['numpy'].n}, {time.perf_counter() - t0:.0f} s)",
              flush=True)

    def geo(v: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in v) / len(v))

    print(f"{'geomean':<15}" + " " * 13 * len(cols)
          + (f"{geo(ratios['default']):>10.2f}x" if default else "")
          + f"{geo(ratios['rule-based']):>8.2f}x"
          + (f"{geo(ratios['tuned']):>9.2f}x" if args.tune else "")
          + (f"{geo(ratios['variant']):>10.2f}x" if args.against else "")
          + (f"{geo(no_trap):>9.2f}x" if default else ""))
    if args.size == "large" and any(KERNELS[n].dataset != "LARGE" for n in names):
        print("* MEDIUM dataset: NumPy would take more than 10 s at LARGE")
    if default:
        worst = min(no_trap)
        print(f"rule-based vs default: worst {worst:.2f}x "
              f"({names[no_trap.index(worst)]}); the no-trap rule asks >= 0.90x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
