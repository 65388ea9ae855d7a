"""Which parts of a lowered loop nest run on the GPU, and how each is launched.

A lowered kernel (``schedule/ir.py``) becomes a *host program* and *device kernels*, as in
Halide's ``CodeGen_GPU_Host``: the host program keeps the statements that only decide what runs
(``let`` of sizes, ``if`` over sizes, allocation of root buffers, serial loops around launches)
and replaces each *region* by a :class:`Launch`. A region is

- a loop nest whose outermost loops are mapped to the GPU: ``gpu_block`` loops (1-3; the last
  one is ``blockIdx.x``), then directly inside them ``gpu_thread`` loops (0-3; the last is
  ``threadIdx.x``), with only ``let`` and ``if`` between them; what is inside the innermost
  mapped loop runs serially in each thread; or
- a *cooperative* kernel: ``gpu_block`` loops whose body holds several ``gpu_thread`` loop
  nests (stages computed at a block loop, or at a serial loop inside it: the tiles a block
  stages in shared memory). Statements outside the thread nests run in every thread (``let``,
  ``if`` and serial loops: the same in all of them) or, when they store, in thread 0 alone; a
  buffer allocated outside the thread nests is in shared memory (a constant size, or for one
  ``cache_read(..., scope="shared")`` copy a size the call's sizes fix: ``Launch.dynamic``), and a
  barrier (``bar.sync``) follows a thread nest where what may run after it in the block (the
  statements after it, and the whole body of a serial loop of the block around it) reads a
  buffer the nest writes, writes one it reads, or writes one it writes (but two writes of a
  pure stage's buffer allocated outside the block: they store the same values): a nest sees
  what the previous ones wrote, and no thread overwrites what another has yet to read
  (``barriers``). A nest that only reads buffers no later statement writes (softmax's output,
  reading the row's max and sum) runs the iterations of a serial loop around it without a
  barrier between them. The block has, per axis, the largest constant bound of the nests'
  extents; each nest runs where ``threadIdx`` is below its own extents (and 0 on the axes it
  does not use);
- any other statement that reads or writes a buffer (a stage left serial), run by one thread.

Launch dimensions are host expressions: a ``gpu_block`` loop's extent (it may use sizes and host
variables, never another mapped loop's variable), a ``gpu_thread`` loop's extent, or where that
varies from block to block (the partial tile of a split), its constant upper bound; the kernel
then guards the thread loop with ``threadIdx < extent``.

A buffer of the block asked for in each thread's own memory (``cache_write(...,
scope="local")``) is not shared: each thread keeps its elements, across the block's serial
loops (``private.py``).

See also: Halide ``src/CodeGen_GPU_Host.cpp``, ``src/FuseGPUThreadLoops.cpp``; TVM's
``SplitHostDevice`` pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tensorlang.affine import const_value
from tensorlang.errors import CompileError
from tensorlang.expr import BinOp, Cmp, Const, Expr, Var, walk
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
    child_stmts,
    map_stmt,
    reads_memory,
    walk_stmts,
)

from .bounds import inline_lets, upper_bound
from .double_buffer import double_buffer, substituted
from .private import AXES, thread_private
from .specialize import has_gpu_loops, specialize

#: CUDA's limits on launch dimensions (compute capability 3.0 and later)
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
#: static shared memory of one block (CUDA's limit without opting in to more)
MAX_SHARED_BYTES = 48 * 1024
#: the register file of a multiprocessor (32-bit registers, every architecture from sm_50 to
#: sm_90) and the most a thread may use: a block of more than 65536 // 255 = 256 threads can
#: ask for more registers than there are
REGISTERS_PER_SM = 65536
MAX_REGISTERS_PER_THREAD = 255


@dataclass(frozen=True, eq=False)
class Launch(Stmt):
    """A host statement: run ``body`` on the GPU as kernel ``name``.

    ``grid`` and ``block`` are the launch dimensions (x, y, z) as host expressions (sizes and
    host variables); ``axes`` maps each mapped loop's variable to its id register
    (``("ctaid" | "tid", "x" | "y" | "z")``); ``guarded`` names the thread loops launched with an
    upper bound of their extent (their body runs only where ``tid < extent``). The kernel takes
    the buffers ``buffers`` (by name, in this order), then every size of the pipeline, then the
    host variables ``scalars`` (int64). A cooperative kernel (``nests`` not empty: the outermost
    loop of each thread nest -> the axes it uses) synchronises the block after each nest named
    in ``barriers`` (see the module docstring);
    ``shared`` gives its buffers in shared memory, with the number of elements they are
    allocated (a constant bound of their size; the largest where a buffer is allocated in
    several versions of a nest, each version an array of its own); ``dynamic`` the one whose
    size is known only when launching (a ``cache_read(..., scope="shared")`` copy of a whole
    row), in CUDA's dynamic shared memory."""

    index: int
    name: str
    body: Stmt
    grid: tuple[Expr, Expr, Expr]
    block: tuple[Expr, Expr, Expr]
    axes: dict[str, tuple[str, str]] = field(hash=False)
    guarded: frozenset[str]
    buffers: tuple[str, ...]
    scalars: tuple[str, ...]
    nests: dict[str, frozenset[str]] = field(default_factory=dict, hash=False)
    shared: dict[str, int] = field(default_factory=dict, hash=False)
    #: the one shared buffer sized when launching (dynamic shared memory), and its bytes as a
    #: host expression (sizes and host variables): None where every one has a constant size
    dynamic: tuple[str, Expr] | None = field(default=None, hash=False)
    #: the nests (by their outermost loop's variable) followed by a barrier
    barriers: frozenset[str] = field(default=frozenset(), hash=False)

    @property
    def cooperative(self) -> bool:
        return bool(self.nests)

    @property
    def shared_bytes(self) -> int:
        """The shared memory a block of this kernel takes when compiled, in bytes (``dynamic``
        comes on top, sized at each launch)."""
        return _shared_bytes(self.shared, self.body)

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


