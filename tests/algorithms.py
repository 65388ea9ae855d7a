"""The algorithms the schedule tests use: matmul, batched matmul, blur, conv2d, softmax, layernorm.

Each builder returns ``(output Func, make_arrays(rng, size_scale) -> dict, extra Funcs by name)``.
"""

from __future__ import annotations

import numpy as np

import tensorlang as tl

AVX512 = "+avx,+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl"
#: LLVM feature strings of the CPUs ``autotune.cpu_model.DESCRIBED`` describes
FEATURES = {"haswell": "+avx,+avx2,+fma", "skylake-avx512": AVX512,
            "icelake-server": AVX512, "sapphirerapids": AVX512, "znver4": AVX512,
            "znver3": "+avx,+avx2,+fma", "znver5": AVX512}


def described_target(cpu: str):
    """A ``Target`` for the described CPU ``cpu`` (same triple as the host): tests of tile sizes
    pin one, so they hold on hosts with AVX2 only as on AVX-512 ones."""
    from tensorlang.backends.llvm.target import Target, host_target

    h = host_target()
    return Target(h.triple, cpu, FEATURES[cpu], h.llvm_version, h.llvmlite_version)


#: the described Zen 4: tests of which shapes take which form pin the CPU they were written for,
#: so that they hold on any host (this machine's own rules differ on a CPU without AVX-512: half
#: the lanes, half the registers); their kernels, compiled for this machine, run everywhere
ZEN4 = described_target("znver4")


def runnable(target):
    """``target`` where this CPU runs its code, else this CPU's own ``Target``: a kernel of a
    schedule made for a described CPU then runs (and is checked against NumPy) on any host. The
    loop nest is the same (lowering does not read the target); only the instructions differ, and
    those of an AVX-512 target are checked on hosts that have it."""
    from tensorlang.backends.llvm.target import host_target

    return host_target() if target.missing_features(host_target()) else target


def bicg():
    """PolyBench's bicg alone (no arrays): ``s[j] = r[i] * A[i, j]`` (a column reduction) and
    ``q[i] = A[i, j] * p[j]`` (a row reduction), float64, both reading ``A[i, j]``."""
    N, M = tl.sizes("N M")
    A = tl.Input("A", (N, M), tl.float64)
    p, r = tl.Input("p", (M,), tl.float64), tl.Input("r", (N,), tl.float64)
    i, j = tl.vars("i j")
    s, q = tl.Func("s"), tl.Func("q")
    s[j] = r[i] * A[i, j]
    q[i] = A[i, j] * p[j]
    return s, q


