"""The NumPy reference evaluator: the oracle every compiled kernel is tested against.

Each Func is evaluated over its whole domain by broadcasting: every Var of a definition gets its own
axis of an index grid, the right side is evaluated with NumPy ufuncs on that grid, and reductions
reduce the reduction axes. Large domains are evaluated in chunks along the first pure axis so that
the grid holds at most ``CHUNK_ELEMENTS`` elements.

Semantics shared with the compiled code (and documented on the operators): integer ``//`` and ``%``
by zero give 0 (NumPy's result); float-to-int casts saturate and map NaN to 0; max/min propagate NaN.
"""

from __future__ import annotations

import math

import itertools
from typing import Any, Sequence

import numpy as np

from .arguments import collect_arrays
from .expr import Access, BinOp, Call, Cast, Cmp, Const, Expr, Not, Select, Size, Var
from .expr import BinOp as _B
from .func import FOLDING_BOUNDARIES, Func
from .pipeline import Binding, Pipeline

CHUNK_ELEMENTS = 1 << 22

_BIN = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
        "floordiv": np.floor_divide, "mod": np.remainder, "max": np.maximum, "min": np.minimum,
        "and": np.logical_and, "or": np.logical_or}
_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal}
_CALL = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "neg": np.negative,
         "floor": np.floor, "ceil": np.ceil, "round": np.rint, "sin": np.sin, "cos": np.cos,
         "tanh": np.tanh, "erf": np.vectorize(math.erf, otypes=[np.float64]),
         "pow": np.power}
_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


