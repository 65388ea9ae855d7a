"""Where a compiled kernel spends its time, loop by loop: ``perf`` samples of the JIT code.

Run: python benchmarks/jit_profile.py [--workload matmul | --app hist | --polybench cholesky]
     [--shape M=1024,...]
     [--dtype float64] [--cpu haswell] [--set NAME=VALUE[+NAME=VALUE]] [--seconds 6]
     [--list FIRST-LAST] [--then 'PYTHON']
     (TENSORLANG_NUM_THREADS=1 for one thread; needs ``perf``, Debian package linux-perf)

The rule-based schedule of a built-in workload, of a program of ``halide_apps.py`` or of a
PolyBench kernel (``--set``
changes the rules' constants as ``benchmarks/gemm_packed.py``'s ``auto:NAME=VALUE`` does) is
compiled, for this machine or for a described CPU (``--cpu haswell``: AVX2 code with 16 vector
registers, which an AVX-512 host runs; ``OPENBLAS_CORETYPE=Haswell`` gives NumPy's BLAS the
matching kernels), and called
repeatedly for ``--seconds`` while ``perf record -e cpu-clock`` samples the process (a software
clock: it works in virtual machines without hardware counters). Each sample inside the JIT
code is charged to the innermost loop holding it (a backward branch and its target in the
disassembly of the code's bytes, ``objdump``); the script prints each loop's share of the
kernel's samples with its instruction and FMA counts, the hottest instructions, and the share of
all samples in library functions (``memmove`` is a copy loop LLVM turned into a call), and
last the share of the kernel's time in its innermost FMA loops (``fma_share``), the figure to
compare between two schedules on a shared machine: a slower minute stretches every loop alike
(other tenants' use of the caches still moves it).

A sampled instruction is the one after the stall, not the stalled one (skid): a load that
misses shows up as the instruction using its value. See also: perf-record(1); Halide's
``HL_PROFILE`` does the same per Func with an instrumenting profiler.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mca import FMA_STEMS, target_for  # noqa: E402

#: a backward branch of objdump's disassembly: its address and target
_JUMP = re.compile(r"^\s*([0-9a-f]+):.*\sj\w+\s+(?:0x)?([0-9a-f]+)")


def loops_of(disassembly: str) -> tuple[dict[int, str], list[tuple[int, int]]]:
    """(instruction text by address, loops as (first, last) address ranges) of objdump's
    disassembly: a loop is a backward branch and its target."""
    text: dict[int, str] = {}
    loops = []
    for line in disassembly.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s*(?:[0-9a-f]{2} )+\s*(.*)$", line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        text[addr] = m.group(2).strip()
        j = _JUMP.match(line)
        if j and int(j.group(2), 16) <= addr:
            loops.append((int(j.group(2), 16), addr))
    return text, loops


def innermost(ip: int, loops: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The smallest loop whose range holds ``ip``, or None."""
    inside = [lp for lp in loops if lp[0] <= ip <= lp[1]]
    return min(inside, key=lambda lp: lp[1] - lp[0]) if inside else None


def charge(ips: list[int], text: dict[int, str], loops: list[tuple[int, int]]
           ) -> list[tuple[float, tuple[int, int] | None, int, int]]:
    """(share of ``ips``, loop or None, instructions, FMAs) per loop, most samples first."""
    count = collections.Counter(innermost(ip, loops) for ip in ips)
    out = []
    for lp, n in count.most_common():
        body = [t for a, t in text.items() if lp and lp[0] <= a <= lp[1]]
        fmas = sum(t.startswith(FMA_STEMS) for t in body)
        out.append((n / max(1, len(ips)), lp, len(body), fmas))
    return out


#: library functions a kernel's copies and fills become (LLVM turns such loops into calls)
COPY_CALLS = ("memmove", "memcpy", "memset")


def fma_share(ips: list[int], text: dict[int, str], loops: list[tuple[int, int]],
              copies: int = 0) -> float:
    """The share of ``ips`` plus ``copies`` (samples in ``COPY_CALLS``, the kernel's too) that
    fall in an innermost loop holding FMAs: the time the kernel spends in its register tile's
    loop, the rest being copies, the tile's loads and stores, and loop overhead."""
    inner = [lp for lp in loops if not any(o != lp and lp[0] <= o[0] and o[1] <= lp[1]
                                           for o in loops)]
    fma = [lp for lp in inner if any(t.startswith(FMA_STEMS) for a, t in text.items()
                                     if lp[0] <= a <= lp[1])]
    hits = sum(1 for ip in ips if innermost(ip, loops) in fma)
    return hits / max(1, len(ips) + copies)


