"""Tuning with and without the cost model, against NumPy (issue: autotuner).

Run: python benchmarks/tuning.py [--trials 150] [--budget 300] [--workloads gemm,blur,...]
[--seeds 0,1,2] [--searches model-guided,TPE,random,tl.autotune] [--quick]
For each workload and each search — model-guided (TPE proposals ranked by the learned cost model),
plain Optuna TPE, random — with one equal budget of measured trials (and at most ``--budget``
seconds): the best time, the ratio to NumPy measured in the same run (im2col + matmul for conv2d),
the tuning wall time, and the best time after 10/25/50/100/150 measured trials; then, per
workload, how many measured trials each search needed to reach 90% of a target: its own final
best, the model-guided search's final best (the issue asks that the model-guided search reach
90% of *its* final best in fewer trials than the others: read either way, both are printed), and
the best time *any* of the three found (a search that converges early to a poor schedule wins
the first reading but not the others). The model-guided search's cost model
is warmed with the records of the workloads tuned before it in the same run (transfer). Every
search measures the rule-based schedule (``heuristic.py``) first but only as a time bound
(``heuristic="bound"``), so each is judged on its own proposals; its time is printed as a
"heuristic" row. A fourth search, "tl.autotune", is what a user's ``tl.autotune(F, sizes,
trials=150, timeout=300)`` does (``heuristic="seed"``, no transfer): the model-guided search
started from the rule-based schedule (a completed trial of the study, a parent of the mutants,
and a candidate for the result: its curve starts with it); it is not in the trials-to-90%
comparisons, which are about searches on their own (``--searches`` picks which run). With the
``halide`` package installed, Halide's Adams2019 autoscheduler runs on the same workloads and
arrays (``halide_peer.py``) and a "vs halide" column gives Halide's time over ours (> 1: faster).
"% peak" is the best schedule's GFLOP/s over the machine's fp32 FMA peak (``peak.py``), measured
first in the same run. With ``--seeds``, each seed is a whole run (tables as above), then a table
of medians over the seeds and, per workload, on how many seeds each search was the first to 90%
of its own best: the VM's speed drifts by up to ~30% between runs, so one run decides little.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import halide_peer  # noqa: E402
from common import median_seconds, table  # noqa: E402
from peak import peak_gflops  # noqa: E402

import tensorlang as tl  # noqa: E402
from tensorlang.autotuner.measure import random_inputs  # noqa: E402
from tensorlang.autotuner.records import read_records  # noqa: E402
from tensorlang.autotuner.workloads import BUILTIN, input_shapes  # noqa: E402
from tensorlang.pipeline import Pipeline  # noqa: E402


def workloads(quick: bool) -> dict:
    """Benchmark name -> (workload, sizes): the issue's shapes, or small ones with --quick."""
    n = 256 if quick else 1024
    img = 512 if quick else 4096
    c, hw = (16, 28) if quick else (64, 56)
    return {
        "gemm": (BUILTIN["matmul"], {"M": n, "N": n, "K": n}),
        "blur": (BUILTIN["blur"], {"H": img + 2, "W": img + 2}),
        "softmax": (BUILTIN["softmax"], {"R": img, "S": img}),
        "conv2d": (BUILTIN["conv2d"], {"Nb": 1, "CI": c, "CO": c, "H": hw, "W": hw}),
    }


SEARCHES = [("model-guided", dict(cost_model="gbt", sampler="tpe", heuristic="bound")),
            ("TPE", dict(cost_model="none", sampler="tpe", heuristic="bound")),
            ("random", dict(cost_model="none", sampler="random", heuristic="bound")),
            ("tl.autotune", dict(cost_model="gbt", sampler="tpe", heuristic="seed"))]
#: the searches compared on trials to 90% (each on its own proposals)
COMPARED = ("model-guided", "TPE", "random")


def trials_to_90(curve: list[float], target: float) -> int | None:
    """Measured trials until the best-so-far ``curve`` is within 90% of ``target`` (None: never)."""
    return next((k + 1 for k, v in enumerate(curve) if v <= target / 0.9), None)


def reach_time(curve: list[float], target: float) -> str:
    n = trials_to_90(curve, target)
    return "never" if n is None else str(n)