def reference(output: Func | Sequence[Func], *args: np.ndarray,
              **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
    """Evaluate the algorithm computing ``output`` with NumPy.

    Args:
        output: the output Func, or a list of output Funcs (then a tuple of arrays is returned,
            in that order).
        *args: input arrays in Input order (``Pipeline(output).inputs``), or
        **kwargs: input arrays by Input name, and sizes no input fixes (``N=10``).

    Returns:
        A new C-contiguous array of ``output``'s dtype whose shape is its domain's extents; element
        ``[0, ...]`` holds the domain's minimum point; for a list of outputs, a tuple of them.

    Raises:
        ShapeError: the arrays do not fit the algorithm (see ``Pipeline.bind``).
    """
    p = Pipeline(output)
    arrays, sizes = collect_arrays(p, args, kwargs)
    b = p.bind({k: v.shape for k, v in arrays.items()}, sizes)
    values: dict[str, np.ndarray] = dict(arrays)
    for f in p.funcs:
        values[f.name] = _eval_func(f, b, values)
        for u in f.updates:
            _eval_update(f, u, b, values)
    if isinstance(output, Func):
        return values[output.name]
    return tuple(values[o.name] for o in p.outputs)


def _eval_update(f: Func, u, b: Binding, values: dict[str, np.ndarray]) -> None:
    """Run update ``u`` in place: RDom points in lexicographic order (first dimension
    innermost), all values of the pure Vars at once (they are independent)."""
    rng = b.ranges[f"{f.name}.update({u.number})"]
    arr = values[f.name]
    fmin = [lo for lo, _ in b.bounds[f.name]]
    if any(ext <= 0 for _, ext in rng.values()):
        return
    pure = list(u.pure)
    env: dict[str, np.ndarray] = {}
    for axis, v in enumerate(pure):
        lo, ext = rng[v]
        shape = [1] * len(pure)
        shape[axis] = ext
        env[v] = np.arange(lo, lo + ext, dtype=np.int64).reshape(shape)
    grid = tuple(rng[v][1] for v in pure)
    rv = list(u.rvars)
    spans = [range(rng[r.name][0], rng[r.name][0] + rng[r.name][1]) for r in rv]
    with np.errstate(all="ignore"):
        for point in itertools.product(*reversed(spans)):  # last dimension outermost
            for r, val in zip(reversed(rv), point):
                env[r.name] = np.array(val, dtype=np.int64)
            inside = _inside(u.predicate, env, b, values, grid)
            if inside is not None and not inside.any():
                continue
            value = np.broadcast_to(_eval(u.value, env, b, values), grid)
            idx = tuple(np.broadcast_to(np.asarray(_eval(i, env, b, values)), grid) - m
                        for i, m in zip(u.index, fmin))
            if inside is None:
                arr[idx] = value
            else:  # RDom.where: only the points inside are updated
                arr[tuple(i[inside] for i in idx)] = value[inside]


def _inside(predicate: tuple, env: dict[str, np.ndarray], b: Binding,
            values: dict[str, np.ndarray], grid: tuple[int, ...]) -> np.ndarray | None:
    """Where every ``RDom.where`` condition holds, broadcast to ``grid`` (None: no condition)."""
    if not predicate:
        return None
    mask = np.ones(grid, dtype=bool)
    for c in predicate:
        mask &= np.broadcast_to(np.asarray(_eval(c, env, b, values), dtype=bool), grid)
    return mask


def _einsum_fast_path(f: Func, b: Binding, values: dict[str, np.ndarray]) -> np.ndarray | None:
    """``np.einsum`` for a sum of a product of plain-Var reads over whole arrays (matmul, batched
    matmul, contractions): the same value as the broadcast evaluation, computed by BLAS."""
    d = f.definition
    assert d is not None
    if d.reduce_op != "sum" or not f.dtype.is_float:  # type: ignore[union-attr]
        return None
    terms: list = []

    def flatten(e) -> bool:
        if isinstance(e, _B) and e.op == "mul":
            return flatten(e.a) and flatten(e.b)
        if isinstance(e, Access) and e.boundary is None and all(
                isinstance(i, Var) for i in e.indices) and e.dtype is f.dtype:
            terms.append(e)
            return True
        return False

    if not flatten(d.value) or len(terms) < 2:
        return None
    rng = b.ranges[f.name]
    letters: dict[str, str] = {}
    ops, subs = [], []
    for a in terms:
        arr = values[a.name]
        bounds = b.bounds[a.name]
        sl = []
        for ix, (lo, _ext) in zip(a.indices, bounds):
            vlo, vext = rng[ix.name]
            sl.append(slice(vlo - lo, vlo - lo + vext))
        ops.append(arr[tuple(sl)])
        subs.append("".join(letters.setdefault(ix.name, chr(97 + len(letters)))
                            for ix in a.indices))
    if len(letters) > 26 or any(len(set(s_)) != len(s_) for s_ in subs):
        return None
    out = "".join(letters[a.name] for a in d.args)
    if any(c not in "".join(subs) for c in out):
        return None
    return np.einsum(f"{','.join(subs)}->{out}", *ops, optimize=True).astype(f.dtype.numpy)


def _eval_func(f: Func, b: Binding, values: dict[str, np.ndarray]) -> np.ndarray:
    d = f.definition
    assert d is not None and f.dtype is not None
    fast = None if d.predicate else _einsum_fast_path(f, b, values)
    if fast is not None:
        return fast
    rng = b.ranges[f.name]
    pure = [a.name for a in d.args]
    red = [r.name for r in d.rvars]
    order = pure + red
    out = np.empty(tuple(rng[v][1] for v in pure), dtype=f.dtype.numpy)
    if out.size == 0:
        return out
    inner = int(np.prod([rng[v][1] for v in order[1:]], dtype=np.int64)) if order else 1
    rows = rng[pure[0]][1] if pure else 1
    step = max(1, CHUNK_ELEMENTS // max(inner, 1))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        env: dict[str, np.ndarray] = {}
        for axis, v in enumerate(order):
            lo, ext = rng[v]
            vals = np.arange(lo, lo + ext, dtype=np.int64)
            if axis == 0 and pure:
                vals = vals[r0:r1]
            shape = [1] * len(order)
            shape[axis] = len(vals)
            env[v] = vals.reshape(shape)
        grid = tuple(len(env[v].ravel()) for v in order)
        with np.errstate(all="ignore"):
            val = np.broadcast_to(_eval(d.value, env, b, values), grid)
            if d.reduce_op is not None:
                axes = tuple(range(len(pure), len(order)))
                inside = _inside(d.predicate, env, b, values, grid)
                if inside is not None:  # RDom.where: points outside add the identity
                    val = np.where(inside, val, _identity(d.reduce_op, val.dtype, ()))
                if not all(g > 0 for g in grid):
                    val = _identity(d.reduce_op, f.dtype.numpy, grid[: len(pure)])
                elif d.reduce_op in ("sum", "prod") and f.dtype.is_half:
                    val = _sequential(d.reduce_op, val, len(pure), f.dtype.numpy)
                elif d.reduce_op in ("sum", "prod"):
                    val = _REDUCE[d.reduce_op](val, axis=axes, dtype=f.dtype.numpy)
                else:
                    val = _REDUCE[d.reduce_op](val, axis=axes)
        if pure:
            out[r0:r1] = val
        else:
            out[()] = val
    return out


def _sequential(op: str, val: np.ndarray, npure: int, dtype: np.dtype) -> np.ndarray:
    """A float16 / bfloat16 sum or product in the default loop order (the reduction axes in
    order, the first outermost), rounded after each step as the kernel's accumulator is
    (``np.sum`` would accumulate in float32 and round once)."""
    flat = val.reshape(val.shape[:npure] + (-1,))
    acc = np.full(flat.shape[:npure], 0 if op == "sum" else 1, dtype=dtype)
    ufunc = np.add if op == "sum" else np.multiply
    for k in range(flat.shape[-1]):
        acc = ufunc(acc, flat[..., k]).astype(dtype)
    return acc


def _identity(op: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if op == "sum":
        v: Any = 0
    elif op == "prod":
        v = 1
    elif _is_float(dtype):
        v = -np.inf if op == "max" else np.inf
    else:
        info = np.iinfo(dtype)
        v = info.min if op == "max" else info.max
    return np.full(shape, v, dtype=dtype)


def _eval(e: Expr, env: dict[str, np.ndarray], b: Binding,
          values: dict[str, np.ndarray]) -> np.ndarray:
    def go(n: Expr) -> Any:
        if isinstance(n, Const):
            return np.array(n.value, dtype=n.dtype.numpy)
        if isinstance(n, Var):
            return env[n.name]
        if isinstance(n, Size):
            return np.array(b.sizes[n.name], dtype=np.int64)
        if isinstance(n, BinOp):
            return _BIN[n.op](go(n.a), go(n.b)).astype(n.dtype.numpy, copy=False)
        if isinstance(n, Cmp):
            return _CMP[n.op](go(n.a), go(n.b))
        if isinstance(n, Not):
            return np.logical_not(go(n.a))
        if isinstance(n, Call):
            return np.asarray(_CALL[n.name](*(go(a) for a in n.args))).astype(n.dtype.numpy,
                                                                           copy=False)
        if isinstance(n, Select):
            return np.where(go(n.cond), go(n.t), go(n.f)).astype(n.dtype.numpy, copy=False)
        if isinstance(n, Cast):
            return cast_array(np.asarray(go(n.value)), n.dtype.numpy)
        if isinstance(n, Access):
            return _read(n, [np.asarray(go(i)) for i in n.indices], b, values)
        raise TypeError(f"reference: unexpected node {type(n).__name__}")

    return go(e)


def cast_array(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x.astype(dtype)`` with tensorlang's rules: float->int truncates toward zero and saturates
    at the integer type's limits, NaN -> 0 (LLVM ``fptosi.sat``); anything->bool is ``!= 0``."""
    if _is_float(x.dtype) and dtype.kind in "iu":
        info = np.iinfo(dtype)
        t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0))
        hi, lo = t >= float(info.max), t <= float(info.min)
        safe = np.where(hi | lo, 0.0, t).astype(dtype)
        return np.where(hi, info.max, np.where(lo, info.min, safe)).astype(dtype)
    if dtype.kind == "b":
        return x != 0
    return x.astype(dtype)


def _is_float(dtype: np.dtype) -> bool:
    """A NumPy float dtype, or ml_dtypes' bfloat16 (whose kind is not 'f')."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _fold(kind: str, t: np.ndarray, ext: int) -> np.ndarray:
    """Offsets ``t`` from a domain's start folded into ``[0, ext)`` as NumPy's ``np.pad`` modes
    ``wrap`` (repeat_image), ``symmetric`` (mirror_image) and ``reflect`` (mirror_interior)."""
    if kind == "repeat_image":
        return np.mod(t, ext)
    period = 2 * ext if kind == "mirror_image" else 2 * ext - 2
    if period == 0:  # mirror_interior of one element
        return np.zeros_like(t)
    t = np.mod(t, period)
    return np.where(t >= ext, period - (1 if kind == "mirror_image" else 0) - t, t)


def _read(a: Access, idx: list[np.ndarray], b: Binding, values: dict[str, np.ndarray]) -> Any:
    arr = values[a.name]
    bounds = b.bounds[a.name]
    shifted = []
    mask = None
    folding = a.boundary is not None and a.boundary.kind in FOLDING_BOUNDARIES
    for ix, (lo, ext) in zip(idx, bounds):
        if folding:
            ix = lo + _fold(a.boundary.kind, np.asarray(ix) - lo, ext)  # type: ignore[union-attr]
        elif a.boundary is not None:
            inside = (ix >= lo) & (ix < lo + ext)
            mask = inside if mask is None else mask & inside
            ix = np.clip(ix, lo, lo + ext - 1)
        shifted.append(ix - lo)
    if a.boundary is not None and any(ext == 0 for _, ext in bounds):
        # an empty array has no edge (bind refuses clamp_edge of it): everything is exterior
        assert a.boundary.value is not None
        shape = np.broadcast_shapes(*(i.shape for i in idx))
        return np.full(shape, a.boundary.value.value, dtype=arr.dtype)
    val = arr[tuple(shifted)]
    if a.boundary is not None and a.boundary.kind == "constant_exterior":
        assert a.boundary.value is not None
        val = np.where(mask, val, np.array(a.boundary.value.value, dtype=arr.dtype))
    return val
