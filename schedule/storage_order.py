"""Storage order: an internal Func's buffer laid out with its dimensions in another order
(``reorder_storage``), applied to the loop nest right after ``realize``.

The buffer's mins and extents and every access to it (loads, stores, prefetches) are permuted
into the storage order, so each later pass and code generation see an ordinary row-major buffer
whose last index is the one with unit stride. Values and the order of evaluation are
unchanged. See also: Halide ``Func::reorder_storage``.
"""

from __future__ import annotations

import dataclasses

from tensorlang.expr import Expr, map_children

from .ir import Allocate, Buffer, Load, LoweredFunc, Prefetch, Stmt, Store, map_stmt


def storage_permutation(args: tuple[str, ...], order: tuple[str, ...]) -> tuple[int, ...]:
    """The argument positions of ``order`` (a Func's pure Vars, outermost stored first).

    >>> storage_permutation(("j", "b"), ("b", "j"))
    (1, 0)
    """
    return tuple(args.index(v) for v in order)


def _permuted(items: tuple, perm: tuple[int, ...]) -> tuple:
    return tuple(items[d] for d in perm)


def reorder_storage(f: LoweredFunc, perms: dict[str, tuple[int, ...]]) -> LoweredFunc:
    """``f`` with each buffer named in ``perms`` stored in that order: ``perms[name][k]`` is the
    argument dimension stored at position ``k`` (0: the outermost)."""
    perms = {n: p for n, p in perms.items() if p != tuple(range(len(p)))}
    if not perms:
        return f

    def buffer(b: Buffer) -> Buffer:
        p = perms.get(b.name)
        if p is None:
            return b
        return dataclasses.replace(b, mins=_permuted(b.mins, p),
                                   extents=_permuted(b.extents, p))

    def fe(e: Expr) -> Expr:
        e = map_children(e, fe)
        if isinstance(e, Load) and e.buffer in perms:
            return dataclasses.replace(e, indices=_permuted(e.indices, perms[e.buffer]))
        return e

    def fs(s: Stmt) -> Stmt:
        s = map_stmt(s, fs, fe)
        if isinstance(s, (Store, Prefetch)) and s.buffer in perms:
            return dataclasses.replace(s, indices=_permuted(s.indices, perms[s.buffer]))
        if isinstance(s, Allocate) and s.buffer.name in perms:
            return dataclasses.replace(s, buffer=buffer(s.buffer))
        return s

    return dataclasses.replace(f, body=fs(f.body),
                               buffers={n: buffer(b) for n, b in f.buffers.items()})
