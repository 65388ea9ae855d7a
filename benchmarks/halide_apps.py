"""Programs from Halide's apps, in tensorlang: the rule-based schedule against the default one
(the no-trap check) and NumPy, measured in the same run, and the time ``tl.compile(F, "auto")``
takes to build and compile each.

Run: python benchmarks/halide_apps.py [--apps unsharp,stencil_chain] [--rounds 5]

- ``unsharp`` (apps/unsharp): gray from RGB, a 7-tap Gaussian blur in y then x with the edge
  repeated, sharpen, and the ratio applied to each channel; float32, planar ``(3, H, W)``.
  Halide's Funcs are defined everywhere; here a Func has a domain, so the reads Halide makes
  outside the image go through ``tl.clamp_edge`` of the Func read (gray and blur_y are pointwise
  in the edge-repeated input, so the values are the same).
- ``stencil_chain`` (apps/stencil_chain): ``stages`` 5x5 box filters, each reading the previous
  one (32 by default); float32. Inlining stage into stage grows the expression 25-fold per stage:
  the rule-based schedule must stop (``MAX_INLINE_NODES``) and compile quickly.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorlang as tl  # noqa: E402
from tensorlang.autotuner.heuristic import heuristic_schedule  # noqa: E402
from tensorlang.autotuner.timing import Stats, interleaved  # noqa: E402
from common import cpu_name  # noqa: E402

F32 = tl.float32


def _gauss(sigma: float) -> list[float]:
    return [math.exp(-i * i / (2 * sigma * sigma)) / (math.sqrt(2 * math.pi) * sigma)
            for i in range(4)]


def unsharp(sigma: float = 1.5) -> tl.Func:
    """Halide's unsharp mask: ``(3, H, W)`` float32 in, the same shape out."""
    H, W = tl.sizes("H W")
    inp = tl.Input("input", (3, H, W), F32)
    c, y, x = tl.vars("c y x")
    k = _gauss(sigma)
    gray = tl.Func("gray")
    gray[y, x] = 0.299 * inp[0, y, x] + 0.587 * inp[1, y, x] + 0.114 * inp[2, y, x]
    g = tl.clamp_edge(gray)
    blur_y = tl.Func("blur_y")
    blur_y[y, x] = k[0] * gray[y, x] + sum(k[d] * (g[y - d, x] + g[y + d, x]) for d in (1, 2, 3))
    b = tl.clamp_edge(blur_y)
    blur_x = tl.Func("blur_x")
    blur_x[y, x] = k[0] * blur_y[y, x] + sum(k[d] * (b[y, x - d] + b[y, x + d])
                                             for d in (1, 2, 3))
    sharpen = tl.Func("sharpen")
    sharpen[y, x] = 2.0 * gray[y, x] - blur_x[y, x]
    ratio = tl.Func("ratio")
    ratio[y, x] = sharpen[y, x] / gray[y, x]
    out = tl.Func("unsharp")
    out[c, y, x] = ratio[y, x] * inp[c, y, x]
    return out


def unsharp_numpy(a: dict[str, np.ndarray], sigma: float = 1.5) -> np.ndarray:
    img = a["input"]
    k = [np.float32(v) for v in _gauss(sigma)]
    gray = (np.float32(0.299) * img[0] + np.float32(0.587) * img[1]
            + np.float32(0.114) * img[2])
    h, w = gray.shape
    gp = np.pad(gray, ((3, 3), (0, 0)), mode="edge")
    by = k[0] * gray + sum(k[d] * (gp[3 - d:3 - d + h] + gp[3 + d:3 + d + h]) for d in (1, 2, 3))
    bp = np.pad(by, ((0, 0), (3, 3)), mode="edge")
    bx = k[0] * by + sum(k[d] * (bp[:, 3 - d:3 - d + w] + bp[:, 3 + d:3 + d + w])
                         for d in (1, 2, 3))
    ratio = (np.float32(2.0) * gray - bx) / gray
    return ratio[None] * img


def stencil_chain(stages: int = 32) -> tl.Func:
    """Halide's stencil_chain: ``stages`` 5x5 box filters, each reading the previous one; the
    output shrinks by 4 per stage."""
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), F32)
    y, x = tl.vars("y x")
    prev = In
    for k in range(stages):
        f = tl.Func(f"s{k}")
        acc = None
        for dy in range(-2, 3):
            for dx in range(-2, 3):
                acc = prev[y + dy, x + dx] if acc is None else acc + prev[y + dy, x + dx]
        f[y, x] = acc * (1.0 / 25)
        prev = f
    return prev


def stencil_chain_numpy(a: dict[str, np.ndarray], stages: int = 32) -> np.ndarray:
    cur = a["In"]
    for _ in range(stages):
        h, w = cur.shape
        acc = sum(cur[2 + dy:h - 2 + dy, 2 + dx:w - 2 + dx] for dy in range(-2, 3)
                  for dx in range(-2, 3))
        cur = acc * np.float32(1.0 / 25)
    return cur


APPS = {
    # name: (builder, numpy reference, sizes, inputs)
    "unsharp": (unsharp, unsharp_numpy, {"H": 2560, "W": 1536},
                lambda s, rng: {"input": rng.random((3, s["H"], s["W"]), dtype=np.float32)
                                + np.float32(0.1)}),
    "stencil_chain": (stencil_chain, stencil_chain_numpy, {"H": 1536, "W": 2560},
                      lambda s, rng: {"In": rng.random((s["H"], s["W"]), dtype=np.float32)}),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apps", default=",".join(APPS))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"Halide apps on {cpu_name()} ({os.cpu_count()} CPUs); {args.rounds} interleaved rounds, "
          f"medians")
    print(f"{'app':<15}{'numpy':>12}{'default':>12}{'rule-based':>12}{'np/rule':>9}"
          f"{'rule/def':>10}{'auto build+compile':>20}")
    for name in [n for n in args.apps.split(",") if n]:
        build, ref_fn, sizes, make = APPS[name]
        arrays = make(sizes, np.random.default_rng(0))
        out = build()
        t0 = time.perf_counter()
        s = heuristic_schedule(out, sizes)
        rule = tl.compile(out, s)
        t_auto = time.perf_counter() - t0
        default = tl.compile(out)
        want = ref_fn(arrays)
        calls = {"numpy": lambda: ref_fn(arrays)}
        for label, k in (("default", default), ("rule-based", rule)):
            got = k(**arrays)
            if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                print(f"{name}: {label} differs from NumPy", file=sys.stderr)
                return 1
            res = np.empty_like(got)
            calls[label] = lambda k=k, res=res: k(**arrays, out=res)
        times = interleaved(calls, rounds=args.rounds, runs=1, settle=("numpy",))
        med = {k: Stats.of(v).median for k, v in times.items()}
        print(f"{name:<15}" + "".join(f"{med[c] * 1e3:>9.2f} ms" for c in
                                      ("numpy", "default", "rule-based"))
              + f"{med['numpy'] / med['rule-based']:>8.2f}x"
              + f"{med['default'] / med['rule-based']:>9.2f}x{t_auto:>18.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
