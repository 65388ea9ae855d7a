"""A built-in workload's rule-based schedule against NumPy (and a variant of the rules), for
this machine or a described CPU, interleaved in one process.

Run: python benchmarks/builtin.py batch_matmul [--shape B=8,M=256,N=256,K=256]
     [--dtype float32] [--cpu haswell] [--against NAME=VALUE[+NAME=VALUE]] [--rounds 7]
     (TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread)

The workload (``autotune/workloads.py``: matmul, batch_matmul, conv2d, blur, softmax, layernorm)
is built over ``--dtype``, scheduled by the rules (``heuristic_schedule``) for this machine or,
with ``--cpu``, for a described CPU (``mca.FEATURES``: ``haswell`` is AVX2 code with 16 vector
registers, which an AVX-512 host runs; ``OPENBLAS_CORETYPE=Haswell`` gives NumPy's BLAS the
matching kernels), checked against its NumPy peer, then timed against it in interleaved rounds
(``autotune.timing.interleaved``, NumPy's threads given time to settle). ``--against`` adds the
rule-based schedule made with those constants set (``common.rule_settings``: ``SHIFT_ROWS=0``
is ``heuristic.SHIFT_ROWS``, ``tensorlang.schedule.nest.SERIAL_TAILS=0`` a lowering switch):
an A/B of a rule in one process. Prints, per contender, the median in ms, IQR / median,
NumPy's median over this one and n, then GFLOP/s (median and best).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorlang as tl  # noqa: E402
from common import cpu_name, numpy_blas, print_vs_numpy, rule_settings  # noqa: E402
from tensorlang.autotuner.heuristic import heuristic_schedule  # noqa: E402
from tensorlang.autotuner.timing import MIN_RUN_SECONDS, interleaved  # noqa: E402
from tensorlang.autotuner.workloads import BUILTIN, input_shapes, parse_shape  # noqa: E402
from tensorlang.backends.llvm.runtime import num_threads  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", choices=sorted(BUILTIN))
    ap.add_argument("--shape", default="", help="NAME=SIZE,... (default: the workload's)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--cpu", default="", help="a described CPU to compile for (mca.FEATURES)")
    ap.add_argument("--against", default="", help="NAME=VALUE[+...]: the rules' constants")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    work = BUILTIN[args.workload]
    sizes = parse_shape(args.shape) if args.shape else dict(work.shape)
    target = None
    if args.cpu:
        from mca import target_for

        target = target_for(args.cpu)
    out = work.build_as(args.dtype)
    rng = np.random.default_rng(0)
    arrays = {n: rng.standard_normal(s).astype(args.dtype)
              for n, s in input_shapes(out, sizes).items()}
    peer = work.numpy(arrays)
    want = peer()
    tol = 1e-3 if args.dtype == "float32" else 1e-9
    contenders = {}
    for label, settings in [("auto", ""), *([("variant", args.against)] if args.against
                                            else [])]:
        with rule_settings(settings):
            kern = tl.compile(out, heuristic_schedule(out, sizes, target), target=target)
        np.testing.assert_allclose(kern(**arrays), want, rtol=tol, atol=tol)
        contenders[label] = (lambda k=kern: k(**arrays))
    contenders["numpy"] = peer
    print(f"{args.workload} {args.dtype} {sizes} on {cpu_name()}"
          + (f" (code for {args.cpu})" if args.cpu else "")
          + f", tensorlang on {num_threads()} threads; NumPy: {numpy_blas()}"
          + (f"; variant: {args.against}" if args.against else ""), flush=True)
    times = interleaved(contenders, rounds=args.rounds, settle=("numpy",),
                        min_run_seconds=MIN_RUN_SECONDS)
    print_vs_numpy(args.workload, times)
    flops = work.flops(sizes)
    if flops:
        for label, ts in times.items():
            print(f"  {label:<10} {flops / np.median(ts) / 1e9:8.1f} GFLOP/s median, "
                  f"best {flops / min(ts) / 1e9:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