def gemm(dtype=tl.float32):
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` alone (no arrays), of ``dtype``."""
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), dtype), tl.Input("B", (K, N), dtype)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]
    return C


def max_plus(dtype=tl.float32):
    """``C[i, j] = max_k A[i, k] + B[k, j]`` (the tropical semiring's matmul) of ``dtype``, and
    its RDom: a reduction whose identity is not zero."""
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), dtype), tl.Input("B", (K, N), dtype)
    i, j = tl.vars("i j")
    rk = tl.RDom((0, K))
    C = tl.Func("C")
    C[i, j] = tl.max(A[i, rk] + B[rk, j])
    return C, rk


def assert_gemm_matches_numpy(kern, dtype, shapes, seed: int) -> None:
    """Call ``kern`` (compiled from ``gemm(dtype)``) on random operands of each ``(M, N, K)`` of
    ``shapes`` and compare with NumPy's ``a @ b`` (rtol 1e-10 in float64, 2e-4 in float32)."""
    rng = np.random.default_rng(seed)
    tol = 1e-10 if dtype is tl.float64 else 2e-4
    for m, n, k in shapes:
        a = rng.random((m, k)).astype(dtype.numpy)
        b = rng.random((k, n)).astype(dtype.numpy)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=tol)


def assert_a_point_of_the_space(output, sizes, target, s) -> dict:
    """Assert that the search space of ``output`` at ``sizes`` for ``target`` holds the
    schedule ``s`` (``SearchSpace.point`` finds decisions that sample it again, with the same
    stage signature); returns those decisions."""
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    space = SearchSpace(output, sizes, target)
    point = space.point(s)
    assert point is not None
    again = space.sample(optuna.trial.FixedTrial(point[0]))
    assert space.signature(again) == space.signature(s)
    return point[0]


def matmul():
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), tl.float32), tl.Input("B", (K, N), tl.float32)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]

    def arrays(rng, m, n, k_):
        return {"A": rng.random((m, k_), dtype=np.float32),
                "B": rng.random((k_, n), dtype=np.float32)}

    return C, arrays


def batch_matmul():
    Bt, M, N, K = tl.sizes("Bt M N K")
    A, B = tl.Input("A", (Bt, M, K), tl.float32), tl.Input("B", (Bt, K, N), tl.float32)
    b, i, j, k = tl.vars("b i j k")
    C = tl.Func("C")
    C[b, i, j] = A[b, i, k] * B[b, k, j]

    def arrays(rng, m, n, k_):
        return {"A": rng.random((2, m, k_), dtype=np.float32),
                "B": rng.random((2, k_, n), dtype=np.float32)}

    return C, arrays


def blur():
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float32)
    y, x = tl.vars("y x")
    bx = tl.Func("bx")
    bx[y, x] = (In[y, x - 1] + In[y, x] + In[y, x + 1]) / 3
    out = tl.Func("out")
    out[y, x] = (bx[y - 1, x] + bx[y, x] + bx[y + 1, x]) / 3

    def arrays(rng, m, n, k_):
        return {"In": rng.random((m + 2, n + 2), dtype=np.float32)}

    return out, arrays


def conv2d():
    Nb, CI, H, W, CO = tl.sizes("Nb CI H W CO")
    In = tl.Input("In", (Nb, CI, H, W), tl.float32)
    Wt = tl.Input("Wt", (CO, CI, 3, 3), tl.float32)
    n, co, y, x, ci, ry, rx = tl.vars("n co y x ci ry rx")
    pad = tl.Func("pad", shape=(Nb, CI, H, W))
    pad[n, ci, y, x] = In[n, ci, y, x]
    padded = tl.constant_exterior(pad, 0.0)
    O = tl.Func("O", shape=(Nb, CO, H, W))
    O[n, co, y, x] = padded[n, ci, y + ry - 1, x + rx - 1] * Wt[co, ci, ry, rx]

    def arrays(rng, m, n_, k_):
        return {"In": rng.random((1, 3, m, n_), dtype=np.float32),
                "Wt": rng.random((k_ % 4 + 1, 3, 3, 3), dtype=np.float32)}

    return O, arrays


def softmax():
    R, S = tl.sizes("R S")
    X = tl.Input("X", (R, S), tl.float32)
    i, j, k = tl.vars("i j k")
    mx = tl.Func("mx")
    mx[i] = tl.max(X[i, k])
    e = tl.Func("e")
    e[i, j] = tl.exp(X[i, j] - mx[i])
    sm = tl.Func("sm")
    sm[i] = e[i, k]
    out = tl.Func("softmax")
    out[i, j] = e[i, j] / sm[i]

    def arrays(rng, m, n, k_):
        return {"X": (rng.standard_normal((m, n)) * 3).astype(np.float32)}

    return out, arrays


def layernorm():
    R, S = tl.sizes("R S")
    X = tl.Input("X", (R, S), tl.float32)
    G, Bb = tl.Input("G", (S,), tl.float32), tl.Input("Bb", (S,), tl.float32)
    i, j, k = tl.vars("i j k")
    mean = tl.Func("mean")
    mean[i] = X[i, k] / tl.cast(tl.float32, S)
    var = tl.Func("var")
    var[i] = (X[i, k] - mean[i]) * (X[i, k] - mean[i]) / tl.cast(tl.float32, S)
    out = tl.Func("layernorm")
    out[i, j] = (X[i, j] - mean[i]) / tl.sqrt(var[i] + 1e-5) * G[j] + Bb[j]

    def arrays(rng, m, n, k_):
        return {"X": rng.standard_normal((m, n)).astype(np.float32),
                "G": rng.random(n, dtype=np.float32), "Bb": rng.random(n, dtype=np.float32)}

    return out, arrays


ALL = {"matmul": matmul, "batch_matmul": batch_matmul, "blur": blur, "conv2d": conv2d,
       "softmax": softmax, "layernorm": layernorm}


def scan():
    """Cumulative sum along x for every row (an update over an RDom), then a pointwise stage."""
    H, W = tl.sizes("H W")
    X = tl.Input("X", (H, W), tl.float32)
    y, x = tl.vars("y x")
    S = tl.Func("S")
    S[y, x] = X[y, x]
    r = tl.RDom((1, W))
    S[y, r] = S[y, r - 1] + X[y, r]
    out = tl.Func("scaled")
    out[y, x] = S[y, x] * 0.5

    def arrays(rng, m, n, k_):
        return {"X": rng.random((m, n), dtype=np.float32)}

    return out, arrays


ALL["scan"] = scan


def skewed():
    """F[x, y] = F[x - 1, y + 1] * 0.5 + Y[x, y] over an RDom: a recurrence along the
    anti-diagonal (one loop order runs it forwards, the interchange does not)."""
    H, W = tl.sizes("H W")
    Y = tl.Input("Y", (H, W), tl.float64)
    y, x = tl.vars("y x")
    F = tl.Func("F")
    F[y, x] = Y[y, x]
    r = tl.RDom((1, H), (0, W - 1))
    F[r.x, r.y] = F[r.x - 1, r.y + 1] * 0.5 + Y[r.x, r.y]
    return F, lambda rng, m, n: {"Y": rng.random((m, n))}


def triangular():
    """Row sums of the lower triangle (an ``RDom.where`` reduction whose bound moves with i),
    then a pointwise stage: random schedules move, split and unroll the bounded loop."""
    N, M = tl.sizes("N M")
    A = tl.Input("A", (N, M), tl.float32)
    (i,) = tl.vars("i")
    r = tl.RDom((0, M), name="r")
    r.where(r.x <= i)
    C = tl.Func("C")
    C[i] = tl.sum(A[i, r])
    out = tl.Func("tri_out")
    out[i] = C[i] * 2.0

    def arrays(rng, m, n, k_):
        return {"A": rng.random((m, n), dtype=np.float32)}

    return out, arrays


ALL["triangular"] = triangular


def trisolv():
    """PolyBench trisolv as one update over the triangle ``j <= i`` (forward substitution):
    a recurrence whose legal loop orders isl decides on the exact triangle."""
    (N,) = tl.sizes("N")
    L = tl.Input("L", (N, N), tl.float64)
    b = tl.Input("b", (N,), tl.float64)
    (i,) = tl.vars("i")
    X = tl.Func("X")
    X[i] = b[i]
    r = tl.RDom((0, N), (0, N), name="r")
    r.where(r.x <= r.y)
    X[r.y] = tl.where(r.x < r.y, X[r.y] - L[r.y, r.x] * X[r.x], X[r.y] / L[r.y, r.y])

    def arrays(rng, m, n, k_):
        return {"L": np.tril(rng.random((m, m))) + m * np.eye(m), "b": rng.random(m)}

    return X, arrays


ALL["trisolv"] = trisolv


def gather():
    """A lookup table read at clamped image values (a gather) feeding a 2x nearest-neighbour
    upsample (``y // 2`` reads): random schedules place the table stage and tile the upsample."""
    H, W = tl.sizes("H W")
    I = tl.Input("I", (H, W), tl.int32)
    T = tl.Input("T", (64,), tl.float32)
    y, x = tl.vars("y x")
    L = tl.Func("L")
    L[y, x] = T[tl.clamp(I[y, x], 0, 63)] + 1.0
    out = tl.Func("upsampled")
    out[y, x] = L[y // 2, x // 2] * 0.5

    def arrays(rng, m, n, k_):
        return {"I": rng.integers(-5, 70, (m, n)).astype(np.int32),
                "T": rng.random(64, dtype=np.float32)}

    return out, arrays


ALL["gather"] = gather


def cholesky():
    """PolyBench cholesky's C loops as one update over ``k <= j <= i`` (``A[i, j] -= A[i, k] *
    A[j, k]`` for ``k < j``, then the square root on the diagonal or the division by ``A[j, j]``
    at ``k == j``); returns the Func ``ch`` (``ch[i, j] = A[i, j]`` above the diagonal)."""
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    i, j = tl.vars("i j")
    ch = tl.Func("ch", shape=(N, N))
    ch[i, j] = A[i, j]
    r = tl.RDom((0, N), (0, N), (0, N))  # k, j, i: k <= j <= i
    k, jj, ii = r.x, r.y, r.z
    r.where((jj <= ii) & (k <= jj))
    last = tl.where(jj == ii, tl.sqrt(ch[ii, jj]), ch[ii, jj] / ch[jj, jj])
    ch[ii, jj] = tl.where(k < jj, ch[ii, jj] - ch[ii, k] * ch[jj, k], last)
    return ch


def lu(wrong_sign: bool = False):
    """PolyBench lu's Doolittle update over the C loops' points (k innermost, then j, i): the
    division by the pivot at ``k == j``, else ``A[i, j] -= A[i, k] * A[k, j]``; float64.
    ``wrong_sign``: ``+=`` instead, the same names and signature (a wrong kernel for tests of
    the verifier)."""
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N, N), tl.float64)
    i, j = tl.vars("i j")
    out = tl.Func("lu", shape=(N, N))
    out[i, j] = A[i, j]
    r = tl.RDom((0, N), (0, N), (0, N))  # k, j, i; k == j divides: a condition with 3 ranges
    k, jj, ii = r.x, r.y, r.z
    r.where((k < ii) & (k <= jj))
    product = out[ii, k] * out[k, jj]
    out[ii, jj] = tl.where(k == jj, out[ii, jj] / out[jj, jj],
                           out[ii, jj] + product if wrong_sign else out[ii, jj] - product)
    return out


def lu_loops(a: np.ndarray) -> np.ndarray:
    """``lu()``'s result by the C loops, one scalar at a time."""
    a = a.copy()
    n = len(a)
    for i in range(n):
        for j in range(n):
            for k in range(min(i, j + 1)):
                a[i, j] = a[i, j] / a[j, j] if k == j else a[i, j] - a[i, k] * a[k, j]
    return a