def _loop_names(s: Stmt) -> str:
    return ", ".join(n.var for n in walk_stmts(s) if isinstance(n, For) and n.kind in GPU_KINDS)


def plan(lowered: LoweredFunc, private: frozenset[str] = frozenset(),
         sized_at_launch: frozenset[str] = frozenset(),
         pure: frozenset[str] = frozenset(),
         double: frozenset[str] = frozenset()) -> DeviceProgram:
    """Split ``lowered`` into its host program and device launches; ``private``: buffers each
    thread keeps its own share of where a block's threads would share them
    (``cache_write(..., scope="local")``, ``private.thread_private``); ``sized_at_launch``:
    buffers that a block's threads share and that may take a size known only when launching
    (``cache_read(..., scope="shared")`` copies, ``private.shared_copies``): one a kernel, in
    dynamic shared memory; ``pure``: the stages whose value at a point is a function of the
    point (no update, no reduction: ``private.pure_stages``), which two thread nests of a block
    may write without a barrier between them (``barriers``); ``double``: the shared copies to
    double buffer (``Stage.double_buffer()``, ``double_buffer.py``).

    Raises:
        CompileError: a mapped loop is where no launch can put it (inside a serial loop of a
            region, below a buffer the block's threads would share, more than three of a kind,
            a block loop inside a thread loop); the message names the loop and the fix.
    """
    lowered = specialize(lowered)
    launches: list[Launch] = []
    order = [b.name for b in (*lowered.inputs, *lowered.outputs)]

    def region(s: Stmt, host_vars: frozenset[str]) -> Stmt:
        index = len(launches)
        launch = _region(lowered, s, index, f"{lowered.name}_k{index}", host_vars, order,
                         private, sized_at_launch, pure, double)
        launches.append(launch)
        return launch

    def host(s: Stmt, host_vars: frozenset[str]) -> Stmt:
        if isinstance(s, Block):
            return Block(tuple(host(c, host_vars) for c in s.stmts))
        if isinstance(s, ProducerConsumer):
            return ProducerConsumer(s.func, host(s.body, host_vars))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, host(s.body, host_vars))
        if isinstance(s, LetStmt) and not reads_memory(s.value):
            return LetStmt(s.var, s.value, host(s.body, host_vars | {s.var}))
        if isinstance(s, IfThenElse) and not reads_memory(s.cond):
            return IfThenElse(s.cond, host(s.then, host_vars),
                              None if s.otherwise is None else host(s.otherwise, host_vars))
        if isinstance(s, For) and s.kind not in GPU_KINDS and has_gpu_loops(s.body):
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
            order: list[str], private: frozenset[str] = frozenset(),
            sized_at_launch: frozenset[str] = frozenset(),
            pure: frozenset[str] = frozenset(),
            double: frozenset[str] = frozenset()) -> Launch:
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
        elif isinstance(node, LetStmt) and has_gpu_loops(node.body):
            lets[node.var] = node.value
            node = node.body
            continue
        elif isinstance(node, IfThenElse) and node.otherwise is None and has_gpu_loops(node.then):
            node = node.then
            continue
        else:
            break
        node = node.body
    if has_gpu_loops(node) and blocks and not threads:
        return _cooperative(lowered, s, blocks, lets, node, index, name, host_vars, order,
                            private, sized_at_launch, pure, double)
    if has_gpu_loops(node):
        inner = next(n for n in walk_stmts(node) if isinstance(n, For) and n.kind in GPU_KINDS)
        where = (f"inside the gpu_threads loops {', '.join(t.var for t in threads)}"
                 if threads else "without gpu_blocks loops around it")
        raise CompileError(f"GPU loop {inner.var} is inside a serial loop or a sequence of "
                           f"statements {where}; a thread nest is one chain of gpu_threads "
                           f"loops, directly inside the gpu_blocks loops or inside a serial "
                           f"loop of the block: compute the stage at root with its own "
                           f"gpu_tile, at a block loop of its consumer, or inside the thread "
                           f"loops")
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
            ext = inline_lets(lp.extent, lets)
            if not {v.name for v in walk_vars(ext)} & mapped:
                dims[k] = ext
                continue
            bound = upper_bound(ext) if reg == "tid" else None
            if bound is None:
                raise CompileError(
                    f"the extent of {'gpu_threads' if reg == 'tid' else 'gpu_blocks'} loop "
                    f"{lp.var} ({ext}) depends on another GPU loop and has no constant bound; "
                    f"split the loop by a constant factor and map the inner part")
            dims[k] = Const(bound, int64)
            guarded.add(lp.var)
    buffers, scalars = _arguments(s, name, host_vars, order)
    return Launch(index, name, s, tuple(grid), tuple(block), axes, frozenset(guarded),
                  buffers, scalars)


