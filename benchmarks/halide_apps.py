"""Programs from Halide's apps, in tensorlang: the rule-based schedule against the default one
(the no-trap check) and NumPy, measured in the same run, and the time ``tl.compile(F, "auto")``
takes to build and compile each.

Run: python benchmarks/halide_apps.py [--apps unsharp,stencil_chain,...] [--rounds 5]
     [--against NAME=VALUE[+NAME=VALUE]]

``--against`` adds a column "variant": the rule-based schedule made with those constants set
(``common.rule_settings``, as ``polybench.py --against``), for an A/B of a rule in one process.

- ``unsharp`` (apps/unsharp): gray from RGB, a 7-tap Gaussian blur in y then x with the edge
  repeated, sharpen, and the ratio applied to each channel; float32, planar ``(3, H, W)``.
  Halide's Funcs are defined everywhere; here a Func has a domain, so the reads Halide makes
  outside the image go through ``tl.clamp_edge`` of the Func read (gray and blur_y are pointwise
  in the edge-repeated input, so the values are the same).
- ``interpolate``, ``bilateral_grid``, ``hist`` (apps/interpolate, apps/bilateral_grid,
  apps/hist): a 10-level pyramid with ``x // 2`` reads; a grid built by a scatter update and
  sliced by gathers at data-dependent z; histogram equalization of a uint8 image (a per-row
  histogram scatter, a scan for the CDF, a gather through it). See each builder's docstring for
  where tensorlang's version differs from Halide's (finite domains, a constant ``r_sigma``).
- ``local_laplacian`` (apps/local_laplacian): 8-level Gaussian and Laplacian pyramids of the
  gray image remapped at 8 intensities (a remap-table gather), the output pyramid picked per
  pixel between two intensities (a gather along that dimension); uint16 in and out.
- ``camera_pipe`` (apps/camera_pipe): a uint16 raw Bayer image to uint8 RGB (demosaic, a
  Q8.8 colour matrix, a tone-curve LUT gather, sharpening), integer arithmetic wrapping as
  Halide's.
- ``stencil_chain`` (apps/stencil_chain): ``stages`` 5x5 box filters, each reading the previous
  one (32 by default); float32. Inlining stage into stage grows the expression 25-fold per stage:
  the rule-based schedule must stop (``MAX_INLINE_NODES``) and compile quickly.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorlang as tl  # noqa: E402
from tensorlang.autotuner.heuristic import heuristic_schedule  # noqa: E402
from tensorlang.autotuner.timing import MIN_RUN_SECONDS, Stats, interleaved  # noqa: E402
from common import cpu_name, rule_settings  # noqa: E402

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


def hist() -> tl.Func:
    """Halide's hist: histogram equalization of an RGB uint8 image ``(3, H, W)`` (planar, as
    Halide's default buffer): luma Y, a histogram per row (a scatter update), their sum, its
    cumulative sum (a scan), then Y equalized through the CDF (a gather) and recombined with
    the chroma; uint8 out."""
    H, W = tl.sizes("H W")
    inp = tl.Input("input", (3, H, W), tl.uint8)
    c, y, x, b = tl.vars("c y x b")
    f32 = [tl.cast(F32, inp[k, y, x]) for k in range(3)]
    Y = tl.Func("Y")
    Y[y, x] = 0.299 * f32[0] + 0.587 * f32[1] + 0.114 * f32[2]
    Cr, Cb = tl.Func("Cr"), tl.Func("Cb")
    Cr[y, x] = (f32[0] - Y[y, x]) * 0.713 + 128.0
    Cb[y, x] = (f32[2] - Y[y, x]) * 0.564 + 128.0
    hist_rows = tl.Func("hist_rows", shape=(H, 256), dtype=tl.int32)
    hist_rows[y, b] = 0
    rx = tl.RDom((0, W), name="rx")
    bin_ = tl.cast(tl.int32, tl.clamp(Y[y, rx], 0.0, 255.0))
    hist_rows[y, bin_] = hist_rows[y, bin_] + 1
    histogram = tl.Func("hist", shape=(256,), dtype=tl.int32)
    histogram[b] = 0
    ry = tl.RDom((0, H), name="ry")
    histogram[b] = histogram[b] + hist_rows[ry, b]
    cdf = tl.Func("cdf", shape=(256,), dtype=tl.int32)
    cdf[b] = histogram[0]
    rb = tl.RDom((1, 256), name="rb")
    cdf[rb] = cdf[rb - 1] + histogram[rb]
    cdf_bin = tl.Func("cdf_bin")
    cdf_bin[y, x] = tl.cast(tl.uint8, tl.clamp(Y[y, x], 0.0, 255.0))
    eq = tl.Func("equalize")
    scale = tl.cast(F32, 255.0 / tl.cast(tl.float64, H * W))
    eq[y, x] = tl.clamp(tl.cast(F32, cdf[cdf_bin[y, x]]) * scale, 0.0, 255.0)
    red = tl.cast(tl.uint8, tl.clamp(eq[y, x] + (Cr[y, x] - 128.0) * 1.4, 0.0, 255.0))
    green = tl.cast(tl.uint8, tl.clamp(eq[y, x] - 0.343 * (Cb[y, x] - 128.0)
                                       - 0.711 * (Cr[y, x] - 128.0), 0.0, 255.0))
    blue = tl.cast(tl.uint8, tl.clamp(eq[y, x] + 1.765 * (Cb[y, x] - 128.0), 0.0, 255.0))
    out = tl.Func("hist_eq", shape=(3, H, W))
    out[c, y, x] = tl.where(c == 0, red, tl.where(c == 1, green, blue))
    return out


def hist_numpy(a: dict[str, np.ndarray]) -> np.ndarray:
    img = a["input"].astype(np.float32)
    f = np.float32
    Y = f(0.299) * img[0] + f(0.587) * img[1] + f(0.114) * img[2]
    Cr = (img[0] - Y) * f(0.713) + f(128)
    Cb = (img[2] - Y) * f(0.564) + f(128)
    bins = np.clip(Y, 0, 255).astype(np.int32)
    histogram = np.bincount(bins.ravel(), minlength=256).astype(np.int32)
    cdf = np.cumsum(histogram, dtype=np.int32)
    eq = np.clip(cdf[bins.astype(np.uint8)].astype(np.float32)
                 * f(255.0 / (Y.shape[0] * Y.shape[1])), 0, 255)
    red = np.clip(eq + (Cr - f(128)) * f(1.4), 0, 255).astype(np.uint8)
    green = np.clip(eq - f(0.343) * (Cb - f(128)) - f(0.711) * (Cr - f(128)), 0, 255
                    ).astype(np.uint8)
    blue = np.clip(eq + f(1.765) * (Cb - f(128)), 0, 255).astype(np.uint8)
    return np.stack([red, green, blue])


def _level(n: tl.Expr, level: int) -> tl.Expr:
    """The size of pyramid level ``level`` of an extent ``n``: ``ceil(n / 2**level)``."""
    return (n + (2 ** level - 1)) // 2 ** level


def interpolate(levels: int = 10) -> tl.Func:
    """Halide's interpolate: fill in an RGBA image ``(4, H, W)`` float32 (alpha-premultiplied)
    from a ``levels``-level pyramid (downsample 1-2-1 in x then y, upsample by ``x // 2`` and
    ``(x + 1) // 2``, blend by the remaining alpha), then normalize by alpha; ``(3, H, W)`` out.
    Halide's Funcs are infinite; here each level has its size, ``ceil(n / 2**l)``, and reads
    past a level's edge repeat it (Halide's repeat_edge of the input, applied at every level)."""
    H, W = tl.sizes("H W")
    inp = tl.Input("input", (4, H, W), F32)
    c, y, x = tl.vars("c y x")
    down = [tl.Func("downsampled_0", shape=(4, H, W))]
    down[0][c, y, x] = tl.where(c < 3, inp[c, y, x] * inp[3, y, x], inp[3, y, x])
    for lv in range(1, levels):
        prev = tl.clamp_edge(down[lv - 1])
        dx = tl.Func(f"downx_{lv}", shape=(4, _level(H, lv - 1), _level(W, lv)))
        dx[c, y, x] = (prev[c, y, 2 * x - 1] + 2.0 * prev[c, y, 2 * x] + prev[c, y, 2 * x + 1]) \
            * 0.25
        dxe = tl.clamp_edge(dx)
        d = tl.Func(f"downsampled_{lv}", shape=(4, _level(H, lv), _level(W, lv)))
        d[c, y, x] = (dxe[c, 2 * y - 1, x] + 2.0 * dxe[c, 2 * y, x] + dxe[c, 2 * y + 1, x]) * 0.25
        down.append(d)
    interp = down[levels - 1]
    for lv in range(levels - 2, -1, -1):
        up = tl.clamp_edge(interp)
        ux = tl.Func(f"upsampledx_{lv}", shape=(4, _level(H, lv + 1), _level(W, lv)))
        ux[c, y, x] = (up[c, y, x // 2] + up[c, y, (x + 1) // 2]) / 2.0
        uxe = tl.clamp_edge(ux)
        u = tl.Func(f"upsampled_{lv}", shape=(4, _level(H, lv), _level(W, lv)))
        u[c, y, x] = (uxe[c, y // 2, x] + uxe[c, (y + 1) // 2, x]) / 2.0
        it = tl.Func(f"interpolated_{lv}", shape=(4, _level(H, lv), _level(W, lv)))
        it[c, y, x] = down[lv][c, y, x] + (1.0 - down[lv][3, y, x]) * u[c, y, x]
        interp = it
    out = tl.Func("interpolate", shape=(3, H, W))
    out[c, y, x] = interp[c, y, x] / interp[3, y, x]
    return out


def _take(a: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    return np.take(a, np.clip(idx, 0, a.shape[axis] - 1), axis=axis)


def interpolate_numpy(a: dict[str, np.ndarray], levels: int = 10) -> np.ndarray:
    f = np.float32
    img = a["input"]
    d0 = np.concatenate([img[:3] * img[3], img[3:4]])
    down = [d0]
    for _ in range(1, levels):
        p = down[-1]
        i = 2 * np.arange((p.shape[2] + 1) // 2)
        dx = (_take(p, i - 1, 2) + f(2) * _take(p, i, 2) + _take(p, i + 1, 2)) * f(0.25)
        j = 2 * np.arange((p.shape[1] + 1) // 2)
        down.append((_take(dx, j - 1, 1) + f(2) * _take(dx, j, 1) + _take(dx, j + 1, 1))
                    * f(0.25))
    interp = down[-1]
    for lv in range(levels - 2, -1, -1):
        h, w = down[lv].shape[1:]
        i = np.arange(w)
        ux = (_take(interp, i // 2, 2) + _take(interp, (i + 1) // 2, 2)) / f(2)
        j = np.arange(h)
        u = (_take(ux, j // 2, 1) + _take(ux, (j + 1) // 2, 1)) / f(2)
        interp = down[lv] + (f(1) - down[lv][3:4]) * u
    return interp[:3] / interp[3:4]


LL_LEVELS, LL_ALPHA, LL_BETA = 8, 1.0, 1.0  # local_laplacian's run-time parameters (estimates)


def local_laplacian(pyramid_levels: int = 8) -> tl.Func:
    """Halide's local_laplacian (Paris, Hasinoff and Kautz, "Local Laplacian Filters", SIGGRAPH
    2011): a uint16 RGB image ``(3, H, W)``, its gray level remapped at ``LL_LEVELS`` intensities
    (a 1-D remap table read by a gather), a Gaussian and a Laplacian pyramid of each
    (``pyramid_levels`` levels, 1-3-3-1 downsampling, bilinear upsampling by ``(x + 1) // 2``),
    the output Laplacian pyramid picked per pixel between the two nearest intensities (a gather
    along the intensity dimension), collapsed and applied to the colour; uint16 out. Each level
    has its size ``ceil(n / 2**j)`` and repeats its edge (Halide's repeat_edge of the input)."""
    H, W = tl.sizes("H W")
    inp = tl.Input("input", (3, H, W), tl.uint16)
    c, y, x, k, v = tl.vars("c y x k v")
    K, J = LL_LEVELS, pyramid_levels
    span = (K - 1) * 256
    remap = tl.Func("remap", shape=(2 * span + 1,))  # remap[v] is Halide's remap(v - span)
    fx = tl.cast(F32, v - span) / 256.0
    remap[v] = LL_ALPHA * fx * tl.exp(-fx * fx / 2.0)
    gray = tl.Func("gray")
    fl = [tl.cast(F32, inp[ch, y, x]) / 65535.0 for ch in range(3)]
    gray[y, x] = 0.299 * fl[0] + 0.587 * fl[1] + 0.114 * fl[2]
    kv = tl.cast(F32, k) * (1.0 / (K - 1))
    idx = tl.clamp(tl.cast(tl.int32, gray[y, x] * float(K - 1) * 256.0), 0, span)
    g0 = tl.Func("gPyramid_0", shape=(K, H, W))
    g0[k, y, x] = LL_BETA * (gray[y, x] - kv) + kv + remap[idx - 256 * k + span]

    def down(f, j, name, with_k):
        e = tl.clamp_edge(f)
        pre = (k,) if with_k else ()
        dy = tl.Func(f"{name}_downy_{j}", shape=((K,) if with_k else ()) + (_level(H, j),
                                                                            _level(W, j - 1)))
        dy[(*pre, y, x)] = (e[(*pre, 2 * y - 1, x)] + 3.0 * (e[(*pre, 2 * y, x)]
                            + e[(*pre, 2 * y + 1, x)]) + e[(*pre, 2 * y + 2, x)]) / 8.0
        de = tl.clamp_edge(dy)
        dx = tl.Func(f"{name}_{j}", shape=((K,) if with_k else ()) + (_level(H, j), _level(W, j)))
        dx[(*pre, y, x)] = (de[(*pre, y, 2 * x - 1)] + 3.0 * (de[(*pre, y, 2 * x)]
                            + de[(*pre, y, 2 * x + 1)]) + de[(*pre, y, 2 * x + 2)]) / 8.0
        return dx

    def up(f, j, name, with_k):  # f at level j + 1 -> level j
        e = tl.clamp_edge(f)
        pre = (k,) if with_k else ()
        ux = tl.Func(f"{name}_upx_{j}", shape=((K,) if with_k else ()) + (_level(H, j + 1),
                                                                          _level(W, j)))
        wx = tl.cast(F32, (x % 2) * 2 + 1) / 4.0
        ux[(*pre, y, x)] = _lerp(e[(*pre, y, (x + 1) // 2)], e[(*pre, y, (x - 1) // 2)], wx)
        ue = tl.clamp_edge(ux)
        uy = tl.Func(f"{name}_up_{j}", shape=((K,) if with_k else ()) + (_level(H, j),
                                                                         _level(W, j)))
        wy = tl.cast(F32, (y % 2) * 2 + 1) / 4.0
        uy[(*pre, y, x)] = _lerp(ue[(*pre, (y + 1) // 2, x)], ue[(*pre, (y - 1) // 2, x)], wy)
        return uy

    gp = [g0]
    for j in range(1, J):
        gp.append(down(gp[-1], j, "gPyramid", True))
    lp = [None] * J
    lp[J - 1] = gp[J - 1]
    for j in range(J - 2, -1, -1):
        u = up(gp[j + 1], j, "gPyramid", True)
        f = tl.Func(f"lPyramid_{j}", shape=(K, _level(H, j), _level(W, j)))
        f[k, y, x] = gp[j][k, y, x] - u[k, y, x]
        lp[j] = f
    ing = [gray]
    for j in range(1, J):
        ing.append(down(ing[-1], j, "inGPyramid", False))
    outl = []
    for j in range(J):
        level = ing[j][y, x] * float(K - 1)
        li = tl.clamp(tl.cast(tl.int32, level), 0, K - 2)
        lf = level - tl.cast(F32, li)
        f = tl.Func(f"outLPyramid_{j}", shape=(_level(H, j), _level(W, j)))
        f[y, x] = (1.0 - lf) * lp[j][li, y, x] + lf * lp[j][li + 1, y, x]
        outl.append(f)
    outg = outl[J - 1]
    for j in range(J - 2, -1, -1):
        u = up(outg, j, "outGPyramid", False)
        f = tl.Func(f"outGPyramid_{j}", shape=(_level(H, j), _level(W, j)))
        f[y, x] = u[y, x] + outl[j][y, x]
        outg = f
    eps = 0.01
    out = tl.Func("local_laplacian")
    out[c, y, x] = tl.cast(tl.uint16, tl.clamp(
        tl.cast(F32, inp[c, y, x]) * (outg[y, x] + eps) / (gray[y, x] + eps), 0.0, 65535.0))
    return out


def local_laplacian_numpy(a: dict[str, np.ndarray], pyramid_levels: int = 8) -> np.ndarray:
    f = np.float32
    K, J = LL_LEVELS, pyramid_levels
    img = a["input"]
    span = (K - 1) * 256
    fx = (np.arange(2 * span + 1) - span).astype(f) / f(256)
    remap = f(LL_ALPHA) * fx * np.exp(-fx * fx / f(2))
    fl = img.astype(f) / f(65535)
    gray = f(0.299) * fl[0] + f(0.587) * fl[1] + f(0.114) * fl[2]
    kk = np.arange(K)[:, None, None]
    kv = kk.astype(f) * f(1.0 / (K - 1))
    idx = np.clip((gray * f(K - 1) * f(256)).astype(np.int32), 0, span)
    g0 = f(LL_BETA) * (gray - kv) + kv + remap[idx - 256 * kk + span]

    def down(p):
        ax_y, ax_x = p.ndim - 2, p.ndim - 1
        j = 2 * np.arange((p.shape[ax_y] + 1) // 2)
        dy = (_take(p, j - 1, ax_y) + f(3) * (_take(p, j, ax_y) + _take(p, j + 1, ax_y))
              + _take(p, j + 2, ax_y)) / f(8)
        i = 2 * np.arange((p.shape[ax_x] + 1) // 2)
        return (_take(dy, i - 1, ax_x) + f(3) * (_take(dy, i, ax_x) + _take(dy, i + 1, ax_x))
                + _take(dy, i + 2, ax_x)) / f(8)

    def up(p, shape):
        ax_y, ax_x = p.ndim - 2, p.ndim - 1
        i = np.arange(shape[-1])
        wx = ((i % 2) * 2 + 1).astype(f) / f(4)
        ux = _take(p, (i + 1) // 2, ax_x) * (f(1) - wx) + _take(p, (i - 1) // 2, ax_x) * wx
        j = np.arange(shape[-2])
        wy = (((j % 2) * 2 + 1).astype(f) / f(4))[:, None]
        return _take(ux, (j + 1) // 2, ax_y) * (f(1) - wy) + _take(ux, (j - 1) // 2, ax_y) * wy

    gp = [g0]
    for _ in range(1, J):
        gp.append(down(gp[-1]))
    lp = [gp[j] - up(gp[j + 1], gp[j].shape) for j in range(J - 1)] + [gp[J - 1]]
    ing = [gray]
    for _ in range(1, J):
        ing.append(down(ing[-1]))
    outl = []
    for j in range(J):
        level = ing[j] * f(K - 1)
        li = np.clip(level.astype(np.int32), 0, K - 2)
        lf = level - li.astype(f)
        Y, X = np.meshgrid(np.arange(level.shape[0]), np.arange(level.shape[1]), indexing="ij")
        outl.append((f(1) - lf) * lp[j][li, Y, X] + lf * lp[j][li + 1, Y, X])
    outg = outl[J - 1]
    for j in range(J - 2, -1, -1):
        outg = up(outg, outl[j].shape) + outl[j]
    color = img.astype(f) * (outg + f(0.01)) / (gray + f(0.01))
    return np.clip(color, 0, 65535).astype(np.uint16)


def _camera_matrices() -> dict[str, np.ndarray]:
    """The colour matrices of Halide's camera_pipe test (process.cpp), rows r, g, b."""
    m3200 = np.array([[1.6697, -0.2693, -0.4004, -42.4346],
                      [-0.3576, 1.0615, 1.5949, -37.1158],
                      [-0.2175, -1.8751, 6.9640, -26.6970]], np.float32)
    m7000 = np.array([[2.2997, -0.4478, 0.1706, -39.0923],
                      [-0.3826, 1.5906, -0.2080, -25.4311],
                      [-0.0888, -0.7344, 2.2832, -20.0826]], np.float32)
    return {"matrix_3200": m3200, "matrix_7000": m7000}


R_SIGMA = 0.1  # bilateral_grid's r_sigma (Halide passes it at run time; its estimate here)


def _lerp(a: tl.Expr, b: tl.Expr, w: tl.Expr) -> tl.Expr:
    return a * (1.0 - w) + b * w  # Halide's lerp of floats


def bilateral_grid(s_sigma: int = 8) -> tl.Func:
    """Halide's bilateral_grid: splat an ``(H, W)`` float32 image into a grid of ``s_sigma``-pixel
    cells by intensity (a scatter update: ``histogram[y, x, zi, c] += ...`` with ``zi`` read
    from the image), blur the grid 1-4-6-4-1 in z, x and y, and slice it back (trilinear gathers
    at data-dependent z). Halide's grid is infinite; here it is indexed from 2 cells before the
    image's first (the blurs read 2 cells out) and ``r_sigma`` is a constant, not a parameter."""
    H, W = tl.sizes("H W")
    inp = tl.Input("input", (H, W), F32)
    y, x, z, c = tl.vars("y x z c")
    s = s_sigma
    clamped = tl.clamp_edge(inp)
    gy, gx = (H - 1) // s + 2, (W - 1) // s + 2  # cells the slicing reads
    nz = int(1.0 / R_SIGMA) + 2  # z cells it reads: zi and zi + 1
    histogram = tl.Func("histogram", shape=(gy + 4, gx + 4, nz + 4, 2), dtype=F32)
    histogram[y, x, z, c] = 0.0
    r = tl.RDom((0, s), (0, s), name="r")
    val = tl.clamp(clamped[(y - 2) * s + r.y - s // 2, (x - 2) * s + r.x - s // 2], 0.0, 1.0)
    zi = tl.cast(tl.int32, val * (1.0 / R_SIGMA) + 0.5) + 2
    histogram[y, x, zi, c] = histogram[y, x, zi, c] + tl.where(c == 0, val, 1.0)
    blurz, blurx, blury = tl.Func("blurz"), tl.Func("blurx"), tl.Func("blury")
    blurz[y, x, z, c] = (histogram[y, x, z, c] + histogram[y, x, z + 1, c] * 4.0
                         + histogram[y, x, z + 2, c] * 6.0 + histogram[y, x, z + 3, c] * 4.0
                         + histogram[y, x, z + 4, c])
    blurx[y, x, z, c] = (blurz[y, x, z, c] + blurz[y, x + 1, z, c] * 4.0
                         + blurz[y, x + 2, z, c] * 6.0 + blurz[y, x + 3, z, c] * 4.0
                         + blurz[y, x + 4, z, c])
    blury[y, x, z, c] = (blurx[y, x, z, c] + blurx[y + 1, x, z, c] * 4.0
                         + blurx[y + 2, x, z, c] * 6.0 + blurx[y + 3, x, z, c] * 4.0
                         + blurx[y + 4, x, z, c])
    v = tl.clamp(inp[y, x], 0.0, 1.0)
    zv = v * (1.0 / R_SIGMA)
    zi = tl.cast(tl.int32, zv)
    zf = zv - tl.cast(F32, zi)
    xf = tl.cast(F32, x % s) / float(s)
    yf = tl.cast(F32, y % s) / float(s)
    xi, yi = x // s, y // s
    g = blury

    def plane(zz):
        return _lerp(_lerp(g[yi, xi, zz, c], g[yi, xi + 1, zz, c], xf),
                     _lerp(g[yi + 1, xi, zz, c], g[yi + 1, xi + 1, zz, c], xf), yf)

    interpolated = tl.Func("interpolated")
    interpolated[y, x, c] = _lerp(plane(zi), plane(zi + 1), zf)
    out = tl.Func("bilateral_grid")
    out[y, x] = interpolated[y, x, 0] / interpolated[y, x, 1]
    return out


def bilateral_grid_numpy(a: dict[str, np.ndarray], s_sigma: int = 8) -> np.ndarray:
    f = np.float32
    img = a["input"]
    h, w = img.shape
    s = s_sigma
    gy, gx, nz = (h - 1) // s + 2, (w - 1) // s + 2, int(1.0 / R_SIGMA) + 2
    hist = np.zeros((gy + 4, gx + 4, nz + 4, 2), f)
    cy, cx = np.arange(gy + 4), np.arange(gx + 4)
    for ry in range(s):  # the RDom's order: r.y outer, r.x inner
        for rx in range(s):
            yy = np.clip((cy - 2) * s + ry - s // 2, 0, h - 1)
            xx = np.clip((cx - 2) * s + rx - s // 2, 0, w - 1)
            val = np.clip(img[yy[:, None], xx[None, :]], f(0), f(1))
            zi = (val * f(1.0 / R_SIGMA) + f(0.5)).astype(np.int32) + 2
            Y, X = np.meshgrid(cy, cx, indexing="ij")
            np.add.at(hist, (Y, X, zi, 0), val)  # the scatter
            np.add.at(hist, (Y, X, zi, 1), f(1))

    def blur(g, axis):
        n = g.shape[axis] - 4
        t = [np.take(g, np.arange(k, k + n), axis=axis) for k in range(5)]
        return t[0] + t[1] * f(4) + t[2] * f(6) + t[3] * f(4) + t[4]

    g = blur(blur(blur(hist, 2), 1), 0)
    v = np.clip(img, f(0), f(1))
    zv = v * f(1.0 / R_SIGMA)
    zi = zv.astype(np.int32)
    zf = zv - zi.astype(f)
    Y, X = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    xf, yf = (X % s).astype(f) / f(s), (Y % s).astype(f) / f(s)
    xi, yi = X // s, Y // s

    def lerp(p, q, t):
        return p * (f(1) - t) + q * t

    def plane(zz, cc):
        return lerp(lerp(g[yi, xi, zz, cc], g[yi, xi + 1, zz, cc], xf),
                    lerp(g[yi + 1, xi, zz, cc], g[yi + 1, xi + 1, zz, cc], xf), yf)

    out = [lerp(plane(zi, cc), plane(zi + 1, cc), zf) for cc in (0, 1)]
    return out[0] / out[1]


# camera_pipe's run-time parameters, as constants (their estimates in Halide's generator)
COLOR_TEMP, GAMMA, CONTRAST, SHARPEN, BLACK, WHITE = 3700.0, 2.0, 50.0, 1.0, 25, 1023


def _avg(a: tl.Expr, b: tl.Expr, dtype) -> tl.Expr:
    """Halide's camera_pipe ``avg``: the mean of two values rounding up, in a wider type."""
    return tl.cast(dtype, (tl.cast(tl.int32, a) + tl.cast(tl.int32, b) + 1) // 2)


def _absd(a: tl.Expr, b: tl.Expr) -> tl.Expr:
    return tl.maximum(a, b) - tl.minimum(a, b)  # Halide's absd of unsigned values


def camera_pipe() -> tl.Func:
    """Halide's camera_pipe: a raw Bayer image (uint16 ``(H, W)``, GRBG) -> hot-pixel
    suppression, deinterleave, demosaic (edge-directed green, then red/blue from colour
    differences), colour correction (a Q8.8 matrix interpolated for the colour temperature),
    a tone curve (a 1024-entry uint8 LUT read by a gather) and sharpening; uint8 ``(3, H', W')``
    out. The run-time parameters are constants here (their estimates); Halide's Funcs are
    infinite and its output is cropped to even sizes, here each stage has the domain its reads
    allow ("valid" semantics), so the output is the part of the image every stencil reaches."""
    H, W = tl.sizes("H W")
    raw = tl.Input("input", (H, W), tl.uint16)
    m3200 = tl.Input("matrix_3200", (3, 4), F32)
    m7000 = tl.Input("matrix_7000", (3, 4), F32)
    y, x, c = tl.vars("y x c")
    u16, i16, u8 = tl.uint16, tl.int16, tl.uint8
    shifted = tl.Func("shifted")
    shifted[y, x] = raw[y + 12, x + 16]
    denoised = tl.Func("denoised")
    a = tl.maximum(tl.maximum(shifted[y, x - 2], shifted[y, x + 2]),
                   tl.maximum(shifted[y - 2, x], shifted[y + 2, x]))
    denoised[y, x] = tl.clamp(shifted[y, x], tl.cast(u16, 0), a)
    ch = {}
    for k, (dy, dx) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):  # g_gr, r_r, b_b, g_gb
        f = tl.Func(["g_gr", "r_r", "b_b", "g_gb"][k])
        f[y, x] = denoised[2 * y + dy, 2 * x + dx]
        ch[f.name] = f
    g_gr, r_r, b_b, g_gb = ch["g_gr"], ch["r_r"], ch["b_b"], ch["g_gb"]

    def pick(v1, d1, v2, d2):  # the interpolation along the direction of smaller difference
        return tl.where(d1 < d2, v1, v2)

    g_r, g_b = tl.Func("g_r"), tl.Func("g_b")
    g_r[y, x] = pick(_avg(g_gr[y, x + 1], g_gr[y, x], u16), _absd(g_gr[y, x + 1], g_gr[y, x]),
                     _avg(g_gb[y - 1, x], g_gb[y, x], u16), _absd(g_gb[y - 1, x], g_gb[y, x]))
    g_b[y, x] = pick(_avg(g_gb[y, x - 1], g_gb[y, x], u16), _absd(g_gb[y, x - 1], g_gb[y, x]),
                     _avg(g_gr[y + 1, x], g_gr[y, x], u16), _absd(g_gr[y + 1, x], g_gr[y, x]))

    def corr(g_here, g1, g2, c1, c2):
        return g_here - _avg(g1, g2, u16) + _avg(c1, c2, u16)

    r_gr, b_gr, r_gb, b_gb = (tl.Func(n) for n in ("r_gr", "b_gr", "r_gb", "b_gb"))
    r_gr[y, x] = corr(g_gr[y, x], g_r[y, x], g_r[y, x - 1], r_r[y, x - 1], r_r[y, x])
    b_gr[y, x] = corr(g_gr[y, x], g_b[y, x], g_b[y - 1, x], b_b[y, x], b_b[y - 1, x])
    r_gb[y, x] = corr(g_gb[y, x], g_r[y, x], g_r[y + 1, x], r_r[y, x], r_r[y + 1, x])
    b_gb[y, x] = corr(g_gb[y, x], g_b[y, x], g_b[y, x + 1], b_b[y, x], b_b[y, x + 1])
    r_b, b_r = tl.Func("r_b"), tl.Func("b_r")
    r_b[y, x] = tl.where(
        _absd(r_r[y, x], r_r[y + 1, x - 1]) < _absd(r_r[y, x - 1], r_r[y + 1, x]),
        corr(g_b[y, x], g_r[y, x], g_r[y + 1, x - 1], r_r[y, x], r_r[y + 1, x - 1]),
        corr(g_b[y, x], g_r[y, x - 1], g_r[y + 1, x], r_r[y, x - 1], r_r[y + 1, x]))
    b_r[y, x] = tl.where(
        _absd(b_b[y, x], b_b[y - 1, x + 1]) < _absd(b_b[y, x + 1], b_b[y - 1, x]),
        corr(g_r[y, x], g_b[y, x], g_b[y - 1, x + 1], b_b[y, x], b_b[y - 1, x + 1]),
        corr(g_r[y, x], g_b[y, x + 1], g_b[y - 1, x], b_b[y, x + 1], b_b[y - 1, x]))

    def interleave(top_l, top_r, bot_l, bot_r):  # Halide's interleave_y of two interleave_x
        left = tl.where(x % 2 == 0, top_l[y // 2, x // 2], top_r[y // 2, x // 2])
        right = tl.where(x % 2 == 0, bot_l[y // 2, x // 2], bot_r[y // 2, x // 2])
        return tl.where(y % 2 == 0, left, right)

    demosaic = []
    for name, parts in (("r", (r_gr, r_r, r_b, r_gb)), ("g", (g_gr, g_r, g_b, g_gb)),
                        ("b", (b_gr, b_r, b_b, b_gb))):
        f = tl.Func(f"demosaic_{name}")
        f[y, x] = tl.cast(i16, interleave(*parts))
        demosaic.append(f)
    alpha = (1.0 / COLOR_TEMP - 1.0 / 3200) / (1.0 / 7000 - 1.0 / 3200)
    i, j = tl.vars("i j")
    matrix = tl.Func("matrix")  # Q8.8 fixed point, row c: the output channel
    matrix[j, i] = tl.cast(i16, (m3200[j, i] * alpha + m7000[j, i] * (1 - alpha)) * 256.0)
    corrected = tl.Func("corrected")
    corrected[c, y, x] = tl.cast(i16, (tl.cast(tl.int32, matrix[c, 3]) + sum(
        tl.cast(tl.int32, matrix[c, k]) * tl.cast(tl.int32, demosaic[k][y, x])
        for k in range(3))) // 256)
    (v,) = tl.vars("v")
    inv_range = 1.0 / (WHITE - BLACK)
    bb = 2.0 - 2.0 ** (CONTRAST / 100.0)
    aa = 2.0 - 2.0 * bb
    xf = tl.clamp(tl.cast(F32, v - BLACK) * inv_range, 0.0, 1.0)
    g = tl.pow(xf, tl.const(1.0 / GAMMA, F32))
    z = tl.where(g > 0.5, 1.0 - (aa * (1.0 - g) * (1.0 - g) + bb * (1.0 - g)), aa * g * g + bb * g)
    val = tl.cast(u8, tl.clamp(z * 255.0 + 0.5, 0.0, 255.0))
    curve = tl.Func("curve", shape=(1024,))
    curve[v] = tl.where(v <= BLACK, tl.cast(u8, 0), tl.where(v > WHITE, tl.cast(u8, 255), val))
    curved = tl.Func("curved")
    curved[c, y, x] = curve[tl.clamp(corrected[c, y, x], 0, 1023)]
    unsharp_y, unsharp = tl.Func("unsharp_y"), tl.Func("unsharp")

    def blur121(p, q, r):
        return _avg(_avg(p, r, u8), q, u8)

    unsharp_y[c, y, x] = blur121(curved[c, y - 1, x], curved[c, y, x], curved[c, y + 1, x])
    unsharp[c, y, x] = blur121(unsharp_y[c, y, x - 1], unsharp_y[c, y, x], unsharp_y[c, y, x + 1])
    mask = tl.Func("mask")
    mask[c, y, x] = tl.cast(i16, curved[c, y, x]) - tl.cast(i16, unsharp[c, y, x])
    strength = int(min(255, max(0, SHARPEN * 32)))  # Halide's u8_sat(sharpen_strength * 32)
    out = tl.Func("camera_pipe")
    out[c, y, x] = tl.saturating_cast(u8, tl.cast(i16, curved[c, y, x])
                                      + (mask[c, y, x] * tl.cast(i16, strength)) // 32)
    return out


@functools.lru_cache(maxsize=8)
def _camera_domains(shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, int], ...]]:
    """Each camera_pipe Func's domain ``(min, extent)`` per dimension for a raw image of
    ``shape`` (computed once per shape, outside the timed NumPy code)."""
    p = tl.Pipeline(camera_pipe())
    shapes = {"input": shape, "matrix_3200": (3, 4), "matrix_7000": (3, 4)}
    return dict(p.bind(shapes).bounds)


def camera_pipe_numpy(a: dict[str, np.ndarray]) -> np.ndarray:
    """Halide's camera_pipe formulas with NumPy, stage by stage, each over the domain
    tensorlang gives that Func (``Pipeline.bind``: the sizes and origins only; every value is
    computed here), stages read at index arrays. uint16 / int16 / uint8 arithmetic wraps as
    Halide's does."""
    dom = _camera_domains(a["input"].shape)
    u16, i16, u8, i32 = np.uint16, np.int16, np.uint8, np.int32
    st: dict[str, tuple[np.ndarray, tuple[int, ...]]] = {}

    def grid(name):
        (y0, h), (x0, w) = dom[name][-2:]
        return np.arange(y0, y0 + h)[:, None], np.arange(x0, x0 + w)[None, :]

    def rd(name, *idx):
        arr, org = st[name]
        rel = [np.asarray(ix) - o for ix, o in zip(idx, org)]
        n = len(rel)
        rel = [r.reshape((1,) * (n - r.ndim) + r.shape) for r in rel]
        # index arrays each along its own axis in steps of 1 or 2 (a shifted or strided window,
        # as the stencils here read) are slices: a view, not a gather
        if all(r.size > 1 and r.shape[k] == r.size for k, r in enumerate(rel)):
            flat = [r.ravel() for r in rel]
            steps = [int(f[1] - f[0]) for f in flat]
            if all(st_ in (1, 2) and np.all(np.diff(f) == st_) and f[0] >= 0
                   for f, st_ in zip(flat, steps)):
                return arr[tuple(slice(int(f[0]), int(f[-1]) + 1, st_)
                                 for f, st_ in zip(flat, steps))]
        return arr[tuple(rel)]

    def put(name, val):
        st[name] = (np.asarray(val), tuple(m for m, _ in dom[name]))

    def avg(p_, q, t):
        return ((p_.astype(i32) + q.astype(i32) + 1) // 2).astype(t)

    def absd(p_, q):
        return np.maximum(p_, q) - np.minimum(p_, q)

    st["input"] = (a["input"], (0, 0))
    Y, X = grid("shifted")
    put("shifted", rd("input", Y + 12, X + 16))
    Y, X = grid("denoised")
    m = np.maximum(np.maximum(rd("shifted", Y, X - 2), rd("shifted", Y, X + 2)),
                   np.maximum(rd("shifted", Y - 2, X), rd("shifted", Y + 2, X)))
    put("denoised", np.clip(rd("shifted", Y, X), 0, m).astype(u16))
    for name, (dy, dx) in zip(("g_gr", "r_r", "b_b", "g_gb"), ((0, 0), (0, 1), (1, 0), (1, 1))):
        Y, X = grid(name)
        put(name, rd("denoised", 2 * Y + dy, 2 * X + dx))
    Y, X = grid("g_r")
    gr, gb = (lambda yy, xx: rd("g_gr", yy, xx)), (lambda yy, xx: rd("g_gb", yy, xx))
    put("g_r", np.where(absd(gr(Y, X + 1), gr(Y, X)) < absd(gb(Y - 1, X), gb(Y, X)),
                        avg(gr(Y, X + 1), gr(Y, X), u16), avg(gb(Y - 1, X), gb(Y, X), u16)))
    Y, X = grid("g_b")
    put("g_b", np.where(absd(gb(Y, X - 1), gb(Y, X)) < absd(gr(Y + 1, X), gr(Y, X)),
                        avg(gb(Y, X - 1), gb(Y, X), u16), avg(gr(Y + 1, X), gr(Y, X), u16)))

    def corr(gh, g1, g2, c1, c2):
        return gh - avg(g1, g2, u16) + avg(c1, c2, u16)

    R = lambda n: (lambda yy, xx: rd(n, yy, xx))  # noqa: E731
    g_r, g_b, r_r, b_b = R("g_r"), R("g_b"), R("r_r"), R("b_b")
    Y, X = grid("r_gr")
    put("r_gr", corr(gr(Y, X), g_r(Y, X), g_r(Y, X - 1), r_r(Y, X - 1), r_r(Y, X)))
    Y, X = grid("b_gr")
    put("b_gr", corr(gr(Y, X), g_b(Y, X), g_b(Y - 1, X), b_b(Y, X), b_b(Y - 1, X)))
    Y, X = grid("r_gb")
    put("r_gb", corr(gb(Y, X), g_r(Y, X), g_r(Y + 1, X), r_r(Y, X), r_r(Y + 1, X)))
    Y, X = grid("b_gb")
    put("b_gb", corr(gb(Y, X), g_b(Y, X), g_b(Y, X + 1), b_b(Y, X), b_b(Y, X + 1)))
    Y, X = grid("r_b")
    put("r_b", np.where(
        absd(r_r(Y, X), r_r(Y + 1, X - 1)) < absd(r_r(Y, X - 1), r_r(Y + 1, X)),
        corr(g_b(Y, X), g_r(Y, X), g_r(Y + 1, X - 1), r_r(Y, X), r_r(Y + 1, X - 1)),
        corr(g_b(Y, X), g_r(Y, X - 1), g_r(Y + 1, X), r_r(Y, X - 1), r_r(Y + 1, X))))
    Y, X = grid("b_r")
    put("b_r", np.where(
        absd(b_b(Y, X), b_b(Y - 1, X + 1)) < absd(b_b(Y, X + 1), b_b(Y - 1, X)),
        corr(g_r(Y, X), g_b(Y, X), g_b(Y - 1, X + 1), b_b(Y, X), b_b(Y - 1, X + 1)),
        corr(g_r(Y, X), g_b(Y, X + 1), g_b(Y - 1, X), b_b(Y, X + 1), b_b(Y - 1, X))))

    def interleave(names, yy, xx):
        tl_, tr, bl, br = (rd(n, yy // 2, xx // 2) for n in names)
        return np.where(yy % 2 == 0, np.where(xx % 2 == 0, tl_, tr), np.where(xx % 2 == 0, bl, br))

    Y, X = grid("corrected")
    dem = np.stack([interleave(n, Y, X) for n in (("r_gr", "r_r", "r_b", "r_gb"),
                                                  ("g_gr", "g_r", "g_b", "g_gb"),
                                                  ("b_gr", "b_r", "b_b", "b_gb"))]).astype(i16)
    alpha = (1.0 / COLOR_TEMP - 1.0 / 3200) / (1.0 / 7000 - 1.0 / 3200)
    mat = ((a["matrix_3200"] * np.float32(alpha) + a["matrix_7000"] * np.float32(1 - alpha))
           * np.float32(256.0)).astype(i16).astype(i32)
    d32 = dem.astype(i32)
    cor = np.stack([((mat[r, 3] + mat[r, 0] * d32[0] + mat[r, 1] * d32[1] + mat[r, 2] * d32[2])
                     // 256).astype(i16) for r in range(3)])
    xs = np.arange(1024)
    xf = np.clip((xs - BLACK).astype(np.float32) * np.float32(1.0 / (WHITE - BLACK)),
                 np.float32(0), np.float32(1))
    g = np.power(xf, np.float32(1.0 / GAMMA))
    bb = np.float32(2.0 - 2.0 ** (CONTRAST / 100.0))
    aa = np.float32(2.0) - np.float32(2.0) * bb
    one = np.float32(1)
    z = np.where(g > np.float32(0.5), one - (aa * (one - g) * (one - g) + bb * (one - g)),
                 aa * g * g + bb * g)
    val = np.clip(z * np.float32(255) + np.float32(0.5), 0, 255).astype(u8)
    curve = np.where(xs <= BLACK, 0, np.where(xs > WHITE, 255, val)).astype(u8)
    put("curved", curve[np.clip(cor, 0, 1023)])  # (the domain of corrected)
    C = np.arange(3)[:, None, None]
    Y, X = grid("unsharp_y")

    def blur121(p_, q, r):
        return avg(avg(p_, r, u8), q, u8)

    put("unsharp_y", blur121(rd("curved", C, Y - 1, X), rd("curved", C, Y, X),
                             rd("curved", C, Y + 1, X)))
    Y, X = grid("unsharp")
    put("unsharp", blur121(rd("unsharp_y", C, Y, X - 1), rd("unsharp_y", C, Y, X),
                           rd("unsharp_y", C, Y, X + 1)))
    Y, X = grid("camera_pipe")
    cur = rd("curved", C, Y, X).astype(i16)
    mask = cur - rd("unsharp", C, Y, X).astype(i16)
    strength = i16(int(min(255, max(0, SHARPEN * 32))))
    res = cur + (mask * strength) // i16(32)
    return np.clip(res, 0, 255).astype(u8)


APPS = {
    # name: (builder, numpy reference, sizes, inputs)
    "unsharp": (unsharp, unsharp_numpy, {"H": 2560, "W": 1536},
                lambda s, rng: {"input": rng.random((3, s["H"], s["W"]), dtype=np.float32)
                                + np.float32(0.1)}),
    "stencil_chain": (stencil_chain, stencil_chain_numpy, {"H": 1536, "W": 2560},
                      lambda s, rng: {"In": rng.random((s["H"], s["W"]), dtype=np.float32)}),
    "interpolate": (interpolate, interpolate_numpy, {"H": 2560, "W": 1536},
                    lambda s, rng: {"input": np.concatenate([
                        rng.random((3, s["H"], s["W"]), dtype=np.float32),
                        (rng.random((1, s["H"], s["W"])) > 0.97).astype(np.float32)])}),
    "bilateral_grid": (bilateral_grid, bilateral_grid_numpy, {"H": 2560, "W": 1536},
                       lambda s, rng: {"input": rng.random((s["H"], s["W"]), dtype=np.float32)}),
    "local_laplacian": (local_laplacian, local_laplacian_numpy, {"H": 2560, "W": 1536},
                        lambda s, rng: {"input": rng.integers(0, 65536, (3, s["H"], s["W"]))
                                        .astype(np.uint16)}),
    "camera_pipe": (camera_pipe, camera_pipe_numpy, {"H": 1968, "W": 2592},
                    lambda s, rng: {"input": rng.integers(0, 1024, (s["H"], s["W"])).astype(
                        np.uint16), **_camera_matrices()}),
    "hist": (hist, hist_numpy, {"H": 2560, "W": 1536},
             lambda s, rng: {"input": rng.integers(0, 256, (3, s["H"], s["W"])).astype(np.uint8)}),
}


def matches(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal up to float32 rounding; NaNs where NumPy's. Integer outputs computed from floats
    may differ where a value computed with FMA contraction lands on the other side of an integer
    before a conversion (a pixel's histogram bin, then its equalized value): at most 1% of them,
    and 0.5% by more than 1."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    g, w = got.astype(np.float64), want.astype(np.float64)
    if want.dtype.kind in "iu":
        d = np.abs(g - w)
        return bool(np.mean(d > 0) < 0.01 and np.mean(d > 1) < 0.005)
    return bool(np.allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apps", default=",".join(APPS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--against", default="", help="NAME=VALUE[+...]: the rules' constants")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"Halide apps on {cpu_name()} ({os.cpu_count()} CPUs); {args.rounds} interleaved rounds, "
          f"medians")
    print(f"{'app':<15}{'numpy':>12}{'default':>12}{'rule-based':>12}{'np/rule':>9}"
          f"{'rule/def':>10}{'auto build+compile':>20}"
          + (f"{'np/variant':>12}{'variant/rule':>14}" if args.against else ""))
    for name in [n for n in args.apps.split(",") if n]:
        build, ref_fn, sizes, make = APPS[name]
        arrays = make(sizes, np.random.default_rng(0))
        out = build()
        t0 = time.perf_counter()
        s = heuristic_schedule(out, sizes)
        rule = tl.compile(out, s)
        t_auto = time.perf_counter() - t0
        default = tl.compile(out)
        variants = [("default", default), ("rule-based", rule)]
        if args.against:
            with rule_settings(args.against):
                variants.append(("variant", tl.compile(out, heuristic_schedule(out, sizes))))
        want = ref_fn(arrays)
        calls = {"numpy": lambda: ref_fn(arrays)}
        for label, k in variants:
            got = k(**arrays)
            if not matches(got, want):
                print(f"{name}: {label} differs from NumPy", file=sys.stderr)
                return 1
            res = np.empty_like(got)
            calls[label] = lambda k=k, res=res: k(**arrays, out=res)
        times = interleaved(calls, rounds=args.rounds, runs=1, settle=("numpy",),
                            min_run_seconds=MIN_RUN_SECONDS)
        med = {k: Stats.of(v).median for k, v in times.items()}
        print(f"{name:<15}" + "".join(f"{med[c] * 1e3:>9.2f} ms" for c in
                                      ("numpy", "default", "rule-based"))
              + f"{med['numpy'] / med['rule-based']:>8.2f}x"
              + f"{med['default'] / med['rule-based']:>9.2f}x{t_auto:>18.1f} s"
              + (f"{med['numpy'] / med['variant']:>11.2f}x"
                 f"{med['rule-based'] / med['variant']:>13.2f}x" if args.against else ""),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
