"""Lowering pass ``widen_tile_tails``: a register tile's update computes a tail's dead lanes.

The tail of a vectorized split with GuardWithIf (the columns past ``N // 16 * 16`` of a GEMM's
packed tile) is a masked vector loop, ``vectorized for x.i in [0, min(8, N - t))``: code
generation runs it as 8 lanes whose loads and stores take a lane mask (``llvm.masked.load``),
each vector only where some lane of it is live (a branch per vector). Inside the reduction loop
of a register tile (``promote_accumulators``) that costs the tile its speed: the branches split
the loop body, so a packed panel's vector is loaded again for every row of the tile, masked.
There the stores go to the tile, whose extent is the loop's lane cap, and what a dead lane
computes stays in the tile's dead lanes, which the tile's store-back (still masked) never
writes anywhere. Where every load of the loop also reads something at its dead lanes, the mask
and the branch buy nothing, and this pass gives the loop its lane cap as its extent. BLIS's
micro-kernel does the same: the whole ``mr x nr`` tile over zero-padded packed panels, the
edge's live part written back (Van Zee and van de Geijn, "BLIS: A Framework for Rapidly
Instantiating BLAS Functionality", TOMS 2015); so does Halide's ``TailStrategy::RoundUp``
where a buffer is padded.

A loop qualifies where its body is one store into a register tile at cells that its variable
indexes (lane by lane: no sum across lanes), its value cannot trap (no integer division by a
variable) and each load in it reads

- a register tile (its extents cover the dead lanes), or
- an internal buffer (its allocation is bounds inference's box over the loops' ranges, which
  an iteration whose lanes are all dead stays inside) where every index that mentions the
  loop's variable, or a tile loop that the loop's extent depends on (the second vector of a
  16-wide tile: ``min(8, N - 8 * x.o - t)``), names no other variable than those and the tile's
  loops of constant range, and interval arithmetic bounds it inside that dimension's constant
  allocation (a packed panel's ``x.i + 8 * x.o`` in ``[0, 16)``).

``WIDEN_TILE_TAILS = 0`` turns the pass off (part of ``lower``'s cache key).
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import const_value, sconst
from tensorlang.errors import ScheduleError
from tensorlang.expr import BinOp, Expr, Var, walk

from .bounds import interval
from .ir import Allocate, Buffer, For, ForKind, Load, LoweredFunc, Stmt, Store, lane_cap, \
    map_stmt

#: 1: the pass runs; 0: masked tails stay masked (for an A/B measurement)
WIDEN_TILE_TAILS = 1

_TRAPPING = ("div", "floordiv", "mod")


def widening() -> int:
    """``WIDEN_TILE_TAILS`` now (part of ``lower``'s cache key: a benchmark flips it)."""
    return WIDEN_TILE_TAILS


def widen_tile_tails(f: LoweredFunc) -> LoweredFunc:
    """Give every qualifying masked vector loop (module docstring) its lane cap as extent."""
    if not WIDEN_TILE_TAILS:
        return f
    def go(s: Stmt, tile: dict[str, tuple[int, int]], buffers: dict[str, Buffer]) -> Stmt:
        if isinstance(s, Allocate):  # the allocation in scope (a name may be allocated twice)
            buffers = {**buffers, s.buffer.name: s.buffer}
        if isinstance(s, For):
            lo, n = const_value(s.min), const_value(s.extent)
            if s.kind is ForKind.VECTORIZED and n is None:
                cap = lane_cap(s.extent)
                if cap is not None and _qualifies(s, cap, tile, buffers):
                    return dataclasses.replace(s, extent=sconst(cap))
            if s.kind in (ForKind.UNROLLED, ForKind.VECTORIZED) and lo is not None \
                    and n is not None:
                tile = {**tile, s.var: (int(lo), int(lo) + int(n) - 1)}
        return map_stmt(s, lambda c: go(c, tile, buffers), lambda e: e)

    body = go(f.body, {}, dict(f.buffers))
    return f if body is f.body else dataclasses.replace(f, body=body)


def _names(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var)}


def _qualifies(loop: For, cap: int, tile: dict[str, tuple[int, int]],
               buffers: dict[str, Buffer]) -> bool:
    """Whether ``loop`` (vectorized, lane cap ``cap``) may run all its lanes; ``tile``: the
    constant-range loops around it (inclusive bounds)."""
    st = loop.body
    if not isinstance(st, Store) or st.initial is not None:
        return False
    target = buffers.get(st.buffer)
    if target is None or not target.register:
        return False
    if not any(loop.var in _names(ix) for ix in st.indices):
        return False
    exprs = [st.value, *st.indices]
    if any(isinstance(n, BinOp) and n.op in _TRAPPING and not n.dtype.is_float
           and not const_value(n.b) for e in exprs for n in walk(e)):
        return False
    first = const_value(loop.min)
    if first is None:
        return False
    # the loops whose values decide which lanes are live
    deciding = {loop.var} | (_names(loop.extent) & tile.keys())
    ranges = {**tile, loop.var: (int(first), int(first) + cap - 1)}
    for ld in (n for e in exprs for n in walk(e) if isinstance(n, Load)):
        buf = buffers.get(ld.buffer)
        if buf is None:
            return False
        if buf.register:
            continue
        if buf.kind != "internal":
            return False
        for d, ix in enumerate(ld.indices):
            names = _names(ix)
            if any(isinstance(n, Load) for n in walk(ix)):
                return False
            if not names & deciding:
                continue
            if not names <= ranges.keys() or not _inside(ix, ranges, buf, d):
                return False
    return True


def _inside(ix: Expr, ranges: dict[str, tuple[int, int]], buf: Buffer, d: int) -> bool:
    """Whether ``ix`` over ``ranges`` stays in ``buf``'s constant allocation along ``d``."""
    lo_b, n_b = const_value(buf.mins[d]), const_value(buf.extents[d])
    if lo_b is None or n_b is None:
        return False
    try:
        lo, hi = interval(ix, {k: (sconst(a), sconst(b)) for k, (a, b) in ranges.items()})
    except ScheduleError:  # an index interval arithmetic cannot bound: not proven
        return False
    lo_v, hi_v = const_value(lo), const_value(hi)
    return lo_v is not None and hi_v is not None and lo_b <= lo_v and hi_v < lo_b + n_b
