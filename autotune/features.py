"""A fixed-length feature vector per candidate, from its lowered loop nest (for the cost model).

The nest is lowered for the concrete sizes being tuned (a few ms) and walked once; loop extents are
evaluated with those sizes (a tail's extent with the enclosing loop variables at 0: its full tile).
Each store contributes with its execution count. Features (``FEATURE_NAMES`` order), in the spirit
of Adams et al. 2019 (Halide's learned autoscheduler) and Ansor's per-store features:

- ``log_iters``: log2 of innermost iterations executed (all stores);
- ``log_flops``: log2 of arithmetic operations executed (ops in stored values x executions);
- ``vector_width``: widest vectorized loop (0 if none); ``vector_frac``: share of executions in a
  vectorized loop;
- ``unroll``: product of unrolled extents around the hottest store;
- ``parallel_extent``: log2 extent of the outermost parallel loop (0: none);
  ``parallel_balance``: iterations per thread rounded up / ideal (1 = perfectly balanced);
- ``fp_l1, fp_2, fp_3, fp_4``: log2 bytes touched by the hottest store's loop body inside its 1, 2,
  3, 4 innermost loops (all its accesses; compare with the L1/L2/L3 sizes ``l1/l2/l3`` below);
- ``fits_l1, fits_l2``: innermost footprint level that still fits in L1 / L2 (0-4);
- ``intensity``: flops per byte of the 2-innermost-loop footprint;
- ``contiguous``: share of the hottest store's accesses that are unit-stride in its innermost loop;
- ``stages``: number of produce blocks; ``log_alloc``: log2 bytes allocated per execution of
  allocations; ``loops``: loops around the hottest store;
- ``threads``: worker threads;
- ``tile_vectors``: native vector registers the hottest store's register tile spans — over the
  unrolled and vectorized loops innermost around it, the product of unrolled extents and of vector
  lanes / native lanes rounded up (GEMM's 8 x 32 tile: 16; a tile past ~28 spills on AVX-512).
  Added in 0.1 after ``threads`` (``docs/performance.md``, "Measurements behind code choices").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from tensorlang.affine import NonAffine, affine_form
from tensorlang.backends.llvm.target import host_target
from tensorlang.expr import BinOp, Call, Const, Expr, Size, Var, walk
from tensorlang.schedule.ir import (
    Allocate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    LoweredFunc,
    ProducerConsumer,
    Store,
    child_stmts,
)

FEATURE_NAMES = ("log_iters", "log_flops", "vector_width", "vector_frac", "unroll",
                 "parallel_extent", "parallel_balance", "fp_1", "fp_2", "fp_3", "fp_4",
                 "fits_l1", "fits_l2", "intensity", "contiguous", "stages", "log_alloc", "loops",
                 "threads", "tile_vectors")
"""Feature names in vector order. Features are only ever appended, so a record written by an
older version is a prefix; ``CostModel.add`` pads it with NaN (missing)."""


def cache_sizes() -> tuple[int, int, int]:
    """L1d, L2, L3 sizes in bytes (from sysfs; 32 KiB / 1 MiB / 32 MiB if unreadable)."""
    sizes = {1: 32 << 10, 2: 1 << 20, 3: 32 << 20}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in os.listdir(base):
            d = os.path.join(base, idx)
            level = int(open(os.path.join(d, "level")).read())
            kind = open(os.path.join(d, "type")).read().strip()
            text = open(os.path.join(d, "size")).read().strip()
            if kind in ("Data", "Unified") and text.endswith("K"):
                sizes[level] = int(text[:-1]) << 10
    except (OSError, ValueError):
        pass
    return sizes[1], sizes[2], sizes[3]


@dataclass
class _Loop:
    var: str
    extent: int
    kind: ForKind


def _extent(e: Expr, sizes: dict[str, int], env: dict[str, int] | None = None) -> int:
    env = env or {}

    def go(n: Expr) -> int:
        if isinstance(n, Var):
            return env.get(n.name, 0)
        if isinstance(n, Const):
            return int(n.value)
        if isinstance(n, Size):
            return sizes[n.name]
        if isinstance(n, BinOp):
            a, b = go(n.a), go(n.b)
            return {"add": a + b, "sub": a - b, "mul": a * b, "max": max(a, b),
                    "min": min(a, b), "floordiv": a // b if b else 0,
                    "mod": a % b if b else 0}.get(n.op, 1)
        return 1

    try:
        return max(go(e), 0)
    except (KeyError, TypeError):
        return 1


def _ops(e: Expr) -> int:
    return sum(1 for n in walk(e) if isinstance(n, (BinOp, Call)) and not n.dtype.is_int)


def store_counts(f: LoweredFunc, sizes: dict[str, int]) -> dict[str, float]:
    """Executed stores per buffer of a lowered kernel at ``sizes`` (loop extents evaluated as
    ``features`` does: a tail at its full tile, of an if only the first branch)."""
    counts: dict[str, float] = {}

    def go(s, mult: float, env: dict[str, int]) -> None:
        if isinstance(s, LetStmt):
            env = {**env, s.var: _extent(s.value, sizes, env)}
        if isinstance(s, For):
            mult *= max(1, _extent(s.extent, sizes, env))
        if isinstance(s, Store):
            counts[s.buffer] = counts.get(s.buffer, 0.0) + mult
        for c in ((s.then,) if isinstance(s, IfThenElse) else child_stmts(s)):
            go(c, mult, env)

    go(f.body, 1.0, {})
    return counts


def features(f: LoweredFunc, sizes: dict[str, int], threads: int | None = None) -> np.ndarray:
    """The feature vector (float64, ``len(FEATURE_NAMES)``) of a lowered kernel at ``sizes``."""
    threads = threads or os.cpu_count() or 1
    l1, l2, _ = cache_sizes()
    stores: list[tuple[Store, list[_Loop]]] = []
    stages = 0
    alloc = 0.0

    def walk_stmt(s, loops: list[_Loop], mult: float, env: dict[str, int]) -> None:
        nonlocal stages, alloc
        if isinstance(s, ProducerConsumer):
            stages += 1
        if isinstance(s, LetStmt):
            env = {**env, s.var: _extent(s.value, sizes, env)}
        if isinstance(s, For):
            loops = loops + [_Loop(s.var, max(1, _extent(s.extent, sizes, env)), s.kind)]
        if isinstance(s, Allocate):
            n = s.buffer.dtype.itemsize
            for e in s.buffer.extents:
                n *= max(1, _extent(e, sizes, env))
            alloc += n * mult
        if isinstance(s, Store):
            stores.append((s, loops))
        m = mult * (loops[-1].extent if isinstance(s, For) else 1)
        # of an if, only the first branch: the fast loop version (or the guarded body)
        kids = (s.then,) if isinstance(s, IfThenElse) else child_stmts(s)
        for c in kids:
            walk_stmt(c, loops, m, env)

    walk_stmt(f.body, [], 1.0, {})
    if not stores:
        return np.zeros(len(FEATURE_NAMES))
    execs = [math.prod(lp.extent for lp in loops) for _, loops in stores]
    total = float(sum(execs))
    flops = float(sum(e * max(_ops(s.value), 1) for (s, _), e in zip(stores, execs)))
    hot = int(np.argmax(execs))
    store, loops = stores[hot]
    vec = [lp.extent for lp in loops if lp.kind is ForKind.VECTORIZED]
    vec_frac = sum(e for (_, lps), e in zip(stores, execs)
                   if any(lp.kind is ForKind.VECTORIZED for lp in lps)) / total
    unroll = math.prod(lp.extent for lp in loops if lp.kind is ForKind.UNROLLED)
    native = max(1, _vector_bits() // (8 * max(1, store.value.dtype.itemsize)))
    tile = 1
    for lp in reversed(loops):
        if lp.kind is ForKind.UNROLLED:
            tile *= lp.extent
        elif lp.kind is ForKind.VECTORIZED:
            tile *= -(-lp.extent // native)
        else:
            break
    par = next((lp.extent for lp in loops if lp.kind is ForKind.PARALLEL), 0)
    balance = (math.ceil(par / threads) * threads / par) if par else 0.0
    accesses = [(store.buffer, store.indices)] + [
        (ld.buffer, ld.indices) for ld in walk(store.value) if isinstance(ld, Load)]
    item = {n: b.dtype.itemsize for n, b in f.buffers.items()}
    fps = []
    for depth in (1, 2, 3, 4):
        inner = {lp.var: lp.extent for lp in loops[-depth:]}
        fps.append(math.log2(max(1.0, sum(_footprint(ix, inner) * item.get(buf, 4)
                                           for buf, ix in accesses))))
    fits_l1 = sum(1 for v in fps if 2 ** v <= l1)
    fits_l2 = sum(1 for v in fps if 2 ** v <= l2)
    innermost = loops[-1].var if loops else None
    contiguous = sum(1 for _, ix in accesses if _unit_stride(ix, innermost)) / len(accesses)
    intensity = (max(_ops(store.value), 1) * math.prod(lp.extent for lp in loops[-2:])) / (
        2 ** fps[1])
    return np.array([math.log2(total), math.log2(max(flops, 1.0)), max(vec, default=0),
                     vec_frac, unroll, math.log2(par) if par else 0.0, balance, *fps, fits_l1,
                     fits_l2, intensity, contiguous, stages, math.log2(alloc + 1), len(loops),
                     threads, tile], dtype=np.float64)


def _vector_bits() -> int:
    return host_target().vector_bits


def _footprint(indices: tuple[Expr, ...], inner: dict[str, int]) -> float:
    """Distinct cells an access touches while the ``inner`` loops run (a box estimate)."""
    n = 1.0
    for ix in indices:
        try:
            form = affine_form(ix)
            span = sum(abs(c) * (inner[v] - 1) for v, c in form.coeffs if v in inner) + 1
        except NonAffine:
            span = max((inner[v] for v in {x.name for x in walk(ix) if isinstance(x, Var)}
                        if v in inner), default=1)
        n *= span
    return n


def _unit_stride(indices: tuple[Expr, ...], var: str | None) -> bool:
    if var is None or not indices:
        return True
    try:
        forms = [affine_form(ix) for ix in indices]
    except NonAffine:
        return False
    return all(f.coeff(var) == 0 for f in forms[:-1]) and forms[-1].coeff(var) in (0, 1)

