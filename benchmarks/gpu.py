"""tensorlang's CUDA kernels against the GPU's libraries, measured in one run on one GPU.

    python benchmarks/gpu.py [--repeat 50] [--rounds 2] [--auto-only]
                             [--workloads sgemm,softmax,conv2d,blur]

Per workload: the rule-based GPU schedule (``schedule="auto"`` with an empty cache; for sgemm and
conv2d, an implicit GEMM there, register tiles per thread kept across reduction blocks staged in
shared memory; for softmax a block of 256 threads per row for its max, its sum and its output; for
the blur its first pass staged per block), a hand schedule that stages tiles in shared memory, and
variants of the rule (``schedules``; ``CODEGEN_VARIANTS``: the rule compiled with part of the code
generator as it was before a change), timed with CUDA events around the launches (inputs already on
the GPU, ``CUDAKernel.benchmark``), against torch (cuBLAS with TF32 off, cuDNN, ``torch.softmax``)
and, for softmax, a one-row-per-program Triton kernel when Triton is installed, and for the blur a
copy of its input (torch ``clone``: the bandwidth yardstick). Kernels are timed in ``--rounds``
interleaved rounds of ``--repeat`` runs. Prints n, median and IQR (and the rounds' medians), the
GPU's name, the ratio to the fastest peer, and the blur's bytes a second as a share of the copy's;
every kernel's result is checked against NumPy first. Without a usable GPU it says so and prints
each kernel's resources from ``ptxas`` (registers, bytes spilled, shared memory) and which kernels
a call at the case's sizes launches (``CUDAKernel.launch_plan``), which need no GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import statistics
import sys
import warnings
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorlang as tl  # noqa: E402
from tensorlang.autotuner import workloads as W  # noqa: E402
from tensorlang.backends.cuda.driver import DeviceError, device  # noqa: E402
from tensorlang.backends.cuda.ptx import find_ptxas, ptxas  # noqa: E402
from tensorlang.backends.cuda import rules  # noqa: E402
from tensorlang.backends.cuda.rules import (gpu_schedule, map_pure_loops,  # noqa: E402
                                           row_reduction, stage_in_block, stage_row_values,
                                           staged_reduction)
from tensorlang.schedule.trace import TailStrategy  # noqa: E402

#: the issue's sizes: sgemm 4096, softmax 8192 x 8192, conv2d 32x64x56x56 -> 64, blur 8192^2
CASES = {
    "sgemm": ("matmul", dict(M=4096, N=4096, K=4096)),
    "softmax": ("softmax", dict(R=8192, S=8192)),
    "conv2d": ("conv2d", dict(Nb=32, CI=64, H=56, W=56, CO=64)),
    "blur": ("blur", dict(H=8194, W=8194)),
}


def staged(name: str, f: tl.Func) -> tl.Schedule:
    """A hand schedule staging tiles in shared memory (docs/gpu.md)."""
    s = tl.Schedule(f)
    g = {h.name: h for h in tl.Pipeline(f).funcs}
    if name == "matmul":
        s[f].tile("i", "j", 16, 16)
        s[f].split("k", 16)
        s[f].reorder("i.o", "j.o", "k.o", "i.i", "j.i", "k.i")
        s[f].gpu_blocks("i.o", "j.o")
        s[f].gpu_threads("i.i", "j.i")
        for t in ("A", "B"):
            c = s.cache_read(t, s[f], "k.o", scope="shared")
            c.gpu_threads(*c.loops[-2:])
    elif name == "blur":
        s[f].gpu_tile("y", "x", 8, 32)
        s[g["bx"]].compute_at(s[f], "x.o")
        s[g["bx"]].gpu_threads("y", "x")
    elif name == "softmax":  # (each block of 256 columns reduces its row again)
        s[f].gpu_tile("i", "j", 1, 256)
        s[g["e"]].compute_inline()
        for n in ("mx", "sm"):
            s[g[n]].compute_at(s[f], "j.o")
    elif name == "conv2d":
        s[f].gpu_tile("y", "x", 8, 8)
        z = s[f].fuse("n", "co")
        s[f].gpu_blocks(z, "y.o", "x.o")
        s[f].reorder(z, "y.o", "x.o", "ci", "y.i", "x.i", "ry", "rx")
        s[g["pad"]].compute_at(s[f], "ci")
        s[g["pad"]].gpu_threads("y", "x")
    return s


def unfused(name: str, f: tl.Func) -> tl.Schedule:
    """The rule-based schedule without the fusion rule 2 or 5 makes: softmax's max and sum
    and the output as three kernels (rule 4 each), the blur's first pass at root. Timed beside
    the rule, it says what the fusion is worth on the GPU at hand."""
    s = tl.Schedule(f)
    g = {h.name: h for h in tl.Pipeline(f).funcs}
    if name == "softmax":
        s[g["e"]].compute_inline()
        for n in ("mx", "sm"):
            row_reduction(s, n)
    for n in ((f.name, "bx") if name == "blur" else (f.name,)):
        map_pure_loops(s, n)
    return s


def rows_a_thread(f: tl.Func, rows: int, per: int, cols: int = 32) -> tl.Schedule:
    """The blur with ``rows x cols`` output tiles a block, each thread computing ``per`` rows
    of a column (cols x rows / per threads), the first pass staged per block as rule 2 stages
    it, its rows spread over the same threads (rule 2 takes 32 x 32, 4 rows a thread)."""
    s = tl.Schedule(f)
    map_pure_loops(s, f.name, (rows // per, cols), rows=per)
    stage_in_block(s, "bx", f.name, rows // per)
    return s


def guarded_rows(f: tl.Func) -> tl.Schedule:
    """The rule-based blur (32 x 32 tiles, 4 rows a thread, the first pass staged per block on
    8 rows of threads) as it was before the staged tile's 34 rows were split with their last
    step shifted inwards: each of the 5 rows a thread stages guarded (34 is no multiple of 8),
    the loop not unrolled."""
    s = tl.Schedule(f)
    map_pure_loops(s, f.name, (8, 32), rows=4)
    s["bx"].compute_at(s[f], "x.o")
    yo, yi = s["bx"].split("y", 8)
    s["bx"].reorder(yi, "x", yo)
    s["bx"].gpu_threads(yi, "x")
    return s


def interleaved_columns(f: tl.Func, sizes: dict[str, int]) -> tl.Schedule:
    """The rule-based schedule with a thread's register-tile columns ``tx`` apart (runs of one
    column: ``x_groups`` = the tile's columns, ``GEMM_GROUP_VECTOR`` 1), so that a warp's
    threads read consecutive words of the staged input and store consecutive outputs, where
    the rule's runs of 4 put them 16 bytes apart (bank conflicts, a quarter of each sector
    stored)."""
    with mock.patch.object(rules, "GEMM_GROUP_VECTOR", 1):
        return gpu_schedule(f, sizes=sizes, x_groups=rules.GEMM_REGS)


def unstaged_rows(f: tl.Func, sizes: dict[str, int]) -> tl.Schedule:
    """The rule-based softmax with its row not staged in shared memory (rule 5 before stop 47:
    the max, the sum and the output each read the row from global memory, the later two
    mostly from the cache)."""
    with mock.patch.object(rules, "ROW_SHARED_BYTES", 0):
        return gpu_schedule(f, sizes=sizes)


def codegen_before_stop_48() -> contextlib.ExitStack:
    """While open, the CUDA code generator as before stop 47's last two changes (made after
    its GPU time): a boundary condition's read kept its clamps and a branch-free select of two
    clamped loads (no ``bounds.unclamped_load``), and an index with a division or remainder by
    a constant was flattened one dimension at a time (no ``flat_index.flat_offset``)."""
    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch("tensorlang.backends.cuda.codegen.unclamped_load",
                                   lambda e: None))
    stack.enter_context(mock.patch("tensorlang.backends.llvm.memory.flat_offset",
                                   lambda indices, mins, extents: None))
    return stack


def two_ex2_exp(gen, x):
    """float32 ``exp`` as ``DeviceGen.exp_f32`` took it before stop 48: ``2**n * 2**f`` with
    ``n = floor(x log2 e)`` and ``f`` reduced by Cody and Waite's two-part ln 2, two
    ``ex2.approx`` an ``exp``."""
    c = functools.partial(gen.const, x.type)
    log2e = 1.4426950408889634
    xc = gen.call_intrinsic("minnum", gen.call_intrinsic("maxnum", x, c(-104.0)), c(89.0))
    n = gen.call_intrinsic("floor", gen.fop("fmul", xc, c(log2e)))
    r = gen.fop("fsub", xc, gen.fop("fmul", n, c(0.693359375)))
    r = gen.fop("fsub", r, gen.fop("fmul", n, c(-2.12194440e-4)))
    res = gen.fop("fmul", gen._ex2(gen.fop("fmul", r, c(log2e))), gen._ex2(n))
    return gen.builder.select(gen.builder.fcmp_unordered("uno", x, x), x, res)


def exp_before_stop_48() -> contextlib.AbstractContextManager:
    """While open, the CUDA code generator's float32 ``exp`` is ``two_ex2_exp``."""
    return mock.patch("tensorlang.backends.cuda.codegen.DeviceGen.exp_f32", two_ex2_exp)