def first_to_90(reach: dict[str, int | None]) -> list[str]:
    """The searches that needed the fewest measured trials (ties: all of them)."""
    done = {k: v for k, v in reach.items() if v is not None}
    best = min(done.values(), default=None)
    return [k for k, v in done.items() if v == best]


def run_seed(seed: int, args: argparse.Namespace, wl: dict, peak: float,
             halide_ms: dict[str, float]) -> dict:
    """One run of every search on every workload with ``seed``; prints its tables and returns
    ``{workload: {"numpy": s, search: (best seconds, trials to 90% of its own best, trials to
    90% of the model-guided search's best)}}``."""
    checkpoints = [k for k in (10, 25, 50, 100, 150) if k <= args.trials]
    rows, speed, summary = [], [], {}
    logdir = tempfile.mkdtemp(prefix="tl-tuning-bench-")
    transfer: list = []
    for name in args.workloads.split(","):
        work, sizes = wl[name]
        out = work.build()
        arrays = random_inputs(Pipeline(out), input_shapes(out, sizes))
        ref = work.numpy(arrays)
        t_np = median_seconds(ref)
        flops = work.flops(sizes)
        if name not in halide_ms:  # Adams2019 schedules once per workload, not per seed
            halide_ms[name] = float("nan")
            if halide_peer.available():
                halide_ms[name] = halide_peer.halide_seconds(name, sizes, arrays, ref())
                print(f"{name}: Halide Adams2019 {halide_ms[name] * 1e3:.3f} ms", flush=True)
        t_hl = halide_ms[name]
        print(f"{name}: numpy {t_np * 1e3:.3f} ms (seed {seed})", flush=True)
        reach, curves, summary[name] = [], [], {"numpy": t_np}
        heuristic_times = []  # every search measures it first, each in a fresh worker
        for label, kw in [(lab, kw) for lab, kw in SEARCHES if lab in args.searches]:
            extra: dict = {}
            if label == "model-guided":  # transfer: records of the workloads tuned before
                extra = dict(transfer=list(transfer), log=os.path.join(logdir, f"{name}.jsonl"))
            t0 = time.perf_counter()
            res = tl.autotune(out, sizes, trials=args.trials, seed=seed,
                              timeout=args.budget, cache=False, **kw, **extra)
            if label == "model-guided":
                transfer.extend(r for r in read_records(extra["log"]) if r.ok)
            wall = time.perf_counter() - t0
            heuristic_times.append(res.heuristic_seconds)
            curve = [r for r in res.best_so_far()]
            measured = [b for b, r in zip(curve, res.history) if r.state != "pruned"]
            marks = " ".join(f"{measured[k - 1] * 1e3:.2f}" if len(measured) >= k and
                             np.isfinite(measured[k - 1]) else "-" for k in checkpoints)
            rows.append((name, label, f"{res.best_seconds * 1e3:.3f} ms",
                         f"{t_np / res.best_seconds:.2f}x",
                         f"{t_hl / res.best_seconds:.2f}x" if t_hl == t_hl else "-",
                         f"{flops / res.best_seconds / 1e9:.1f}",
                         f"{100 * flops / res.best_seconds / 1e9 / peak:.0f}%",
                         f"{wall:.0f} s", f"{res.pruned}", marks))
            print(" | ".join(map(str, rows[-1])), f"| numpy {t_np * 1e3:.3f} ms", flush=True)
            if label not in COMPARED:  # starts from the rule-based schedule: not compared
                summary[name][label] = (res.best_seconds, None, None)
                continue
            own = trials_to_90(measured, measured[-1]) if measured else None
            summary[name][label] = (res.best_seconds, own)
            reach.append(f"{label} {reach_time(measured, measured[-1]) if measured else '-'}")
            curves.append((label, measured))
        # the rule-based schedule every search measured first (``heuristic="bound"``): what
        # ``tl.autotune`` with its default ``heuristic="seed"`` starts from and never ends above
        # (the median of its measurements, one per search, all printed: on this VM one kernel's
        # time in a fresh worker is sometimes 2x its usual for minutes -- GEMM's 11 vs 26 ms,
        # conv2d's 1.1 vs 2.1 ms -- with no steal time reported: host-side contention)
        t_h = float(np.median(heuristic_times))
        summary[name]["heuristic"] = (t_h, None, None)
        if np.isfinite(t_h):
            each = " ".join(f"{t * 1e3:.2f}" for t in heuristic_times)
            rows.append((name, "heuristic", f"{t_h * 1e3:.3f} ms", f"{t_np / t_h:.2f}x",
                         f"{t_hl / t_h:.2f}x" if t_hl == t_hl else "-",
                         f"{flops / t_h / 1e9:.1f}", f"{100 * flops / t_h / 1e9 / peak:.0f}%",
                         "-", "-", f"(rules, no search; measured {each} ms)"))
            print(" | ".join(map(str, rows[-1])), flush=True)
        if not any(c for _, c in curves):
            continue
        overall = min(c[-1] for _, c in curves if c)
        common = ", ".join(f"{label} {reach_time(c, overall)}" for label, c in curves)
        mg = next((c[-1] for label, c in curves if label == "model-guided" and c), overall)
        to_mg = ", ".join(f"{label} {reach_time(c, mg)}" for label, c in curves)
        for label, c in curves:
            summary[name][label] += (trials_to_90(c, mg) if c else None,)
        speed.append((name, f"{t_np * 1e3:.3f} ms", ", ".join(reach), to_mg, common))
    print(f"\nseed {seed}")
    print(table(rows, ("workload", "search", "best", "vs numpy", "vs halide", "GFLOP/s", "% peak",
                       "tuning",
                       "pruned", "best after " + "/".join(map(str, checkpoints)) + " (ms)")))
    if speed:  # at least one compared search ran
        print()
        print(table(speed, ("workload", "numpy", "trials to 90% of its own final best",
                            "... of the model-guided's final best",
                            "... of the best any search found")))
    return summary


