"""Lowering pass ``promote_accumulators``: keep a reduction's register tile in a local buffer.

For a serial loop ``L`` (typically the outermost reduction loop) whose body updates ``C`` through
exactly one unguarded reduction store whose indices do not depend on ``L``, and where every loop
inside ``L`` that the indices do use is unrolled or vectorized with a constant extent (the register
tile; other loops inside ``L`` are reduction loops and stay in place)::

    for k:                                   allocate C.acc[8, 32]
      unrolled for i.i in [0, 8):            unrolled for i.i: vectorized for j.i: C.acc[..] = C[..]
        vectorized for j.i in [0, 32):  ->   for k:
          C[i, j] += A[i, k] * B[k, j]         unrolled for i.i: vectorized for j.i: C.acc[..] += ..
                                             unrolled for i.i: vectorized for j.i: C[..] = C.acc[..]

The accumulator has constant shape and is indexed by unrolled constants and whole vectors (or is
one cell of an internal buffer: an rfactor stage's partial sum), so LLVM (SROA) keeps it in
registers; C is read and written once per tile instead of once per ``k``. This
is what TVM's ``cache_write(C, "local")`` and Halide's register blocking achieve, done automatically:
without it LLVM cannot keep the tile in registers when C's row stride is symbolic (the rows might
overlap). It changes no result: C is touched by nothing else inside ``L``.

The remainder pieces of loop partitioning keep their tile too: a masked vector loop
(``min(8, N - 8 * x.o)``, possibly inside another loop of the tile) takes its lane cap as the
tile's extent, and a guard on the path (``if i.i + t < M``: a tail row; ``if j.i + t <= i``: a
triangle's diagonal) is copied into the nests that load and store the tile, provided it reads
no memory and mentions, of the variables bound inside ``L``, only the tile's loops around it.
A guard on the reduction alone (``if k.i.i + 4 * k.i.o + t < K``: the reduction split again
inside a ``kc`` block of symbolic extent) mentions none of the tile's loops: it stays where it is,
around the update of the accumulator, and the tile is loaded and stored whatever it says (a
cell it leaves without an update is stored back unchanged).
The accumulator is a ``register`` buffer: code generation accesses it without the lane mask.
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import const_value, sconst
from tensorlang.expr import BinOp, Expr, Var, walk

from .ir import (CONCURRENT, Allocate, Block, Buffer, For, ForKind, IfThenElse, Load, LoweredFunc,
                 Stmt, Store, lane_cap, map_stmt, padded_lanes, reads_memory)
from .nest import conjunction

MAX_TILE_ELEMENTS = 1024
#: whether a guard on the reduction alone stays around the update (else it prevents the
#: register tile, as before; part of ``lower``'s cache key, for a benchmark's ``--against``)
STAY_GUARDS = 1


#: whether a register tile's vector dimension is allocated to a power of two (its extent 7: 8),
#: so that code generation can run a remainder of lanes that is not one as a single masked
#: vector (``backends/llvm/loops.py``, ``LoopGen.vector_loop``); 0: the loop's extent, as
#: before (for ``--against``)
PAD_VECTORS = 1


def promoting() -> tuple[int, int]:
    """``STAY_GUARDS`` and ``PAD_VECTORS`` now (part of ``lower``'s cache key: a benchmark
    flips them)."""
    return STAY_GUARDS, PAD_VECTORS


def _stores(s: Stmt, path: tuple[For, ...] = ()) -> list[tuple[Store, tuple[For, ...]]]:
    out: list[tuple[Store, tuple[For, ...]]] = []
    if isinstance(s, Store):
        out.append((s, path))
    elif isinstance(s, For):
        out.extend(_stores(s.body, path + (s,)))
    elif isinstance(s, Block):
        for c in s.stmts:
            out.extend(_stores(c, path))
    else:
        for f in ("body", "then", "otherwise"):
            c = getattr(s, f, None)
            if isinstance(c, Stmt):
                out.extend(_stores(c, path + (s,)))  # type: ignore[arg-type]
    return out


def _loads(s: Stmt) -> list[Load]:
    out: list[Load] = []

    def ex(e: Expr) -> None:
        out.extend(n for n in walk(e) if isinstance(n, Load))

    def go(st: Stmt) -> None:
        if isinstance(st, Store):
            ex(st.value)
            for i in st.indices:
                ex(i)
        elif isinstance(st, For):
            ex(st.min)
            ex(st.extent)
            go(st.body)
        elif isinstance(st, Block):
            for c in st.stmts:
                go(c)
        else:
            for f in ("body", "then", "otherwise"):
                c = getattr(st, f, None)
                if isinstance(c, Stmt):
                    go(c)

    go(s)
    return out


def _vars(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var)}


def _try_promote(loop: For, buffers: dict[str, Buffer], counter: list[int]) -> Stmt | None:
    if loop.kind not in (ForKind.SERIAL, ForKind.UNROLLED):
        return None
    stores = _stores(loop.body)
    reds = [(s, p) for s, p in stores if s.reduce_op is not None]
    if len(reds) != 1:
        return None
    store, path = reds[0]
    if any(s.buffer == store.buffer for s, _ in stores if s is not store):
        return None
    if any(ld.buffer == store.buffer for ld in _loads(loop.body)):
        return None
    # the path holds loops and guards (``if`` without ``else``: a GuardWithIf tail row), no
    # other statement
    if any(not isinstance(f, (For, IfThenElse)) for f in path):
        return None
    if any(isinstance(f, IfThenElse) and f.otherwise is not None for f in path):
        return None
    idx_vars = set().union(*(_vars(i) for i in store.indices)) if store.indices else set()
    if loop.var in idx_vars:
        return None
    loops = [f for f in path if isinstance(f, For)]
    # the tile: the loops inside L that select the cell; the others (inner reduction loops)
    # stay where they are
    chain = [f for f in loops if f.var in idx_vars]
    others = [f for f in loops if f.var not in idx_vars]
    # no chain: one cell of an internal buffer (an rfactor stage's partial sum), which LLVM
    # cannot keep in a register itself (the buffer may alias the inputs; arguments are noalias)
    if not chain and buffers[store.buffer].kind != "internal":
        return None
    if any(f.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED) for f in chain):
        return None
    if any(f.kind in CONCURRENT or f.kind is ForKind.VECTORIZED for f in others):
        return None
    exts = [_tile_extent(f) for f in chain]
    if any(e is None or e < 1 for e in exts):
        return None
    size = 1
    for e in exts:
        size *= e  # type: ignore[operator]
    if size > MAX_TILE_ELEMENTS:
        return None
    chain_vars = {f.var for f in chain}
    inner = {loop.var} | {f.var for f in loops}
    # guards on the reduction alone stay in place (not copied into the load and store nests)
    stays = {id(f) for f in path if STAY_GUARDS and isinstance(f, IfThenElse)
             and _vars(f.cond) & inner and not _vars(f.cond) & chain_vars
             and not reads_memory(f.cond)}
    kept = tuple(f for f in path if id(f) not in stays)
    if not _bounds_hoistable(loop, kept, idx_vars):
        return None
    # the tile must map one-to-one onto cells: every chain variable appears in exactly one index,
    # alone among the chain variables there or in a mixed-radix combination (``x.i.i + 8 * x.i.o``
    # of a vectorized split)
    extent_of = {f.var: e for f, e in zip(chain, exts)}
    seen: set[str] = set()
    for ix in store.indices:
        used = _vars(ix) & chain_vars
        if used & seen:
            return None
        if len(used) > 1 and not _mixed_radix(ix, used, extent_of):
            return None
        seen |= used
    if seen != chain_vars:
        return None
    counter[0] += 1
    cbuf = buffers[store.buffer]
    # a vector loop's dimension padded to a power of two: code generation may run the loop's last
    # lanes as one wider vector under a lane mask (7 lanes as 8, not 4 + 2 + 1)
    padded = [padded_lanes(e) if PAD_VECTORS and f.kind is ForKind.VECTORIZED  # type: ignore
              else e for f, e in zip(chain, exts)]
    acc = Buffer(f"{store.buffer}.acc{counter[0]}", cbuf.dtype, tuple(f.min for f in chain),
                 tuple(_c(e) for e in padded), "internal", register=True)
    buffers[acc.name] = acc
    acc_idx = tuple(Var(f.var) for f in chain)
    # the copy nests: the chain loops and the guards, in their order on the path
    tile = [f for f in kept if isinstance(f, IfThenElse) or f.var in chain_vars]

    def nest(core: Stmt) -> Stmt:
        for f in reversed(tile):
            core = dataclasses.replace(f, then=core) if isinstance(f, IfThenElse) \
                else dataclasses.replace(f, body=core)
        return core

    load_in = nest(Store(acc.name, acc_idx, Load(store.buffer, store.indices, cbuf.dtype)))
    if store.initial is not None:
        # a folded initialisation: the tile starts from the identity, without reading C, where
        # this entry into L is the cells' first update (the conditions on loops outside L;
        # those on L and the loops inside it hold when L starts)
        inside = {loop.var} | {f.var for f in path if isinstance(f, For)}
        outer = [c for c in store.initial[0] if not _vars(c) & inside]
        first = nest(Store(acc.name, acc_idx, store.initial[1]))
        load_in = first if not outer else IfThenElse(conjunction(outer), first, load_in)
    write_out = nest(Store(store.buffer, store.indices, Load(acc.name, acc_idx, cbuf.dtype)))
    new_store = Store(acc.name, acc_idx, store.value, store.reduce_op)
    new_loop = dataclasses.replace(loop, body=_replace(loop.body, store, new_store))
    return Allocate(acc, Block((load_in, new_loop, write_out)))


def _tile_extent(f: For) -> int | None:
    """The accumulator's extent along chain loop ``f``: its constant extent, or the lane cap of
    a masked vector loop (``min(8, N - 8 * x.o)``: 8)."""
    n = const_value(f.extent)
    if n is None and f.kind is ForKind.VECTORIZED:
        return lane_cap(f.extent)
    return n


def _bounds_hoistable(loop: For, path: tuple, idx_vars: set[str]) -> bool:
    """Whether the chain loops and guards on ``path`` can be copied out of ``loop`` in their
    order: a chain loop's min is invariant in ``loop``, its extent and a guard's condition
    mention, of the variables bound inside ``loop``, only the chain loops enclosing them
    (``min(8, N - 8 * j.i.o - t)`` inside ``j.i.o``; ``if i.i + t < M``), and none reads memory
    (a buffer written inside ``loop`` could change between the copies)."""
    inner = {loop.var} | {f.var for f in path if isinstance(f, For)}
    enclosing: set[str] = set()
    for f in path:
        if isinstance(f, IfThenElse):
            if _vars(f.cond) & (inner - enclosing) or reads_memory(f.cond):
                return False
        elif f.var in idx_vars:
            if _vars(f.min) & inner or reads_memory(f.min):
                return False
            if _vars(f.extent) & (inner - enclosing) or reads_memory(f.extent):
                return False
            enclosing.add(f.var)
    return True


def _linear(e: Expr, vars_: set[str]) -> dict[str, int] | None:
    """The constant coefficients of ``vars_`` in ``e`` (terms without them are opaque: a
    ``min(...)`` tile origin is fine), or None if they do not occur linearly."""
    if not (_vars(e) & vars_):
        return {}
    if isinstance(e, Var):
        return {e.name: 1}
    if isinstance(e, BinOp) and e.op in ("add", "sub"):
        a, b = _linear(e.a, vars_), _linear(e.b, vars_)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    if isinstance(e, BinOp) and e.op == "mul":
        for c, rest in ((e.a, e.b), (e.b, e.a)):
            k = const_value(c)
            if k is not None:
                inner = _linear(rest, vars_)
                return None if inner is None else {v: k * x for v, x in inner.items()}
    return None


def _mixed_radix(ix: Expr, used: set[str], extent_of: dict[str, int]) -> bool:
    """True if ``ix`` is linear in the variables ``used`` and takes a distinct value for every
    point of their box: sorted by coefficient, each coefficient exceeds the largest sum the
    smaller terms reach (``c[k+1] > sum(c[j] * (extent[j] - 1) for j <= k)``)."""
    form = _linear(ix, used)
    if form is None:
        return False
    coeffs = sorted((abs(form.get(v, 0)), extent_of[v]) for v in used)
    reach = 0
    for c, e in coeffs:
        if c == 0 or c <= reach:
            return False
        reach += c * (e - 1)
    return True


def _c(v: int) -> Expr:
    return sconst(v)


def _replace(s: Stmt, old: Store, new: Store) -> Stmt:
    if s is old:
        return new
    return map_stmt(s, lambda c: _replace(c, old, new), lambda e: e)


def promote_accumulators(f: LoweredFunc) -> LoweredFunc:
    """Apply the promotion to the outermost qualifying loop of every loop nest."""
    buffers = dict(f.buffers)
    counter = [0]

    def go(s: Stmt) -> Stmt:
        if isinstance(s, For):
            r = _try_promote(s, buffers, counter)
            if r is not None:
                return r
        return map_stmt(s, go, lambda e: e)

    body = go(f.body)
    if body is f.body:
        return f
    return dataclasses.replace(f, body=body, buffers=buffers)