#: variants compiled with the code generator changed, by case and label: the patch that changes
#: it while the rule's schedule (with these arguments of ``gpu_schedule``) compiles
CODEGEN_VARIANTS = {
    "conv2d": {"rule, codegen before stop 48": (codegen_before_stop_48, {})},
    "softmax": {"rule, exp of two ex2 (before stop 48)": (exp_before_stop_48, {}),
                "rule, exp of two ex2 (before stop 48), 512 threads": (exp_before_stop_48,
                                                                        {"row_threads": 512})},
}


def compile_variants(name: str, case: str, f: tl.Func, sizes: dict[str, int],
                     target: str) -> dict[str, object]:
    """The kernels of ``schedules`` (less the rule-based one, which is ``"auto"``) and of
    ``CODEGEN_VARIANTS`` for ``case``, compiled for ``target``."""
    out = {label: tl.compile(f, s, target=target)
           for label, s in schedules(name, f, sizes).items() if label != "rule-based"}
    for label, (patched, kwargs) in CODEGEN_VARIANTS.get(case, {}).items():
        with patched():
            out[label] = tl.compile(f, gpu_schedule(f, sizes=sizes, **kwargs), target=target)
    return out


def schedules(name: str, f: tl.Func, sizes: dict[str, int]) -> dict[str, tl.Schedule]:
    """The schedules measured besides ``"auto"``: the rule-based one at ``sizes`` (what
    ``"auto"`` takes with an empty cache; printed without a GPU), the hand-staged one, for
    sgemm and conv2d the rule with its transposed tile's rows padded (``pad_words=4``), for
    conv2d the rule with its copies' last steps guarded (``copy_tail``), with its columns
    interleaved (``interleaved_columns``) and its tile in 8 x 8 register tiles on 8 x 7
    threads, for
    sgemm the rule with a thread's columns in one run (``x_groups=1``, the rule takes two), with
    its tiles double buffered (``double_buffer()``),
    the rule with reduction blocks of 8, its 8 x 8 register tiles on 16 x 8 and 8 x 16
    threads (128 x 64 and 64 x 128 tiles), for
    softmax and the blur the rule without its fusion (``unfused``), softmax with 128, 512 and
    1024 threads a row, without its row staged in shared memory (``unstaged_rows``) and so
    with its ``exp`` computed once an element into shared memory (``stage_row_values``), the
    blur with other tiles and rows a thread (``rows_a_thread``) and with its staged rows
    guarded (``guarded_rows``)."""
    out = {"rule-based": gpu_schedule(f, sizes=sizes), "staged": staged(name, f)}
    if name in ("matmul", "conv2d"):  # the transposed tile's rows 4 words past 32n apart
        out["rule, transposed tile padded"] = gpu_schedule(f, sizes=sizes, pad_words=4)
    if name == "conv2d":  # (the rule before stop 47: a copy's last step guarded)
        out["rule, copies guarded"] = gpu_schedule(f, sizes=sizes,
                                                   copy_tail=TailStrategy.GuardWithIf)
        out["rule, columns interleaved"] = interleaved_columns(f, sizes)
    if name == "conv2d":  # the rule's 64 x 56 tile in 8 x 8 registers: 8 x 7 threads a block
        t = tl.Schedule(f)
        t["pad"].compute_inline()  # (as the rule: into the copy of its rows)
        staged_reduction(t, f.name, (8, 7), 8, True, 8, registers=True,
                         tail=TailStrategy.ShiftInwards, pad_words=4, x_groups=2)
        out["8x8 on 8x7 threads"] = t
    if name == "matmul":  # (8 x 8 with blocks of 8 is the rule; of 32 measured slower)
        out["rule, columns in 1 run"] = gpu_schedule(f, sizes=sizes, x_groups=1)
        t = gpu_schedule(f, sizes=sizes)
        for copy in ("A_shared", "B_shared"):
            t[copy].double_buffer()
        out["rule, double-buffered"] = t
        out["rule, k8"] = gpu_schedule(f, kblock=8, sizes=sizes)  # (the rule before stop 47)
        for threads in ((16, 8), (8, 16)):  # 128 x 64 and 64 x 128 tiles of 128 threads
            t = tl.Schedule(f)
            staged_reduction(t, f.name, threads, 8, True, 8, registers=True,
                             tail=TailStrategy.ShiftInwards)
            out[f"8x8 on {threads[0]}x{threads[1]} threads"] = t
    if name in ("softmax", "blur"):
        out["unfused"] = unfused(name, f)
    if name == "softmax":
        for t in (128, 512, 1024):
            out[f"rule {t} threads"] = gpu_schedule(f, sizes=sizes, row_threads=t)
        out["rule, row not staged"] = unstaged_rows(f, sizes)  # (the rule before stop 47)
        t = unstaged_rows(f, sizes)
        stage_row_values(t, f.name)  # exp once an element, into shared memory
        out["rule, e once in shared memory"] = t
    if name == "blur":
        out["1 row a thread"] = rows_a_thread(f, 8, 1)
        out["8 rows a thread"] = rows_a_thread(f, 64, 8)
        out["rule, staged rows guarded"] = guarded_rows(f)  # (the rule before stop 47)
        for rows, per, cols in ((16, 2, 32), (32, 4, 64), (64, 4, 32), (64, 4, 64),
                                (128, 4, 32)):
            out[f"{rows}x{cols} tiles, {per} rows"] = rows_a_thread(f, rows, per, cols)
    return out


