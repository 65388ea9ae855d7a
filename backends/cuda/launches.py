"""Which parts of a lowered loop nest run on the GPU, and how each is launched.

A lowered kernel (``schedule/ir.py``) becomes a *host program* and *device kernels*, as in
Halide's ``CodeGen_GPU_Host``: the host program keeps the statements that only decide what runs
(``let`` of sizes, ``if`` over sizes, allocation of root buffers, serial loops around launches)
and replaces each *region* by a :class:`Launch`. A region is

- a loop nest whose outermost loops are mapped to the GPU: ``gpu_block`` loops (1-3; the last
  one is ``blockIdx.x``), then directly inside them ``gpu_thread`` loops (0-3; the last is
  ``threadIdx.x``), with only ``let`` and ``if`` between them; what is inside the innermost
  mapped loop runs serially in each thread; or
- any other statement that reads or writes a buffer (a stage left serial), run by one thread.

Launch dimensions are host expressions: a ``gpu_block`` loop's extent (it may use sizes and host
variables, never another mapped loop's variable), a ``gpu_thread`` loop's extent, or where that
varies from block to block (the partial tile of a split), its constant upper bound; the kernel
then guards the thread loop with ``threadIdx < extent``.

Not yet: buffers shared by the threads of a block (an ``Allocate`` between the block and thread
loops: ``cache_read(..., scope="shared")`` and barriers), serial loops between block and thread
loops. Both are refused with a ``CompileError`` that says so.

See also: Halide ``src/CodeGen_GPU_Host.cpp``, ``src/FuseGPUThreadLoops.cpp``; TVM's
``SplitHostDevice`` pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorlang.affine import const_value
from tensorlang.errors import CompileError
from tensorlang.expr import BinOp, Const, Expr, Var, substitute, walk
from tensorlang.dtypes import int64
from tensorlang.schedule.ir import (
    GPU_KINDS,
    Allocate,
    Block,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    LoweredFunc,
    ProducerConsumer,
    Stmt,
    Store,
    walk_stmts,
)

#: CUDA's limits on launch dimensions (compute capability 3.0 and later)
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)

AXES = ("x", "y", "z")


@dataclass(frozen=True, eq=False)
class Launch(Stmt):
    """A host statement: run ``body`` on the GPU as kernel ``name``.

    ``grid`` and ``block`` are the launch dimensions (x, y, z) as host expressions (sizes and
    host variables); ``axes`` maps each mapped loop's variable to its id register
    (``("ctaid" | "tid", "x" | "y" | "z")``); ``guarded`` names the thread loops launched with an
    upper bound of their extent (their body runs only where ``tid < extent``). The kernel takes
    the buffers ``buffers`` (by name, in this order), then every size of the pipeline, then the
    host variables ``scalars`` (int64)."""

    index: int
    name: str
    body: Stmt
    grid: tuple[Expr, Expr, Expr]
    block: tuple[Expr, Expr, Expr]
    axes: dict[str, tuple[str, str]] = field(hash=False)
    guarded: frozenset[str]
    buffers: tuple[str, ...]
    scalars: tuple[str, ...]

    @property
    def single_thread(self) -> bool:
        return not self.axes


@dataclass(frozen=True)
class DeviceProgram:
    """A lowered kernel split for the GPU: ``host`` (the lowered body with each region replaced
    by a :class:`Launch`) and the launches in order."""

    lowered: LoweredFunc
    host: Stmt
    launches: tuple[Launch, ...]


ONE = Const(1, int64)


def _mapped(s: Stmt) -> bool:
    return any(isinstance(n, For) and n.kind in GPU_KINDS for n in walk_stmts(s))


def _stmt_exprs(s: Stmt) -> list[Expr]:
    if isinstance(s, For):
        return [s.min, s.extent]
    if isinstance(s, Store):
        return [*s.indices, s.value]
    if isinstance(s, IfThenElse):
        return [s.cond]
    if isinstance(s, LetStmt):
        return [s.value]
    if isinstance(s, Allocate):
        return [*s.buffer.mins, *s.buffer.extents]
    return []


def _reads_memory(e: Expr) -> bool:
    return any(isinstance(n, Load) for n in walk(e))


def _loop_names(s: Stmt) -> str:
    return ", ".join(n.var for n in walk_stmts(s) if isinstance(n, For) and n.kind in GPU_KINDS)


def plan(lowered: LoweredFunc) -> DeviceProgram:
    """Split ``lowered`` into its host program and device launches.

    Raises:
        CompileError: a mapped loop is where no launch can put it (inside a serial loop of a
            region, below a buffer the block's threads would share, more than three of a kind,
            a block loop inside a thread loop); the message names the loop and the fix.
    """
    launches: list[Launch] = []
    order = [b.name for b in (*lowered.inputs, *lowered.outputs)]

    def region(s: Stmt, host_vars: frozenset[str]) -> Stmt:
        index = len(launches)
        launch = _region(lowered, s, index, f"{lowered.name}_k{index}", host_vars, order)
        launches.append(launch)
        return launch

    def host(s: Stmt, host_vars: frozenset[str]) -> Stmt:
        if isinstance(s, Block):
            return Block(tuple(host(c, host_vars) for c in s.stmts))
        if isinstance(s, ProducerConsumer):
            return ProducerConsumer(s.func, host(s.body, host_vars))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, host(s.body, host_vars))
        if isinstance(s, LetStmt) and not _reads_memory(s.value):
            return LetStmt(s.var, s.value, host(s.body, host_vars | {s.var}))
        if isinstance(s, IfThenElse) and not _reads_memory(s.cond):
            return IfThenElse(s.cond, host(s.then, host_vars),
                              None if s.otherwise is None else host(s.otherwise, host_vars))
        if isinstance(s, For) and s.kind not in GPU_KINDS and _mapped(s.body):
            if s.kind is ForKind.PARALLEL:
                raise CompileError(f"loop {s.var} is parallel (the CPU thread pool) and holds "
                                   f"GPU loops ({_loop_names(s.body)}); on target cuda make it "
                                   f"serial, or map it with gpu_blocks")
            # a serial loop around launches (time steps): the host runs it
            return For(s.var, s.min, s.extent, ForKind.SERIAL, host(s.body, host_vars | {s.var}))
        return region(s, host_vars)

    body = host(lowered.body, frozenset())
    return DeviceProgram(lowered, body, tuple(launches))


def _region(lowered: LoweredFunc, s: Stmt, index: int, name: str, host_vars: frozenset[str],
            order: list[str]) -> Launch:
    blocks: list[For] = []
    threads: list[For] = []
    lets: dict[str, Expr] = {}
    node = s
    while True:
        if isinstance(node, For) and node.kind is ForKind.GPU_BLOCK:
            if threads:
                raise CompileError(f"gpu_blocks loop {node.var} is inside gpu_threads loop "
                                   f"{threads[-1].var}: map the outer loops to blocks and the "
                                   f"inner ones to threads (gpu_tile does both)")
            blocks.append(node)
        elif isinstance(node, For) and node.kind is ForKind.GPU_THREAD:
            threads.append(node)
        elif isinstance(node, LetStmt) and _mapped(node.body):
            lets[node.var] = node.value
            node = node.body
            continue
        elif isinstance(node, IfThenElse) and node.otherwise is None and _mapped(node.then):
            node = node.then
            continue
        else:
            break
        node = node.body
    if _mapped(node):
        inner = next(n for n in walk_stmts(node) if isinstance(n, For) and n.kind in GPU_KINDS)
        what = ("a buffer allocated between the block and thread loops (a buffer the threads "
                "of a block share: shared memory, not supported yet)" if any(
                    isinstance(n, Allocate) for n in walk_stmts(node)) else
                "a serial loop or a sequence of statements")
        raise CompileError(f"GPU loop {inner.var} is inside {what}; a kernel's gpu_blocks loops "
                           f"must be its outermost loops and its gpu_threads loops directly "
                           f"inside them: compute the stage at root with its own gpu_tile, or "
                           f"compute it inside the thread loops")
    for kind, loops in (("gpu_blocks", blocks), ("gpu_threads", threads)):
        if len(loops) > 3:
            raise CompileError(f"{len(loops)} nested {kind} loops "
                               f"({', '.join(lp.var for lp in loops)}); a GPU has three "
                               f"dimensions: fuse some of them")
    mapped = {lp.var for lp in (*blocks, *threads)}
    axes: dict[str, tuple[str, str]] = {}
    grid: list[Expr] = [ONE, ONE, ONE]
    block: list[Expr] = [ONE, ONE, ONE]
    guarded: set[str] = set()
    for reg, loops, dims in (("ctaid", blocks, grid), ("tid", threads, block)):
        for k, lp in enumerate(reversed(loops)):
            axes[lp.var] = (reg, AXES[k])
            ext = _inline(lp.extent, lets)
            if not {v.name for v in walk_vars(ext)} & mapped:
                dims[k] = ext
                continue
            bound = _upper_bound(ext) if reg == "tid" else None
            if bound is None:
                raise CompileError(
                    f"the extent of {'gpu_threads' if reg == 'tid' else 'gpu_blocks'} loop "
                    f"{lp.var} ({ext}) depends on another GPU loop and has no constant bound; "
                    f"split the loop by a constant factor and map the inner part")
            dims[k] = Const(bound, int64)
            guarded.add(lp.var)
    bound_inside: set[str] = set()
    used_vars: set[str] = set()
    used: set[str] = set()
    allocated: set[str] = set()
    for st in walk_stmts(s):
        if isinstance(st, (For, LetStmt)):
            bound_inside.add(st.var)
        if isinstance(st, Allocate):
            allocated.add(st.buffer.name)
        if isinstance(st, Store):
            used.add(st.buffer)
        for e in _stmt_exprs(st):
            for n in walk(e):
                if isinstance(n, Var):
                    used_vars.add(n.name)
                elif isinstance(n, Load):
                    used.add(n.buffer)
    free = used_vars - bound_inside
    stray = free - host_vars
    if stray:
        raise CompileError(f"kernel {name} uses {', '.join(sorted(stray))}, defined neither in "
                           f"it nor by the host (a tensorlang bug; please report the loop nest)")
    args = sorted(used - allocated, key=lambda b: (order.index(b) if b in order else len(order),
                                                  b))
    return Launch(index, name, s, tuple(grid), tuple(block), axes, frozenset(guarded),
                  tuple(args), tuple(sorted(free)))


def walk_vars(e: Expr) -> list[Var]:
    return [n for n in walk(e) if isinstance(n, Var)]


def _inline(e: Expr, lets: dict[str, Expr]) -> Expr:
    """``e`` with the region's ``let`` variables replaced by their values (innermost first)."""
    for _ in range(len(lets) + 1):
        names = {v.name for v in walk_vars(e)} & set(lets)
        if not names:
            return e
        e = substitute(e, {n: lets[n] for n in names})
    return e


