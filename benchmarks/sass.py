"""What tensorlang's CUDA kernels issue, read in their machine code, without a GPU.

    python benchmarks/sass.py [--workloads sgemm,softmax,conv2d,blur] [--variants 'all|NAME;...']
                              [--arch sm_90]

For each of issue 20's workloads at its sizes (``gpu.py``'s cases) and each schedule of
``gpu.py`` (the rule-based one, and with ``--variants`` the others), the kernel that a call at
those sizes launches first (``CUDAKernel.launch_plan``) is assembled by ``ptxas`` for
``--arch`` and disassembled by ``nvdisasm`` (NVIDIA's ``nvidia-cuda-nvcc`` and
``nvidia-cuda-nvdisasm`` wheels, or a CUDA toolkit on ``PATH``). Printed: its static
instruction count and, per kind, the fused multiply-adds (``FFMA``), global loads and stores
(``LDG``, ``STG``), shared loads and stores (``LDS``, ``STS``) and barriers (``BAR.SYNC``);
then each loop (a backward branch and the instructions from its target to it, innermost
first as they appear), with the same counts. Loop bodies are what each iteration issues: a
copy's instructions an element, a product's ``FFMA`` share.

Static counts say what a kernel issues, not how long it takes (latency, bank conflicts, the
memory system); time kernels with ``gpu.py`` on a GPU. The GPU's ``llvm-mca``, in the spirit
of ``benchmarks/mca.py`` for CPUs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu  # noqa: E402  (the cases and the schedules)

import tensorlang as tl  # noqa: E402
from tensorlang.autotuner import workloads as W  # noqa: E402
from tensorlang.backends.cuda.ptx import find_ptxas  # noqa: E402

KINDS = ("FFMA", "LDG", "STG", "LDS", "STS", "BAR")
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")


def find_nvdisasm() -> str | None:
    """``nvdisasm`` beside the ``ptxas`` that tensorlang finds (the NVIDIA wheels share a
    ``bin``), else on ``PATH``."""
    ptxas = find_ptxas()
    if ptxas:
        here = os.path.join(os.path.dirname(ptxas), "nvdisasm")
        if os.access(here, os.X_OK):
            return here
    try:
        import nvidia
        for base in nvidia.__path__:
            for sub in sorted(os.listdir(base), reverse=True):
                path = os.path.join(base, sub, "bin", "nvdisasm")
                if os.access(path, os.X_OK):
                    return path
    except ImportError:
        pass
    return shutil.which("nvdisasm")


def disassemble(ptx: str, arch: str, ptxas: str, nvdisasm: str) -> dict[str, list[str]]:
    """The SASS of each kernel of ``ptx``, one line per instruction or label, by name."""
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as fh:
            fh.write(ptx)
        subprocess.run([ptxas, f"-arch={arch}", src, "-o", cubin], check=True,
                       capture_output=True, timeout=300)
        text = subprocess.run([nvdisasm, "-c", cubin], check=True, capture_output=True,
                              text=True, timeout=300).stdout
    kernels: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in text.splitlines():
        m = re.match(r"^\.text\.(\S+):", line)
        if m:
            lines = kernels.setdefault(m.group(1), [])
        elif lines is not None and (_INSTR.search(line) or _LABEL.match(line)):
            lines.append(line)
    return kernels


def counts(lines: list[str]) -> Counter:
    """Instructions (``all``) and those of each of ``KINDS`` in ``lines``."""
    c: Counter = Counter()
    for line in lines:
        m = _INSTR.search(line)
        if m:
            c["all"] += 1
            op = m.group(3).split(".")[0]
            if op in KINDS:
                c[op] += 1
    return c


def loops(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line of each loop: from a label to a later branch back to it."""
    where = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line))}
    out = []
    for i, line in enumerate(lines):
        m = _BRANCH.search(line)
        if m and m.group(1) in where and where[m.group(1)] < i:
            out.append((where[m.group(1)], i))
    return out


def show(c: Counter) -> str:
    return f"{c['all']:5d} instrs " + " ".join(f"{k} {c[k]:4d}" for k in KINDS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(gpu.CASES))
    ap.add_argument("--variants", default="",
                    help="'all' or names of gpu.py's schedules, separated by ';'")
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args()
    ptxas, nvdisasm = find_ptxas(), find_nvdisasm()
    if not ptxas or not nvdisasm:
        print("needs ptxas and nvdisasm: pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm")
        return 1
    warnings.simplefilter("ignore")
    for case in args.workloads.split(","):
        name, sizes = gpu.CASES[case]
        f = W.BUILTIN[name].build()
        options = {"rule-based": None}
        if args.variants:
            options = gpu.schedules(name, f, sizes)
            if args.variants != "all":
                options = {k: v for k, v in options.items()
                           if k == "rule-based" or k in args.variants.split(";")}
        for label, s in options.items():
            if s is None:
                s = gpu.gpu_schedule(f, sizes=sizes)
            kern = tl.compile(f, s, target=f"cuda:{args.arch}")
            first = kern.launch_plan(sizes)[0][0]
            sass = disassemble(kern.ptx(), args.arch, ptxas, nvdisasm)[first]
            print(f"{case:8s} {label}: {first} {show(counts(sass))}")
            for a, b in loops(sass):
                if counts(sass[a:b + 1])["all"] < 2:  # (the branch to itself after EXIT)
                    continue
                print(f"{'':10s}loop of {b - a + 1:4d} lines  {show(counts(sass[a:b + 1]))}")
    print(f"(static counts, {args.arch}; ptxas {ptxas}; not times)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
