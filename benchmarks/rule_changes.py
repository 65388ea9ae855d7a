"""Which rule-based schedules a switch of the rules changes: PolyBench's kernels (LARGE sizes),
a set of GEMM shapes in float32 and float64, and with ``--suites`` also the programs from
Halide's apps (``halide_apps.py``) and the built-in workloads, for several thread counts and
CPUs, each schedule built with the rules as they are and with ``NAME=VALUE`` set
(``common.rule_settings``: ``PARTIAL_BLOCKS=0``, ``cpu_model.MAX_ACCUMULATORS=24``); nothing is
compiled or timed.

Run: python benchmarks/rule_changes.py NAME=VALUE[+NAME=VALUE] [--threads 1,2,16]
     [--cpus native,haswell,znver3,skylake-avx512,sapphirerapids]
     [--suites polybench,gemm,halide,builtin] [--lowered]
``--lowered`` compares the lowered loop nests instead (``tensorlang.schedule.lower``), for a
switch of a lowering pass (``tensorlang.schedule.promote.PAD_VECTORS=0``), which changes no
schedule: one line per changed kernel with the counts of its nest's lines removed and added.
Prints one line per changed schedule (threads, CPU, kernel: the lines of ``Schedule.to_python``
removed (-) and added (+) by the switch) and the count of changed schedules. Slow: minutes.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.workloads import BUILTIN, matmul
from tensorlang.errors import ScheduleError
from tensorlang.schedule.lower import lower

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import rule_settings  # noqa: E402
from mca import target_for  # noqa: E402
from polybench.kernels import KERNELS  # noqa: E402

GEMM_SHAPES = ["1024x1024x1024", "1000x1100x1200", "2048x2048x2048", "900x900x900",
               "500x500x500", "1009x1013x1019", "800x900x1000", "4096x256x256",
               "256x4096x1024", "3000x3000x300"]


def gemm(shape: str, dtype: tl.DType) -> tuple[tl.Func, dict[str, int]]:
    m, n, k = map(int, shape.split("x"))
    return matmul(dtype), {"M": m, "N": n, "K": k}


def schedule_text(f, sizes, target, lowered: bool = False) -> str:
    try:
        s = heuristic_schedule(f, sizes, target)
        return str(lower(f, s)) if lowered else s.to_python()
    except ScheduleError as exc:
        return f"ScheduleError: {exc}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("switch", help="NAME=VALUE[+NAME=VALUE], as benchmarks/common.rule_settings")
    ap.add_argument("--threads", default="1,2,4,8,16,32,64")
    ap.add_argument("--cpus", default="native,haswell,znver3,skylake-avx512,sapphirerapids")
    ap.add_argument("--suites", default="polybench,gemm")
    ap.add_argument("--lowered", action="store_true", help="compare the lowered loop nests")
    args = ap.parse_args(argv)
    suites = args.suites.split(",")
    cases = []
    if "polybench" in suites:
        cases += [(name, kern.handle(kern.build()), kern.large) for name, kern in KERNELS.items()]
    if "gemm" in suites:
        cases += [(f"gemm {shape} {dt.name}", *gemm(shape, dt))
                  for shape in GEMM_SHAPES for dt in (tl.float32, tl.float64)]
    if "halide" in suites:
        from halide_apps import APPS
        cases += [(name, build(), dict(sizes)) for name, (build, _, sizes, _) in APPS.items()]
    if "builtin" in suites:
        cases += [(name, w.build(), dict(w.shape)) for name, w in BUILTIN.items()]
    changed = total = 0
    for threads in args.threads.split(","):
        os.environ["TENSORLANG_NUM_THREADS"] = threads
        for cpu in args.cpus.split(","):
            target = None if cpu == "native" else target_for(cpu)
            for name, f, sizes in cases:
                now = schedule_text(f, sizes, target, args.lowered)
                with rule_settings(args.switch):
                    then = schedule_text(f, sizes, target, args.lowered)
                total += 1
                if now == then:
                    continue
                changed += 1
                diff = [line for line in difflib.unified_diff(
                    now.splitlines(), then.splitlines(), lineterm="", n=0)
                    if line[:1] in "+-" and line[:3] not in ("+++", "---")]
                if args.lowered:
                    diff = [f"{sum(d[0] == '-' for d in diff)} nest lines removed, "
                            f"{sum(d[0] == '+' for d in diff)} added"]
                print(f"{threads:>2} {cpu} {name}: " + " | ".join(diff), flush=True)
    print(f"{changed} of {total} schedules change with {args.switch}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
