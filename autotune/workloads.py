"""Built-in workloads (what ``tensorlang tune|bench NAME`` and the benchmarks tune), and loading a
user's workload from ``path/to/file.py:function``.

A workload is an algorithm (a function returning the output Func; the built-ins take the element
type, float32 unless asked: ``tensorlang bench matmul --dtype float64``), its default shape (size
symbols by name), a NumPy version of the same computation (the peer every speed is measured
against, in the same run) and its floating-point operation count (for GFLOP/s).

========== ==================== ============================================================
name       sizes                computation
========== ==================== ============================================================
matmul     M, N, K              C[i, j] = sum_k A[i, k] * B[k, j]            (NumPy: ``A @ B``)
batch_matmul B, M, N, K         C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]   (``np.matmul``)
conv2d     Nb, CI, CO, H, W     3x3 convolution, zero padding 1, NCHW   (im2col + matmul)
blur       H, W                 3x3 box blur in two passes; H, W are the *input* sizes, the
                                output is (H-2) x (W-2)
softmax    R, S                 row-wise softmax of an R x S matrix
layernorm  R, S                 row-wise layer normalisation with gain and bias
========== ==================== ============================================================
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import tensorlang.language as tl
from tensorlang.arguments import collect_arrays
from tensorlang.dtypes import DType
from tensorlang.errors import DefinitionError, ShapeError
from tensorlang.func import Func
from tensorlang.pipeline import Pipeline


@dataclass(frozen=True)
class Workload:
    """A named algorithm with a default shape, a NumPy peer and a FLOP count.

    ``build()`` returns the output Func; ``build(dtype)`` (a ``tl.DType`` of ``dtypes``, the
    element types it is written for; a user's workload has none but its own) the same algorithm
    over that element type. ``numpy(arrays)`` returns a callable of no arguments computing the same
    output with NumPy (None: no peer), in the arrays' dtype; ``flops(sizes)`` is the
    floating-point operation count (0: unknown).
    """

    name: str
    build: Callable[..., Func]
    shape: dict[str, int]
    numpy: Callable[[dict[str, np.ndarray]], Callable[[], np.ndarray]] | None = None
    flops: Callable[[dict[str, int]], float] = lambda sizes: 0.0
    doc: str = ""
    dtypes: tuple[str, ...] = ()

    def build_as(self, dtype: str | None) -> Func:
        """The output Func over element type ``dtype`` (a NumPy name, e.g. ``"float64"``; None:
        as written).

        Raises:
            DefinitionError: the workload is not written for that element type.
        """
        if dtype is None:
            return self.build()
        if dtype not in self.dtypes:
            kinds = ", ".join(self.dtypes) or "only the types its own code names"
            raise DefinitionError(f"workload {self.name} has no {dtype} version: it is written for "
                                  f"{kinds}")
        return self.build(getattr(tl, dtype))


def input_shapes(output: Func, sizes: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The shape of every Input of ``output``'s pipeline for concrete sizes (by size name):
    ``Pipeline.input_shapes``.

    Raises:
        ShapeError: a size an input shape needs is missing from ``sizes``.
    """
    return Pipeline(output).input_shapes(sizes)


class BoundExtents:
    """Every Func's loop extents when ``output`` runs at ``sizes``: its pipeline bound to the
    input shapes those sizes give (``Pipeline.bind``).

    Attributes:
        shapes: input shapes by Input name. binding: the ``Binding`` (``ranges[func][var]`` is
            ``(min, extent)``).

    Raises:
        ShapeError: the sizes do not fit the algorithm.
    """

    def __init__(self, output: Func, sizes: dict[str, int]) -> None:
        pipeline = Pipeline(output)
        self.shapes = input_shapes(output, sizes)
        self.binding = pipeline.bind(self.shapes, {k: v for k, v in sizes.items()
                                                   if k in pipeline.sizes})

    def extent(self, func: str, var: str) -> int:
        """The extent of loop Var ``var`` of ``func`` (a stage id's Func name)."""
        return self.binding.ranges[func][var][1]


def free_sizes(output: Func, sizes: dict[str, int]) -> dict[str, int]:
    """The sizes a kernel call must be given explicitly (``N=...``): those no input shape fixes."""
    p = Pipeline(output)
    bound = {getattr(d, "name", None) for i in p.inputs for d in i.shape}
    return {k: v for k, v in sizes.items() if k in p.sizes and k not in bound}


def format_shape(sizes: dict[str, int]) -> str:
    """``{"M": 1024, "N": 64}`` -> ``"M=1024,N=64"`` (what ``parse_shape`` reads)."""
    return ",".join(f"{k}={v}" for k, v in sizes.items())


def sizes_tag(sizes: dict[str, int]) -> str:
    """``{"M": 1024, "N": 64}`` -> ``"M1024-N64"`` (log file and study names)."""
    return "-".join(f"{k}{v}" for k, v in sizes.items())


def bind_sizes(output: Func, shapes: dict[str, int] | None, arrays: dict[str, np.ndarray] | None
           ) -> dict[str, int]:
    """Concrete sizes by name from ``shapes`` (sizes given by name) or example ``arrays``.

    Raises:
        ShapeError: a size is missing, or the arrays do not fit the algorithm.
    """
    p = Pipeline(output)
    if shapes is not None:
        missing = [s for s in p.sizes if s not in shapes]
        if missing:
            raise ShapeError(f"shapes= gives no value for size {missing[0]}")
        return {k: int(v) for k, v in shapes.items()}
    if arrays is None:
        raise ShapeError("tl.autotune needs shapes={size: value} or example arrays")
    given, extra = collect_arrays(p, (), arrays, copy_noncontiguous=False)  # names and dtypes
    b = p.bind({k: v.shape for k, v in given.items()}, extra)
    return dict(b.sizes)


def memory_needed(output: Any, sizes: dict[str, int]) -> int:
    """Bytes a measuring worker holds at least: every input and output array at these sizes
    (intermediate buffers come on top, as the schedule places them).

    Raises:
        ShapeError: the sizes do not fit the algorithm."""
    p = Pipeline(output)
    b = p.bind(input_shapes(output, sizes), {k: v for k, v in sizes.items() if k in p.sizes})
    total = 0
    for obj in (*p.inputs, *p.outputs):
        n = 1
        for _, ext in b.bounds[obj.name]:
            n *= max(0, ext)
        total += n * obj.dtype.numpy.itemsize
    return total


def memory_available() -> int | None:
    """Bytes of memory available to a new process (Linux ``MemAvailable``; else the free
    physical pages), or None when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


# -- the algorithms ------------------------------------------------------------------------------
def matmul(dtype: DType = tl.float32) -> Func:
    M, N, K = tl.sizes("M N K")
    A, B = tl.Input("A", (M, K), dtype), tl.Input("B", (K, N), dtype)
    i, j, k = tl.vars("i j k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[k, j]
    return C


def batch_matmul(dtype: DType = tl.float32) -> Func:
    Bt, M, N, K = tl.sizes("B M N K")
    A, B = tl.Input("A", (Bt, M, K), dtype), tl.Input("B", (Bt, K, N), dtype)
    b, i, j, k = tl.vars("b i j k")
    C = tl.Func("C")
    C[b, i, j] = A[b, i, k] * B[b, k, j]
    return C


def conv2d(dtype: DType = tl.float32) -> Func:
    Nb, CI, H, W, CO = tl.sizes("Nb CI H W CO")
    In = tl.Input("In", (Nb, CI, H, W), dtype)
    Wt = tl.Input("Wt", (CO, CI, 3, 3), dtype)
    n, co, y, x, ci, ry, rx = tl.vars("n co y x ci ry rx")
    pad = tl.Func("pad", shape=(Nb, CI, H + 2, W + 2))
    pad[n, ci, y, x] = tl.constant_exterior(In, 0.0)[n, ci, y - 1, x - 1]
    conv = tl.Func("O")
    conv[n, co, y, x] = pad[n, ci, y + ry, x + rx] * Wt[co, ci, ry, rx]
    return conv


def blur(dtype: DType = tl.float32) -> Func:
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), dtype)
    y, x = tl.vars("y x")
    bx = tl.Func("bx")
    bx[y, x] = (In[y, x - 1] + In[y, x] + In[y, x + 1]) * (1 / 3)
    out = tl.Func("out")
    out[y, x] = (bx[y - 1, x] + bx[y, x] + bx[y + 1, x]) * (1 / 3)
    return out


def softmax(dtype: DType = tl.float32) -> Func:
    R, S = tl.sizes("R S")
    X = tl.Input("X", (R, S), dtype)
    i, j, k = tl.vars("i j k")
    mx, e, sm, out = tl.Func("mx"), tl.Func("e"), tl.Func("sm"), tl.Func("softmax")
    mx[i] = tl.max(X[i, k])
    e[i, j] = tl.exp(X[i, j] - mx[i])
    sm[i] = e[i, k]
    out[i, j] = e[i, j] * (1.0 / sm[i])
    return out


def layernorm(dtype: DType = tl.float32) -> Func:
    R, S = tl.sizes("R S")
    X = tl.Input("X", (R, S), dtype)
    G, Bb = tl.Input("G", (S,), dtype), tl.Input("Bb", (S,), dtype)
    i, j, k = tl.vars("i j k")
    mean, var, out = tl.Func("mean"), tl.Func("var"), tl.Func("layernorm")
    mean[i] = X[i, k] * (1.0 / tl.cast(dtype, S))
    var[i] = (X[i, k] - mean[i]) * (X[i, k] - mean[i]) * (1.0 / tl.cast(dtype, S))
    out[i, j] = (X[i, j] - mean[i]) / tl.sqrt(var[i] + 1e-5) * G[j] + Bb[j]
    return out


# -- NumPy peers ---------------------------------------------------------------------------------
def _np_matmul(a: dict) -> Callable[[], np.ndarray]:
    return lambda: np.matmul(a["A"], a["B"])


def _np_conv2d(a: dict) -> Callable[[], np.ndarray]:
    x, w = a["In"], a["Wt"]
    nb, ci, h, wd = x.shape
    co = w.shape[0]
    wmat = w.reshape(co, -1)

    def f() -> np.ndarray:  # im2col + matmul
        p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))
        cols = cols.transpose(0, 1, 4, 5, 2, 3).reshape(nb, ci * 9, h * wd)
        return (wmat @ cols).reshape(nb, co, h, wd)
    return f


def _np_blur(a: dict) -> Callable[[], np.ndarray]:
    x = a["In"]

    def f() -> np.ndarray:
        third = x.dtype.type(1 / 3)
        bx = (x[:, :-2] + x[:, 1:-1] + x[:, 2:]) * third
        return (bx[:-2] + bx[1:-1] + bx[2:]) * third
    return f


def _np_softmax(a: dict) -> Callable[[], np.ndarray]:
    x = a["X"]

    def f() -> np.ndarray:
        z = np.exp(x - x.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)
    return f


def _np_layernorm(a: dict) -> Callable[[], np.ndarray]:
    x, g, b = a["X"], a["G"], a["Bb"]

    def f() -> np.ndarray:
        m = x.mean(axis=1, keepdims=True)
        v = ((x - m) ** 2).mean(axis=1, keepdims=True)
        return (x - m) / np.sqrt(v + x.dtype.type(1e-5)) * g + b
    return f


_FLOATS = ("float32", "float64")

BUILTIN: dict[str, Workload] = {w.name: w for w in [
    Workload("matmul", matmul, {"M": 1024, "N": 1024, "K": 1024}, _np_matmul,
             lambda s: 2.0 * s["M"] * s["N"] * s["K"], "C = A @ B", _FLOATS),
    Workload("batch_matmul", batch_matmul, {"B": 8, "M": 256, "N": 256, "K": 256}, _np_matmul,
             lambda s: 2.0 * s["B"] * s["M"] * s["N"] * s["K"], "batched A @ B", _FLOATS),
    Workload("conv2d", conv2d, {"Nb": 1, "CI": 64, "CO": 64, "H": 56, "W": 56}, _np_conv2d,
             lambda s: 2.0 * s["Nb"] * s["CO"] * s["CI"] * 9 * s["H"] * s["W"],
             "3x3 convolution, zero padding, NCHW", _FLOATS),
    Workload("blur", blur, {"H": 4098, "W": 4098}, _np_blur,
             lambda s: 8.0 * (s["H"] - 2) * (s["W"] - 2), "two-pass 3x3 box blur", _FLOATS),
    Workload("softmax", softmax, {"R": 4096, "S": 4096}, _np_softmax,
             lambda s: 5.0 * s["R"] * s["S"], "row-wise softmax", _FLOATS),
    Workload("layernorm", layernorm, {"R": 4096, "S": 4096}, _np_layernorm,
             lambda s: 9.0 * s["R"] * s["S"], "row-wise layer normalisation", _FLOATS),
]}


def get_workload(spec: str) -> Workload:
    """A built-in workload by name, or ``path/to/file.py:function`` (a function of no arguments
    returning the output Func, or a list of output Funcs; its default shape is empty, so every
    size comes from --shape).

    Raises:
        DefinitionError: unknown name, missing file or function, or the function does not
            return a Func (or a list of Funcs).
    """
    if spec in BUILTIN:
        return BUILTIN[spec]
    if ":" not in spec:
        raise DefinitionError(f"unknown workload {spec!r}: use one of {', '.join(BUILTIN)} or "
                              f"path/to/file.py:function")
    path, _, fn_name = spec.rpartition(":")
    if not os.path.isfile(path):
        raise DefinitionError(f"workload file {path!r} does not exist")
    mod_spec = importlib.util.spec_from_file_location(
        f"tensorlang_user_{abs(hash(os.path.abspath(path)))}", path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise DefinitionError(f"{path} has no function {fn_name!r}")

    def build() -> Any:
        f: Any = fn()
        if not isinstance(f, Func) and not (
                isinstance(f, (list, tuple)) and f and all(isinstance(o, Func) for o in f)):
            raise DefinitionError(f"{spec} must return the output tl.Func (or a list of output "
                                  f"Funcs), got {type(f).__name__}")
        return list(f) if isinstance(f, tuple) else f
    return Workload(fn_name, build, {}, None, lambda s: 0.0, f"user workload {spec}")


def parse_shape(text: str) -> dict[str, int]:
    """``"M=1024,N=1024,K=1024"`` -> ``{"M": 1024, ...}``.

    Raises:
        ValueError: an item is not ``NAME=positive integer``.
    """
    out = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, eq, value = item.partition("=")
        if not eq or not name.strip().isidentifier() or not value.strip().isdigit() \
                or int(value) < 1:
            raise ValueError(f"bad shape item {item!r}: expected NAME=positive integer, e.g. "
                             f"M=1024")
        out[name.strip()] = int(value)
    return out
