"""atomic() in the rule-based schedule: PolyBench's sequential recurrences with the rule-based
schedule against the same schedule without its atomic() steps and NumPy, measured in the same
run.

Run: python benchmarks/atomic.py [--kernels cholesky,trisolv,...] [--size large|small]
     [--rounds 3]

Each kernel is one update that reads its own Func; its innermost loop accumulates into one cell
(a dot product of cholesky, lu, ludcmp, trisolv; the norms and dot products of gramschmidt;
durbin's sum). The rule-based schedule marks every update ``atomic()``, so the lowering runs
such a loop as a register reduction (``schedule/cell_reduction.py``); "strict order" replays
the same schedule without those steps. Every result is checked against NumPy first; times are
interleaved (``autotune.timing.interleaved``, one timed run per block), medians with the
interquartile range.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorlang as tl  # noqa: E402
from common import cpu_name, numpy_blas, print_vs_numpy  # noqa: E402
from tensorlang.autotuner.heuristic import heuristic_schedule  # noqa: E402
from tensorlang.autotuner.timing import MIN_RUN_SECONDS, interleaved  # noqa: E402
from polybench.kernels import KERNELS  # noqa: E402

DEFAULT = "cholesky,trisolv,gramschmidt,durbin,lu,ludcmp"


def without_atomic(out, s: tl.Schedule) -> tl.Schedule:
    """``s`` replayed without its atomic() steps."""
    t = tl.Schedule(out)
    for st in s.steps:
        if st.op != "atomic":
            t.apply(st)
    return t


def _case(name: str, size: str, rounds: int) -> None:
    kern = KERNELS[name]
    sizes = getattr(kern, size)
    arrays = kern.inputs(sizes, np.random.default_rng(0))
    outs = kern.build()
    h = kern.handle(outs)
    rule = heuristic_schedule(h, sizes)
    assert any(st.op == "atomic" for st in rule.steps), rule.to_python()
    args = kern.call_args(h, arrays, sizes)
    want = kern.numpy({k: v.copy() for k, v in arrays.items()}, sizes)
    runs = {}
    for label, s in (("rule-based (atomic)", rule), ("strict order", without_atomic(h, rule))):
        k = tl.compile(h, s)
        got = k(**args)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            assert np.allclose(g, w, rtol=1e-6, atol=1e-8), f"{name} ({label}) differs from NumPy"
        runs[label] = (lambda k=k, o=got: k(**args, out=o if len(o) > 1 else o[0]))
    times = interleaved({"numpy": lambda: kern.numpy(arrays, sizes), **runs}, rounds=rounds,
                        runs=1, settle=("numpy",), min_run_seconds=MIN_RUN_SECONDS)
    print_vs_numpy(name, times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default=DEFAULT, help=f"comma-separated (default: {DEFAULT})")
    ap.add_argument("--size", choices=("small", "large"), default="large")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"atomic() on {cpu_name()} ({os.cpu_count()} CPUs), PolyBench {args.size} datasets; "
          f"NumPy calls {numpy_blas()}; {args.rounds} interleaved rounds, medians")
    for name in args.kernels.split(","):
        if name not in KERNELS:
            print(f"unknown kernel {name!r}; known: {', '.join(sorted(KERNELS))}",
                  file=sys.stderr)
            return 2
        _case(name, args.size, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
