"""Lowering pass ``forward_initialisations``: a register tile starts from the pure value.

``promote_accumulators`` loads a reduction's register tile from ``C`` before the reduction loop
and stores it back after. Where the reduction's initialisation (the pure definition's value, the
identity of a sum) is stored to the same cells right before, the tile reads back what was just
stored::

    unrolled for i.i: vectorized for j.i: C[..] = 0      allocate C.acc[4, 64]
    allocate C.acc[4, 64]                                unrolled for i.i: vectorized for j.i:
    unrolled for i.i: vectorized for j.i:                  C.acc[..] = 0
      C.acc[..] = C[..]                             ->   for k: ... C.acc[..] += ...
    for k: ... C.acc[..] += ...                          unrolled for i.i: vectorized for j.i:
    unrolled for i.i: vectorized for j.i:                  C[..] = C.acc[..]
      C[..] = C.acc[..]

The pass forwards the stored value into the tile (store-to-load forwarding) and drops the
stores it makes dead (dead-store elimination: the tile's store overwrites every one of those
cells and nothing reads ``C`` in between). A short reduction (``K`` = 17) thus writes each cell
of ``C`` once instead of twice and reads it not at all, BLIS's ``beta = 0`` micro-kernel.
``fold_init`` does the same where the initialisation is a pass of its own, away from the tile.

It applies to two adjacent statements of a block (nested blocks spliced in: a reduction loop
partitioned into a main piece and a remainder is a block of its own), an initialisation nest and
the tile's allocation, where

- the allocation holds three statements: a nest that loads the tile from ``C``, the loop that
  updates the tile (it neither reads nor writes ``C``), and a nest that stores the tile to ``C``;
- the initialisation nest, the load nest and the store nest are the same loops (variable, bounds,
  kind) and guards in the same order, around one store each, at the same indices of ``C``; and
- the initial value does not read ``C``.

``FORWARD_INIT = 0`` turns the pass off (part of ``lower``'s cache key, for a benchmark's
``--against``).

See also: ``schedule/promote.py`` (the register tile), ``schedule/fold_init.py`` (the
initialisation folded into the first reduction iteration); LLVM's GVN and DSE, which do not see
through the symbolic row stride of ``C``.
"""

from __future__ import annotations

import dataclasses

from tensorlang.expr import Expr, walk

from .ir import Allocate, Block, For, IfThenElse, Load, LoweredFunc, Stmt, Store, map_stmt

#: 1: the pass runs; 0: the tile is loaded from the initialised ``C`` (an A/B switch)
FORWARD_INIT = 1
#: 1: nested blocks spliced in when looking for the pair; 0: only a block's own statements
SPLICE_BLOCKS = 1


def forwarding() -> tuple[int, int]:
    """``FORWARD_INIT`` and ``SPLICE_BLOCKS`` now (part of ``lower``'s cache key: a benchmark
    flips them)."""
    return FORWARD_INIT, SPLICE_BLOCKS


def forward_initialisations(f: LoweredFunc) -> LoweredFunc:
    """Forward every qualifying initialisation into the register tile after it (module
    docstring)."""
    if not FORWARD_INIT:
        return f

    def go(s: Stmt) -> Stmt:
        s = map_stmt(s, go, lambda e: e)
        if not isinstance(s, Block):
            return s
        out: list[Stmt] = []
        changed = False
        for st in _flat(s):
            if out and isinstance(st, Allocate):
                merged = _forward(out[-1], st)
                if merged is not None:
                    out[-1] = merged
                    changed = True
                    continue
            out.append(st)
        if not changed:
            return s
        return out[0] if len(out) == 1 else Block(tuple(out))

    body = go(f.body)
    return f if body is f.body else dataclasses.replace(f, body=body)


def _flat(s: Block) -> list[Stmt]:
    """The statements of ``s`` with nested blocks spliced in (a loop partitioned into pieces is
    a block of its own inside the block of the nest around it)."""
    out: list[Stmt] = []
    for st in s.stmts:
        out.extend(_flat(st) if SPLICE_BLOCKS and isinstance(st, Block) else [st])
    return out


def _nest(s: Stmt) -> tuple[list[Stmt], Store] | None:
    """The loops and guards (``if`` without ``else``) around the one store of ``s``, outermost
    first, and that store; None where ``s`` is not such a nest."""
    wrappers: list[Stmt] = []
    while True:
        if isinstance(s, Store):
            return wrappers, s
        if isinstance(s, For):
            wrappers.append(s)
            s = s.body
        elif isinstance(s, IfThenElse) and s.otherwise is None:
            wrappers.append(s)
            s = s.then
        else:
            return None


def _same_wrappers(a: list[Stmt], b: list[Stmt]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, For) and isinstance(y, For):
            if (x.var, x.kind, x.width) != (y.var, y.kind, y.width) \
                    or not x.min.same_as(y.min) or not x.extent.same_as(y.extent):
                return False
        elif isinstance(x, IfThenElse) and isinstance(y, IfThenElse):
            if not x.cond.same_as(y.cond):
                return False
        else:
            return False
    return True


def _same_indices(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x.same_as(y) for x, y in zip(a, b))


def _touches(s: Stmt, buffer: str) -> bool:
    """Whether ``s`` stores to or loads from ``buffer`` anywhere (``map_stmt`` visits every
    statement's expressions)."""
    hits: list[object] = []

    def fe(e: Expr) -> Expr:
        hits.extend(n for n in walk(e) if isinstance(n, Load) and n.buffer == buffer)
        return e

    def fs(st: Stmt) -> Stmt:
        if isinstance(st, Store) and st.buffer == buffer:
            hits.append(st)
        return map_stmt(st, fs, fe)

    fs(s)
    return bool(hits)


def _forward(init: Stmt, alloc: Allocate) -> Stmt | None:
    """``alloc`` with its tile starting from ``init``'s value, ``init`` dropped; None where the
    pair does not qualify."""
    acc = alloc.buffer
    if not acc.register or not isinstance(alloc.body, Block) or len(alloc.body.stmts) != 3:
        return None
    load_in, update, write_out = alloc.body.stmts
    first, loaded, stored = _nest(init), _nest(load_in), _nest(write_out)
    if first is None or loaded is None or stored is None:
        return None
    (w0, s0), (w1, s1), (w2, s2) = first, loaded, stored
    if s0.reduce_op is not None or s1.reduce_op is not None or s2.reduce_op is not None:
        return None
    c = s0.buffer
    if not (isinstance(s1.value, Load) and s1.value.buffer == c and s1.buffer == acc.name):
        return None
    if not (s2.buffer == c and isinstance(s2.value, Load) and s2.value.buffer == acc.name):
        return None
    if not (_same_indices(s0.indices, s1.value.indices) and _same_indices(s0.indices, s2.indices)
            and _same_indices(s1.indices, s2.value.indices)):
        return None
    if not (_same_wrappers(w0, w1) and _same_wrappers(w0, w2)):
        return None
    if any(isinstance(n, Load) and n.buffer in (c, acc.name) for n in walk(s0.value)):
        return None
    if _touches(update, c):
        return None
    start = _rebuild(load_in, dataclasses.replace(s1, value=s0.value))
    return dataclasses.replace(alloc, body=Block((start, update, write_out)))


def _rebuild(s: Stmt, store: Store) -> Stmt:
    """The nest ``s`` with its one store replaced by ``store``."""
    if isinstance(s, Store):
        return store
    if isinstance(s, For):
        return dataclasses.replace(s, body=_rebuild(s.body, store))
    assert isinstance(s, IfThenElse)
    return dataclasses.replace(s, then=_rebuild(s.then, store))