def readable_bytes(lo: int, size: int) -> bytes:
    """This process's memory at ``[lo, lo + size)``, zeros where nothing readable is mapped
    (``/proc/self/maps``): the JIT code's last function ends short of the 64 KiB taken after
    its start, and reading an unmapped page would crash the process, as would reading a mapped
    file past its end or the kernel's ``[vvar]`` page (SIGBUS): the JIT code lies in anonymous
    memory, named mappings are skipped."""
    out = bytearray(size)
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split()
            span, perms = fields[:2]
            a, b = (int(v, 16) for v in span.split("-"))
            start, end = max(a, lo), min(b, lo + size)
            named = len(fields) > 5 and not fields[5].startswith(("[heap]", "[anon"))
            if start < end and perms.startswith("r") and not named:
                out[start - lo:end - lo] = ctypes.string_at(start, end - start)
    return bytes(out)


def _run(args: argparse.Namespace) -> None:
    """The sampled process: compile, dump the code's bytes and address, call the kernel."""
    import numpy as np

    import tensorlang as tl
    from common import rule_settings
    from tensorlang.autotuner.heuristic import heuristic_schedule
    from tensorlang.autotuner.measure import random_inputs
    from tensorlang.autotuner.workloads import BUILTIN, free_sizes, input_shapes, parse_shape

    bench = None
    if args.polybench:  # a PolyBench kernel at its LARGE sizes, on its inputs
        from polybench.kernels import KERNELS
        bench = KERNELS[args.polybench]
        out = bench.handle(bench.build())
        sizes = dict(bench.large, **(parse_shape(args.shape) if args.shape else {}))
    elif args.app:  # a program of benchmarks/halide_apps.py, at its sizes and on its inputs
        from halide_apps import APPS
        build, _, sizes, make = APPS[args.app]
        out = build()
        sizes = dict(sizes, **(parse_shape(args.shape) if args.shape else {}))
    else:
        w = BUILTIN[args.workload]
        out = w.build_as(args.dtype)
        sizes = dict(w.shape, **(parse_shape(args.shape) if args.shape else {}))
    target = None
    if args.cpu:
        target = target_for(args.cpu)
    with rule_settings(args.set):  # (lowering's switches too: compiled inside)
        s = tl.Schedule(out) if args.default else heuristic_schedule(out, sizes, target)
        if args.then:  # more primitives on the rule's schedule, e.g. s["B_local"].vectorize(...)
            exec(args.then, {"s": s, "tl": tl})
        kern = tl.compile(out, s, target=target) if target else tl.compile(out, s)
    module = kern._compiled  # (the execution engine and the optimised IR)
    names = re.findall(r"^define [^@]*@\"?([\w.$]+)\"?\(", module.optimized_ir, re.M)
    starts = sorted(a for a in (module.engine.get_function_address(n) for n in names) if a)
    lo = starts[0]
    size = starts[-1] - lo + (1 << 16)  # the last function's length is not known: 64 KiB more
    with open(os.path.join(args.dump, "code.bin"), "wb") as fh:
        fh.write(readable_bytes(lo, size))
    with open(os.path.join(args.dump, "code.txt"), "w") as fh:
        fh.write(f"{lo} {size}\n{s.to_python()}\n")
    t0 = time.time()
    calls = 0
    if bench is not None:  # its own arguments (sizes, scalars); a fresh output each call
        call = bench.call_args(out, bench.inputs(sizes, np.random.default_rng(0)), sizes)
        while time.time() - t0 < args.seconds:
            kern(**call)
            calls += 1
        print(f"{calls} calls in {args.seconds:g} s", flush=True)
        return
    arrays = make(sizes, np.random.default_rng(0)) if args.app else \
        random_inputs(tl.Pipeline(out), input_shapes(out, sizes))
    extra = free_sizes(out, sizes)
    o = kern(**arrays, **extra)
    np.asarray(o)
    t0 = time.time()
    while time.time() - t0 < args.seconds:
        kern(**arrays, **extra, out=o)
        calls += 1
    print(f"{calls} calls in {args.seconds:g} s", flush=True)