def peers(case: str, arrays: dict[str, np.ndarray], repeat: int) -> dict[str, list[float]]:
    """Times of torch (and Triton) on the same GPU, CUDA events, seconds."""
    try:
        import torch
    except ImportError:
        return {}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t = {k: torch.from_numpy(v).cuda() for k, v in arrays.items()}
    if case == "sgemm":
        fns = {"torch (cuBLAS)": lambda: t["A"] @ t["B"]}
    elif case == "softmax":
        fns = {"torch.softmax": lambda: torch.softmax(t["X"], dim=1)}
        tri = _triton_softmax(t["X"])
        if tri is not None:
            fns["Triton (row per program)"] = tri
    elif case == "conv2d":
        fns = {"torch (cuDNN)": lambda: torch.nn.functional.conv2d(t["In"], t["Wt"],
                                                                    padding=1)}
    else:
        x = t["In"]

        def blur() -> object:
            bx = (x[:, :-2] + x[:, 1:-1] + x[:, 2:]) * (1 / 3)
            return (bx[:-2] + bx[1:-1] + bx[2:]) * (1 / 3)
        fns = {"torch (two passes)": blur,
               "copy of In (torch clone)": lambda: x.clone()}
    out = {}
    for name, fn in fns.items():
        for _ in range(3):
            fn()
        times = []
        for _ in range(repeat):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        out[name] = times
    return out


