"""Double buffering of a block's staged tiles (``Stage.double_buffer()``: TVM's
``double_buffer``), a rewrite of a cooperative kernel's block body (``launches._cooperative``).

A reduction staged in shared memory runs, per step of its serial loop ``k``, the copies of the
operands' tiles, a barrier, the product of the tiles, a barrier: each step's loads from global
memory wait for the previous step's product and the product waits for them. Double buffered,
each copied buffer gets two slots, ``k % 2`` its slot at step ``k``, and the loop becomes::

    if n > 0: copies of step k0 into slot k0 % 2          (the prologue; barrier)
    for k in [k0, k0 + n):
        if k + 1 < k0 + n: copies of step k + 1 into slot (k + 1) % 2     (no barrier)
        the product of step k from slot k % 2                            (barrier)

so the loads of step ``k + 1`` are issued before the product of step ``k`` and ``ptxas`` can
overlap them with its FMAs; one barrier a step instead of two (the copies' loads, which read
only arrays the kernel does not write, move earlier: nothing between could change what they
read). The copy of step ``k + 1`` writes the slot the product of step ``k - 1`` read, after
the barrier that ends step ``k - 1``; the product of step ``k + 1`` reads it after the barrier
that ends step ``k``: the prefetching copies need no barrier of their own (``barriers`` is
told so: they are ``exempt``).

Applied where the loop's body is the copies of its double-buffered buffers, allocated in the
loop with constant extents (a whole tile's kernel), then the rest; elsewhere (a partial tile's
kernel, whose tiles vary in size) the loop is left single-buffered. A staged buffer's origin
moves with ``k`` (its tile's first row): its accesses are rewritten relative to it, the
buffer's origin 0, so that the copy of step ``k + 1`` (``k`` replaced by ``k + 1``
throughout) and the product of step ``k`` each index their own step's tile.

See also: TVM ``src/tir/transforms/inject_double_buffer.cc``; CUTLASS's multistage mainloop.
"""

from __future__ import annotations

import dataclasses

from tensorlang.affine import const_value
from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Cmp, Const, Expr, Var, map_children, substitute, walk
from tensorlang.schedule.ir import (Allocate, Block, Buffer, For, ForKind, IfThenElse, Load,
                                    ProducerConsumer, Stmt, Store, map_stmt,
                                    walk_stmts)

#: suffix of the loop variables of a prefetching copy's thread nest (a copy of the prologue's)
NEXT = ".next"


def double_buffer(body: Stmt, names: frozenset[str], nests: dict[str, frozenset[str]],
                  axes: dict[str, tuple[str, str]], shared: dict[str, int]
                  ) -> tuple[Stmt, frozenset[str]]:
    """``body`` with each serial loop that stages buffers of ``names`` double buffered (module
    docstring), and the prefetching copies' thread nests (their outermost loops' variables,
    registered in ``nests`` and ``axes`` like those they copy; ``shared`` doubled for each
    buffer) that need no barrier after them."""
    if not names:
        return body, frozenset()
    written = {n.buffer for n in walk_stmts(body) if isinstance(n, Store)}
    exempt: set[str] = set()

    def go(st: Stmt) -> Stmt:
        if isinstance(st, For) and st.kind is ForKind.SERIAL and st.var not in nests:
            new = _loop(st, names, written, nests, axes, shared, exempt)
            if new is not None:
                return new
        return map_stmt(st, go, lambda e: e)

    return go(body), frozenset(exempt)


