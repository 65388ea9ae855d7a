"""PolyBench/C 4.2 kernels in tensorlang, each with a NumPy reference written from the C source.

Every kernel is a ``Kernel``: its outputs (one Func each; a C kernel with several live-out arrays
has several), its sizes (PolyBench's SMALL and LARGE datasets), its inputs, and a NumPy function
computing the same live-out arrays. Data are float64 (PolyBench's default ``DATA_TYPE``);
``alpha``/``beta`` are the constants of PolyBench's ``init_array``. Where the C code fills one
triangle of a symmetric result and mirrors it (covariance, correlation), the algorithm computes
the whole matrix, as NumPy does. The inputs are seeded random arrays, not PolyBench's
``init_array`` patterns: a reference check is stronger on unstructured data.

Ported so far: the dense linear-algebra and data-mining kernels the language expresses directly.
See also: Pouchet and Yuki, PolyBench/C 4.2.1 (polybench.sourceforge.net).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

import tensorlang as tl

ALPHA, BETA = 1.5, 1.2
F64 = tl.float64


@dataclass(frozen=True)
class Kernel:
    """One PolyBench kernel: ``build()`` -> its output Funcs; ``small``/``large`` sizes by name;
    ``inputs(sizes, rng)`` -> arrays by Input name; ``numpy(arrays)`` -> the live-out arrays
    in the order of the outputs; ``flops(sizes)`` -> floating-point operations of one run."""

    name: str
    build: Callable[[], list[tl.Func]]
    small: dict[str, int]
    large: dict[str, int]
    inputs: Callable[[dict[str, int], np.random.Generator], dict[str, np.ndarray]]
    numpy: Callable[[dict[str, np.ndarray]], list[np.ndarray]]
    flops: Callable[[dict[str, int]], float]


def _arrays(rng: np.random.Generator, **shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {name: rng.random(shape) for name, shape in shapes.items()}


# -- linear-algebra/blas ------------------------------------------------------------------------
def _gemm() -> list[tl.Func]:
    NI, NJ, NK = tl.sizes("NI NJ NK")
    C, A, B = tl.Input("C", (NI, NJ), F64), tl.Input("A", (NI, NK), F64), \
        tl.Input("B", (NK, NJ), F64)
    i, j, k = tl.vars("i j k")
    out = tl.Func("gemm")
    out[i, j] = BETA * C[i, j] + ALPHA * tl.sum(A[i, k] * B[k, j])
    return [out]


def _gemver() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), F64)
    u1, v1, u2, v2, w0, x0, y, z = (tl.Input(n, (N,), F64)
                                    for n in ("u1", "v1", "u2", "v2", "w", "x", "y", "z"))
    i, j = tl.vars("i j")
    Ah = tl.Func("Ah")
    Ah[i, j] = A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]
    x = tl.Func("x1")
    x[i] = x0[i] + BETA * tl.sum(Ah[j, i] * y[j]) + z[i]
    w = tl.Func("gemver")
    w[i] = w0[i] + ALPHA * tl.sum(Ah[i, j] * x[j])
    return [w]


def _gemver_np(a: dict[str, np.ndarray]) -> list[np.ndarray]:
    ah = a["A"] + np.outer(a["u1"], a["v1"]) + np.outer(a["u2"], a["v2"])
    x = a["x"] + BETA * (ah.T @ a["y"]) + a["z"]
    return [a["w"] + ALPHA * (ah @ x)]


def _gesummv() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    A, B, x = tl.Input("A", (N, N), F64), tl.Input("B", (N, N), F64), tl.Input("x", (N,), F64)
    i, j = tl.vars("i j")
    y = tl.Func("gesummv")
    y[i] = ALPHA * tl.sum(A[i, j] * x[j]) + BETA * tl.sum(B[i, j] * x[j])
    return [y]


# -- linear-algebra/kernels ---------------------------------------------------------------------
def _2mm() -> list[tl.Func]:
    NI, NJ, NK, NL = tl.sizes("NI NJ NK NL")
    A, B = tl.Input("A", (NI, NK), F64), tl.Input("B", (NK, NJ), F64)
    C, D = tl.Input("C", (NJ, NL), F64), tl.Input("D", (NI, NL), F64)
    i, j, k, l_ = tl.vars("i j k l")
    tmp = tl.Func("tmp")
    tmp[i, j] = ALPHA * A[i, k] * B[k, j]
    out = tl.Func("mm2")
    out[i, l_] = BETA * D[i, l_] + tl.sum(tmp[i, j] * C[j, l_])
    return [out]


def _3mm() -> list[tl.Func]:
    NI, NJ, NK, NL, NM = tl.sizes("NI NJ NK NL NM")
    A, B = tl.Input("A", (NI, NK), F64), tl.Input("B", (NK, NJ), F64)
    C, D = tl.Input("C", (NJ, NM), F64), tl.Input("D", (NM, NL), F64)
    i, j, k = tl.vars("i j k")
    E, F, G = tl.Func("E"), tl.Func("F"), tl.Func("mm3")
    E[i, j] = A[i, k] * B[k, j]
    F[i, j] = C[i, k] * D[k, j]
    G[i, j] = E[i, k] * F[k, j]
    return [G]


def _atax() -> list[tl.Func]:
    M, N = tl.sizes("M N")
    A, x = tl.Input("A", (M, N), F64), tl.Input("x", (N,), F64)
    i, j = tl.vars("i j")
    tmp, y = tl.Func("tmp"), tl.Func("atax")
    tmp[i] = A[i, j] * x[j]
    y[j] = A[i, j] * tmp[i]
    return [y]


def _bicg() -> list[tl.Func]:
    N, M = tl.sizes("N M")
    A, p, r = tl.Input("A", (N, M), F64), tl.Input("p", (M,), F64), tl.Input("r", (N,), F64)
    i, j = tl.vars("i j")
    s, q = tl.Func("bicg_s"), tl.Func("bicg_q")
    s[j] = r[i] * A[i, j]
    q[i] = A[i, j] * p[j]
    return [s, q]


def _mvt() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), F64)
    x1, x2, y1, y2 = (tl.Input(n, (N,), F64) for n in ("x1", "x2", "y_1", "y_2"))
    i, j = tl.vars("i j")
    o1, o2 = tl.Func("mvt_x1"), tl.Func("mvt_x2")
    o1[i] = x1[i] + tl.sum(A[i, j] * y1[j])
    o2[i] = x2[i] + tl.sum(A[j, i] * y2[j])
    return [o1, o2]


def _doitgen() -> list[tl.Func]:
    NR, NQ, NP = tl.sizes("NR NQ NP")
    A, C4 = tl.Input("A", (NR, NQ, NP), F64), tl.Input("C4", (NP, NP), F64)
    r, q, p, s = tl.vars("r q p s")
    out = tl.Func("doitgen")
    out[r, q, p] = A[r, q, s] * C4[s, p]
    return [out]


# -- datamining ---------------------------------------------------------------------------------
def _covariance() -> list[tl.Func]:
    N, M = tl.sizes("N M")
    data = tl.Input("data", (N, M), F64)
    i, j, k = tl.vars("i j k")
    mean, d, cov = tl.Func("mean"), tl.Func("centered"), tl.Func("covariance")
    mean[j] = tl.sum(data[i, j]) / tl.cast(F64, N)
    d[i, j] = data[i, j] - mean[j]
    cov[i, j] = tl.sum(d[k, i] * d[k, j]) / (tl.cast(F64, N) - 1.0)
    return [cov]


def _covariance_np(a: dict[str, np.ndarray]) -> list[np.ndarray]:
    data = a["data"]
    d = data - data.sum(axis=0) / data.shape[0]
    return [(d.T @ d) / (data.shape[0] - 1.0)]


EPS = 0.1


def _correlation() -> list[tl.Func]:
    N, M = tl.sizes("N M")
    data = tl.Input("data", (N, M), F64)
    i, j, k = tl.vars("i j k")
    fn = tl.cast(F64, N)
    mean, sd, dn, corr = tl.Func("mean"), tl.Func("stddev"), tl.Func("normed"), \
        tl.Func("correlation")
    mean[j] = tl.sum(data[i, j]) / fn
    dev = tl.sqrt(tl.sum((data[i, j] - mean[j]) * (data[i, j] - mean[j])) / fn)
    sd[j] = tl.where(dev <= EPS, 1.0, dev)
    dn[i, j] = (data[i, j] - mean[j]) / (tl.sqrt(fn) * sd[j])
    corr[i, j] = tl.where(i == j, 1.0, tl.sum(dn[k, i] * dn[k, j]))
    return [corr]


def _correlation_np(a: dict[str, np.ndarray]) -> list[np.ndarray]:
    data = a["data"]
    n = float(data.shape[0])
    mean = data.sum(axis=0) / n
    sd = np.sqrt(((data - mean) ** 2).sum(axis=0) / n)
    sd = np.where(sd <= EPS, 1.0, sd)
    dn = (data - mean) / (np.sqrt(n) * sd)
    corr = dn.T @ dn
    np.fill_diagonal(corr, 1.0)
    return [corr]


KERNELS: dict[str, Kernel] = {k.name: k for k in [
    Kernel("gemm", _gemm, dict(NI=60, NJ=70, NK=80), dict(NI=1000, NJ=1100, NK=1200),
           lambda s, rng: _arrays(rng, C=(s["NI"], s["NJ"]), A=(s["NI"], s["NK"]),
                                  B=(s["NK"], s["NJ"])),
           lambda a: [BETA * a["C"] + ALPHA * (a["A"] @ a["B"])],
           lambda s: 2.0 * s["NI"] * s["NJ"] * s["NK"]),
    Kernel("2mm", _2mm, dict(NI=40, NJ=50, NK=70, NL=80),
           dict(NI=800, NJ=900, NK=1100, NL=1200),
           lambda s, rng: _arrays(rng, A=(s["NI"], s["NK"]), B=(s["NK"], s["NJ"]),
                                  C=(s["NJ"], s["NL"]), D=(s["NI"], s["NL"])),
           lambda a: [BETA * a["D"] + (ALPHA * (a["A"] @ a["B"])) @ a["C"]],
           lambda s: 2.0 * s["NI"] * s["NJ"] * (s["NK"] + s["NL"])),
    Kernel("3mm", _3mm, dict(NI=40, NJ=50, NK=60, NL=70, NM=80),
           dict(NI=800, NJ=900, NK=1000, NL=1100, NM=1200),
           lambda s, rng: _arrays(rng, A=(s["NI"], s["NK"]), B=(s["NK"], s["NJ"]),
                                  C=(s["NJ"], s["NM"]), D=(s["NM"], s["NL"])),
           lambda a: [(a["A"] @ a["B"]) @ (a["C"] @ a["D"])],
           lambda s: 2.0 * (s["NI"] * s["NJ"] * s["NK"] + s["NJ"] * s["NL"] * s["NM"]
                            + s["NI"] * s["NL"] * s["NJ"])),
    Kernel("atax", _atax, dict(M=116, N=124), dict(M=1900, N=2100),
           lambda s, rng: _arrays(rng, A=(s["M"], s["N"]), x=(s["N"],)),
           lambda a: [a["A"].T @ (a["A"] @ a["x"])],
           lambda s: 4.0 * s["M"] * s["N"]),
    Kernel("bicg", _bicg, dict(M=116, N=124), dict(M=1900, N=2100),
           lambda s, rng: _arrays(rng, A=(s["N"], s["M"]), p=(s["M"],), r=(s["N"],)),
           lambda a: [a["r"] @ a["A"], a["A"] @ a["p"]],
           lambda s: 4.0 * s["M"] * s["N"]),
    Kernel("mvt", _mvt, dict(N=120), dict(N=2000),
           lambda s, rng: _arrays(rng, A=(s["N"], s["N"]), x1=(s["N"],), x2=(s["N"],),
                                  y_1=(s["N"],), y_2=(s["N"],)),
           lambda a: [a["x1"] + a["A"] @ a["y_1"], a["x2"] + a["A"].T @ a["y_2"]],
           lambda s: 4.0 * s["N"] ** 2),
    Kernel("gemver", _gemver, dict(N=120), dict(N=2000),
           lambda s, rng: _arrays(rng, A=(s["N"], s["N"]),
                                  **{n: (s["N"],) for n in ("u1", "v1", "u2", "v2", "w", "x",
                                                            "y", "z")}),
           _gemver_np, lambda s: 10.0 * s["N"] ** 2),
    Kernel("gesummv", _gesummv, dict(N=90), dict(N=1300),
           lambda s, rng: _arrays(rng, A=(s["N"], s["N"]), B=(s["N"], s["N"]), x=(s["N"],)),
           lambda a: [ALPHA * (a["A"] @ a["x"]) + BETA * (a["B"] @ a["x"])],
           lambda s: 4.0 * s["N"] ** 2),
    Kernel("doitgen", _doitgen, dict(NQ=20, NR=25, NP=30), dict(NQ=140, NR=150, NP=160),
           lambda s, rng: _arrays(rng, A=(s["NR"], s["NQ"], s["NP"]), C4=(s["NP"], s["NP"])),
           lambda a: [a["A"] @ a["C4"]],
           lambda s: 2.0 * s["NR"] * s["NQ"] * s["NP"] ** 2),
    Kernel("covariance", _covariance, dict(M=80, N=100), dict(M=1200, N=1400),
           lambda s, rng: _arrays(rng, data=(s["N"], s["M"])), _covariance_np,
           lambda s: 2.0 * s["N"] * s["M"] ** 2),
    Kernel("correlation", _correlation, dict(M=80, N=100), dict(M=1200, N=1400),
           lambda s, rng: _arrays(rng, data=(s["N"], s["M"])), _correlation_np,
           lambda s: 2.0 * s["N"] * s["M"] ** 2),
]}