def _triton_softmax(x):
    try:
        import torch
        import triton
        import triton.language as tlang
    except ImportError:
        return None

    @triton.jit
    def kernel(out_ptr, in_ptr, n_cols, BLOCK: tlang.constexpr):
        row = tlang.program_id(0)
        cols = tlang.arange(0, BLOCK)
        mask = cols < n_cols
        v = tlang.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
        v = v - tlang.max(v, axis=0)
        e = tlang.exp(v)
        tlang.store(out_ptr + row * n_cols + cols, e / tlang.sum(e, axis=0), mask=mask)

    out = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[1])
    return lambda: kernel[(x.shape[0],)](out, x, x.shape[1], BLOCK=block)


def summary(times: list[float]) -> str:
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    med = statistics.median(times)
    return f"{med * 1e3:9.3f} ms  IQR {100 * (q[2] - q[0]) / med:4.0f}%  (n={len(times)})"


def resources(report: str) -> list[str]:
    """Per kernel of a ``ptxas -v`` report, in name order: registers, spilled bytes (stores),
    shared memory bytes."""
    out = {}
    for block in report.split("Compiling entry function")[1:]:
        name = re.search(r"'([^']+)'", block).group(1)
        regs = re.search(r"Used (\d+) registers", block)
        spill = re.search(r"(\d+) bytes spill stores", block)
        smem = re.search(r"(\d+) bytes smem", block)
        out[name] = (f"{name} {regs.group(1) if regs else '?'} regs"
                     f"{f', {spill.group(1)} B spilled' if spill and spill.group(1) != '0' else ''}"
                     f"{f', {smem.group(1)} B smem' if smem else ''}")
    return [out[k] for k in sorted(out)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=50, help="timed runs a round")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    ap.add_argument("--auto-only", action="store_true",
                    help="time only schedule='auto' against the peers")
    ap.add_argument("--workloads", default=",".join(CASES))
    args = ap.parse_args()
    cases = [c for c in args.workloads.split(",") if c]
    try:
        dev = device()
    except DeviceError as exc:
        print(f"no usable GPU here ({exc}); nothing is timed.")
        if find_ptxas():
            print("PTX resources per kernel (ptxas -v, sm_90):")
            for case in cases:
                name, sizes = CASES[case]
                f = W.BUILTIN[name].build()
                for label, s in schedules(name, f, sizes).items():
                    kern = tl.compile(f, s, target="cuda:sm_90")
                    report = ptxas(kern.ptx(), "sm_90")
                    runs = ", ".join(f"{k} grid {'x'.join(map(str, g))} block "
                                     f"{'x'.join(map(str, b))}"
                                     for k, g, b in kern.launch_plan(sizes))
                    print(f"  {case:8s} {label:14s} {'; '.join(resources(report))}\n"
                          f"  {'':8s} {'':14s} at {W.format_shape(sizes)} runs {runs}")
        return 0
    info = dev.info
    print(f"GPU: {info.name} (sm_{info.capability[0]}{info.capability[1]}, driver "
          f"{info.driver}, {info.multiprocessors} SMs); CUDA events, medians")
    rng = np.random.default_rng(0)
    for case in cases:
        name, sizes = CASES[case]
        w = W.BUILTIN[name]
        f = w.build()
        arrays = {k: rng.random(v, dtype=np.float32)
                  for k, v in W.input_shapes(f, sizes).items()}
        want = w.numpy(arrays)()
        print(f"{case} {W.format_shape(sizes)}")
        rows = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kernels = {"tensorlang auto": tl.compile(f, "auto", shapes=sizes, target="cuda")}
            if not args.auto_only:
                kernels.update({f"tensorlang {label}": k for label, k in
                                compile_variants(name, case, f, sizes, "cuda").items()})
        ok = {label: np.allclose(kern(**arrays), want, rtol=1e-3, atol=1e-4)
              for label, kern in kernels.items()}
        rounds: dict[str, list[float]] = {label: [] for label in kernels}
        for r in range(args.rounds):  # interleaved: each round times every kernel in turn
            order = list(kernels) if r % 2 == 0 else list(reversed(kernels))
            for label in order:
                times = kernels[label].benchmark(**arrays, repeat=args.repeat)
                rows.setdefault(label, []).extend(times)
                rounds[label].append(statistics.median(times))
        for label in kernels:
            spread = f"  rounds {min(rounds[label]) * 1e3:.3f}-{max(rounds[label]) * 1e3:.3f}"
            print(f"  {label:30s} {summary(rows[label])}{spread if args.rounds > 1 else ''}  "
                  f"{'ok' if ok[label] else 'WRONG RESULT'}")
        ref = peers(case, arrays, args.repeat)
        copy = ref.pop("copy of In (torch clone)", None)
        for label, times in ref.items():
            print(f"  {label:30s} {summary(times)}")
        if ref:
            best = min(statistics.median(t) for t in ref.values())
            for label in kernels:
                print(f"  {label} / fastest peer: {best / statistics.median(rows[label]):.2f}x")
        if copy:  # the blur moves its input and its output once: as a share of a copy's rate
            rate = 2 * arrays["In"].nbytes / statistics.median(copy)
            print(f"  copy of In (torch clone)   {summary(copy)}  {rate / 1e9:.0f} GB/s "
                  f"(bytes read + written)")
            moved = arrays["In"].nbytes + want.nbytes
            for label in kernels:
                got = moved / statistics.median(rows[label])
                print(f"  {label} moves {got / 1e9:.0f} GB/s: {100 * got / rate:.0f}% of the "
                      f"copy's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
