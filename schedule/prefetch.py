"""Lowering of ``prefetch``: the prefetch statements at the top of one loop of a stage's nest.

``s[F].prefetch(T, L, offset)`` asks for the box of tensor ``T`` that iteration ``L + offset``
of F's loop ``L`` touches (its reads, and for F itself the cells it writes) to be brought into
the cache at the top of iteration ``L``: while this iteration computes, the next one's data
arrives. Bounds inference gives the box (the loops inside ``L`` vary over their ranges; the
loops outside are fixed), it is clipped to ``T``'s domain (no address outside the buffer), and
it is fetched a cache line at a time: a loop per dimension, the innermost stepping by a line's
worth of elements. Past the loop's last iteration nothing is fetched (Halide's
``PrefetchBoundStrategy::GuardWithIf``).

The register tile of a GEMM is the intended use: its first loads of ``C``'s rows, a row stride
apart, miss the cache once per tile and stall the tile's first multiply-adds; prefetched one
tile ahead they arrive during the previous tile's reduction loop, as BLIS's and OpenBLAS's
micro-kernels prefetch ``C`` before their loop.

See also: Halide ``Func::prefetch`` (``src/Prefetch.cpp``, ``src/Func.h``); TVM
``Schedule.prefetch``; Intel 64 and IA-32 Architectures Optimization Reference Manual,
"Software prefetching".
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import sadd, sconst, sfloordiv, smax, smin, ssub
from tensorlang.dtypes import DType, int64
from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, BinOp, Cmp, Expr, Var, substitute, walk

from .bounds import interval, read_box
from .ir import (Block, Buffer, For, ForKind, IfThenElse, LoweredFunc, Prefetch, Stmt,
                 child_stmts, map_stmt, walk_stmts)
from .nest import Leaf, StageNest

#: bytes of a cache line on every x86-64 CPU (and most others)
LINE_BYTES = 64


def prefetch_at(stage: str, specs: list[tuple[str, str, int]], nest: StageNest, lf: Leaf,
                value: Expr, target: Access, buffers: dict[str, Buffer]) -> list[Stmt]:
    """The prefetch statements for loop ``lf`` of ``stage``'s ``nest``: one nest per
    ``(tensor, loop, offset)`` of ``specs`` whose loop is ``lf``.

    ``value`` is the stage's right side and ``target`` its store (an Access of the Func at the
    stored cells), both over the nest's loop variables; ``buffers`` the whole buffers by name
    (inputs, outputs and Funcs at root: the only tensors a prefetch may name, checked by the
    caller).

    Raises:
        ScheduleError: a read of the tensor whose index bounds inference cannot bound (a
            gather) inside the loop.
    """
    out: list[Stmt] = []
    for n, (tensor, loop, offset) in enumerate(specs):
        if loop != lf.name:
            continue
        buf = buffers[tensor]
        k = nest.position(loop)
        # whole tiles (a tail's extent names the loops outside it): a box that may run past
        # the last tile's edge, clipped to the domain below
        ranges = nest.leaf_ranges(k + 1, loose=True)
        domain = tuple(zip(buf.mins, buf.extents))
        reads = [value] + ([target] if target.name == tensor else [])
        box = read_box(tensor, reads, ranges, len(domain), domain)
        if any(b is None for b in box):
            continue  # nothing of the tensor is touched inside the loop
        if _unbounded(tensor, reads, ranges):
            raise ScheduleError.in_schedule(
                stage, f"prefetch of {tensor} at {loop}: an index of {tensor} inside {loop} is "
                f"not bounded by the loops' ranges (a gather); prefetch another tensor",
                f"prefetch({tensor!r}, {loop!r})")
        box = [_outside(b, ranges) for b in box]  # type: ignore[arg-type]
        shift = {lf.var: sadd(Var(lf.var), sconst(offset))}
        boxes = [(substitute(lo, shift), substitute(hi, shift)) for lo, hi in box]
        out.append(IfThenElse(
            Cmp("lt", sadd(Var(lf.var), sconst(offset)), sadd(lf.min, lf.extent)),
            _fetch_box(f"{tensor}.pf{n}", tensor, boxes, domain, buf.dtype)))
    return out


def _outside(b: tuple[Expr, Expr], ranges) -> tuple[Expr, Expr]:
    """Bounds ``b`` free of the loops in ``ranges``: a range that names another inner loop
    (a tile's extent that depends on the loop around it) is bounded once more."""
    lo, hi = b
    for _ in range(len(ranges)):
        names = {n.name for e in (lo, hi) for n in walk(e) if isinstance(n, Var)}
        if not names & ranges.keys():
            break
        lo, hi = interval(lo, ranges)[0], interval(hi, ranges)[1]
    return lo, hi


def _unbounded(tensor: str, reads: list[Expr], ranges) -> bool:
    """Whether some index of ``tensor`` in ``reads`` escapes interval arithmetic (``read_box``
    then answers the whole domain: correct for allocation, useless for a prefetch)."""
    for e in reads:
        for a in walk(e):
            if isinstance(a, Access) and a.name == tensor:
                for ix in a.indices:
                    try:
                        interval(ix, ranges)
                    except ScheduleError:
                        return True
    return False


def _fetch_box(prefix: str, tensor: str, box: list[tuple[Expr, Expr]],
               domain: tuple[tuple[Expr, Expr], ...], dtype: DType) -> Stmt:
    """Loops touching every cache line of ``box`` (inclusive bounds) clipped to ``domain``: the
    outer dimensions element by element, the innermost a line's worth of elements apart from
    its low end, the last point clamped to its high end (so the line of ``hi`` is fetched
    whatever the buffer's alignment; where the box starts on a line, one line twice)."""
    clipped = []
    for (lo, hi), (dmin, dext) in zip(box, domain):
        clipped.append((smax(lo, dmin), smin(hi, ssub(sadd(dmin, dext), sconst(1)))))
    step = max(1, LINE_BYTES // dtype.itemsize)
    idx: list[Expr] = [Var(f"{prefix}.d{d}") for d in range(len(clipped))]
    lo, hi = clipped[-1]
    t = Var(f"{prefix}.line")
    idx[-1] = smin(sadd(lo, BinOp("mul", t, sconst(step), int64)), hi)
    body: Stmt = Prefetch(tensor, tuple(idx))
    span = ssub(hi, lo)  # (negative: nothing of the box is inside the domain)
    count = smin(sadd(span, sconst(1)), sadd(sfloordiv(span, step), sconst(2)))
    body = For(t.name, sconst(0), count, ForKind.SERIAL, body, width=1)
    for d in reversed(range(len(clipped) - 1)):
        dlo, dhi = clipped[d]
        body = For(f"{prefix}.d{d}", dlo, sadd(ssub(dhi, dlo), sconst(1)), ForKind.SERIAL, body,
                   width=1)
    return body


def without_prefetches(f: LoweredFunc) -> LoweredFunc:
    """``f`` without its prefetch nests (a backend without cache prefetches: the GPU's)."""

    def go(s: Stmt) -> Stmt:
        if isinstance(s, Block):
            kept = tuple(go(c) for c in s.stmts if not _only_prefetches(c))
            return kept[0] if len(kept) == 1 else Block(kept)
        return map_stmt(s, go, lambda e: e)

    body = go(f.body)
    return f if body is f.body else dataclasses.replace(f, body=body)


def _only_prefetches(s: Stmt) -> bool:
    """Whether ``s`` does nothing but prefetch (a nest ``prefetch_at`` made)."""
    leaves = [c for c in walk_stmts(s) if not child_stmts(c)]
    return bool(leaves) and all(isinstance(c, Prefetch) for c in leaves)