def _loop(loop: For, names: frozenset[str], written: set[str],
          nests: dict[str, frozenset[str]], axes: dict[str, tuple[str, str]],
          shared: dict[str, int], exempt: set[str]) -> Stmt | None:
    allocs: list[Buffer] = []
    node = loop.body
    while isinstance(node, Allocate):
        allocs.append(node.buffer)
        node = node.body
    staged = {b.name for b in allocs if b.name in names
              and all(const_value(e) is not None for e in b.extents)}
    if not staged or not isinstance(node, Block):
        return None
    stmts = list(node.stmts)
    copies: list[Stmt] = []
    while stmts and isinstance(stmts[0], ProducerConsumer) and stmts[0].func in staged:
        copies.append(stmts.pop(0))
    if {c.func for c in copies} != staged or not stmts:  # type: ignore[attr-defined]
        return None
    for c in copies:  # a copy reads only what the kernel never writes
        if any(isinstance(n, Store) and n.buffer not in staged for n in walk_stmts(c)):
            return None
        if _reads(c) & (written - staged):
            return None
    if any(isinstance(n, Store) and n.buffer in staged for s in stmts for n in walk_stmts(s)):
        return None
    k = Var(loop.var)
    mins = {b.name: b.mins for b in allocs if b.name in staged}
    slotted = [_slotted(c, mins, k) for c in copies]
    renames = {lp.var: lp.var + NEXT for c in copies for lp in walk_stmts(c)
               if isinstance(lp, For) and lp.var in nests}
    for old, new in renames.items():
        nests[new], axes[new] = nests[old], axes[old]
        exempt.add(new)
    end = BinOp("add", loop.min, loop.extent, int64)
    nxt = BinOp("add", k, Const(1, int64), int64)
    prologue = [substituted(c, {loop.var: loop.min}, {}) for c in slotted]
    prefetch = [substituted(c, {loop.var: nxt}, renames) for c in slotted]
    body = Block((IfThenElse(Cmp("lt", nxt, end), Block(tuple(prefetch))),
                  *(_slotted(s, mins, k) for s in stmts)))
    # the prologue only where the loop runs (an empty reduction has no tile to copy)
    out: Stmt = Block((IfThenElse(Cmp("gt", loop.extent, Const(0, int64)), Block(tuple(prologue))),
                       dataclasses.replace(loop, body=body)))
    for b in reversed(allocs):  # outside the loop now: a slot dimension, the origin 0
        if b.name in staged:
            shared[b.name] = 2 * shared.get(b.name, 0)
            b = Buffer(b.name, b.dtype, (Const(0, int64),) * (b.rank + 1),
                       (Const(2, int64), *b.extents), b.kind, b.register)
        out = Allocate(b, out)
    return out


def _reads(s: Stmt) -> set[str]:
    """The buffers ``s`` loads from."""
    out: set[str] = set()

    def fe(e: Expr) -> Expr:
        out.update(x.buffer for x in walk(e) if isinstance(x, Load))
        return e

    def fs(st: Stmt) -> Stmt:
        return map_stmt(st, fs, fe)

    fs(s)
    return out


def _slotted(s: Stmt, mins: dict[str, tuple[Expr, ...]], k: Var) -> Stmt:
    """``s`` with every access to a buffer of ``mins`` indexed by the slot ``k % 2`` first,
    then relative to the buffer's origin ``mins[buffer]``."""
    slot = BinOp("mod", k, Const(2, int64), int64)

    def at(name: str, indices: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return (slot, *(BinOp("sub", i, m, int64) for i, m in zip(indices, mins[name])))

    def fe(e: Expr) -> Expr:
        e = map_children(e, fe)
        if isinstance(e, Load) and e.buffer in mins:
            return dataclasses.replace(e, indices=at(e.buffer, e.indices))
        return e

    def fs(st: Stmt) -> Stmt:
        st = map_stmt(st, fs, fe)
        if isinstance(st, Store) and st.buffer in mins:
            return dataclasses.replace(st, indices=at(st.buffer, st.indices))
        return st

    return fs(s)


def substituted(s: Stmt, values: dict[str, Expr], renames: dict[str, str]) -> Stmt:
    """``s`` with the variables of ``values`` replaced by their values and the loops named in
    ``renames`` (and their uses) renamed."""
    mapping = {**values, **{old: Var(new) for old, new in renames.items()}}

    def fs(st: Stmt) -> Stmt:
        st = map_stmt(st, fs, lambda e: substitute(e, mapping))
        if isinstance(st, For) and st.var in renames:
            return dataclasses.replace(st, var=renames[st.var])
        return st

    return fs(s)
