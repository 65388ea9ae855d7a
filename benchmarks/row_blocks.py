"""GEMM with the rule-based schedule's packed nest and other row-block sizes, against NumPy,
interleaved in one process: how a block count that does not share out over the threads costs,
and what a shorter last block (``heuristic.PARTIAL_BLOCKS``) gives back.

Run: python benchmarks/row_blocks.py MxNxK f32|f64 BLOCKS [--base-rows R] [--rounds N]
                                     [--cpu haswell]
     BLOCKS: comma-separated register tiles per row block (the nest's ``split('i.o', n)``),
     ``ROWSxTILES`` to replace the tile's rows (``split('i', ROWS)``) too, or ``rule`` for the
     rule's own schedule at M rows; ``--base-rows R``: the nest is the rule's
     for R rows (its tile height and blocking) with only the block size replaced, so a block
     size the rule would not take at M can be timed (996 rows with the nest for 1000: 249
     tiles of 4 rows in 3 whole blocks or 2 with the last shorter). Threads as the package
     takes them (``TENSORLANG_NUM_THREADS``; NumPy's ``OPENBLAS_NUM_THREADS``). ``--cpu``:
     code for a described CPU (``benchmarks/mca.py``'s ``target_for``; AVX2 for ``haswell``)
     that this host runs, against NumPy's BLAS (``OPENBLAS_CORETYPE=Haswell``).
Prints per contender the median of n interleaved rounds, IQR / median and GFLOP/s (best round).
"""
from __future__ import annotations

import argparse
import os
import re
import sys

import numpy as np

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.timing import Stats, interleaved
from tensorlang.autotuner.workloads import matmul
from tensorlang.backends.llvm.runtime import num_threads

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cpu_name, numpy_blas  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", help="MxNxK")
    ap.add_argument("dtype", choices=["f32", "f64"])
    ap.add_argument("blocks", help="tiles per row block, comma-separated, or 'rule'")
    ap.add_argument("--base-rows", type=int, default=0, help="the rule's nest for this many rows")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--cpu", default=None, help="code for this described CPU (haswell, ...)")
    args = ap.parse_args(argv)
    m, n, k = map(int, args.shape.split("x"))
    dtype = tl.float32 if args.dtype == "f32" else tl.float64
    C = matmul(dtype)
    target = None
    if args.cpu:
        from mca import target_for
        target = target_for(args.cpu)
    base = heuristic_schedule(C, {"M": args.base_rows or m, "N": n, "K": k}, target).to_python()
    if "split('i.o'" not in base:
        ap.error(f"the rule's schedule for {args.base_rows or m} rows has no row blocks:\n{base}")
    rng = np.random.default_rng(0)
    a = rng.random((m, k)).astype(dtype.numpy)
    b = rng.random((k, n)).astype(dtype.numpy)
    ref = a @ b
    contenders = {}
    for v in args.blocks.split(","):
        if v == "rule":
            s = heuristic_schedule(C, {"M": m, "N": n, "K": k}, target)
        else:
            s = tl.Schedule(C)
            # the rule's schedule as Python (Schedule.to_python), its block size replaced
            rows, _, tiles = v.rpartition("x")
            text = re.sub(r"split\('i\.o', \d+\)", f"split('i.o', {int(tiles)})", base)
            if rows:
                text = re.sub(r"split\('i', \d+\)", f"split('i', {int(rows)})", text)
            exec(text, {"s": s})
        kern = tl.compile(C, s, target=target) if target else tl.compile(C, s)
        out = np.empty((m, n), dtype.numpy)
        kern(a, b, out=out)
        err = np.abs(out - ref).max() / np.abs(ref).max()
        if err > 1e-4:
            raise SystemExit(f"{v}: relative error {err:.2e} against NumPy")
        print(v, [line for line in s.to_python().splitlines() if ".split('i" in line])
        contenders[v] = lambda kern=kern, out=out: kern(a, b, out=out)
    out0 = np.empty((m, n), dtype.numpy)
    contenders["numpy"] = lambda: np.matmul(a, b, out=out0)
    res = {name: Stats.of(t) for name, t in
           interleaved(contenders, rounds=args.rounds, runs=5, warmup=1).items()}
    flops = 2 * m * n * k
    code = f", code for {args.cpu}" if args.cpu else ""
    print(f"{args.shape} {args.dtype} on {cpu_name()}{code}, {num_threads()} threads; NumPy calls "
          f"{numpy_blas()}; {args.rounds} interleaved rounds")
    for name, st in res.items():
        print(f"{name:8s} median {st.median * 1e3:8.3f} ms  IQR/med {st.iqr / st.median:5.1%}  "
              f"{flops / st.median / 1e9:7.1f} GFLOP/s  (best {flops / st.min / 1e9:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
