"""Predicted throughput of a kernel's innermost loop on other x86 CPUs, with ``llvm-mca``.

Run: python benchmarks/mca.py [--workload matmul] [--shape M=1024,N=1024,K=1024]
     [--cpus znver4,sapphirerapids,skylake-avx512,haswell,znver3] [--mca llvm-mca-19] [--measure]
     [--against NAME=VALUE]
     python benchmarks/mca.py --polybench cholesky [--shape N=2000] [--cpus ...]

Only one CPU kind is on hand, so the rule-based schedule of a workload is made and compiled
*for* each named CPU (its vector width and register count; LLVM's CPU name and that CPU's
vector features: AVX2 + FMA for haswell and znver3, AVX-512 for the others), the innermost loop holding
the most FMA work is cut out of the assembly, and ``llvm-mca -mcpu=CPU`` predicts its
steady-state cycles per iteration from LLVM's scheduling model of that CPU. From the FMAs in
the loop (2 FLOPs per lane) the script prints the predicted FLOPs per cycle and their share of
the CPU's FMA peak (``PEAK_FLOPS_PER_CYCLE``: FMA pipes x lanes x 2, fp32, from the vendors'
optimisation manuals; half of it for a loop of float64 FMAs), and their share of what
llvm-mca's own model gives independent FMAs of that width (``model_peak``): LLVM 19's
``sapphirerapids`` model issues 512-bit FMAs on one port, half the Xeon's two, so its share of
the vendor's peak reads half of what the loop reaches in the model. ``--polybench NAME`` takes a
PolyBench kernel (``benchmarks/polybench``) at its LARGE sizes instead of a built-in workload
(cholesky's jammed dot products). ``--measure`` adds this machine's measured GFLOP/s of the
host build next to it (one thread vs all: ``TENSORLANG_NUM_THREADS``). ``--against`` adds the
loop compiled with other values of a rule's or a code generation switch's constants
(``tensorlang.backends.llvm.row_bases.ROW_BASES=0``): its cycles for as many FLOPs.

A prediction is an upper bound of the loop in isolation: it ignores cache misses, the loop
nest around the loop and the clock. It says whether the register tile can keep the FMA pipes
busy on that CPU, not how fast the kernel runs there. ``--host-schedule`` compiles this
machine's schedule for every CPU instead (on haswell LLVM then splits each 512-bit vector into
two 256-bit ones and the tile no longer fits the 16 registers). See also: llvm-mca's
documentation (llvm.org/docs/CommandGuide/llvm-mca.html); Low et al., "Analytical Modeling Is
Enough for High-Performance BLIS", TOMS 2016.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorlang as tl  # noqa: E402
from common import rule_settings  # noqa: E402
from tensorlang.autotuner.heuristic import heuristic_schedule  # noqa: E402
from tensorlang.autotuner.workloads import BUILTIN, parse_shape  # noqa: E402
from tensorlang.backends.llvm.target import Target, host_target  # noqa: E402

_AVX512 = "+avx,+avx2,+fma,+f16c,+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512cd"
#: LLVM feature strings the code is generated with, per CPU name
FEATURES = {
    "haswell": "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2",
    "skylake-avx512": _AVX512,
    "icelake-server": _AVX512 + ",+avx512vnni",
    "sapphirerapids": _AVX512 + ",+avx512bf16,+avx512vnni",
    "znver4": _AVX512 + ",+avx512bf16,+avx512vnni",
    "znver5": _AVX512 + ",+avx512bf16,+avx512vnni",
    "znver3": "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2",
}
#: fp32 FLOPs per cycle per core at the FMA peak: FMA pipes x fp32 lanes x 2. Haswell: 2 x 256-bit;
#: Skylake-SP / Ice Lake-SP / Sapphire Rapids (two 512-bit FMA units): 2 x 512-bit; Zen 3 and
#: Zen 4: 2 x 256-bit pipes (on Zen 4 a 512-bit FMA occupies both halves); Zen 5: 2 x 512-bit.
PEAK_FLOPS_PER_CYCLE = {"haswell": 32, "skylake-avx512": 64, "icelake-server": 64,
                        "sapphirerapids": 64, "znver4": 32, "znver3": 32, "znver5": 64}
_LANES = {"xmm": 4, "ymm": 8, "zmm": 16}


#: the x86 FMA mnemonics' stems: ``C -= A * B`` compiles to ``vfnmadd``
FMA_STEMS = ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")


def innermost_fma_loop(asm: str) -> list[str]:
    """The instructions of the single-block loop (a label and a later backward branch to it, no
    label between) that holds the most FMA work (``loop_flops``): the register tile's k-loop in
    a GEMM."""
    lines = asm.splitlines()
    labels = {m.group(1): i for i, ln in enumerate(lines)
              if (m := re.match(r"^(\.LBB\d+_\d+):", ln))}
    best: tuple[int, int, list[str]] | None = None
    for i, ln in enumerate(lines):
        m = re.match(r"^\s+j\w+\s+(\.LBB\d+_\d+)", ln)
        if not m or m.group(1) not in labels or labels[m.group(1)] >= i:
            continue
        raw = lines[labels[m.group(1)] + 1: i + 1]
        if any(re.match(r"^\.LBB\d+_\d+:", x) for x in raw):
            continue  # not a single-block loop: an outer loop around others
        body = [x.strip() for x in raw if x.strip() and not x.strip().startswith((".", "#"))]
        fmas = loop_flops(body)  # vector FMAs before a scalar remainder loop's as many
        if fmas and (best is None or (fmas, -len(body)) > (best[0], -best[1])):
            best = (fmas, len(body), body)
    return best[2] if best else []


def loop_flops(body: list[str]) -> int:
    """FLOPs of one iteration: 2 per lane of every FMA (``ps`` 32-bit lanes of its register,
    ``pd`` 64-bit lanes, ``ss``/``sd`` one)."""
    total = 0
    for x in body:
        m = re.match(r"vfn?m(?:add|sub)\w*?(ps|pd|ss|sd)\s", x)
        reg = re.findall(r"%([xyz]mm)\d+", x)
        if not m or not reg:
            continue
        kind = m.group(1)
        lanes = 1 if kind in ("ss", "sd") else _LANES[reg[-1]] // (2 if kind == "pd" else 1)
        total += 2 * lanes
    return total


def mca_cycles(body: list[str], cpu: str, mca: str) -> float:
    """llvm-mca's steady-state cycles per iteration of ``body`` on ``cpu`` (Total Cycles /
    Iterations over 500 iterations)."""
    text = "\n".join(body) + "\n"
    out = subprocess.run([mca, f"-mcpu={cpu}", "-iterations=500"], input=text,
                         capture_output=True, text=True, check=True).stdout
    cycles = float(re.search(r"Total Cycles:\s+(\d+)", out).group(1))
    iters = float(re.search(r"Iterations:\s+(\d+)", out).group(1))
    return cycles / iters


def target_for(cpu: str) -> Target:
    """A ``Target`` for the CPU named ``cpu`` (a key of ``FEATURES``), with the host's triple and
    LLVM: code for it that an AVX-512 host also runs (AVX2 for ``haswell``)."""
    h = host_target()
    return Target(h.triple, cpu, FEATURES[cpu], h.llvm_version, h.llvmlite_version)


def fma_probe(register: str, kind: str, chains: int = 16) -> list[str]:
    """A loop of ``chains`` independent FMAs (``vfmadd231`` + ``kind``: ``ps`` or ``pd``) on
    ``register`` registers (``xmm``/``ymm``/``zmm``), more chains than any CPU's FMA latency x
    pipes: llvm-mca's cycles for it give the FMA throughput its model of a CPU assumes."""
    body = [f"vfmadd231{kind}\t%{register}{16 + i % 8}, %{register}{24 + i % 8}, %{register}{i}"
            for i in range(chains)]
    return [*body, "decq\t%rcx", "jne\t.LBB0_1"]


