"""The loop-nest IR: what lowering produces and what codegen and cost-model features consume.

Statements are frozen dataclasses with tuple children (rebuild, never mutate). Expressions are the
algorithm IR's (``tensorlang.expr``) plus :class:`Load`, a read of a buffer at multi-dimensional
indices in the producer's own coordinates (the buffer's ``mins`` are subtracted by codegen).

See also: Halide ``src/IR.h`` (For, Store, Allocate, ProducerConsumer, IfThenElse, LetStmt); TVM TIR.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Callable

from tensorlang.affine import const_value, sadd
from tensorlang.dtypes import DType
from tensorlang.expr import BinOp, Expr, walk
from tensorlang.printer import expr_str


class ForKind(enum.Enum):
    """How a loop runs.

    - ``SERIAL``: iterations in order. Always legal.
    - ``PARALLEL``: iterations spread over the thread pool; legal when the loop carries no
      dependence. Costs one parallel-region launch (microseconds) per execution of the loop.
    - ``VECTORIZED``: iterations become lanes of SIMD instructions; legal when the loop carries no
      dependence. Best on the innermost loop with unit-stride accesses.
    - ``UNROLLED``: the body is replicated; always legal. Needs a constant extent.
    - ``GPU_BLOCK`` / ``GPU_THREAD``: iterations become the blocks of a GPU grid / the threads
      of a block (``gpu_blocks`` / ``gpu_threads``; the CUDA backend, ``backends/cuda``); legal,
      like ``PARALLEL``, when the loop carries no dependence.
    """

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    GPU_BLOCK = "gpu_block"
    GPU_THREAD = "gpu_thread"


#: loop kinds whose iterations run at the same time on different threads: a dependence carried
#: by one of these loops is a race (``schedule/legality/check.py``)
CONCURRENT = frozenset({ForKind.PARALLEL, ForKind.GPU_BLOCK, ForKind.GPU_THREAD})
#: the loop kinds of a GPU grid
GPU_KINDS = frozenset({ForKind.GPU_BLOCK, ForKind.GPU_THREAD})


#: The largest extent an unrolled loop may have (lowering refuses more; code generation
#: replicates the body this many times at most).
MAX_UNROLL = 256


def padded_lanes(n: int) -> int:
    """The least power of two at least ``n``: the lanes a register tile's vector dimension of
    ``n`` is allocated (``promote.PAD_VECTORS``), which code generation may run as one vector."""
    return 1 << max(0, n - 1).bit_length()


def lane_cap(extent: Expr) -> int | None:
    """The constant bound ``c`` of a vector loop extent ``min(c, e)`` or ``min(e, c)`` with
    ``1 < c <= 64`` (the tail of a ``GuardWithIf`` split: ``min(8, N - 8 * x.o)``), the
    smallest such bound of a nested ``min`` (the tail of a split inside a split's tail:
    ``min(min(16, e1), e2)``), or None. Code generation runs such a loop as ``c`` lanes under
    a mask."""
    if isinstance(extent, BinOp) and extent.op == "min":
        caps = []
        for side in (extent.a, extent.b):
            c = const_value(side)
            c = lane_cap(side) if c is None else c
            if c is not None and 1 < c <= 64:
                caps.append(int(c))
        return min(caps) if caps else None
    return None


@dataclass(frozen=True, eq=False)
class Buffer:
    """A buffer: ``dtype`` elements, row-major over ``extents``, indexed from ``mins``.

    ``kind`` is ``input`` (a kernel argument, read-only), ``output`` (a kernel argument, written)
    or ``internal`` (allocated by the kernel). Extents and mins are size expressions.

    ``register``: a register tile (``promote_accumulators``): constant extents that cover every
    lane of every vector access, including the dead lanes of a masked vector loop (its extents
    are the loops' lane caps), so code generation accesses it without the lane mask and LLVM
    can keep it in registers; what dead lanes hold is never stored anywhere else.
    """

    name: str
    dtype: DType
    mins: tuple[Expr, ...]
    extents: tuple[Expr, ...]
    kind: str
    register: bool = False

    @property
    def rank(self) -> int:
        return len(self.extents)


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    """Read ``buffer[indices]`` (indices in the producer's coordinates, int64)."""

    buffer: str
    indices: tuple[Expr, ...]
    dtype: DType


def reads_memory(e: Expr) -> bool:
    """Whether ``e`` loads from any buffer (its value may change when memory is written)."""
    return any(isinstance(n, Load) for n in walk(e))


class Stmt:
    """Base class of loop-nest IR statements."""

    def __str__(self) -> str:
        return print_stmt(self)


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """``for var in [min, min + extent): body``, run as ``kind``; ``width`` is the SIMD width of
    a vectorized loop (0: its constant extent, or the native width when it has none); a serial
    loop with ``width`` 1 stays scalar (LLVM's loop vectorizer is told to leave it).
    ``independent``: no iteration touches a cell another iteration writes, as the pass that set
    it proved (``schedule/invariant_reads.py``); codegen tells LLVM so
    (``llvm.loop.parallel_accesses``), whose vectorizer then needs no run-time alias checks."""

    var: str
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    width: int = 0
    independent: bool = False


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    """``buffer[indices] = value``; with ``reduce_op``, ``buffer[indices] = buffer[indices] op
    value`` where the op is associative (reassociation allowed: the reduction policy).
    ``reassociable``: the store of an ``atomic()`` update, whose accumulation into one cell
    ``reduce_update_cells`` may turn into a reduction (``schedule/cell_reduction.py``).
    ``initial``: ``(conditions, value)`` of a reduction whose initialisation pass was folded
    into it (``schedule/fold_init.py``): where all the conditions hold (the cell's first
    update) the old value is ``value`` (the reduction's identity), not the buffer's."""

    buffer: str
    indices: tuple[Expr, ...]
    value: Expr
    reduce_op: str | None = None
    reassociable: bool = False
    initial: tuple[tuple[Expr, ...], Expr] | None = None


@dataclass(frozen=True, eq=False)
class Prefetch(Stmt):
    """A hint: bring the cache line holding ``buffer[indices]`` into the nearest cache. It
    changes no value, and an address outside the buffer is never touched (codegen clamps none:
    lowering emits only indices inside the buffer's domain). Halide's ``Prefetch`` node; x86
    ``prefetcht0`` (LLVM ``llvm.prefetch``)."""

    buffer: str
    indices: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class Allocate(Stmt):
    """Storage for an internal ``buffer`` that lives for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False)
class Block(Stmt):
    """Statements in sequence."""

    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class IfThenElse(Stmt):
    """``if cond: then else: otherwise`` (``otherwise`` may be None)."""

    cond: Expr
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(frozen=True, eq=False)
class LetStmt(Stmt):
    """Bind ``var`` (int64) to ``value`` within ``body``."""

    var: str
    value: Expr
    body: Stmt


@dataclass(frozen=True, eq=False)
class ProducerConsumer(Stmt):
    """Marks the statements that compute Func ``func`` (Halide's ``produce f:``)."""

    func: str
    body: Stmt


@dataclass(frozen=True, eq=False)
class LoweredFunc:
    """A whole lowered kernel: its argument buffers (inputs in order, then the outputs in the
    pipeline's order), the size parameters it takes (by name, in order), every buffer it touches,
    and the body."""

    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    sizes: tuple[str, ...]
    buffers: dict[str, Buffer] = field(hash=False)
    body: Stmt

    def __str__(self) -> str:
        return print_stmt(self.body)


# -- traversal -----------------------------------------------------------------------------------
def child_stmts(s: Stmt) -> tuple[Stmt, ...]:
    """The statements directly inside ``s``, in order."""
    if isinstance(s, Block):
        return s.stmts
    if isinstance(s, IfThenElse):
        return (s.then,) if s.otherwise is None else (s.then, s.otherwise)
    if isinstance(s, (For, Allocate, LetStmt, ProducerConsumer)):
        return (s.body,)
    return ()


def walk_stmts(s: Stmt):
    """Pre-order traversal of ``s`` and every statement inside it."""
    yield s
    for c in child_stmts(s):
        yield from walk_stmts(c)


def map_stmt(s: Stmt, fs: Callable[[Stmt], Stmt], fe: Callable[[Expr], Expr]) -> Stmt:
    """Rebuild ``s`` with ``fs`` applied to child statements and ``fe`` to its expressions."""

    if isinstance(s, For):
        new = dict(min=fe(s.min), extent=fe(s.extent), body=fs(s.body))
    elif isinstance(s, Store):
        new = dict(indices=tuple(fe(i) for i in s.indices), value=fe(s.value))
        if s.initial is not None:
            conds = tuple(fe(c) for c in s.initial[0])
            if any(a is not b for a, b in zip(conds, s.initial[0])):
                new["initial"] = (conds, s.initial[1])
    elif isinstance(s, Prefetch):
        new = dict(indices=tuple(fe(i) for i in s.indices))
    elif isinstance(s, Allocate):
        new = dict(body=fs(s.body))
    elif isinstance(s, Block):
        new = dict(stmts=tuple(fs(c) for c in s.stmts))
    elif isinstance(s, IfThenElse):
        new = dict(cond=fe(s.cond), then=fs(s.then),
                   otherwise=None if s.otherwise is None else fs(s.otherwise))
    elif isinstance(s, LetStmt):
        new = dict(value=fe(s.value), body=fs(s.body))
    elif isinstance(s, ProducerConsumer):
        new = dict(body=fs(s.body))
    else:
        raise TypeError(f"unknown statement {type(s).__name__}")
    if all(new[k] is getattr(s, k) or (isinstance(new[k], tuple) and all(
            a is b for a, b in zip(new[k], getattr(s, k)))) for k in new):
        return s
    return dataclasses.replace(s, **new)  # type: ignore[type-var]



def map_stmt_and_bounds(s: Stmt, fs: Callable[[Stmt], Stmt], fe: Callable[[Expr], Expr]
                        ) -> Stmt:
    """``map_stmt``, with ``fe`` applied to an allocation's buffer bounds too (``map_stmt``
    leaves them as they are): for a rewrite of variables those bounds may name."""
    if isinstance(s, Allocate):
        buf = s.buffer
        nb = dataclasses.replace(buf, mins=tuple(fe(m) for m in buf.mins),
                                 extents=tuple(fe(x) for x in buf.extents))
        return dataclasses.replace(s, buffer=nb, body=fs(s.body))
    return map_stmt(s, fs, fe)

# -- printing ------------------------------------------------------------------------------------
def _load_str(n: Expr, go: Callable) -> str:
    if isinstance(n, Load):
        return f"{n.buffer}[{', '.join(go(i) for i in n.indices)}]"
    return f"<{type(n).__name__}>"


def e2s(e: Expr) -> str:
    """Text of a loop-nest IR expression."""
    return expr_str(e, _load_str)


_OPS = {"sum": "+=", "prod": "*=", "max": "max=", "min": "min="}


def print_stmt(s: Stmt, indent: int = 0) -> str:
    """The loop nest as text, Halide ``print_loop_nest`` style (one statement per line)."""
    pad = "  " * indent
    if isinstance(s, For):
        kind = "" if s.kind is ForKind.SERIAL else f"{s.kind.value} "
        kind = "independent " + kind if s.independent else kind
        from tensorlang.affine import const_value

        hi = e2s(s.extent) if const_value(s.min) == 0 else e2s(_add(s.min, s.extent))
        head = f"{pad}{kind}for {s.var} in [{e2s(s.min)}, {hi}):\n"
        return head + print_stmt(s.body, indent + 1)
    if isinstance(s, Store):
        idx = ", ".join(e2s(i) for i in s.indices)
        op = "=" if s.reduce_op is None else _OPS[s.reduce_op]
        first = "" if s.initial is None else \
            f"  (from {e2s(s.initial[1])} where {' and '.join(e2s(c) for c in s.initial[0])})"
        return f"{pad}{s.buffer}[{idx}] {op} {e2s(s.value)}{first}\n"
    if isinstance(s, Prefetch):
        return f"{pad}prefetch {s.buffer}[{', '.join(e2s(i) for i in s.indices)}]\n"
    if isinstance(s, Allocate):
        b = s.buffer
        dims = "".join(f", {e2s(e)}" for e in b.extents)
        return f"{pad}allocate {b.name}[{b.dtype.value}{dims}]\n" + print_stmt(s.body, indent)
    if isinstance(s, Block):
        return "".join(print_stmt(c, indent) for c in s.stmts)
    if isinstance(s, IfThenElse):
        out = f"{pad}if {e2s(s.cond)}:\n" + print_stmt(s.then, indent + 1)
        if s.otherwise is not None:
            out += f"{pad}else:\n" + print_stmt(s.otherwise, indent + 1)
        return out
    if isinstance(s, LetStmt):
        return f"{pad}let {s.var} = {e2s(s.value)}\n" + print_stmt(s.body, indent)
    if isinstance(s, ProducerConsumer):
        return f"{pad}produce {s.func}:\n" + print_stmt(s.body, indent + 1)
    raise TypeError(f"unknown statement {type(s).__name__}")


def _add(a: Expr, b: Expr) -> Expr:
    return sadd(a, b)