def _arguments(s: Stmt, name: str, host_vars: frozenset[str], order: list[str]
               ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The buffers kernel ``name`` (body ``s``) takes, and the host variables it reads."""
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
    return tuple(args), tuple(sorted(free))


def _grid(blocks: list[For], lets: dict[str, Expr], mapped: set[str],
          axes: dict[str, tuple[str, str]]) -> list[Expr]:
    grid: list[Expr] = [ONE, ONE, ONE]
    for k, lp in enumerate(reversed(blocks)):
        axes[lp.var] = ("ctaid", AXES[k])
        ext = inline_lets(lp.extent, lets)
        if {v.name for v in walk_vars(ext)} & mapped:
            raise CompileError(f"the extent of gpu_blocks loop {lp.var} ({ext}) depends on "
                               f"another GPU loop; map loops of fixed extent to blocks")
        grid[k] = ext
    return grid


def _cooperative(lowered: LoweredFunc, s: Stmt, blocks: list[For], lets: dict[str, Expr],
                 body: Stmt, index: int, name: str, host_vars: frozenset[str],
                 order: list[str], private: frozenset[str] = frozenset(),
                 sized_at_launch: frozenset[str] = frozenset(),
                 pure: frozenset[str] = frozenset(),
                 double: frozenset[str] = frozenset()) -> Launch:
    """A kernel whose block runs several thread nests (see the module docstring)."""
    mapped = {n.var for n in walk_stmts(s) if isinstance(n, For) and n.kind in GPU_KINDS}
    axes: dict[str, tuple[str, str]] = {}
    grid = _grid(blocks, lets, mapped, axes)
    dims = [1, 1, 1]
    nests: dict[str, frozenset[str]] = {}
    shared: dict[str, int] = {}
    dynamic: dict[str, Expr] = {}  # the buffer sized at launch -> its bytes (host expression)
    singles = [0]

    def nest(st: For, scope: dict[str, Expr]) -> None:
        chain: list[For] = []
        node: Stmt = st
        inner = dict(scope)
        while True:
            if isinstance(node, For) and node.kind is ForKind.GPU_THREAD:
                chain.append(node)
                node = node.body
            elif isinstance(node, LetStmt) and has_gpu_loops(node.body):
                inner[node.var] = node.value
                node = node.body
            elif isinstance(node, IfThenElse) and node.otherwise is None \
                    and has_gpu_loops(node.then):
                node = node.then
            else:
                break
        if has_gpu_loops(node) or len(chain) > 3:
            raise CompileError(f"the gpu_threads loops of kernel {name} from {st.var} are not "
                               f"one nest of at most three loops with nothing mapped inside")
        used = set()
        for k, lp in enumerate(reversed(chain)):
            axis = AXES[k]
            if axes.get(lp.var, ("tid", axis)) != ("tid", axis):
                raise CompileError(f"gpu_threads loop {lp.var} is mapped to two thread axes in "
                                   f"kernel {name}; give the nests distinct loop names")
            axes[lp.var] = ("tid", axis)
            used.add(axis)
            bound = upper_bound(inline_lets(lp.extent, inner))
            if bound is None:
                raise CompileError(
                    f"the extent of gpu_threads loop {lp.var} in kernel {name} has no constant "
                    f"bound ({inline_lets(lp.extent, inner)}); the threads of a block that runs "
                    f"several stages need constant tile sizes: split by a constant factor")
            dims[k] = max(dims[k], bound)
        nests[st.var] = frozenset(used)

    def single(st: Stmt) -> Stmt:
        var = f"_single{singles[0]}"
        singles[0] += 1
        nests[var] = frozenset({"x"})
        axes[var] = ("tid", "x")
        return For(var, Const(0, int64), ONE, ForKind.GPU_THREAD, st)

    def block_level(st: Stmt, scope: dict[str, Expr]) -> Stmt:
        if isinstance(st, For) and st.kind is ForKind.GPU_THREAD:
            nest(st, scope)
            return st
        if not has_gpu_loops(st):
            stores = any(isinstance(n, Store) for n in walk_stmts(st))
            return single(st) if stores else st
        if isinstance(st, For) and st.kind is ForKind.GPU_BLOCK:
            raise CompileError(f"gpu_blocks loop {st.var} is inside the block loops of kernel "
                               f"{name} below other statements; map the outermost loops only")
        if isinstance(st, For) and st.kind not in (ForKind.SERIAL, ForKind.UNROLLED):
            raise CompileError(f"loop {st.var} ({st.kind.value}) holds gpu_threads loops; a "
                               f"loop of the block around thread loops must be serial")
        if isinstance(st, Block):
            return Block(tuple(block_level(c, scope) for c in st.stmts))
        if isinstance(st, ProducerConsumer):
            return ProducerConsumer(st.func, block_level(st.body, scope))
        if isinstance(st, Allocate) and st.buffer.name in private:
            # each thread's share, in its own memory (after the nests inside: their axes)
            return thread_private(Allocate(st.buffer, block_level(st.body, scope)), axes,
                                  {**_lets_of(lowered.body), **scope}, name, blocks)
        if isinstance(st, Allocate) and st.buffer.name in sized_at_launch and any(
                upper_bound(inline_lets(ext, scope)) is None for ext in st.buffer.extents):
            dynamic[st.buffer.name] = _launch_size(st.buffer, scope, host_vars, name,
                                                   dynamic)
            return Allocate(st.buffer, block_level(st.body, scope))
        if isinstance(st, Allocate):
            count = 1
            for ext in st.buffer.extents:
                bound = upper_bound(inline_lets(ext, scope))
                if bound is None:
                    raise CompileError(
                        f"{st.buffer.name} is shared by the threads of a block of kernel {name} "
                        f"but its size ({', '.join(map(str, st.buffer.extents))}) has no "
                        f"constant bound; shared memory is sized when compiling: compute it at "
                        f"a loop whose tile has a constant size")
                count *= max(bound, 0)
            # the largest of its allocations: loop partitioning may allocate a buffer in
            # several versions of a nest (a whole tile's, a partial one's), never two at once,
            # so they share one array (codegen._shared)
            shared[st.buffer.name] = max(shared.get(st.buffer.name, 0), count)
            return Allocate(st.buffer, block_level(st.body, scope))
        if isinstance(st, LetStmt):
            return LetStmt(st.var, st.value, block_level(st.body, {**scope, st.var: st.value}))
        if isinstance(st, IfThenElse):
            return IfThenElse(st.cond, block_level(st.then, scope), None if st.otherwise is None
                              else block_level(st.otherwise, scope))
        if isinstance(st, For) and upper_bound(inline_lets(st.extent, scope)) == 1:
            # at most one iteration (a point of a fused block loop): its variable is a value,
            # so that a thread's own buffer indexed by it has constant indices (private.py)
            once = block_level(st.body, {**scope, st.var: st.min})
            if const_value(inline_lets(st.extent, scope)) != 1:
                once = IfThenElse(Cmp("ge", st.extent, Const(1, int64)), once, None)
            return LetStmt(st.var, st.min, once)
        if isinstance(st, For):
            return For(st.var, st.min, st.extent, st.kind, block_level(st.body, scope),
                       st.width)
        raise CompileError(f"kernel {name}: a {type(st).__name__} holds GPU loops")

    new_body = block_level(body, dict(lets))
    new_body, prefetching = double_buffer(new_body, double, nests, axes, shared)
    new_body = _distinct_nests(new_body, nests, axes)
    used_bytes = _shared_bytes(shared, body)
    if used_bytes > MAX_SHARED_BYTES:
        twice = f" ({', '.join(sorted(double & set(shared)))} double buffered: twice their " \
            f"tiles)" if double & set(shared) else ""
        raise CompileError(f"the buffers the threads of a block of kernel {name} share "
                           f"({', '.join(shared)}) need up to {used_bytes} bytes{twice}; shared "
                           f"memory holds at most {MAX_SHARED_BYTES} bytes a block: stage "
                           f"smaller tiles" + (" or leave them single-buffered" if twice else ""))
    threads = dims[0] * dims[1] * dims[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise CompileError(f"kernel {name} needs blocks of {dims[0]} x {dims[1]} x {dims[2]} = "
                           f"{threads} threads (the largest thread nest per axis); a block "
                           f"holds at most {MAX_THREADS_PER_BLOCK}: use smaller tiles")
    kernel = _replace_body(s, body, new_body)
    buffers, scalars = _arguments(kernel, name, host_vars, order)
    guarded = frozenset(v for v, (reg, _) in axes.items() if reg == "tid")
    return Launch(index, name, kernel, tuple(grid), tuple(Const(d, int64) for d in dims), axes,
                  guarded, buffers, scalars, nests, shared,
                  next(iter(dynamic.items())) if dynamic else None,
                  barriers(new_body, frozenset(nests), private, pure, prefetching))


def barriers(body: Stmt, nests: frozenset[str], private: frozenset[str],
             pure: frozenset[str], exempt: frozenset[str] = frozenset()) -> frozenset[str]:
    """The thread nests of a cooperative kernel's block ``body`` (``nests``: their outermost
    loops' variables) that need a barrier after them (the module docstring): those whose
    accesses conflict with what may run after them in the block. Buffers each thread keeps to
    itself (``private``, and those allocated inside a nest) never conflict. Nor do two writes
    of a buffer of ``pure`` (a stage whose value at a point is a function of the point: no
    update, no reduction) allocated outside the block: they store the same value at an
    element, unless what they read changed between them, which the nest's reads catch.
    Buffer-granular otherwise, so conservative: two nests writing disjoint parts of one buffer
    still get a barrier between them. The nests ``exempt`` get none: a double-buffered loop's
    prefetching copies (``double_buffer.py``), which write the slot no one reads until the
    loop's next barrier."""
    need: set[str] = set()
    inside = {n.buffer.name for n in walk_stmts(body) if isinstance(n, Allocate)}

    def visit(st: Stmt, after: tuple[Stmt, ...]) -> None:
        if isinstance(st, For) and st.var in exempt:
            return
        if isinstance(st, For) and st.var in nests:
            local = private | {n.buffer.name for n in walk_stmts(st)
                               if isinstance(n, Allocate)}
            reads, writes = _accesses(st, local)
            later_reads: set[str] = set()
            later_writes: set[str] = set()
            for a in after:
                r, w = _accesses(a, local)
                later_reads |= r
                later_writes |= w
            overwritten = {b for b in writes & later_writes if b not in pure or b in inside}
            if writes & later_reads or reads & later_writes or overwritten:
                need.add(st.var)
            return
        if isinstance(st, Block):
            for k, c in enumerate(st.stmts):
                visit(c, st.stmts[k + 1:] + after)
            return
        if isinstance(st, For):  # a serial loop of the block: its next iteration runs after
            visit(st.body, (st,) + after)
            return
        for c in child_stmts(st):
            visit(c, after)

    visit(body, ())
    _merge_barriers(body, nests, private, need)
    return frozenset(need)


def _distinct_nests(body: Stmt, nests: dict[str, frozenset[str]],
                    axes: dict[str, tuple[str, str]]) -> Stmt:
    """``body`` with each thread nest that occurs more than once (a nest in each version of a
    stage: a whole tile's and a partial tile's) renamed past its first occurrence
    (``<var>.v2``, ...; registered in ``nests`` and ``axes`` as the first), so that each
    occurrence has a barrier of its own (``barriers``)."""
    seen: dict[str, int] = {}

    def go(st: Stmt) -> Stmt:
        if isinstance(st, For) and st.var in nests:
            n = seen[st.var] = seen.get(st.var, 0) + 1
            if n == 1:
                return st
            renames = {lp.var: f"{lp.var}.v{n}" for lp in walk_stmts(st)
                       if isinstance(lp, For) and lp.var in axes}
            for old, new in renames.items():
                axes[new] = axes[old]
                if old in nests:
                    nests[new] = nests[old]
            return substituted(st, {}, renames)
        return map_stmt(st, go, lambda e: e)

    return go(body)


def _merge_barriers(body: Stmt, nests: frozenset[str], private: frozenset[str],
                    need: set[str]) -> None:
    """Drop the barrier after a nest where the nests right after it in its sequence neither
    read what it writes nor write what it reads or writes, up to one that keeps its barrier:
    that barrier orders the nest before everything after it too (a GEMM's copies of ``A``'s
    and ``B``'s tiles, one barrier after both; their loads in flight together). Each nest
    occurs once (``_distinct_nests``); a sequence is walked from its end, so a chain of such
    nests keeps only its last barrier."""

    def nest_of(st: Stmt) -> str | None:
        while isinstance(st, (ProducerConsumer, LetStmt)):
            st = st.body
        return st.var if isinstance(st, For) and st.var in nests else None

    for blk in walk_stmts(body):
        if not isinstance(blk, Block):
            continue
        stmts = blk.stmts
        for k in range(len(stmts) - 2, -1, -1):
            var = nest_of(stmts[k])
            if var is None or var not in need:
                continue
            local = private | {n.buffer.name for n in walk_stmts(stmts[k])
                               if isinstance(n, Allocate)}
            reads, writes = _accesses(stmts[k], local)
            for later in stmts[k + 1:]:
                other = nest_of(later)
                r, w = _accesses(later, local)
                if other is None or writes & (r | w) or reads & w:
                    break
                if other in need:
                    need.discard(var)
                    break


def _accesses(s: Stmt, local: frozenset[str] | set[str]) -> tuple[set[str], set[str]]:
    """The buffers statement ``s`` reads and writes, but the ``local`` ones."""
    reads: set[str] = set()
    writes: set[str] = set()
    for n in walk_stmts(s):
        if isinstance(n, Store) and n.buffer not in local:
            writes.add(n.buffer)
            if n.reduce_op is not None:  # buffer[i] op= value reads it too
                reads.add(n.buffer)
        for e in _stmt_exprs(n):
            reads.update(x.buffer for x in walk(e) if isinstance(x, Load)
                         and x.buffer not in local)
    return reads, writes


def _launch_size(buf, scope: dict[str, Expr], host_vars: frozenset[str], kernel: str,
                 dynamic: dict[str, Expr]) -> Expr:
    """The bytes of shared buffer ``buf``, sized when launching kernel ``kernel``, as an
    expression the host program evaluates (its extents in sizes and host variables).

    Raises:
        CompileError: the size depends on the block (a partial tile), or the kernel already has
            another buffer sized at launch.
    """
    size: Expr = Const(buf.dtype.itemsize, int64)
    for ext in buf.extents:  # (bytes: the element size times each extent)
        e = inline_lets(ext, scope)
        inner = {v.name for v in walk(e) if isinstance(v, Var)} - host_vars
        if inner:
            raise CompileError(
                f"{buf.name} is shared by the threads of a block of kernel {kernel} and sized "
                f"when launching, but its size ({', '.join(map(str, buf.extents))}) depends on "
                f"{', '.join(sorted(inner))}, which only a block knows: give it a size that "
                f"the sizes alone fix")
        size = BinOp("mul", size, e, int64)
    old = dynamic.get(buf.name)
    if any(n != buf.name for n in dynamic):
        raise CompileError(f"kernel {kernel} has two shared buffers sized when launching "
                           f"({', '.join(dynamic)}, {buf.name}); it may have one")
    return size if old is None or old.same_as(size) else BinOp("max", old, size, int64)


def _lets_of(s: Stmt) -> dict[str, Expr]:
    """Every ``let`` of ``s`` bound once (a name bound twice is left out)."""
    seen: dict[str, Expr] = {}
    twice: set[str] = set()
    for n in walk_stmts(s):
        if isinstance(n, LetStmt):
            if n.var in seen:
                twice.add(n.var)
            seen[n.var] = n.value
    return {k: v for k, v in seen.items() if k not in twice}


def _shared_bytes(shared: dict[str, int], body: Stmt) -> int:
    """Bytes of the shared buffers ``shared`` (name -> elements) allocated in ``body``."""
    return sum(n * lowered_itemsize(body, b) for b, n in shared.items())


def lowered_itemsize(s: Stmt, buffer: str) -> int:
    """The element size in bytes of the buffer ``buffer`` allocated in ``s``."""
    return next(n.buffer.dtype.itemsize for n in walk_stmts(s)
                if isinstance(n, Allocate) and n.buffer.name == buffer)


def _replace_body(s: Stmt, old: Stmt, new: Stmt) -> Stmt:
    """``s`` (a spine of block loops, lets and ifs ending at ``old``) ending at ``new``."""
    if s is old:
        return new
    if isinstance(s, (For, LetStmt)):
        return dataclasses.replace(s, body=_replace_body(s.body, old, new))
    if isinstance(s, IfThenElse):
        return dataclasses.replace(s, then=_replace_body(s.then, old, new))
    raise AssertionError("not a spine")


def walk_vars(e: Expr) -> list[Var]:
    return [n for n in walk(e) if isinstance(n, Var)]


def launch_error(name: str, grid: tuple[int, ...], block: tuple[int, ...],
                 dynamic: int = 0, shared_limit: int = 0) -> str | None:
    """Why launching kernel ``name`` with these dimensions and ``dynamic`` bytes of dynamic
    shared memory would fail (None: it can run); ``shared_limit``: the most shared memory a
    block of this GPU may opt in to (0: unknown, not checked)."""
    if shared_limit and dynamic > shared_limit:
        return (f"kernel {name} needs {dynamic} bytes of shared memory sized at this launch "
                f"(a copy with scope='shared' whose size the call's sizes fix); a block of "
                f"this GPU holds at most {shared_limit}: stage a smaller tile, or without "
                f"scope='shared'")
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