def _upper_bound(e: Expr) -> int | None:
    """A constant ``c >= e`` for every value of its variables, from its form: a constant, or
    ``min(a, b)`` where one side has such a bound (the partial tile of a split:
    ``min(factor, extent - factor * outer)``). None: no such bound was found."""
    c = const_value(e)
    if c is not None:
        return c
    if isinstance(e, BinOp) and e.op == "min":
        bounds = [b for b in (_upper_bound(e.a), _upper_bound(e.b)) if b is not None]
        return min(bounds) if bounds else None
    return None


def launch_error(name: str, grid: tuple[int, ...], block: tuple[int, ...]) -> str | None:
    """Why launching kernel ``name`` with these dimensions would fail (None: it can run)."""
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        return (f"kernel {name} has blocks of {block[0]} x {block[1]} x {block[2]} = "
                f"{threads} threads; a block holds at most {MAX_THREADS_PER_BLOCK}: use a "
                f"smaller gpu_tile")
    for what, dims, limits in (("block", block, MAX_BLOCK_DIMS), ("grid", grid, MAX_GRID_DIMS)):
        for axis, d, lim in zip(AXES, dims, limits):
            if d > lim:
                return (f"kernel {name}: {what} dimension {axis} is {d}, more than the "
                        f"{lim} CUDA allows; map a larger loop to x or split it")
    return None


__all__ = ["DeviceProgram", "Launch", "launch_error", "plan"]