def listing(ips: list[int], text: dict[int, str], lo: int, span: str) -> list[str]:
    """Lines "share offset instruction" for the instructions at offsets ``span`` ("FIRST-LAST",
    as the loop table prints them) of the code starting at address ``lo``."""
    first, last = (int(v) for v in span.split("-"))
    count = collections.Counter(ips)
    return [f"{count[a] / max(1, len(ips)):6.1%}  {a - lo:>7}  {t[:60]}"
            for a, t in sorted(text.items()) if first <= a - lo <= last]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="matmul")
    ap.add_argument("--app", default="", help="a program of halide_apps.py instead")
    ap.add_argument("--polybench", default="",
                    help="a PolyBench kernel (benchmarks/polybench) at its LARGE sizes instead")
    ap.add_argument("--shape", default="")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--cpu", default="", help="a described CPU to compile for (mca.FEATURES)")
    ap.add_argument("--set", default="", help="NAME=VALUE[+...]: the rules' constants")
    ap.add_argument("--then", default="", metavar="PYTHON",
                    help="statements run on the rule's schedule s before compiling "
                         "(s[\"B_local\"].vectorize(\"B_local_d1\", 8))")
    ap.add_argument("--default", action="store_true",
                    help="profile the default schedule instead of the rule-based one")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--list", default="", metavar="FIRST-LAST",
                    help="also print the instructions at these offsets with their samples")
    ap.add_argument("--dump", default="", help=argparse.SUPPRESS)  # the sampled child's
    args = ap.parse_args(argv)
    if args.dump:
        _run(args)
        return 0
    perf, objdump = shutil.which("perf"), shutil.which("objdump")
    if not perf or not objdump:
        print("needs perf and objdump (Debian: apt-get install linux-perf binutils)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        child = [sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:]),
                 "--dump", tmp]
        rec = subprocess.run([perf, "record", "-q", "-e", "cpu-clock", "-F", "4000", "-o",
                              data, "--", *child], capture_output=True, text=True)
        if rec.returncode != 0 or not os.path.exists(os.path.join(tmp, "code.txt")):
            print(rec.stdout + rec.stderr, file=sys.stderr)
            return rec.returncode or 1
        print(rec.stdout.strip())
        with open(os.path.join(tmp, "code.txt")) as fh:
            lo, size = map(int, fh.readline().split())
            schedule = fh.read().strip()
        samples = subprocess.run([perf, "script", "-i", data, "-F", "ip,sym,dso"],
                                 capture_output=True, text=True).stdout.splitlines()
        dis = subprocess.run([objdump, "-D", "-b", "binary", "-mi386:x86-64",
                              f"--adjust-vma={lo}", os.path.join(tmp, "code.bin")],
                             capture_output=True, text=True).stdout
    ips, libs = [], collections.Counter()
    for line in samples:
        parts = line.split()
        if not parts:
            continue
        ip = int(parts[0], 16)
        if lo <= ip < lo + size:
            ips.append(ip)
        elif len(parts) >= 3 and not parts[1].startswith("[unknown]"):
            libs[parts[1]] += 1
    text, loops = loops_of(dis)
    print(schedule)
    share = len(ips) / max(1, len(samples))
    print(f"{len(samples)} samples, {len(ips)} in the kernel ({share:.0%})")
    print(f"{'share':>6}  loop (offsets)      instructions  FMAs  first instruction")
    for share, lp, n, fmas in charge(ips, text, loops)[:args.top]:
        where = f"{lp[0] - lo}-{lp[1] - lo}" if lp else "outside loops"
        first = text.get(lp[0], "") if lp else ""
        print(f"{share:6.1%}  {where:<18}{n:>13}{fmas:>6}  {first[:48]}")
    hot = collections.Counter(ips).most_common(args.top)
    print("hottest instructions (share of the kernel's samples):")
    for ip, n in sorted(hot):
        print(f"{n / max(1, len(ips)):6.1%}  {ip - lo:>7}  {text.get(ip, '?')[:60]}")
    if args.list:
        print(f"offsets {args.list} (share of the kernel's samples):")
        for line in listing(ips, text, lo, args.list):
            print(line)
    print("library functions (share of all samples):")
    for sym, n in libs.most_common(5):
        print(f"{n / max(1, len(samples)):6.1%}  {sym}")
    copies = sum(n for sym, n in libs.items() if any(c in sym for c in COPY_CALLS))
    print(f"innermost FMA loops: {fma_share(ips, text, loops, copies):.1%} of the kernel's "
          f"samples and its copy calls' ({len(ips)} + {copies})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
