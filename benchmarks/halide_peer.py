"""Halide's Adams2019 autoscheduler on the tuning benchmark's workloads (a peer, when the
``halide`` PyPI package is installed: ``pip install halide``).

Each workload is written in Halide the way its documentation does (x innermost, estimates for
every dimension), scheduled by ``Pipeline.apply_autoscheduler(target, AutoschedulerParams(
"Adams2019", {"parallelism": cores}))`` with the package's default cost-model weights,
JIT-compiled for the host, checked against NumPy, and timed realizing into a preallocated output
(the same ``out=`` convention as the tensorlang column). Run alone:
``python benchmarks/halide_peer.py [--quick]``.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import median_seconds  # noqa: E402


def available() -> bool:
    try:
        import halide  # noqa: F401
    except ImportError:
        return False
    return True


def _setup(name: str, sizes: dict[str, int], arrays: dict[str, np.ndarray]
           ) -> tuple[Callable[[], None], np.ndarray]:
    """(run, out): ``run()`` realizes the autoscheduled pipeline into ``out``."""
    import halide as hl

    lib = os.path.join(os.path.dirname(hl.__file__), "lib64", "libautoschedule_adams2019.so")
    hl.load_plugin(lib if os.path.exists(lib) else "autoschedule_adams2019")
    x, y, c, n = hl.Var("x"), hl.Var("y"), hl.Var("c"), hl.Var("n")
    bufs = {k: hl.Buffer(np.ascontiguousarray(v)) for k, v in arrays.items()}
    if name == "gemm":
        m, nn, k = sizes["M"], sizes["N"], sizes["K"]
        A, B = bufs["A"], bufs["B"]  # Halide dims: (k, i) and (j, k)
        r = hl.RDom([(0, k)])
        C = hl.Func("C")
        C[x, y] = hl.f32(0)
        C[x, y] += A[r.x, y] * B[x, r.x]
        C.set_estimates([(0, nn), (0, m)])
        out = np.empty((m, nn), np.float32)
    elif name == "blur":
        h, w = sizes["H"] - 2, sizes["W"] - 2
        In = bufs["In"]
        bx, by = hl.Func("bx"), hl.Func("by")
        third = hl.f32(1 / 3)
        bx[x, y] = (In[x, y] + In[x + 1, y] + In[x + 2, y]) * third
        by[x, y] = (bx[x, y] + bx[x, y + 1] + bx[x, y + 2]) * third
        C = by
        C.set_estimates([(0, w), (0, h)])
        out = np.empty((h, w), np.float32)
    elif name == "softmax":
        rows, cols = sizes["R"], sizes["S"]
        X = bufs["X"]
        r = hl.RDom([(0, cols)])
        mx, e, sm, C = hl.Func("mx"), hl.Func("e"), hl.Func("sm"), hl.Func("softmax")
        mx[y] = hl.maximum(X[r.x, y])
        e[x, y] = hl.exp(X[x, y] - mx[y])
        sm[y] = hl.sum(e[r.x, y])
        C[x, y] = e[x, y] / sm[y]
        C.set_estimates([(0, cols), (0, rows)])
        out = np.empty((rows, cols), np.float32)
    elif name == "conv2d":
        nb, ci, co, h, w = sizes["Nb"], sizes["CI"], sizes["CO"], sizes["H"], sizes["W"]
        In, Wt = bufs["In"], bufs["Wt"]  # (x, y, ci, n) and (rx, ry, ci, co)
        pad = hl.BoundaryConditions.constant_exterior(In, hl.f32(0))
        r = hl.RDom([(0, 3), (0, 3), (0, ci)])
        C = hl.Func("conv")
        C[x, y, c, n] = hl.f32(0)
        C[x, y, c, n] += pad[x + r.x - 1, y + r.y - 1, r.z, n] * Wt[r.x, r.y, r.z, c]
        C.set_estimates([(0, w), (0, h), (0, co), (0, nb)])
        out = np.empty((nb, co, h, w), np.float32)
    else:
        raise KeyError(name)
    p = hl.Pipeline(C)
    target = hl.get_jit_target_from_environment()
    p.apply_autoscheduler(target, hl.AutoschedulerParams(
        "Adams2019", {"parallelism": str(os.cpu_count() or 1)}))
    p.compile_jit(target)
    ob = hl.Buffer(out)

    def run() -> None:
        p.realize(ob)
    return run, out


def halide_seconds(name: str, sizes: dict[str, int], arrays: dict[str, np.ndarray],
                   expected: np.ndarray) -> float:
    """Median seconds of the Adams2019-scheduled Halide pipeline (checked against
    ``expected``)."""
    run, out = _setup(name, sizes, arrays)
    run()
    np.testing.assert_allclose(out, expected, rtol=2e-3, atol=1e-3)
    return median_seconds(run)


def main() -> None:
    import argparse

    from tuning import workloads

    from tensorlang.autotuner.measure import random_inputs
    from tensorlang.autotuner.workloads import input_shapes
    from tensorlang.pipeline import Pipeline

    ap = argparse.ArgumentParser(description="Halide Adams2019 vs NumPy, same run")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workloads", default="gemm,blur,softmax,conv2d")
    args = ap.parse_args()
    for name in args.workloads.split(","):
        work, sizes = workloads(args.quick)[name]
        out = work.build()
        arrays = random_inputs(Pipeline(out), input_shapes(out, sizes))
        ref = work.numpy(arrays)
        t_np = median_seconds(ref)
        t_hl = halide_seconds(name, sizes, arrays, ref())
        print(f"{name:<8} halide {t_hl * 1e3:9.3f} ms  numpy {t_np * 1e3:9.3f} ms  "
              f"halide vs numpy {t_np / t_hl:.2f}x", flush=True)


if __name__ == "__main__":
    main()