def model_peak(cpu: str, mca: str, register: str, kind: str) -> float:
    """FLOPs per cycle of independent FMAs on ``register`` registers in llvm-mca's model of
    ``cpu``: where it is below the vendor's peak (``PEAK_FLOPS_PER_CYCLE``), the model has fewer
    FMA pipes for that width than the part (LLVM 19's ``sapphirerapids`` and
    ``icelake-server`` issue 512-bit FMAs on one port, as the client cores with AVX-512 have;
    the Xeons have two), and a loop's share of the vendor's peak understates it."""
    body = fma_probe(register, kind)
    return loop_flops(body) / mca_cycles(body, cpu, mca)


def find_mca(cpus: list[str], given: str | None) -> str | None:
    """An llvm-mca that knows every CPU named (newest first: LLVM 14's lacks znver4)."""
    names = [given] if given else ["llvm-mca-19", "llvm-mca-18", "llvm-mca-17", "llvm-mca-16",
                                   "llvm-mca"]
    for name in names:
        path = shutil.which(name)
        if not path:
            continue
        known = subprocess.run([path, "-mcpu=help"], capture_output=True, text=True).stderr + \
            subprocess.run([path, "-mcpu=help"], capture_output=True, text=True).stdout
        if all(re.search(rf"\b{re.escape(c)}\b", known) for c in cpus):
            return path
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="matmul", choices=sorted(BUILTIN))
    ap.add_argument("--polybench", default="", help="a PolyBench kernel instead (LARGE sizes)")
    ap.add_argument("--shape", default="")
    ap.add_argument("--cpus", default="znver4,sapphirerapids,skylake-avx512,haswell,znver3")
    ap.add_argument("--mca", default=None, help="the llvm-mca binary (default: newest found)")
    ap.add_argument("--host-schedule", action="store_true",
                    help="compile this machine's rule-based schedule for every CPU")
    ap.add_argument("--measure", action="store_true",
                    help="also time the host build here (GFLOP/s, 1 thread and all)")
    ap.add_argument("--against", default="",
                    help="NAME=VALUE[+NAME=VALUE]: also the loop compiled with these constants "
                         "(a rule's or a code generation switch's variant; common.rule_settings)")
    args = ap.parse_args(argv)
    cpus = [c for c in args.cpus.split(",") if c]
    unknown = [c for c in cpus if c not in FEATURES]
    if unknown:
        print(f"no feature string for {unknown}; known: {', '.join(FEATURES)}", file=sys.stderr)
        return 2
    mca = find_mca(cpus, args.mca)
    if mca is None:
        print(f"no llvm-mca that knows {', '.join(cpus)} (Debian: apt-get install llvm-19)",
              file=sys.stderr)
        return 2
    if args.polybench:
        from polybench.kernels import KERNELS

        if args.polybench not in KERNELS or args.measure:
            print(f"--polybench takes one of {', '.join(KERNELS)}, without --measure",
                  file=sys.stderr)
            return 2
        kern = KERNELS[args.polybench]
        name, w = args.polybench, None
        sizes = dict(kern.large, **(parse_shape(args.shape) if args.shape else {}))
        out = kern.handle(kern.build())
    else:
        name, w = args.workload, BUILTIN[args.workload]
        sizes = dict(w.shape, **(parse_shape(args.shape) if args.shape else {}))
        out = w.build()
    s = heuristic_schedule(out, sizes)
    h = host_target()
    whose = f"this machine's ({h.cpu})" if args.host_schedule else "each CPU's own"
    print(f"{name} {sizes}: {whose} rule-based schedule; {os.path.basename(mca)}")
    print(f"{'cpu':<16}{'FMAs/iter':>10}{'cycles/iter':>12}{'FLOP/cycle':>11}{'peak':>6}"
          f"{'% peak':>8}{'model peak':>11}{'% model':>8}"
          + (f"{'variant':>9}{'% model':>8}" if args.against else ""))
    short = []
    for cpu in cpus:
        t = target_for(cpu)
        sched = s if args.host_schedule else heuristic_schedule(out, sizes, t)
        body = innermost_fma_loop(tl.compile(out, sched, target=t).assembly())
        if not body:
            print(f"{cpu:<16} no FMA loop found")
            continue
        cyc = mca_cycles(body, cpu, mca)
        fl = loop_flops(body) / cyc
        fmas = [x for x in body if x.startswith(FMA_STEMS)]
        double = any(re.match(r"v\w+pd\s", x) for x in fmas)
        peak = PEAK_FLOPS_PER_CYCLE[cpu] // (2 if double else 1)
        widest = max((r for x in fmas for r in re.findall(r"%([xyz]mm)\d+", x)),
                     key=lambda r: _LANES[r])
        modelled = model_peak(cpu, mca, widest, "pd" if double else "ps")
        if modelled < 0.9 * peak:  # (the probe's loop counter costs a little)
            short.append(cpu)
        row = (f"{cpu:<16}{len(fmas):>10}{cyc:>12.2f}{fl:>11.1f}{peak:>6}{fl / peak:>8.0%}"
               f"{modelled:>11.1f}{fl / modelled:>8.0%}")
        if args.against:
            with rule_settings(args.against):
                alt = heuristic_schedule(out, sizes, t) if not args.host_schedule else s
                other = innermost_fma_loop(tl.compile(out, alt, target=t).assembly())
            if other:  # its cycles for as many FLOPs
                ocyc = mca_cycles(other, cpu, mca) * loop_flops(body) / loop_flops(other)
                row += f"{ocyc:>9.2f}{loop_flops(body) / ocyc / modelled:>8.0%}"
        print(row)
    if short:
        print(f"model peak: independent FMAs in llvm-mca's model; below the vendor's peak for "
              f"{', '.join(short)} (the model has fewer FMA pipes of that width than the part): "
              f"read '% model' there")
    if args.measure and w is not None and w.flops:
        from tensorlang.autotuner.measure import random_inputs
        from tensorlang.autotuner.timing import Stats
        from tensorlang.autotuner.workloads import free_sizes, input_shapes

        arrays = random_inputs(tl.Pipeline(out), input_shapes(out, sizes))
        extra = free_sizes(out, sizes)
        k = tl.compile(out, s)
        o = k(**arrays, **extra)
        ts = []
        for _ in range(20):
            t0 = time.perf_counter()
            k(**arrays, **extra, out=o)
            ts.append(time.perf_counter() - t0)
        st = Stats.of(ts)
        gf = w.flops(sizes) / st.median / 1e9
        print(f"measured here ({h.cpu}, {os.cpu_count()} threads): median "
              f"{st.median * 1e3:.3f} ms (n={st.n}, IQR {st.q1 * 1e3:.3f}-{st.q3 * 1e3:.3f}), "
              f"{gf:.1f} GFLOP/s; `python benchmarks/peak.py` gives this machine's FMA peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
