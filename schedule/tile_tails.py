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
  allocation (a packed panel's ``x.i + 8 * x.o`` in ``[0, 16)``), or, where the allocation's
  minimum varies (a panel of the columns' remainder, run as a piece of its own: minimum
  ``max(N // 64 * 64 + 64 * j.o, 0)``, read at ``N // 64 * 64 + j.i + 16 * j.o.i + 64 * j.o``),
  the index less one term of that minimum (a ``max``'s operands) is affine in the tile's loops
  and within the constant extent, and the index's least value is at or above each other term
  (proved with the constant minima of the loops around it and sizes at least 0: a size is an
  array's extent, and ``Pipeline.bind`` refuses a negative one), or
- an input or output at indices that name none of those deciding loops (A's rows read in place
  by a tile over B's copied panel: the same element in every lane): in bounds wherever some
  lane of the tile is live, so the whole-vector loop runs under the condition that the first
  lane at the deciding loops' first iterations is, the masked loop otherwise (a condition
  invariant in the reduction loop, which LLVM takes out of it).

``WIDEN_TILE_TAILS = 0`` turns the pass off (part of ``lower``'s cache key).
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import NonAffine, affine_form, const_value, sconst, ssub
from tensorlang.errors import ScheduleError
from tensorlang.expr import BinOp, Cast, Cmp, Const, Expr, Size, Var, substitute, walk

from .bounds import interval
from .ir import Allocate, Buffer, For, ForKind, IfThenElse, LetStmt, Load, LoweredFunc, Stmt, \
    Store, lane_cap, map_stmt

#: 1: the pass runs; 0: masked tails stay masked (for an A/B measurement)
WIDEN_TILE_TAILS = 1
#: 1: a load from a buffer whose allocation's minimum varies qualifies where its index is
#: proved inside (``_inside_varying``); 0: only constant minima, as before (for ``--against``)
VARYING_MINS = 1
#: 1: a load of an input or output whose index no deciding loop changes qualifies, the widened
#: loop then run where the deciding loops' first lane is live (``_qualifies``); 0: such a loop
#: stays masked, as before (for ``--against``)
EXTERNAL_READS = 1

_TRAPPING = ("div", "floordiv", "mod")


def widening() -> tuple[int, int, int]:
    """``WIDEN_TILE_TAILS``, ``VARYING_MINS`` and ``EXTERNAL_READS`` now (part of ``lower``'s
    cache key: a benchmark flips them)."""
    return WIDEN_TILE_TAILS, VARYING_MINS, EXTERNAL_READS


def widen_tile_tails(f: LoweredFunc) -> LoweredFunc:
    """Give every qualifying masked vector loop (module docstring) its lane cap as extent."""
    if not WIDEN_TILE_TAILS:
        return f
    def go(s: Stmt, tile: dict[str, tuple[int, int]], buffers: dict[str, Buffer],
           scope: _Scope) -> Stmt:
        if isinstance(s, Allocate):  # the allocation in scope (a name may be allocated twice)
            buffers = {**buffers, s.buffer.name: s.buffer}
        if isinstance(s, LetStmt):
            scope = scope.bind(s.var, s.value)
        if isinstance(s, For):
            lo, n = const_value(s.min), const_value(s.extent)
            if s.kind is ForKind.VECTORIZED and n is None:
                cap = lane_cap(s.extent)
                how = _qualifies(s, cap, tile, buffers, scope) if cap is not None else None
                if how is not None:
                    wide = dataclasses.replace(s, extent=sconst(cap))
                    return wide if how is True else IfThenElse(how, wide, s)
            if s.kind in (ForKind.UNROLLED, ForKind.VECTORIZED) and lo is not None \
                    and n is not None:
                tile = {**tile, s.var: (int(lo), int(lo) + int(n) - 1)}
            scope = scope.loop(s.var, lo)
        return map_stmt(s, lambda c: go(c, tile, buffers, scope), lambda e: e)

    body = go(f.body, {}, dict(f.buffers), _Scope({}, {}))
    return f if body is f.body else dataclasses.replace(f, body=body)


def _names(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var)}


@dataclasses.dataclass(frozen=True)
class _Scope:
    """The let bindings and the constant loop minima (None: not constant) around a statement."""

    lets: dict[str, Expr]
    lows: dict[str, int | None]

    def bind(self, var: str, value: Expr) -> _Scope:
        return _Scope({**self.lets, var: self.expand(value)}, self.lows)

    def loop(self, var: str, low: int | None) -> _Scope:
        lets = {k: v for k, v in self.lets.items() if k != var}
        return _Scope(lets, {**self.lows, var: low})

    def expand(self, e: Expr) -> Expr:
        """``e`` with the lets in scope replaced by their values (themselves expanded)."""
        used = _names(e) & self.lets.keys()
        return substitute(e, {k: self.lets[k] for k in used}) if used else e


def _qualifies(loop: For, cap: int, tile: dict[str, tuple[int, int]],
               buffers: dict[str, Buffer], scope: _Scope) -> Expr | bool | None:
    """Whether ``loop`` (vectorized, lane cap ``cap``) may run all its lanes: ``True``, or a
    condition under which it may (a load of an input or output whose index the deciding loops
    do not change is in bounds where some lane of the tile is live: the condition says the
    first lane at their first iterations is; elsewhere the loop runs masked, as it was);
    ``None``: it may not. ``tile``: the constant-range loops around it (inclusive
    bounds); ``scope``: the lets and loops around."""
    st = loop.body
    if not isinstance(st, Store) or st.initial is not None:
        return None
    target = buffers.get(st.buffer)
    if target is None or not target.register:
        return None
    if not any(loop.var in _names(ix) for ix in st.indices):
        return None
    exprs = [st.value, *st.indices]
    if any(isinstance(n, BinOp) and n.op in _TRAPPING and not n.dtype.is_float
           and not const_value(n.b) for e in exprs for n in walk(e)):
        return None
    first = const_value(loop.min)
    if first is None:
        return None
    # the loops whose values decide which lanes are live
    deciding = {loop.var} | (_names(loop.extent) & tile.keys())
    ranges = {**tile, loop.var: (int(first), int(first) + cap - 1)}
    guard = False
    for ld in (n for e in exprs for n in walk(e) if isinstance(n, Load)):
        buf = buffers.get(ld.buffer)
        if buf is None:
            return None
        if buf.register:
            continue
        if buf.kind != "internal":
            # an operand read in place (A's rows in a tile over B's panel): the same element
            # in every lane and every deciding iteration
            if not EXTERNAL_READS or any(_names(ix) & deciding for ix in ld.indices):
                return None
            guard = True
            continue
        for d, ix in enumerate(ld.indices):
            names = _names(ix)
            if any(isinstance(n, Load) for n in walk(ix)):
                return None
            if not names & deciding:
                continue
            if not (names <= ranges.keys() and _inside(ix, ranges, buf, d)) \
                    and not (VARYING_MINS and _inside_varying(ix, ranges, buf, d, scope)):
                return None
    if not guard:
        return True
    # the live lanes at the deciding loops' first iterations (where a tail's extent falls as a
    # later vector of the tile starts further in, the most there are: the condition then holds
    # wherever the tile runs)
    at_first = substitute(loop.extent, {v: sconst(tile[v][0]) for v in deciding - {loop.var}})
    if any(v in deciding for v in _names(at_first)):
        return None
    return Cmp("gt", at_first, sconst(0))


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


def _inside_varying(ix: Expr, ranges: dict[str, tuple[int, int]], buf: Buffer, d: int,
                    scope: _Scope) -> bool:
    """Whether ``ix`` over ``ranges`` stays in ``buf``'s allocation along ``d`` whose minimum
    varies (module docstring): for some operand ``a`` of the minimum's ``max``, ``ix - a`` is
    affine in ``ranges``' loops with values in ``[0, extent)`` (the minimum is at least ``a``),
    and ``ix``'s least value is at or above every other operand (so the minimum is ``a``)."""
    n_b = const_value(buf.extents[d])
    if n_b is None:
        return False
    at = scope.expand(ix)
    terms = _max_operands(scope.expand(buf.mins[d]))
    for a in terms:
        diff = ssub(at, a)
        try:
            form = affine_form(diff)
        except NonAffine:
            continue
        if form.params or not set(form.vars) <= ranges.keys():
            continue
        lo = hi = form.const
        for v, c in form.coeffs:
            first, last = ranges[v]
            lo += c * (first if c > 0 else last)
            hi += c * (last if c > 0 else first)
        if lo < 0 or hi >= n_b:
            continue
        least = BinOp("add", a, sconst(lo), a.dtype) if lo else a
        if all(t is a or _at_least_zero(ssub(least, t), scope) for t in terms):
            return True
    return False


def _max_operands(e: Expr) -> list[Expr]:
    """The operands of nested ``max``es (``e`` itself where it is none)."""
    if isinstance(e, BinOp) and e.op == "max":
        return _max_operands(e.a) + _max_operands(e.b)
    return [e]


def _at_least_zero(e: Expr, scope: _Scope) -> bool:
    """Whether integer ``e`` is at least 0 wherever it is evaluated: built by sums, products by
    non-negative constants, floor divisions by positive ones, ``min`` and ``max`` from
    constants, sizes and loop variables whose loop starts at a constant at least 0."""
    if isinstance(e, Const):
        return e.dtype.is_int and int(e.value) >= 0
    if isinstance(e, Size):
        return True
    if isinstance(e, Var):
        low = scope.lows.get(e.name)
        return low is not None and low >= 0
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return _at_least_zero(e.value, scope)
    if not isinstance(e, BinOp) or not e.dtype.is_int:
        return False
    a, b = _at_least_zero(e.a, scope), _at_least_zero(e.b, scope)
    if e.op in ("add", "min"):
        return a and b
    if e.op == "max":
        return a or b
    if e.op == "mul":
        return a and b
    if e.op == "floordiv":
        c = const_value(e.b)
        return a and c is not None and c > 0
    if e.op == "sub":  # a sum whose terms cancel to an affine form of such terms
        try:
            form = affine_form(e)
        except NonAffine:
            return False
        return form.const >= 0 and all(
            c > 0 and _at_least_zero(Var(v), scope) for v, c in form.coeffs) \
            and all(c > 0 for _, c in form.params)
    return False
