"""PolyBench/C 4.2 kernels in tensorlang, each with a NumPy reference written from the C source.

Every kernel is a ``Kernel``: its outputs (one Func each; a C kernel with several live-out arrays
has several, compiled as one pipeline with several outputs: ``Kernel.handle``), its sizes
(PolyBench's SMALL and LARGE datasets), its inputs, and a NumPy function
computing the same live-out arrays. Data are float64 (PolyBench's default ``DATA_TYPE``);
``alpha``/``beta`` are the constants of PolyBench's ``init_array``. Where the C code computes
one triangle of a symmetric product (syrk, syr2k) or computes one and mirrors it (covariance,
correlation), so does the port (``_triangle_products``: an RDom restricted to the triangle).
The inputs are seeded random arrays, not PolyBench's
``init_array`` patterns: a reference check is stronger on unstructured data.

All 30 kernels of PolyBench/C 4.2. Where the C loop body runs several statements on different
arrays per step (fdtd-2d, durbin, gramschmidt, adi), they are one update over a buffer holding
those arrays, its left side choosing the array per RDom point.
See also: Pouchet and Yuki, PolyBench/C 4.2.1 (polybench.sourceforge.net).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import tensorlang as tl

ALPHA, BETA = 1.5, 1.2
F64 = tl.float64


@dataclass(frozen=True)
class Kernel:
    """One PolyBench kernel: ``build()`` -> its output Funcs; ``small``/``large`` sizes by name
    (``large`` is PolyBench's LARGE dataset, or MEDIUM where ``dataset`` says so: NumPy would take
    more than 10 s at LARGE); ``inputs(sizes, rng)`` -> arrays by Input name;
    ``numpy(arrays, sizes)`` -> the live-out arrays in the order of the outputs;
    ``flops(sizes)`` -> floating-point operations of one run. Sizes no input array fixes (a time
    step count ``T``) are passed to the kernel by name (``kernel(A=..., T=500)``)."""

    name: str
    build: Callable[[], list[tl.Func]]
    small: dict[str, int]
    large: dict[str, int]
    inputs: Callable[[dict[str, int], np.random.Generator], dict[str, np.ndarray]]
    numpy: Callable[[dict[str, np.ndarray], dict[str, int]], list[np.ndarray]]
    flops: Callable[[dict[str, int]], float]
    dataset: str = "LARGE"

    @staticmethod
    def handle(outs: list[tl.Func]) -> tl.Func | list[tl.Func]:
        """What ``tl.compile`` takes for these outputs: the Func, or the list of them (one
        kernel computing every live-out array, returning a tuple)."""
        return outs[0] if len(outs) == 1 else outs

    def call_args(self, out: tl.Func | list[tl.Func], arrays: dict[str, np.ndarray],
                  sizes: dict[str, int]) -> dict[str, object]:
        """Keyword arguments of the kernel of ``out`` (a Func or a list of output Funcs): its
        Input arrays and the sizes they do not fix."""
        pipeline = tl.Pipeline(out)
        fixed = {s.name for i in pipeline.inputs for s in i.shape if isinstance(s, tl.Size)}
        args: dict[str, object] = {i.name: arrays[i.name] for i in pipeline.inputs}
        args.update({n: sizes[n] for n in pipeline.sizes if n not in fixed})
        return args


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


def _gemver_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
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
    # C's tmp += alpha * A * B, with alpha factored out of the sum (as gemm's and NumPy's
    # reference): inside, it cost one multiply per product
    tmp[i, j] = ALPHA * tl.sum(A[i, k] * B[k, j])
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
    # C computes cov[i][j] for j >= i and copies it to cov[j][i]
    upper = _triangle_products("dtd", N, lambda i, j, k: d[k, i] * d[k, j], upper=True)
    cov[i, j] = tl.where(j >= i, upper[i, j], upper[j, i]) / (tl.cast(F64, N) - 1.0)
    return [cov]


def _covariance_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
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
    # C sets corr[i][i] = 1, computes corr[i][j] for j > i and copies it to corr[j][i]
    upper = _triangle_products("dtd", N, lambda i, j, k: dn[k, i] * dn[k, j], upper=True,
                               diagonal=False)
    corr[i, j] = tl.where(i == j, 1.0, tl.where(j > i, upper[i, j], upper[j, i]))
    return [corr]


def _correlation_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    data = a["data"]
    n = float(data.shape[0])
    mean = data.sum(axis=0) / n
    sd = np.sqrt(((data - mean) ** 2).sum(axis=0) / n)
    sd = np.where(sd <= EPS, 1.0, sd)
    dn = (data - mean) / (np.sqrt(n) * sd)
    corr = dn.T @ dn
    np.fill_diagonal(corr, 1.0)
    return [corr]


# -- linear-algebra/blas: triangular and symmetric ---------------------------------------------
# The C loops touch one triangle: RDoms restricted with r.where run exactly those points.
def _symm() -> list[tl.Func]:
    M, N = tl.sizes("M N")
    C, A, B = tl.Input("C", (M, N), F64), tl.Input("A", (M, M), F64), tl.Input("B", (M, N), F64)
    i, j = tl.vars("i j")
    lo = tl.RDom((0, M), name="lo")  # A holds the lower triangle of a symmetric matrix:
    lo.where(lo.x <= i)  # row i of it is A[i, k] for k <= i ...
    up = tl.RDom((0, M), name="up")
    up.where(up.x > i)  # ... and A[k, i] for k > i
    out = tl.Func("symm")
    out[i, j] = BETA * C[i, j] + ALPHA * (tl.sum(A[i, lo] * B[lo, j])
                                          + tl.sum(A[up, i] * B[up, j]))
    return [out]


def _symm_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    sym = np.tril(a["A"]) + np.tril(a["A"], -1).T
    return [BETA * a["C"] + ALPHA * (sym @ a["B"])]


def _triangle_products(name: str, depth: tl.Size, value, upper: bool = False,
                       diagonal: bool = True) -> tl.Func:
    """``name[i, j] = sum_k value(i, j, k)`` for ``k < depth`` over one triangle only, as C's
    loops (``j <= i``; ``upper``: ``j >= i``; without the ``diagonal``: strict): the points
    outside it keep the sum's identity. A GEMM-like stage whose tiles outside the triangle the
    rule-based schedule does not run."""
    i, j = tl.vars("i j")
    k = tl.RDom((0, depth), name="k")
    if upper:
        k.where(j >= i if diagonal else j > i)
    else:
        k.where(j <= i if diagonal else j < i)
    f = tl.Func(name)
    f[i, j] = tl.sum(value(i, j, k))
    return f


def _syrk() -> list[tl.Func]:
    N, M = tl.sizes("N M")
    C, A = tl.Input("C", (N, N), F64), tl.Input("A", (N, M), F64)
    i, j = tl.vars("i j")
    out = tl.Func("syrk", shape=(N, N))  # the lower triangle is updated, the upper one kept
    out[i, j] = C[i, j]
    t = tl.RDom((0, N), (0, N), name="t")  # j, i
    t.where(t.x <= t.y)
    # A A^T over the triangle: a GEMM-like stage whose tiles above the diagonal are skipped
    aat = _triangle_products("aat", M, lambda i, j, k: A[i, k] * A[j, k])
    out[t.y, t.x] = BETA * out[t.y, t.x] + ALPHA * aat[t.y, t.x]
    return [out]


def _syr2k() -> list[tl.Func]:
    N, M = tl.sizes("N M")
    C, A, B = tl.Input("C", (N, N), F64), tl.Input("A", (N, M), F64), tl.Input("B", (N, M), F64)
    i, j = tl.vars("i j")
    out = tl.Func("syr2k", shape=(N, N))
    out[i, j] = C[i, j]
    t = tl.RDom((0, N), (0, N), name="t")
    t.where(t.x <= t.y)
    ab = _triangle_products("abt", M, lambda i, j, k: A[j, k] * B[i, k] + B[j, k] * A[i, k])
    out[t.y, t.x] = BETA * out[t.y, t.x] + ALPHA * ab[t.y, t.x]
    return [out]


def _lower(a: np.ndarray, new: np.ndarray) -> np.ndarray:
    return np.where(np.tri(*a.shape, dtype=bool), new, a)


def _trmm() -> list[tl.Func]:
    M, N = tl.sizes("M N")
    A, B = tl.Input("A", (M, M), F64), tl.Input("B", (M, N), F64)
    i, j = tl.vars("i j")
    k = tl.RDom((0, M), name="k")
    k.where(k.x > i)  # B := alpha * A^T B, A unit lower triangular
    out = tl.Func("trmm")
    out[i, j] = ALPHA * (B[i, j] + tl.sum(A[k, i] * B[k, j]))
    return [out]


# -- linear-algebra/solvers ---------------------------------------------------------------------
def _trisolv() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    L, b = tl.Input("L", (N, N), F64), tl.Input("b", (N,), F64)
    (i,) = tl.vars("i")
    x = tl.Func("trisolv", shape=(N,))
    x[i] = b[i]
    r = tl.RDom((0, N), (0, N))  # r.x = j (inner), r.y = i: forward substitution, in order
    r.where(r.x <= r.y)
    j, row = r.x, r.y
    x[row] = tl.where(j < row, x[row] - L[row, j] * x[j], x[row] / L[row, row])
    return [x]


def _trisolv_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    L, x = a["L"], a["b"].copy()
    for i in range(len(x)):
        x[i] = (x[i] - L[i, :i] @ x[:i]) / L[i, i]
    return [x]


def _trisolv_inputs(s: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = s["N"]  # well conditioned: a dominant diagonal, as PolyBench's init_array makes it
    return {"L": np.tril(rng.random((n, n))) + n * np.eye(n), "b": rng.random(n)}


def _gramschmidt() -> list[tl.Func]:
    M, N = tl.sizes("M N")
    A = tl.Input("A", (M, N), F64)
    c, x, y, i0, j0 = tl.vars("c x y i j")
    # The C code's three arrays, each stored transposed (column j of A at row j), as the planes
    # of one buffer: A at plane 0, Q at 1 (A[i][j] at [0, j, base + i]), R at 2 (R[k][j] at
    # [2, j, k]). Transposed, the C code's inner loops over i read and write contiguous rows.
    base = M + 1  # A's and Q's rows start here: every read of the update stays in the buffer
    g = tl.Func("qr", shape=(3, N, 3 * M + N + 2))
    g[c, y, x] = tl.where(c == 0, tl.constant_exterior(A, 0.0)[x - base, y], 0.0)
    # One update over the C loops' points, k outermost, then j >= k; for each, i in two phases
    # along one RDom dimension: i <= M (phase 0) and i > M (phase 1, row i - M - 1). For
    # j == k, phase 0 sums the norm of column k over i < M and takes its square root at
    # i == M, phase 1 writes Q's column k; for each j > k (skipping i == M), phase 0 sums
    # R[k][j] = Q[:, k] . A[:, j], phase 1 does A[:, j] -= Q[:, k] R[k][j]. With the phases
    # along i, each phase-0 sum accumulates into one cell over a range of i (an atomic()
    # update's reduction: schedule/cell_reduction.py).
    d = tl.RDom((0, 2 * M + 1), (0, N), (0, N))  # i, j, k
    i, j, k = d.x, d.y, d.z
    d.where((j >= k) & ((i != M) | (j == k)))
    first = i <= M
    r_kj, q_ik, a_ij = g[2, j, k], g[1, k, base + i], g[0, j, base + i]
    norm = tl.where(i == M, tl.sqrt(r_kj), r_kj + a_ij * a_ij)
    dot = tl.where(i == 0, 0.0, r_kj) + q_ik * a_ij  # R[k][j] = 0 before its sum
    a_row, q_row = g[0, j, i], g[1, k, i]  # row i - M - 1 in phase 1
    second = tl.where(j == k, a_row / g[2, k, k], a_row - q_row * r_kj)
    plane = tl.where(first, 2, tl.where(j == k, 1, 0))
    g[plane, j, tl.where(first, k, i)] = tl.where(first, tl.where(j == k, norm, dot), second)
    outs = []
    for name, plane_of, rows in (("A", 0, M), ("R", 2, N), ("Q", 1, M)):
        o = tl.Func(f"gramschmidt_{name}", shape=(rows, N))
        o[i0, j0] = g[plane_of, j0, i0 + (base if plane_of < 2 else 0)]
        outs.append(o)
    return outs


def _gramschmidt_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    A = a["A"].copy()
    m, n = A.shape
    R, Q = np.zeros((n, n)), np.zeros((m, n))
    for k in range(n):  # the C loops over i as vector operations, k and j as in C
        R[k, k] = np.sqrt(A[:, k] @ A[:, k])
        Q[:, k] = A[:, k] / R[k, k]
        R[k, k + 1:] = Q[:, k] @ A[:, k + 1:]
        A[:, k + 1:] -= np.outer(Q[:, k], R[k, k + 1:])
    return [A, R, Q]


# -- stencils: T time steps, the C code's two arrays as the two rows of one buffer --------------
def _jacobi_1d() -> list[tl.Func]:
    N, T = tl.sizes("N T")
    A, B = tl.Input("A", (N,), F64), tl.Input("B", (N,), F64)
    p, i = tl.vars("p i")
    buf = tl.Func("buf", shape=(2, N))  # buf[0] is A, buf[1] is B
    buf[p, i] = tl.where(p == 0, A[i], B[i])
    r = tl.RDom((1, N - 1), (0, 2), (0, T))  # x: i, y: which array is read, z: the time step
    buf[1 - r.y, r.x] = 0.33333 * (buf[r.y, r.x - 1] + buf[r.y, r.x] + buf[r.y, r.x + 1])
    out = tl.Func("jacobi_1d")
    out[i] = buf[0, i]
    return [out]


def _jacobi_1d_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    A, B = a["A"].copy(), a["B"].copy()
    for _ in range(s["T"]):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
    return [A]


def _jacobi_2d() -> list[tl.Func]:
    N, T = tl.sizes("N T")
    A, B = tl.Input("A", (N, N), F64), tl.Input("B", (N, N), F64)
    p, i, j = tl.vars("p i j")
    buf = tl.Func("buf", shape=(2, N, N))
    buf[p, i, j] = tl.where(p == 0, A[i, j], B[i, j])
    r = tl.RDom((1, N - 1), (1, N - 1), (0, 2), (0, T))  # j, i, read array, time step
    jj, ii, q = r.x, r.y, r.z
    buf[1 - q, ii, jj] = 0.2 * (buf[q, ii, jj] + buf[q, ii, jj - 1] + buf[q, ii, jj + 1]
                                + buf[q, ii + 1, jj] + buf[q, ii - 1, jj])
    out = tl.Func("jacobi_2d")
    out[i, j] = buf[0, i, j]
    return [out]


def _jacobi_2d_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    A, B = a["A"].copy(), a["B"].copy()
    for _ in range(s["T"]):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1]
                               + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1]
                               + B[:-2, 1:-1])
    return [A]


def _heat_3d() -> list[tl.Func]:
    N, T = tl.sizes("N T")
    A, B = tl.Input("A", (N, N, N), F64), tl.Input("B", (N, N, N), F64)
    p, i, j, k = tl.vars("p i j k")
    buf = tl.Func("buf", shape=(2, N, N, N))
    buf[p, i, j, k] = tl.where(p == 0, A[i, j, k], B[i, j, k])
    r = tl.RDom((1, N - 1), (1, N - 1), (1, N - 1), (0, 2), (0, T))  # k, j, i, read array, t
    kk, jj, ii, q = r[0], r[1], r[2], r[3]
    c = buf[q, ii, jj, kk]
    buf[1 - q, ii, jj, kk] = (
        0.125 * (buf[q, ii + 1, jj, kk] - 2.0 * c + buf[q, ii - 1, jj, kk])
        + 0.125 * (buf[q, ii, jj + 1, kk] - 2.0 * c + buf[q, ii, jj - 1, kk])
        + 0.125 * (buf[q, ii, jj, kk + 1] - 2.0 * c + buf[q, ii, jj, kk - 1]) + c)
    out = tl.Func("heat_3d")
    out[i, j, k] = buf[0, i, j, k]
    return [out]


def _heat_step(a: np.ndarray) -> np.ndarray:
    c = a[1:-1, 1:-1, 1:-1]
    return (0.125 * (a[2:, 1:-1, 1:-1] - 2.0 * c + a[:-2, 1:-1, 1:-1])
            + 0.125 * (a[1:-1, 2:, 1:-1] - 2.0 * c + a[1:-1, :-2, 1:-1])
            + 0.125 * (a[1:-1, 1:-1, 2:] - 2.0 * c + a[1:-1, 1:-1, :-2]) + c)


def _heat_3d_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    A, B = a["A"].copy(), a["B"].copy()
    for _ in range(s["T"]):
        B[1:-1, 1:-1, 1:-1] = _heat_step(A)
        A[1:-1, 1:-1, 1:-1] = _heat_step(B)
    return [A]


def _seidel_2d() -> list[tl.Func]:
    N, T = tl.sizes("N T")
    A = tl.Input("A", (N, N), F64)
    i, j = tl.vars("i j")
    out = tl.Func("seidel_2d", shape=(N, N))
    out[i, j] = A[i, j]
    r = tl.RDom((1, N - 1), (1, N - 1), (0, T))  # Gauss-Seidel in place: j, i, time step
    jj, ii = r.x, r.y
    out[ii, jj] = (out[ii - 1, jj - 1] + out[ii - 1, jj] + out[ii - 1, jj + 1]
                   + out[ii, jj - 1] + out[ii, jj] + out[ii, jj + 1]
                   + out[ii + 1, jj - 1] + out[ii + 1, jj] + out[ii + 1, jj + 1]) / 9.0
    return [out]


def _seidel_2d_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    # The C sweep, vectorized along the wavefronts 2i + j = w: a point reads the new values of
    # (i-1, j-1..j+1) and (i, j-1) (wavefronts w-3..w-1) and the old ones of (i, j+1) and row i+1
    # (w+1..w+3), so the points of one wavefront are independent and every read sees the value
    # the C loop order gives it.
    A = a["A"].copy()
    n = A.shape[0]
    fronts = []
    for w in range(3, 3 * (n - 2) + 1):
        i = np.arange(max(1, (w - n + 3) // 2), min(n - 2, (w - 1) // 2) + 1)
        j = w - 2 * i
        keep = (j >= 1) & (j <= n - 2)
        fronts.append((i[keep], j[keep]))
    for _ in range(s["T"]):
        for i, j in fronts:
            A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1] + A[i, j - 1] + A[i, j]
                       + A[i, j + 1] + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
    return [A]


def _adi_constants(n, t):
    """adi's coefficients a..f from N and TSTEPS, in the C code's order of operations (ints or
    size expressions)."""
    dx = 1.0 / n
    dy = 1.0 / n
    dt = 1.0 / t
    mul1 = 2.0 * dt / (dx * dx)
    mul2 = 1.0 * dt / (dy * dy)
    a = -mul1 / 2.0
    d = -mul2 / 2.0
    return a, 1.0 + mul1, a, d, 1.0 + mul2, d


def _adi() -> list[tl.Func]:
    N, T = tl.sizes("N T")
    u = tl.Input("u", (N, N), F64)
    a, b, c, d, e, f = _adi_constants(tl.cast(F64, N), tl.cast(F64, T))
    w, x, y = tl.vars("w x y")
    # p[i][j] does not depend on i or on the data: the same recurrence over j in every row and
    # time step, computed once per sweep (sweep 0: the column sweep's a, b, c; 1: the row
    # sweep's d, e, f) with the C code's operations, so with the same values
    p = tl.Func("p", shape=(2, N))
    p[w, y] = 0.0
    rp = tl.RDom((1, N - 1), (0, 2), name="rp")  # j, sweep
    pj, ps = rp.x, rp.y
    p[ps, pj] = -tl.where(ps == 0, c, f) / (
        tl.where(ps == 0, a, d) * p[ps, pj - 1] + tl.where(ps == 0, b, e))
    # u at plane 0, v transposed at plane 1 (v[j][i] at [1, i, j]), q at plane 2: transposed, v
    # is written and read the way u is, so sweep s reads plane s and writes plane 1 - s
    st = tl.Func("sweeps", shape=(3, N, N))
    st[w, x, y] = tl.where(w == 0, u[x, y], 0.0)
    r = tl.RDom((0, N), (0, 2), (1, N - 1), (0, 2), (0, T))  # j', phase, i, sweep, time step
    jf, ph, i, s = r.x, r.y, r.z, r.w
    r.where((ph == 1) | (jf < N - 1))
    rec_a, rec_b = tl.where(s == 0, a, d), tl.where(s == 0, b, e)
    st_d, st_f = tl.where(s == 0, d, a), tl.where(s == 0, f, c)
    jm = tl.maximum(jf - 1, 0)
    # phase 0, j' = j from 0 to N - 2: q (q[i][0] = 1.0: v[0][i], u[i][0])
    num = (-st_d * st[s, jf, i - 1] + (1.0 + 2.0 * st_d) * st[s, jf, i]
           - st_f * st[s, jf, i + 1] - rec_a * st[2, i, jm])
    forward = tl.where(jf == 0, 1.0, num / (rec_a * p[s, jm] + rec_b))
    # phase 1, j = N - 1 - j' from N - 1 down to 0: the boundary 1.0 at both ends, else the
    # back substitution
    jb = N - 1 - jf
    back = tl.where((jb == N - 1) | (jb == 0), 1.0,
                    p[s, jb] * st[1 - s, i, tl.minimum(jb + 1, N - 1)] + st[2, i, jb])
    st[tl.where(ph == 0, 2, 1 - s), i, tl.where(ph == 0, jf, jb)] = tl.where(ph == 0, forward,
                                                                           back)
    out = tl.Func("adi", shape=(N, N))
    out[x, y] = st[0, x, y]
    return [out]


def _adi_np(arr: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    n, steps = s["N"], s["T"]
    a, b, c, d, e, f = _adi_constants(n, steps)
    u = arr["u"].copy()
    v, p, q = np.zeros_like(u), np.zeros_like(u), np.zeros_like(u)
    ii = slice(1, n - 1)  # the C loops over i as vector operations
    for _ in range(steps):
        v[0, ii] = 1.0
        p[ii, 0] = 0.0
        q[ii, 0] = v[0, ii]
        for j in range(1, n - 1):
            p[ii, j] = -c / (a * p[ii, j - 1] + b)
            q[ii, j] = (-d * u[j, :n - 2] + (1.0 + 2.0 * d) * u[j, ii] - f * u[j, 2:]
                       - a * q[ii, j - 1]) / (a * p[ii, j - 1] + b)
        v[n - 1, ii] = 1.0
        for j in range(n - 2, 0, -1):
            v[j, ii] = p[ii, j] * v[j + 1, ii] + q[ii, j]
        u[ii, 0] = 1.0
        p[ii, 0] = 0.0
        q[ii, 0] = u[ii, 0]
        for j in range(1, n - 1):
            p[ii, j] = -f / (d * p[ii, j - 1] + e)
            q[ii, j] = (-a * v[:n - 2, j] + (1.0 + 2.0 * a) * v[ii, j] - c * v[2:, j]
                       - d * q[ii, j - 1]) / (d * p[ii, j - 1] + e)
        u[ii, n - 1] = 1.0
        for j in range(n - 2, 0, -1):
            u[ii, j] = p[ii, j] * u[ii, j + 1] + q[ii, j]
    return [u]


# -- medley -------------------------------------------------------------------------------------
def _floyd_warshall() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    path = tl.Input("path", (N, N), tl.int32)  # PolyBench's DATA_TYPE for this kernel is int
    i, j = tl.vars("i j")
    out = tl.Func("floyd_warshall", shape=(N, N))
    out[i, j] = path[i, j]
    r = tl.RDom((0, N), (0, N), (0, N))  # j, i, k: k outermost, in place
    jj, ii, kk = r.x, r.y, r.z
    out[ii, jj] = tl.minimum(out[ii, jj], out[ii, kk] + out[kk, jj])
    return [out]


def _floyd_warshall_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    p = a["path"].copy()
    for k in range(p.shape[0]):
        # row k and column k do not change in step k (p[k, k] >= 0), so one vector step is the
        # C loop over i and j
        np.minimum(p, p[:, k, None] + p[None, k, :], out=p)
    return [p]


def _lu_update(name: str, A: tl.Input, N: tl.Size) -> tl.Func:
    """Doolittle LU in place, the C loops as one update (k innermost, then j, i) over the points
    they run: k < j with a division at k == j left of the diagonal, k < i on and right of it —
    together ``k < i and k <= j``."""
    i, j = tl.vars("i j")
    lu = tl.Func(name, shape=(N, N))
    lu[i, j] = A[i, j]
    r = tl.RDom((0, N), (0, N), (0, N))
    k, jj, ii = r.x, r.y, r.z
    r.where((k < ii) & (k <= jj))
    lu[ii, jj] = tl.where(k == jj, lu[ii, jj] / lu[jj, jj], lu[ii, jj] - lu[ii, k] * lu[k, jj])
    return lu


def _lu() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    return [_lu_update("lu", tl.Input("A", (N, N), F64), N)]


def _lu_np_matrix(A: np.ndarray) -> np.ndarray:
    # right-looking elimination: the same L and U as the C (Doolittle) loops, up to rounding
    A = A.copy()
    for k in range(A.shape[0]):
        A[k + 1:, k] /= A[k, k]
        A[k + 1:, k + 1:] -= np.outer(A[k + 1:, k], A[k, k + 1:])
    return A


def _spd(s: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = s["N"]  # symmetric positive definite, as PolyBench's init_array makes it (B B^T)
    b = rng.random((n, n))
    return {"A": b @ b.T / n + np.eye(n)}


def _cholesky() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), F64)
    i, j = tl.vars("i j")
    ch = tl.Func("cholesky", shape=(N, N))
    ch[i, j] = A[i, j]  # the strict upper triangle is left as it was
    r = tl.RDom((0, N), (0, N), (0, N))  # k, j, i over the C loops' points: k <= j <= i
    k, jj, ii = r.x, r.y, r.z
    r.where((jj <= ii) & (k <= jj))
    last = tl.where(jj == ii, tl.sqrt(ch[ii, jj]), ch[ii, jj] / ch[jj, jj])
    ch[ii, jj] = tl.where(k < jj, ch[ii, jj] - ch[ii, k] * ch[jj, k], last)
    return [ch]


def _ludcmp() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    A, b = tl.Input("A", (N, N), F64), tl.Input("b", (N,), F64)
    (i,) = tl.vars("i")
    lu = _lu_update("lu", A, N)
    y = tl.Func("y", shape=(N,))  # forward substitution with the unit lower triangle
    y[i] = b[i]
    s = tl.RDom((0, N), (0, N), name="s")  # j, i
    s.where(s.x < s.y)
    y[s.y] = y[s.y] - lu[s.y, s.x] * y[s.x]
    x = tl.Func("ludcmp", shape=(N,))  # back substitution, rows from the last
    x[i] = y[i]
    t = tl.RDom((0, N), (0, N), name="t")  # j, N - 1 - i
    row = N - 1 - t.y
    t.where(t.x >= row)  # j from i (nothing to subtract) to N - 1 (then divide)
    val = tl.where(t.x > row, x[row] - lu[row, t.x] * x[t.x], x[row])
    x[row] = tl.where(t.x == N - 1, val / lu[row, row], val)
    return [x]


def _ludcmp_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    lu = _lu_np_matrix(a["A"])
    n = len(lu)
    y = a["b"].copy()
    for i in range(n):
        y[i] -= lu[i, :i] @ y[:i]
    x = y.copy()
    for i in range(n - 1, -1, -1):
        x[i] = (x[i] - lu[i, i + 1:] @ x[i + 1:]) / lu[i, i]
    return [x]



def _durbin() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    r = tl.Input("r", (N,), F64)
    kv, c = tl.vars("k c")
    # One update over (i, k) carries the C code's state in two rows, step k's at row k % 2:
    # its running sum at column 0, beta at 1, y[c] at base + c. Per step k, i < k sums r[k - i
    # - 1] y[i] (one cell: an atomic() update's reduction, schedule/cell_reduction.py), i == k
    # takes beta, then i = base + c (c <= k) writes y[c] from the previous row (the C code's
    # z, without a copy). The offset base keeps every read inside the buffer.
    base = N + 1
    st = tl.Func("state", shape=(2, 3 * N + 3))
    st[kv, c] = tl.where(kv == 0, tl.where(c == base, -r[0], tl.where(c == 1, 1.0, 0.0)), 0.0)
    d = tl.RDom((0, 2 * N + 2), (1, N))  # i, k
    i, k = d.x, d.y
    d.where((i <= k) | ((i >= base) & (i - base <= k)))
    cur, prev = k % 2, (k + 1) % 2
    rk = tl.constant_exterior(r, 0.0)
    alpha_prev = st[prev, base + k - 1]  # y[k - 1] after step k - 1
    beta = (1.0 - alpha_prev * alpha_prev) * st[prev, 1]
    running = tl.where(i == 0, 0.0, st[cur, 0]) + rk[k - i - 1] * st[prev, base + i]
    alpha = -(r[k] + st[cur, 0]) / st[cur, 1]
    c1 = i - base  # phase 1: y's index
    y = tl.where(c1 < k, st[prev, i] + alpha * st[prev, base + k - c1 - 1], alpha)
    first = i <= k
    st[cur, tl.where(first, tl.where(i < k, 0, 1), i)] = \
        tl.where(first, tl.where(i < k, running, beta), y)
    out = tl.Func("durbin", shape=(N,))
    out[c] = st[(N - 1) % 2, base + c]
    return [out]


def _durbin_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    r = a["r"]
    y = np.zeros_like(r)
    y[0] = alpha = -r[0]
    beta = 1.0
    for k in range(1, len(r)):
        beta = (1 - alpha * alpha) * beta
        alpha = -(r[k] + r[:k][::-1] @ y[:k]) / beta
        y[:k] = y[:k] + alpha * y[:k][::-1]
        y[k] = alpha
    return [y]


# -- medley: nussinov, deriche ------------------------------------------------------------------
def _nussinov() -> list[tl.Func]:
    (N,) = tl.sizes("N")
    seq = tl.Input("seq", (N,), tl.int32)  # bases 0..3; PolyBench's DATA_TYPE here is int
    i, j = tl.vars("i j")
    # table[i][j] lives at P[i, j + 1]: row N and column 0 are a zero border, so the reads of
    # table[i + 1][.] and table[.][j - 1] stay inside P
    P = tl.Func("table", shape=(N + 1, N + 1), dtype=tl.int32)
    P[i, j] = tl.cast(tl.int32, 0)
    r = tl.RDom((0, N), (0, N), (0, N))  # k, j, N - 1 - i (i runs downwards)
    k, jj = r.x, r.y
    ii = N - 1 - r.z
    r.where((jj > ii) & (k >= ii) & (k < jj))  # k == i: the neighbour terms; then k in (i, j)
    cur = P[ii, jj + 1]
    match = tl.where(seq[ii] + seq[jj] == 3, 1, 0)
    first = tl.maximum(tl.maximum(cur, P[ii, jj]), tl.maximum(
        P[ii + 1, jj + 1], P[ii + 1, jj] + tl.where(ii < jj - 1, match, 0)))
    split = tl.maximum(cur, P[ii, k + 1] + P[k + 1, jj + 1])
    P[ii, jj + 1] = tl.where(k == ii, first, split)
    out = tl.Func("nussinov", shape=(N, N))
    out[i, j] = P[i, j + 1]
    return [out]


def _nussinov_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    seq = a["seq"]
    n = len(seq)
    t = np.zeros((n, n), np.int32)
    for i in range(n - 2, -1, -1):
        for j in range(i + 1, n):
            m = int(seq[i] + seq[j] == 3) if i < j - 1 else 0
            v = max(t[i, j], t[i, j - 1], t[i + 1, j], t[i + 1, j - 1] + m)
            if j > i + 1:  # the k loop, as one vector max
                v = max(v, int((t[i, i + 1:j] + t[i + 2:j + 1, j]).max()))
            t[i, j] = v
    return [t]


F32 = tl.float32
_DA = 0.25  # deriche's alpha, and its coefficients as the C code derives them
_DK = (1 - math.exp(-_DA)) ** 2 / (1 + 2 * _DA * math.exp(-_DA) - math.exp(2 * _DA))
_D1 = _DK
_D2 = _DK * math.exp(-_DA) * (_DA - 1)
_D3 = _DK * math.exp(-_DA) * (_DA + 1)
_D4 = -_DK * math.exp(-2 * _DA)
_B1 = 2.0 ** -_DA
_B2 = -math.exp(-2 * _DA)


def _deriche() -> list[tl.Func]:
    W, H = tl.sizes("W H")
    img = tl.Input("imgIn", (W, H), F32)  # PolyBench's DATA_TYPE for deriche is float
    i, j = tl.vars("i j")
    pad = tl.constant_exterior(img, 0.0)
    # causal and anti-causal recursive filters along j (rows), as scans over an RDom
    y1 = tl.Func("y1", shape=(W, H))
    y1[i, j] = _D1 * img[i, j] + _D2 * pad[i, j - 1]
    r = tl.RDom((1, 2), name="r")
    y1[i, r] = y1[i, r] + _B1 * y1[i, r - 1]
    r2 = tl.RDom((2, H), name="r2")
    y1[i, r2] = y1[i, r2] + _B1 * y1[i, r2 - 1] + _B2 * y1[i, r2 - 2]
    y2 = tl.Func("y2", shape=(W, H))
    y2[i, j] = _D3 * pad[i, j + 1] + _D4 * pad[i, j + 2]
    q = tl.RDom((H - 2, H - 1), name="q")
    y2[i, q] = y2[i, q] + _B1 * y2[i, q + 1]
    q2 = tl.RDom((0, H - 2), name="q2")
    jb = H - 3 - q2
    y2[i, jb] = y2[i, jb] + _B1 * y2[i, jb + 1] + _B2 * y2[i, jb + 2]
    mid = tl.Func("rows")
    mid[i, j] = y1[i, j] + y2[i, j]
    # the same two filters along i (columns) of the row-filtered image
    mpad = tl.constant_exterior(mid, 0.0)
    z1 = tl.Func("z1", shape=(W, H))
    z1[i, j] = _D1 * mid[i, j] + _D2 * mpad[i - 1, j]
    c = tl.RDom((1, 2), name="c")
    z1[c, j] = z1[c, j] + _B1 * z1[c - 1, j]
    c2 = tl.RDom((2, W), name="c2")
    z1[c2, j] = z1[c2, j] + _B1 * z1[c2 - 1, j] + _B2 * z1[c2 - 2, j]
    z2 = tl.Func("z2", shape=(W, H))
    z2[i, j] = _D3 * mpad[i + 1, j] + _D4 * mpad[i + 2, j]
    d = tl.RDom((W - 2, W - 1), name="d")
    z2[d, j] = z2[d, j] + _B1 * z2[d + 1, j]
    d2 = tl.RDom((0, W - 2), name="d2")
    ib = W - 3 - d2
    z2[ib, j] = z2[ib, j] + _B1 * z2[ib + 1, j] + _B2 * z2[ib + 2, j]
    out = tl.Func("deriche")
    out[i, j] = z1[i, j] + z2[i, j]
    return [out]


def _deriche_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    def causal(x: np.ndarray) -> np.ndarray:  # along axis 1, float32 like the C code
        y = np.zeros_like(x)
        xm1 = np.zeros(x.shape[0], x.dtype)
        ym1, ym2 = xm1.copy(), xm1.copy()
        for j in range(x.shape[1]):
            y[:, j] = _D1 * x[:, j] + _D2 * xm1 + _B1 * ym1 + _B2 * ym2
            xm1, ym2, ym1 = x[:, j], ym1, y[:, j]
        return y

    def anticausal(x: np.ndarray) -> np.ndarray:
        y = np.zeros_like(x)
        z = np.zeros(x.shape[0], x.dtype)
        xp1, xp2, yp1, yp2 = z, z, z, z
        for j in range(x.shape[1] - 1, -1, -1):
            y[:, j] = _D3 * xp1 + _D4 * xp2 + _B1 * yp1 + _B2 * yp2
            xp2, xp1, yp2, yp1 = xp1, x[:, j], yp1, y[:, j]
        return y

    img = a["imgIn"]
    mid = causal(img) + anticausal(img)
    midt = np.ascontiguousarray(mid.T)
    return [(causal(midt) + anticausal(midt)).T]


# -- stencils: fdtd-2d --------------------------------------------------------------------------
def _fdtd_2d() -> list[tl.Func]:
    T, NX, NY = tl.sizes("T NX NY")
    ex, ey, hz = (tl.Input(n, (NX, NY), F64) for n in ("ex", "ey", "hz"))
    fict = tl.Input("fict", (T,), F64)
    c, i, j = tl.vars("c i j")
    # the three fields (ey, ex, hz: the order the C code updates them) as one buffer with a
    # border of one cell on each side, so that every read of the three statements stays inside
    g = tl.Func("fields", shape=(3, NX + 2, NY + 2))
    g[c, i, j] = tl.where(c == 0, tl.constant_exterior(ey, 0.0)[i - 1, j - 1],
                          tl.where(c == 1, tl.constant_exterior(ex, 0.0)[i - 1, j - 1],
                                   tl.constant_exterior(hz, 0.0)[i - 1, j - 1]))
    r = tl.RDom((0, NY), (0, NX), (0, 3), (0, T))  # j, i, which field, time step
    jj, ii, f, t = r.x, r.y, r.z, r.w
    I, J = ii + 1, jj + 1
    ey_new = tl.where(ii == 0, fict[t], g[0, I, J] - 0.5 * (g[2, I, J] - g[2, I - 1, J]))
    ex_new = tl.where(jj >= 1, g[1, I, J] - 0.5 * (g[2, I, J] - g[2, I, J - 1]), g[1, I, J])
    hz_new = tl.where((ii < NX - 1) & (jj < NY - 1), g[2, I, J] - 0.7 * (
        g[1, I, J + 1] - g[1, I, J] + g[0, I + 1, J] - g[0, I, J]), g[2, I, J])
    g[f, I, J] = tl.where(f == 0, ey_new, tl.where(f == 1, ex_new, hz_new))
    outs = [tl.Func(f"fdtd_2d_{n}", shape=(NX, NY)) for n in ("ey", "ex", "hz")]
    for k, o in enumerate(outs):  # the three live-out arrays
        o[i, j] = g[k, i + 1, j + 1]
    return outs


def _fdtd_2d_np(a: dict[str, np.ndarray], s: dict[str, int]) -> list[np.ndarray]:
    ex, ey, hz = a["ex"].copy(), a["ey"].copy(), a["hz"].copy()
    for t in range(s["T"]):
        ey[0, :] = a["fict"][t]
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1]
                                             - ey[:-1, :-1])
    return [ey, ex, hz]


KERNELS: dict[str, Kernel] = {k.name: k for k in [
    Kernel("gemm", _gemm, dict(NI=60, NJ=70, NK=80), dict(NI=1000, NJ=1100, NK=1200),
           lambda s, rng: _arrays(rng, C=(s["NI"], s["NJ"]), A=(s["NI"], s["NK"]),
                                  B=(s["NK"], s["NJ"])),
           lambda a, s: [BETA * a["C"] + ALPHA * (a["A"] @ a["B"])],
           lambda s: 2.0 * s["NI"] * s["NJ"] * s["NK"]),
    Kernel("2mm", _2mm, dict(NI=40, NJ=50, NK=70, NL=80),
           dict(NI=800, NJ=900, NK=1100, NL=1200),
           lambda s, rng: _arrays(rng, A=(s["NI"], s["NK"]), B=(s["NK"], s["NJ"]),
                                  C=(s["NJ"], s["NL"]), D=(s["NI"], s["NL"])),
           lambda a, s: [BETA * a["D"] + (ALPHA * (a["A"] @ a["B"])) @ a["C"]],
           lambda s: 2.0 * s["NI"] * s["NJ"] * (s["NK"] + s["NL"])),
    Kernel("3mm", _3mm, dict(NI=40, NJ=50, NK=60, NL=70, NM=80),
           dict(NI=800, NJ=900, NK=1000, NL=1100, NM=1200),
           lambda s, rng: _arrays(rng, A=(s["NI"], s["NK"]), B=(s["NK"], s["NJ"]),
                                  C=(s["NJ"], s["NM"]), D=(s["NM"], s["NL"])),
           lambda a, s: [(a["A"] @ a["B"]) @ (a["C"] @ a["D"])],
           lambda s: 2.0 * (s["NI"] * s["NJ"] * s["NK"] + s["NJ"] * s["NL"] * s["NM"]
                            + s["NI"] * s["NL"] * s["NJ"])),
    Kernel("atax", _atax, dict(M=116, N=124), dict(M=1900, N=2100),
           lambda s, rng: _arrays(rng, A=(s["M"], s["N"]), x=(s["N"],)),
           lambda a, s: [a["A"].T @ (a["A"] @ a["x"])],
           lambda s: 4.0 * s["M"] * s["N"]),
    Kernel("bicg", _bicg, dict(M=116, N=124), dict(M=1900, N=2100),
           lambda s, rng: _arrays(rng, A=(s["N"], s["M"]), p=(s["M"],), r=(s["N"],)),
           lambda a, s: [a["r"] @ a["A"], a["A"] @ a["p"]],
           lambda s: 4.0 * s["M"] * s["N"]),
    Kernel("mvt", _mvt, dict(N=120), dict(N=2000),
           lambda s, rng: _arrays(rng, A=(s["N"], s["N"]), x1=(s["N"],), x2=(s["N"],),
                                  y_1=(s["N"],), y_2=(s["N"],)),
           lambda a, s: [a["x1"] + a["A"] @ a["y_1"], a["x2"] + a["A"].T @ a["y_2"]],
           lambda s: 4.0 * s["N"] ** 2),
    Kernel("gemver", _gemver, dict(N=120), dict(N=2000),
           lambda s, rng: _arrays(rng, A=(s["N"], s["N"]),
                                  **{n: (s["N"],) for n in ("u1", "v1", "u2", "v2", "w", "x",
                                                            "y", "z")}),
           _gemver_np, lambda s: 10.0 * s["N"] ** 2),
    Kernel("gesummv", _gesummv, dict(N=90), dict(N=1300),
           lambda s, rng: _arrays(rng, A=(s["N"], s["N"]), B=(s["N"], s["N"]), x=(s["N"],)),
           lambda a, s: [ALPHA * (a["A"] @ a["x"]) + BETA * (a["B"] @ a["x"])],
           lambda s: 4.0 * s["N"] ** 2),
    Kernel("doitgen", _doitgen, dict(NQ=20, NR=25, NP=30), dict(NQ=140, NR=150, NP=160),
           lambda s, rng: _arrays(rng, A=(s["NR"], s["NQ"], s["NP"]), C4=(s["NP"], s["NP"])),
           lambda a, s: [a["A"] @ a["C4"]],
           lambda s: 2.0 * s["NR"] * s["NQ"] * s["NP"] ** 2),
    Kernel("covariance", _covariance, dict(M=80, N=100), dict(M=1200, N=1400),
           lambda s, rng: _arrays(rng, data=(s["N"], s["M"])), _covariance_np,
           lambda s: 2.0 * s["N"] * s["M"] ** 2),
    Kernel("correlation", _correlation, dict(M=80, N=100), dict(M=1200, N=1400),
           lambda s, rng: _arrays(rng, data=(s["N"], s["M"])), _correlation_np,
           lambda s: 2.0 * s["N"] * s["M"] ** 2),
    Kernel("symm", _symm, dict(M=60, N=80), dict(M=1000, N=1200),
           lambda s, rng: _arrays(rng, C=(s["M"], s["N"]), A=(s["M"], s["M"]),
                                  B=(s["M"], s["N"])),
           _symm_np, lambda s: 2.0 * s["M"] ** 2 * s["N"]),
    Kernel("syrk", _syrk, dict(M=60, N=80), dict(M=1000, N=1200),
           lambda s, rng: _arrays(rng, C=(s["N"], s["N"]), A=(s["N"], s["M"])),
           lambda a, s: [_lower(a["C"], BETA * a["C"] + ALPHA * (a["A"] @ a["A"].T))],
           lambda s: s["N"] ** 2 * s["M"]),
    Kernel("syr2k", _syr2k, dict(M=60, N=80), dict(M=1000, N=1200),
           lambda s, rng: _arrays(rng, C=(s["N"], s["N"]), A=(s["N"], s["M"]),
                                  B=(s["N"], s["M"])),
           lambda a, s: [_lower(a["C"], BETA * a["C"] + ALPHA * (a["B"] @ a["A"].T
                                                                + a["A"] @ a["B"].T))],
           lambda s: 2.0 * s["N"] ** 2 * s["M"]),
    Kernel("trmm", _trmm, dict(M=60, N=80), dict(M=1000, N=1200),
           lambda s, rng: _arrays(rng, A=(s["M"], s["M"]), B=(s["M"], s["N"])),
           lambda a, s: [ALPHA * (a["B"] + np.triu(a["A"].T, 1) @ a["B"])],
           lambda s: s["M"] ** 2 * s["N"]),
    Kernel("trisolv", _trisolv, dict(N=120), dict(N=2000), _trisolv_inputs, _trisolv_np,
           lambda s: s["N"] ** 2),
    # gramschmidt: PolyBench's M and N swapped (LARGE is M=1000, N=1200): with more columns
    # than rows the columns past the M-th are rounding noise, which no two summation orders
    # (C's and BLAS's) agree on; the operation count is the same
    Kernel("gramschmidt", _gramschmidt, dict(M=80, N=60), dict(M=1200, N=1000),
           lambda s, rng: _arrays(rng, A=(s["M"], s["N"])), _gramschmidt_np,
           lambda s: 2.0 * s["M"] * s["N"] ** 2),
    Kernel("jacobi-1d", _jacobi_1d, dict(N=120, T=40), dict(N=2000, T=500),
           lambda s, rng: _arrays(rng, A=(s["N"],), B=(s["N"],)), _jacobi_1d_np,
           lambda s: 6.0 * s["T"] * (s["N"] - 2)),
    Kernel("jacobi-2d", _jacobi_2d, dict(N=90, T=40), dict(N=1300, T=500),
           lambda s, rng: _arrays(rng, A=(s["N"], s["N"]), B=(s["N"], s["N"])), _jacobi_2d_np,
           lambda s: 10.0 * s["T"] * (s["N"] - 2) ** 2),
    Kernel("heat-3d", _heat_3d, dict(N=20, T=40), dict(N=40, T=100),
           lambda s, rng: _arrays(rng, A=(s["N"],) * 3, B=(s["N"],) * 3), _heat_3d_np,
           lambda s: 30.0 * s["T"] * (s["N"] - 2) ** 3, dataset="MEDIUM"),
    Kernel("seidel-2d", _seidel_2d, dict(N=120, T=40), dict(N=400, T=100),
           lambda s, rng: _arrays(rng, A=(s["N"], s["N"])), _seidel_2d_np,
           lambda s: 9.0 * s["T"] * (s["N"] - 2) ** 2, dataset="MEDIUM"),
    Kernel("adi", _adi, dict(N=60, T=40), dict(N=200, T=100),
           lambda s, rng: _arrays(rng, u=(s["N"], s["N"])), _adi_np,
           lambda s: 36.0 * s["T"] * (s["N"] - 2) ** 2, dataset="MEDIUM"),  # 18 per point, sweep
    Kernel("floyd-warshall", _floyd_warshall, dict(N=180), dict(N=500),
           lambda s, rng: {"path": rng.integers(1, 1000, (s["N"], s["N"])).astype(np.int32)},
           _floyd_warshall_np, lambda s: 2.0 * s["N"] ** 3, dataset="MEDIUM"),
    Kernel("lu", _lu, dict(N=120), dict(N=2000), _spd,
           lambda a, s: [_lu_np_matrix(a["A"])], lambda s: 2.0 * s["N"] ** 3 / 3),
    Kernel("cholesky", _cholesky, dict(N=120), dict(N=2000), _spd,
           lambda a, s: [np.tril(np.linalg.cholesky(a["A"])) + np.triu(a["A"], 1)],
           lambda s: s["N"] ** 3 / 3.0),
    Kernel("ludcmp", _ludcmp, dict(N=120), dict(N=2000),
           lambda s, rng: {**_spd(s, rng), "b": rng.random(s["N"])}, _ludcmp_np,
           lambda s: 2.0 * s["N"] ** 3 / 3 + 2.0 * s["N"] ** 2),
    Kernel("durbin", _durbin, dict(N=120), dict(N=2000),
           lambda s, rng: {"r": 0.5 * rng.random(s["N"]) / (1.0 + np.arange(s["N"]))},
           _durbin_np, lambda s: 2.0 * s["N"] ** 2),
    Kernel("nussinov", _nussinov, dict(N=180), dict(N=500),
           lambda s, rng: {"seq": rng.integers(0, 4, s["N"]).astype(np.int32)}, _nussinov_np,
           lambda s: s["N"] ** 3 / 6.0, dataset="MEDIUM"),
    Kernel("deriche", _deriche, dict(W=192, H=128), dict(W=4096, H=2160),
           lambda s, rng: {"imgIn": rng.random((s["W"], s["H"])).astype(np.float32)},
           _deriche_np, lambda s: 32.0 * s["W"] * s["H"]),
    Kernel("fdtd-2d", _fdtd_2d, dict(T=40, NX=60, NY=80), dict(T=500, NX=1000, NY=1200),
           lambda s, rng: {**_arrays(rng, ex=(s["NX"], s["NY"]), ey=(s["NX"], s["NY"]),
                                     hz=(s["NX"], s["NY"])),
                           "fict": np.arange(s["T"], dtype=np.float64)},
           _fdtd_2d_np, lambda s: 11.0 * s["T"] * s["NX"] * s["NY"]),
]}
