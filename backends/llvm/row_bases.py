"""Row base pointers of a register tile: each row of a strided operand addressed from a base of
its own, kept in a register across the loop.

A register tile ``C.acc[i.i, j] += A[b, t + i.i, k] * B_local[k, j]`` broadcasts one element of
each of ``rows`` rows of ``A`` per step of its ``k`` loop, at ``A + ((b * M + t + r) * K + k) *
itemsize``: ``rows`` addresses a row stride ``K`` apart, known only at run time. LLVM's loop
strength reduction rewrites them in terms of one base and the stride and, on x86, recomputes
most rows' addresses in every iteration (chains of ``lea`` and ``add``): instructions that a
4-wide front end (Haswell, Skylake) issues in the cycles its FMAs need. BLIS never meets the
problem, as it packs ``A`` in panels of a constant stride (Goto and van de Geijn, "Anatomy of
High-Performance Matrix Multiplication", TOMS 2008); a tile that reads ``A`` in place (its
reduction not split, so no block of ``A`` is copied) gets here each row's base pointer through
an empty inline-assembly barrier (``asm "" "=r,0"``: the value unchanged, opaque to scalar
evolution), so strength reduction cannot relate the rows and keeps one register per row,
indexed by the loop counter: one load per row and no address arithmetic. The barrier is
``readnone``, so LICM hoists it out of the loop. It is only placed in an innermost loop with at
least two and at most ``MAX_ROWS`` such rows (each costs a general-purpose register; x86-64 has
15 to spare), and only on x86 (the constraint's register class). ``benchmarks/mca.py --against
tensorlang.backends.llvm.row_bases.ROW_BASES=0`` shows the loop's predicted cycles either way.

``ROW_BASES = 0`` turns the pass off (an A/B switch of the benchmarks).
"""

from __future__ import annotations

from collections.abc import Callable

from tensorlang.affine import const_value
from tensorlang.expr import Expr, Var, walk
from tensorlang.schedule.ir import (
    Allocate,
    Block,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    ProducerConsumer,
    Stmt,
    Store,
)

#: 1: give a register tile's strided rows base pointers of their own (0: leave LLVM's addressing)
ROW_BASES = 1
#: 1: also rows of a loop without explicit vectors (jammed dot products that LLVM's loop
#: vectorizer takes: cholesky, ludcmp); 0: only a register tile's broadcast operands
SCALAR_TILES = 0
#: the most row bases one loop gets (general-purpose registers; x86-64 has 16, the loop counter,
#: its bound and the other operands' pointers need some)
MAX_ROWS = 10

#: (buffer name, the indices before the last): one row base, whatever the unrolled loops around it
RowKey = tuple[str, tuple[Expr, ...]]


def row_reads(loop: For, stride_of: Callable[[str], Expr | None]) -> frozenset[RowKey]:
    """The reads of serial ``loop``'s body to address from row bases: loads whose last index
    mentions the loop's variable, whose other indices mention an unrolled loop's variable
    inside it (each unrolled value is a row of its own: a register tile's rows) and no other
    variable bound inside it, and whose row stride (``stride_of(name)``: the buffer's last
    extent; None: unknown buffer) is not a constant. Loads of a buffer allocated inside
    ``loop`` are left alone. Empty unless ``loop`` is innermost (every loop inside it unrolled
    or vectorized: a register tile's reduction loop) and the rows number from 2 to
    ``MAX_ROWS``.

    Only broadcast operands of an explicitly vectorized loop count (a register tile's rows of
    ``A``, one element per row and step): vectors of rows (layernorm's rows summed in vector
    lanes), rows that no unrolled loop makes, and rows a scalar loop reads that LLVM's loop
    vectorizer takes (a dot product of two rows; cholesky's jammed dot products, unless
    ``SCALAR_TILES``) keep LLVM's addressing: timed, they gained nothing from it or lost."""
    if not ROW_BASES:
        return frozenset()
    found: dict[RowKey, int] = {}
    inner: set[str] = set()  # buffers allocated inside the loop
    vectors: set[str] = set()  # the variables of vectorized loops inside it
    nested: list[str] = []  # loops inside it that stay loops

    def expr(e: Expr, bound: frozenset[str], unrolled: dict[str, int]) -> None:
        if not SCALAR_TILES and not any(v in bound for v in vectors):
            return  # not an operand of explicit SIMD: a loop LLVM's vectorizer may take
        for n in walk(e):
            if not isinstance(n, Load) or len(n.indices) < 2 or n.buffer in inner:
                continue
            if not any(isinstance(v, Var) and v.name == loop.var for v in walk(n.indices[-1])):
                continue
            prefix = n.indices[:-1]
            names = {v.name for ix in prefix for v in walk(ix) if isinstance(v, Var)}
            if any(isinstance(v, Var) and v.name in vectors for v in walk(n.indices[-1])):
                continue  # a vector of a row: streamed, its addressing is not the bottleneck
            if loop.var in names or names & (bound - unrolled.keys()) \
                    or not names & unrolled.keys():
                continue
            stride = stride_of(n.buffer)
            if stride is None or const_value(stride) is not None:
                continue
            copies = 1
            for name in names & unrolled.keys():
                copies *= unrolled[name]
            found[(n.buffer, prefix)] = max(found.get((n.buffer, prefix), 0), copies)

    def stmt(s: Stmt, bound: frozenset[str], unrolled: dict[str, int]) -> None:
        if isinstance(s, Block):
            for c in s.stmts:
                stmt(c, bound, unrolled)
        elif isinstance(s, Store):
            expr(s.value, bound, unrolled)
            for ix in s.indices:
                expr(ix, bound, unrolled)
        elif isinstance(s, For):
            n = const_value(s.extent)
            if s.kind is ForKind.UNROLLED and n is not None:
                stmt(s.body, bound | {s.var}, {**unrolled, s.var: n})
            elif s.kind is ForKind.VECTORIZED:
                vectors.add(s.var)
                stmt(s.body, bound | {s.var}, unrolled)
            else:  # a serial loop inside stays a loop: not a register tile's reduction loop
                nested.append(s.var)
        elif isinstance(s, LetStmt):
            expr(s.value, bound, unrolled)
            stmt(s.body, bound | {s.var}, unrolled)
        elif isinstance(s, IfThenElse):
            expr(s.cond, bound, unrolled)
            stmt(s.then, bound, unrolled)
            if s.otherwise is not None:
                stmt(s.otherwise, bound, unrolled)
        elif isinstance(s, Allocate):
            inner.add(s.buffer.name)
            stmt(s.body, bound, unrolled)
        elif isinstance(s, ProducerConsumer):
            stmt(s.body, bound, unrolled)

    stmt(loop.body, frozenset(), {})
    rows = sum(found.values())
    return frozenset(found) if 2 <= rows <= MAX_ROWS and not nested else frozenset()