def print_medians(runs: list[dict]) -> None:
    """Per workload and search over the seeds: the median best time and its ratio to the
    median NumPy time, the trials to 90% of its own best per seed, and on how many seeds each
    search was the first there (ties count for each)."""
    rows = []
    for name in runs[0]:
        t_np = float(np.median([r[name]["numpy"] for r in runs]))
        firsts = [[first_to_90({k: v[j] for k, v in r[name].items() if k in COMPARED})
                   for r in runs] for j in (1, 2)]
        for label in [lab for lab, _ in SEARCHES] + ["heuristic"]:
            if label not in runs[0][name]:
                continue
            best = float(np.median([r[name][label][0] for r in runs]))
            row = [name, label, f"{best * 1e3:.3f} ms", f"{t_np / best:.2f}x"]
            for j in (1, 2):
                row.append("-" if label not in COMPARED else " ".join(
                    "never" if r[name][label][j] is None else str(r[name][label][j])
                    for r in runs))
                row.append("-" if label not in COMPARED else
                           f"{sum(label in f for f in firsts[j - 1])} of {len(runs)}")
            rows.append(tuple(row))
    print(f"\nmedians over {len(runs)} seeds; trials to 90% of a target, per seed, and on how "
          "many seeds the search was first there")
    print(table(rows, ("workload", "search", "median best", "vs median numpy",
                       "to own best", "first", "to model-guided's best", "first")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=150)
    ap.add_argument("--workloads", default="gemm,blur,softmax,conv2d")
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", default=None,
                    help="comma-separated seeds (one run each, then medians); overrides --seed")
    ap.add_argument("--budget", type=float, default=300.0,
                    help="tuning seconds per search (the issue's 5 minutes)")
    ap.add_argument("--searches", default=",".join(lab for lab, _ in SEARCHES),
                    help="comma-separated searches to run (default: all)")
    args = ap.parse_args()
    args.searches = args.searches.split(",")
    unknown = set(args.searches) - {lab for lab, _ in SEARCHES}
    if unknown:
        ap.error(f"unknown searches {sorted(unknown)}; choose from "
                 f"{', '.join(lab for lab, _ in SEARCHES)}")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    wl = workloads(args.quick)
    peak = peak_gflops()
    print(f"fp32 FMA peak: {peak:.1f} GFLOP/s (benchmarks/peak.py)", flush=True)
    halide_ms: dict[str, float] = {}
    runs = [run_seed(seed, args, wl, peak, halide_ms) for seed in seeds]
    if len(runs) > 1:
        print_medians(runs)


if __name__ == "__main__":
    main()
