"""rfactor in the rule-based schedule: reductions and updates with too few pure points to run in
parallel, with the rule-based schedule against the same schedule without its rfactor and
NumPy, measured in the same run.

Run: python benchmarks/rfactor.py [--n 4096] [--rounds 7]

Three programs: the total of n² float32 values (``tl.sum`` with no pure Var), the max of one
row of n² float32 values, and the histogram of an n x n uint8 image (a scatter update ``hist[v]
= hist[v] + 1`` over the whole image). The rule-based schedule splits the outermost reduction
loop into chunks that ``rfactor`` makes a parallel dimension of a new stage; "without rfactor"
replays the same schedule minus those steps (and the split feeding them). Every result is
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
from common import cpu_name, print_vs_numpy  # noqa: E402
from tensorlang.autotuner.heuristic import heuristic_schedule  # noqa: E402
from tensorlang.autotuner.timing import interleaved  # noqa: E402


def total():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    r = tl.RDom((0, N))
    S = tl.Func("S")
    S[()] = tl.sum(X[r])
    return S


def row_max():
    R, C = tl.sizes("R C")
    X = tl.Input("X", (R, C), tl.float32)
    (i,) = tl.vars("i")
    r = tl.RDom((0, C))
    M = tl.Func("M")
    M[i] = tl.max(X[i, r])
    return M


def histogram():
    H, W = tl.sizes("H W")
    image = tl.Input("image", (H, W), tl.uint8)
    (b,) = tl.vars("b")
    hist = tl.Func("hist", shape=(256,), dtype=tl.int32)
    hist[b] = 0
    r = tl.RDom((0, W), (0, H))
    v = tl.cast(tl.int32, image[r.y, r.x])
    hist[v] = hist[v] + 1
    return hist


def without_rfactor(out, s: tl.Schedule) -> tl.Schedule:
    """``s`` replayed without its rfactor steps, the steps on the stages they made, and the
    split of the loop each one factored."""
    made = {f"{st.func.split('.')[0]}_rf" for st in s.steps if st.op == "rfactor"}
    factored = {(st.func, str(st.get("loop")).rsplit(".", 1)[0]) for st in s.steps
                if st.op == "rfactor"}
    t = tl.Schedule(out)
    for st in s.steps:
        if st.op == "rfactor" or st.func.split(".")[0] in made or \
                (st.op == "split" and (st.func, st.get("loop")) in factored):
            continue
        t.apply(st)
    return t


def _case(label: str, out, sizes: dict[str, int], arrays: dict, numpy_fn, rounds: int) -> None:
    rule = heuristic_schedule(out, sizes)
    assert any(st.op == "rfactor" for st in rule.steps), rule.to_python()
    kr = tl.compile(out, rule)
    kp = tl.compile(out, without_rfactor(out, rule))
    want = numpy_fn()
    for k in (kr, kp):
        got = k(**arrays)
        assert np.allclose(got, want, rtol=1e-3, atol=1e-3), f"{label} differs from NumPy"
    o1, o2 = kr(**arrays), kp(**arrays)
    times = interleaved({"numpy": numpy_fn, "rule-based (rfactor)": lambda: kr(**arrays, out=o1),
                         "without rfactor": lambda: kp(**arrays, out=o2)},
                        rounds=rounds, runs=3, settle=("numpy",))
    print_vs_numpy(label, times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096, help="side: n² elements per program")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    n = args.n
    print(f"rfactor on {cpu_name()} ({os.cpu_count()} CPUs); {args.rounds} interleaved rounds of "
          f"3 runs, medians")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n * n, dtype=np.float32)
    _case("total", total(), {"N": n * n}, {"X": x}, lambda: x.sum(), args.rounds)
    row = x.reshape(1, n * n)
    _case("row max", row_max(), {"R": 1, "C": n * n}, {"X": row}, lambda: row.max(axis=1),
          args.rounds)
    img = rng.integers(0, 256, (n, n), dtype=np.uint8)
    _case("histogram", histogram(), {"H": n, "W": n}, {"image": img},
          lambda: np.bincount(img.ravel(), minlength=256), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
