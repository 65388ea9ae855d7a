"""The rule-based GPU schedule: what ``tl.compile(F, "auto", target="cuda")`` uses when no
tuned kernel is cached, and where GPU tuning starts.

Rules, per Func from the output back to the inputs (Halide's "one thread per output pixel"
starting point, as in its GPU schedules and the GPU autoschedulers' initial states):

1. A pure Func other than an output whose definition reads at most one array element (a
   boundary condition, a cast, a pointwise map of one input), or at most one element of each
   array where every consumer reads it once per iteration of its loops (softmax's
   ``exp(X[i, k] - mx[i])``: ``pointwise_once``), is inlined: recomputing it costs less than a
   round trip through GPU memory.
2. A pure Func other than an output that one stage reads, which rule 1 does not inline (a
   stencil's first pass: a blur's ``bx``), is computed at that stage's innermost block loop:
   the tile a block reads, halo included, staged in shared memory by the block's threads
   (``stage_in_block``: Halide's ``compute_at(consumer, xo).gpu_threads(x, y)`` of its GPU
   blur), where it fits and has a constant size; so it never goes through GPU memory. That
   stage computes ``STENCIL_ROWS`` rows a thread (``map_pure_loops(rows=)``; its tile's rows
   staged by the same threads), where one output a thread keeps too few loads in flight to
   use the GPU's memory bandwidth (Volkov, "Better performance at lower occupancy", GTC 2010).
   Every other stage is computed at root and its pure loops are mapped to the GPU: the two
   innermost ``y, x`` by ``gpu_tile(y, x, 8, 32)`` (blocks of 256 threads; 32 consecutive ``x``
   in a warp, so a row-major store is coalesced), any pure loops outside them fused into one
   loop mapped to ``blockIdx.z``; a stage with one pure loop by ``gpu_tile(x, 256)``. Reduction
   loops stay serial inside each thread.
3. A root reduction whose operands a tile of its outputs reads more than once (``GEMM``-like:
   ``C[i, j] = sum_k A[i, k] B[k, j]``, batched or not; a convolution, read as an implicit
   GEMM over its output channels and columns; ``reduction_axes`` finds the two loops) is the
   textbook GPU GEMM instead (``staged_reduction``; NVIDIA's CUDA C++ Programming Guide,
   "Shared Memory"; Volkov and Demmel, SC 2008, for register tiles): blocks of
   ``GEMM_THREADS`` threads, each computing ``GEMM_REGS x GEMM_REGS`` outputs (a 64 x 64 tile
   per block; other pure loops fused onto ``blockIdx.z``), the outermost reduction loop in
   blocks of ``gemm_kblock`` steps (each operand's tile ``GEMM_STAGE_ELEMENTS``; halved until
   the staged tiles take at most ``GEMM_SHARED_BYTES``: a convolution's hold its window) whose
   tiles of the operands the threads stage in shared memory, each thread's outputs kept in its
   registers across them (``cache_write(..., scope="local")``); where the sizes are known
   (``gemm_tiling``), the largest register tile from ``GEMM_REGS_KNOWN x GEMM_REGS_KNOWN``
   (CUTLASS's SIMT shape) down to 1 x 1 that leaves ``GEMM_MIN_BLOCKS`` blocks of
   ``GEMM_MIN_THREADS`` threads, threads spanning a loop shorter than the tile, and whole tiles
   shifted inside the loops. A transposed tile's rows are padded (``GEMM_PAD_WORDS``,
   ``storage_align``) and a thread's columns come in ``GEMM_X_GROUPS`` runs (TVM's virtual
   threads), so that neither the copies' stores nor the register tiles' vector reads meet in
   a bank of shared memory. A copy's last step over the threads is shifted inwards, not
   guarded (a convolution's tiles are no multiple of its threads), so that ptxas issues a
   thread's loads together. The choices were measured on one GPU (an H200: docs/gpu.md); the
   thread counts are the field's usual starting point.
4. A root reduction over one loop of the rows of its operand (one pure loop ``i``, the
   reduction loop ``k`` their last, contiguous index: softmax's max and sum, a mean) gets a
   block of ``ROW_THREADS`` threads per output (``row_reduction``): ``k`` split by it and
   factored out (``rfactor``) so that each thread reduces a strided share (consecutive
   threads, consecutive elements: coalesced), the block's partial results combined in shared
   memory by ``ROW_TREE`` threads, then one (``rfactor`` again: a two-level tree; the CUDA
   samples' ``reduction``; TVM's cross-thread reduction). Where the sizes are
   known, only rows of at least ``ROW_THREADS`` elements.
5. An output whose rows are normalised by row reductions (softmax's ``e[i, j] / sm[i]``, a
   layer norm's ``(X[i, j] - mean[i]) / sqrt(var[i])``: every other Func a rule-4 reduction
   read at its consumer's row ``i``, or pointwise) is one kernel (``row_normalization``): a
   block per row, its columns split over ``ROW_THREADS`` threads, and each row reduction
   computed at that block loop as rule 4 computes it (the threads' strided partial results,
   then the block's), so that the second and third passes over a row can find it in the
   cache, where three kernels (the max, the sum, the output) read the whole matrix from GPU
   memory three times (the one-row-per-program softmax of Triton's tutorial; the online
   normalizer of Milakov and Gimelshein, 2018, would also merge the max and sum passes).
   Where the sizes are known and a row (rounded up to a power of two, as the dispatcher's
   shape bucket) takes at most ``ROW_SHARED_BYTES``, the row is copied once into shared
   memory sized at launch (``stage_rows``) and the three passes read it there, as Triton's
   fused softmax keeps its row in registers.
6. A step that ``tl.check`` refuses (a pure loop of an update that carries a dependence) is not
   taken; a stage with no mappable loop runs in one thread.

See also: Halide's ``gpu_tile`` schedules in ``apps/``; Anderson et al., "Efficient automatic
scheduling of imaging and vision pipelines for the GPU" (OOPSLA 2021).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from tensorlang.errors import CompileError, ScheduleError
from tensorlang.expr import Expr, accesses, free_vars
from tensorlang.func import Func, stage_id
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.ir import ForKind
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule
from tensorlang.schedule.trace import TailStrategy

from .launches import plan
from .private import private_buffers

#: threads of a block for a 2-D tile (y, x) and for one pure loop
TILE_2D = (8, 32)
TILE_1D = 256
#: rule 3's GEMM: threads of a block (y, x); outputs per thread along each pure loop where
#: the sizes are symbolic, and the most tried where they are known (``gemm_tiling``); the
#: elements of each operand's tile staged in shared memory per reduction block (the block
#: is this over the tile's longer side, at most ``GEMM_MAX_KBLOCK``: 16 for 128 x 128 tiles
#: and 64 x 64; 16 rather than 8 for 128 x 128 tiles measured on an H200, docs/gpu.md)
GEMM_THREADS = (16, 16)
GEMM_REGS = 4
GEMM_REGS_KNOWN = 8
GEMM_STAGE_ELEMENTS = 2048
GEMM_MAX_KBLOCK = 16
#: rule 3 at known sizes: a register tile is taken only where a block keeps at least this many
#: threads (a 64 x 56 convolution tile in 8 x 8 registers would leave 8 x 7)
GEMM_MIN_THREADS = 128
#: rule 3's reduction block is halved while its staged tiles take more shared memory than
#: this, in bytes, so that several blocks share a multiprocessor (228 KiB on an H100)
GEMM_SHARED_BYTES = 32 * 1024
#: rule 3 at known sizes: the fewest blocks its register tile may leave (an H100's 132
#: multiprocessors, one block each); a smaller tile where the sizes give fewer
GEMM_MIN_BLOCKS = 132
#: rule 3: a thread's columns in this many runs (``staged_reduction``'s ``x_groups``) where
#: each run keeps ``GEMM_GROUP_VECTOR`` columns; 1: one run (sgemm 4096 on an H200: 3.46 ms
#: in two runs of 4, 3.93 in one of 8; docs/gpu.md)
GEMM_X_GROUPS = 2
GEMM_GROUP_VECTOR = 4
#: rule 3: the rows of a transposed tile this many 4-byte words past a multiple of 32 apart
#: (``staged_reduction``'s ``pad_words``; 0: not padded): 4 keeps them 16-byte aligned for
#: the register tiles' vector reads (sgemm 4096 on an H200 9% faster, docs/gpu.md)
GEMM_PAD_WORDS = 4
#: rule 4: the threads of a block that reduce one row, and those that combine their partial
#: results (then one thread theirs)
ROW_THREADS = 256
ROW_TREE = 16
#: rule 5: a row staged in shared memory (``stage_rows``) where, rounded up to a power of two,
#: it takes at most this many bytes (an H100's multiprocessor holds 228 KiB: three such rows'
#: blocks at once)
ROW_SHARED_BYTES = 64 * 1024
#: rule 2: the rows of the consumer's tile each thread computes where a stencil's producer is
#: staged per block (a tile of 4 x 8 rows by 32 columns, 8 x 32 threads): more loads in flight
#: a thread, and a smaller halo a tile, than one output a thread
STENCIL_ROWS = 4


def _try(s: Schedule, apply: Callable[[Schedule], object]) -> Schedule:
    t = s.copy()
    try:
        apply(t)
    except ScheduleError:
        return s
    return t if t.check(realize=False).ok else s


def gpu_schedule(output: Func | Sequence[Func], regs: int | None = None,
                 kblock: int | None = None, sizes: dict[str, int] | None = None,
                 row_threads: int = ROW_THREADS, pad_words: int | None = None,
                 x_groups: int | None = None, copy_tail: TailStrategy | None = None) -> Schedule:
    """The rule-based GPU schedule of ``output`` (see the module docstring); proven legal.
    ``regs`` and ``kblock``: rule 3's register tile (``regs x regs`` outputs a thread; default
    ``GEMM_REGS``, or at known sizes the largest of ``GEMM_REGS_KNOWN``, a half ... that
    ``gemm_tiling`` takes) and reduction block (default ``gemm_kblock``; halved while its tiles
    do not fit); ``sizes`` (by size name, optional): the sizes it will run at (rule 4 takes
    only long rows); ``row_threads``: rule 5's threads a row; ``pad_words``, ``x_groups``,
    ``copy_tail``: rule 3's (default ``GEMM_PAD_WORDS``, ``GEMM_X_GROUPS``, ShiftInwards;
    ``staged_reduction``).

    Raises:
        ShapeError: ``sizes`` do not fit the algorithm.
    """
    p = Pipeline(output)
    s = Schedule(output)
    ranges = None
    if sizes is not None:
        ranges = p.bind(p.input_shapes(sizes), sizes).ranges
    placed: set[str] = set()  # stages rule 5 computed inside their consumer's kernel
    stencils = stencil_consumers(s)
    for f in reversed(p.funcs):
        d = f.definition
        assert d is not None
        if f.name in placed or s.states[f.name].compute.kind == "inline":
            continue
        if p.is_output(f) and not f.updates:
            rows = normalized_rows(s, f.name)
            if rows and (ranges is None or all(ranges.get(r, {}).get(
                    s.states[r].rvars[0], (0, ROW_THREADS))[1] >= ROW_THREADS for r in rows)):
                t = _try(s, lambda t, f=f, rows=rows: row_normalization(t, f.name, rows,
                                                                        row_threads))
                if t is not s:
                    s = t
                    placed.update(rows)
                    if ranges is not None and row_fits(s, f.name, ranges):
                        s = _try(s, lambda t, f=f: stage_rows(t, f.name, row_threads))
                    continue
        if not p.is_output(f) and d.reduce_op is None and not f.updates \
                and inlined_by_rule_1(s, f.name):
            t = _try(s, lambda t, f=f: t[f].compute_inline())
            if t is not s:
                s = t
                continue
        readers = s.view.readers(f.name)
        if not p.is_output(f) and d.reduce_op is None and not f.updates \
                and len(readers) == 1 and block_loop(s, readers[0]) is not None:
            t = _try(s, lambda t, f=f, r=readers[0]: stage_in_block(
                t, f.name, r, TILE_2D[0] if r in stencils else None))
            if t is not s:
                s = t
                continue
        if not f.updates and reduction_axes(s, f.name) is not None:
            tiling = GemmTiling(regs=regs or GEMM_REGS) if ranges is None else \
                gemm_tiling(s, f.name, ranges.get(f.name, {}), regs or GEMM_REGS_KNOWN)
            if pad_words is not None:
                tiling = replace(tiling, pad_words=pad_words)
            if x_groups is not None:
                tiling = replace(tiling, x_groups=x_groups)
            if copy_tail is not None:
                tiling = replace(tiling, copy_tail=copy_tail)
            t = _staged(s, f.name, tiling, kblock or gemm_kblock(tiling))
            if t is not s:
                s = t
                continue
        if not f.updates and row_like(s, f.name) and (ranges is None or ranges.get(
                f.name, {}).get(s.states[f.name].rvars[0], (0, ROW_THREADS))[1] >= ROW_THREADS):
            t = _try(s, lambda t, f=f: row_reduction(t, f.name))
            if t is not s:
                s = t
                continue
        if f.name in stencils:
            t = _try(s, lambda t, f=f: map_pure_loops(t, f.name, rows=STENCIL_ROWS))
            if t is not s:
                s = t
                continue
        for stage in (f.name, *(stage_id(f.name, u.number) for u in f.updates)):
            s = _try(s, lambda t, st=stage: map_pure_loops(t, st))
    return s


def stencil_consumers(s: Schedule) -> set[str]:
    """The stages that read a Func rule 2 stages per block (pure, not an output, read by that
    one stage, more than once a point so not inlined by rule 1): they get ``STENCIL_ROWS``
    rows a thread."""
    p = s.view.pipeline
    out = set()
    for f in p.funcs:
        d = f.definition
        readers = s.view.readers(f.name)
        if p.is_output(f) or d is None or d.reduce_op is not None or f.updates \
                or len(readers) != 1 or inlined_by_rule_1(s, f.name):
            continue
        out.add(readers[0])
    return out


def inlined_by_rule_1(s: Schedule, name: str) -> bool:
    """Whether rule 1 inlines pure Func ``name`` (not an output): it reads at most one array
    element, or one of each array read once per iteration of its consumers' loops."""
    return len(accesses(s.view.definition(name).value)) <= 1 or pointwise_once(s, name)


def pointwise_once(s: Schedule, name: str) -> bool:
    """Whether pure Func ``name`` reads at most one element of each array and every consumer
    reads it at indices naming every loop variable of that consumer (so that inlining computes
    each element once per consumer, not once per iteration of a loop it does not depend on:
    a GEMM's operand stays an array)."""
    view = s.view
    reads = [a.name for a in accesses(view.definition(name).value)]
    if len(reads) != len(set(reads)):
        return False
    for consumer in view.readers(name):
        d = view.definition(consumer)
        loops = {v.name for v in (*d.args, *d.rvars)}
        for a in accesses(d.value):
            if a.name == name and not loops <= {v.name for e in a.indices for v in free_vars(e)}:
                return False
    return True


def row_like(s: Schedule, name: str) -> bool:
    """Whether root stage ``name`` (untransformed) reduces one loop of rows (rule 4): one pure
    loop, one reduction loop that is the last index of every array of two or more dimensions
    it reads along that loop."""
    st = s.states[name]
    if st.compute.kind != "root" or st.update is not None or st.loops != [*st.pure, *st.rvars] \
            or len(st.pure) != 1 or len(st.rvars) != 1:
        return False
    k = st.rvars[0]

    def along(e: Expr) -> bool:
        return any(v.name == k for v in free_vars(e))

    reads = [a for a in accesses(s.view.definition(name).value)
             if any(along(e) for e in a.indices)]
    # every array of rows it reads along k, k its last index (a column sum reads across rows:
    # a thread per column is coalesced there, a block per column is not)
    return any(along(a.indices[-1]) for a in reads) and \
        all(along(a.indices[-1]) for a in reads if len(a.indices) >= 2)


def row_reduction(s: Schedule, name: str, threads: int = ROW_THREADS) -> None:
    """Rule 4 on stage ``name`` (see ``row_like``), in place: a block per output, its
    reduction split by ``threads`` and factored out onto the block's threads (``<name>_rf``,
    computed at the block loop), the partial results reduced by the block.

    Raises:
        ScheduleError: a primitive does not apply (the caller keeps the schedule as it was).
    """
    st = s.states[name]
    (i,), (k,) = st.pure, st.rvars
    h = s[name]
    _, ki = h.split(k, threads)
    rf = s.rfactor(name, ki)
    h.gpu_blocks(i)
    rf.compute_at(h, i)
    _thread_loop(s, rf)
    _tree(s, name, h, i)


def _thread_loop(s: Schedule, stage) -> None:
    """Map the innermost pure loop of ``stage`` (a factored-out reduction) to threads."""
    st = s.states[stage.func]
    stage.gpu_threads([lp for lp in st.loops if not st.is_reduction_loop(lp)][-1])


def _tree(s: Schedule, name: str, host, loop: str) -> None:
    """The reduction left in ``name`` (over the block's ``ROW_THREADS`` partial results)
    factored once more, onto ``ROW_TREE`` threads computed at ``host``'s ``loop``: each
    combines ``ROW_THREADS / ROW_TREE`` of the partial results, one thread the ``ROW_TREE``
    results (32 steps on the block's critical path where one thread took 256)."""
    (r,) = s.states[name].rvars
    _, ri = s[name].split(r, ROW_TREE)
    rf = s.rfactor(name, ri)
    rf.compute_at(host, loop)
    _thread_loop(s, rf)


def normalized_rows(s: Schedule, name: str) -> list[str]:
    """The row reductions that output ``name`` normalises its rows by (rule 5), in pipeline
    order; empty where the rule does not apply: ``name`` is an untransformed root stage with
    two pure loops and no reduction, and every other Func is either ``row_like`` and read only
    at its consumer's first index (the row), or pure and pointwise."""
    st = s.states[name]
    if st.compute.kind != "root" or st.update is not None or st.rvars or len(st.pure) != 2:
        return []
    view = s.view
    rows = [g.name for g in view.pipeline.funcs if g.name != name and row_like(s, g.name)]
    if not rows:
        return []
    for g in view.pipeline.funcs:
        d = view.definition(g.name)
        if g.name != name and g.name not in rows and (d.rvars or g.updates):
            return []
        for a in accesses(d.value):
            if a.name in rows and not (d.args and len(a.indices) == 1
                                       and a.indices[0].same_as(d.args[0])):
                return []
    return rows


def row_normalization(s: Schedule, name: str, rows: list[str],
                      threads: int = ROW_THREADS) -> None:
    """Rule 5 on output ``name`` and its row reductions ``rows``, in place: the pointwise Funcs
    inlined, a block per row ``i``, the columns split by ``threads`` onto the block's threads,
    each row reduction (and its factored-out partial results, as in ``row_reduction``)
    computed at ``i``.

    Raises:
        ScheduleError: a primitive does not apply (the caller keeps the schedule as it was).
    """
    for g in s.view.pipeline.funcs:  # the pointwise Funcs between (softmax's e): inlined
        if g.name != name and g.name not in rows:
            s[g.name].compute_inline()
    h = s[name]
    i, j = s.states[name].pure
    _, ji = h.split(j, threads)
    h.gpu_blocks(i)
    h.gpu_threads(ji)
    for r in rows:
        (k,) = s.states[r].rvars
        _, ki = s[r].split(k, threads)
        rf = s.rfactor(r, ki)
        s[r].compute_at(h, i)
        rf.compute_at(h, i)
        _thread_loop(s, rf)
        _tree(s, r, h, i)


def row_fits(s: Schedule, name: str, ranges: dict[str, dict[str, tuple[int, int]]]) -> bool:
    """Whether a row of output ``name``'s columns, at the sizes of ``ranges`` rounded up to a
    power of two (the dispatcher's shape bucket, whose kernel serves rows up to that long), of
    the widest array its stages read takes at most ``ROW_SHARED_BYTES`` (rule 5's
    ``stage_rows``)."""
    lo, hi = ranges.get(name, {}).get(s.states[name].pure[-1], (0, 0))
    n = hi - lo
    if n <= 0:
        return False
    view = s.view
    size = max((i.dtype.itemsize for i in view.pipeline.inputs), default=8)
    return (1 << max(0, (n - 1).bit_length())) * size <= ROW_SHARED_BYTES


def stage_rows(s: Schedule, name: str, threads: int = ROW_THREADS) -> None:
    """After ``row_normalization``, in place: the matrix that output ``name``'s rows read
    copied once per row into shared memory sized when launching (the row's length is a
    runtime size: ``cache_read(..., scope="shared", readers=...)``, ``Launch.dynamic``), its
    columns over the block's ``threads`` threads, so that the row reductions and the output
    read the row from shared memory instead of global memory (three passes, one read: the
    row kept on chip as Triton's fused softmax keeps it in registers). One matrix (one buffer
    sized at launch a kernel); a row must fit a block's shared memory when launched.

    Raises:
        ScheduleError: the stage is not a block per row, or a primitive does not apply.
    """
    st = s.states[name]
    blocks = [lp for lp in st.loops if st.kinds.get(lp) is ForKind.GPU_BLOCK]
    if len(blocks) != 1:
        raise ScheduleError(f"{name} is not computed a block per row")
    view = s.view
    inputs = [i.name for i in view.pipeline.inputs if len(view.producer(i.name).bounds) == 2
              and any(i.name in view.reads(f.name) for f in view.funcs)]
    if len(inputs) != 1:
        raise ScheduleError(f"{name}'s rows read {len(inputs)} matrices; one is staged")
    (tensor,) = inputs
    others = tuple(r for r in view.readers(tensor) if r != name)
    copy = s.cache_read(tensor, s[name], blocks[0], scope="shared", readers=others or None)
    col = s.states[copy.func].loops[-1]
    outer, inner = copy.split(col, threads)
    copy.reorder(inner, outer)
    copy.gpu_threads(inner)


def stage_row_values(s: Schedule, name: str, threads: int = ROW_THREADS) -> None:
    """After ``row_normalization``, in place: each pointwise Func inlined into output
    ``name`` and into one of its row reductions (softmax's ``e = exp(X - mx)``, read by the
    sum and by the output) computed once per row into shared memory sized when launching
    (``cache_read`` of the inlined Func with the reduction's factored-out stage as a reader,
    ``Launch.dynamic``), its columns over the block's ``threads`` threads: each element's
    ``exp`` is computed once where the rule computes it for the sum and again for the output,
    and the row is read twice from global memory (the max, then ``e``) instead of three times.
    One such Func (one buffer sized at launch a kernel); a row must fit a block's shared
    memory when launched.

    Raises:
        ScheduleError: the stage is not a block per row, no or several Funcs qualify, or a
            primitive does not apply.
    """
    st = s.states[name]
    blocks = [lp for lp in st.loops if st.kinds.get(lp) is ForKind.GPU_BLOCK]
    if len(blocks) != 1:
        raise ScheduleError(f"{name} is not computed a block per row")
    view = s.view
    inlined = [g for g in view.pipeline.funcs if g.name != name
               and s.states[g.name].compute.kind == "inline" and not view.definition(g.name).rvars]
    readers = {g.name: [r for r in s.states if r != name and g.name in view.reads(r)]
               for g in inlined}
    found = [g for g in inlined if name in view.readers(g.name) and readers[g.name]]
    if len(found) != 1:
        raise ScheduleError(f"{len(found)} inlined Funcs are read by {name} and a row "
                            f"reduction; one is staged")
    (g,) = found
    copy = s.cache_read(g.name, s[name], blocks[0], scope="shared",
                        readers=tuple(readers[g.name]))
    col = s.states[copy.func].loops[-1]
    outer, inner = copy.split(col, threads)
    copy.reorder(inner, outer)
    copy.gpu_threads(inner)


@dataclass(frozen=True)
class GemmTiling:
    """Rule 3's tiles: a block of ``threads`` (ty, tx), ``regs x regs`` outputs a thread, the
    tail strategy of the block tiles, and ``staged_reduction``'s ``pad_words``, ``x_groups``
    and ``copy_tail``."""

    threads: tuple[int, int] = GEMM_THREADS
    regs: int = GEMM_REGS
    tail: TailStrategy = TailStrategy.GuardWithIf
    pad_words: int = GEMM_PAD_WORDS
    x_groups: int = GEMM_X_GROUPS
    copy_tail: TailStrategy = TailStrategy.ShiftInwards


def gemm_tiling(s: Schedule, name: str, extents: dict[str, tuple[int, int]],
                regs: int) -> GemmTiling:
    """Rule 3's tiles at known sizes (``extents``: the stage's loops' (min, extent)):

    - the register tile: the largest of ``regs``, a half, a quarter ... whose blocks number at
      least ``GEMM_MIN_BLOCKS`` (a 256 x 256 GEMM in 64 x 64 tiles would be 16 blocks, a tenth
      of an H100's multiprocessors) and keep at least ``GEMM_MIN_THREADS`` threads, else 1;
    - along a loop shorter than the block's tile, as many threads as its length over the
      register tile where that divides it (a convolution's 56 columns: 14 threads of 4, one
      tile the row's length), else the threads halved until the tile fits the loop;
    - ``ShiftInwards`` tiles where both loops are at least a tile long: the last tile shifted
      back inside, so every block runs whole tiles (1000 rows in 64-row tiles: the last at
      936, 24 rows computed twice), where ``GuardWithIf`` would run a kernel of partial tiles.
    """
    axes = reduction_axes(s, name)
    if axes is None:
        return GemmTiling(regs=regs)
    outer, y, x, _ = axes
    if not all(v in extents for v in (*outer, y, x)):
        return GemmTiling(regs=regs)
    batch = 1
    for v in outer:
        batch *= max(extents[v][1], 1)
    ey, ex = extents[y][1], extents[x][1]
    r = regs
    while True:
        ty, tx = _threads_along(ey, r, GEMM_THREADS[0]), _threads_along(ex, r, GEMM_THREADS[1])
        if r == 1 or (ty * tx >= GEMM_MIN_THREADS and
                      batch * -(-ey // (ty * r)) * -(-ex // (tx * r)) >= GEMM_MIN_BLOCKS):
            break
        r //= 2
    whole = ey >= ty * r and ex >= tx * r
    return GemmTiling((ty, tx), r, TailStrategy.ShiftInwards if whole
                      else TailStrategy.GuardWithIf)


def _threads_along(extent: int, regs: int, threads: int) -> int:
    """Rule 3's threads along a loop of ``extent`` with ``regs`` outputs a thread: ``threads``
    where the tile fits the loop; else ``extent / regs`` where that is whole (one tile the
    loop's length), else ``threads`` halved until the tile fits."""
    if extent >= threads * regs:
        return threads
    if extent % regs == 0:
        return max(extent // regs, 1)
    while threads > 1 and threads * regs > extent:
        threads //= 2
    return threads


def gemm_kblock(tiling: GemmTiling) -> int:
    """Rule 3's reduction block for ``tiling``: ``GEMM_STAGE_ELEMENTS`` over the longer side
    of the block's tile, within 8 ... ``GEMM_MAX_KBLOCK`` (16 for 128 x 128 and 64 x 64
    tiles)."""
    side = max(tiling.threads) * tiling.regs
    return min(GEMM_MAX_KBLOCK, max(8, GEMM_STAGE_ELEMENTS // max(side, 1)))


def _staged(s: Schedule, name: str, tiling: GemmTiling, kblock: int) -> Schedule:
    """Rule 3 on stage ``name``: ``s`` with the stage staged, its reduction block the largest of
    ``kblock``, a half and a quarter of it whose shared tiles take at most
    ``GEMM_SHARED_BYTES`` (else the largest that fits a block: a convolution's tiles hold its
    window too); ``s`` itself when none applies."""
    fits = s
    for kb in (kblock, kblock // 2, kblock // 4):
        t = _try(s, lambda t: staged_reduction(
            t, name, tiling.threads, max(kb, 1), True, tiling.regs, registers=True,
            tail=tiling.tail, pad_words=tiling.pad_words, x_groups=tiling.x_groups,
            copy_tail=tiling.copy_tail))
        if t is s:
            return s
        used = shared_bytes(t)
        if used is not None and used <= GEMM_SHARED_BYTES:
            return t
        if used is not None and fits is s:
            fits = t  # (launchable, over the budget: taken if no smaller block is)
    return fits


def shared_bytes(s: Schedule) -> int | None:
    """The most shared memory a block of ``s``'s kernels takes, in bytes; None where they
    cannot be launched as planned (``launchable``). Remembered for the last ``PLANNED``
    lowerings (``lower`` returns the same loop nest for the same schedule): rule 3 and the
    search space ask again for a schedule they built before."""
    try:
        lowered = lower(s.output, s)
    except CompileError:
        return None
    private = private_buffers(s)
    key = (id(lowered), private)
    hit = _PLANNED.get(key)
    if hit is not None and hit[0] is lowered:
        _PLANNED.move_to_end(key)
        return hit[1]
    try:
        program = plan(lowered, private)
        used: int | None = max((lc.shared_bytes for lc in program.launches), default=0)
    except CompileError:
        used = None
    _PLANNED[key] = (lowered, used)  # (the loop nest kept alive: its id stays its own)
    while len(_PLANNED) > PLANNED:
        _PLANNED.popitem(last=False)
    return used


#: how many lowerings' shared memory ``shared_bytes`` remembers
PLANNED = 32
_PLANNED: OrderedDict[tuple[int, frozenset[str]], tuple[object, int | None]] = OrderedDict()


def launchable(s: Schedule) -> bool:
    """Whether the kernels of ``s`` can be launched as planned: their shared tiles fit a block
    (``launches.MAX_SHARED_BYTES``), their thread nests and buffers have constant bounds
    (``launches.plan`` raises no ``CompileError``)."""
    return shared_bytes(s) is not None


def block_loop(s: Schedule, consumer: str) -> str | None:
    """The innermost gpu_blocks loop of ``consumer`` once mapped (None: not mapped yet)."""
    st = s.states[consumer]
    blocks = [lp for lp in st.loops if st.kinds.get(lp) is ForKind.GPU_BLOCK]
    return blocks[-1] if blocks else None


def stage_in_block(s: Schedule, name: str, consumer: str,
                   thread_rows: int | None = None) -> None:
    """Compute ``name`` at ``consumer``'s innermost block loop, in place: the tile (halo
    included) a block of ``consumer`` reads, staged in shared memory, its two innermost loops
    on the block's threads (rule 2's stencil producers; the space's ``block`` placement);
    with ``thread_rows``, the outer of the two split by it, the block's ``thread_rows`` rows of
    threads each staging every ``thread_rows``-th row (a consumer with several rows a thread,
    ``map_pure_loops(rows=)``, reads more rows than it has threads along them); the split's
    last step shifted inwards (a tile of 34 rows on 8 rows of threads: two rows staged twice,
    the same values, where a guard on each row would keep the loads from being issued
    together) and its loop unrolled.

    Raises:
        ScheduleError: ``consumer`` has no block loop, or the tile has no constant size (a
            whole row) or does not fit a block's shared memory.
    """
    loop = block_loop(s, consumer)
    if loop is None:
        raise ScheduleError(f"{consumer} has no block loop")
    s[name].compute_at(s[consumer], loop)
    y, x = s.states[name].loops[-2:]
    if thread_rows is not None:
        yo, y = s[name].split(y, thread_rows, tail=TailStrategy.ShiftInwards)
        s[name].reorder(y, x, yo)
        try:  # (a tile of constant rows: unrolled, every row's loads in flight a thread)
            s[name].unroll(yo)
        except ScheduleError:
            pass
    s[name].gpu_threads(y, x)
    if not launchable(s):
        raise ScheduleError(f"{name} computed per block of {consumer} cannot be staged")


def map_pure_loops(s: Schedule, stage: str, tile_2d: tuple[int, int] = TILE_2D,
                   tile_1d: int = TILE_1D, rows: int = 1) -> None:
    """Map the pure loops of ``stage`` to GPU blocks and threads (rule 2), in place: blocks of
    ``tile_2d`` (ty, tx) threads over the two innermost, or ``tile_1d`` over a single one;
    with ``rows`` > 1 each thread computes ``rows`` rows of its column (tiles of ``ty * rows``
    by ``tx``, the rows in an unrolled serial loop inside the thread's).

    Raises:
        ScheduleError: a primitive does not apply (the caller keeps the schedule as it was).
    """
    st = s.states[stage]
    pure = [lp for lp in st.loops if not st.is_reduction_loop(lp)]
    if not pure:
        raise ScheduleError(f"{stage} has no pure loop to map")
    h = s[stage]
    if len(pure) == 1:
        h.gpu_tile(pure[0], tile_1d)
        return
    y, x = pure[-2], pure[-1]
    if rows > 1:
        yo, xo, yi, xi = h.tile(y, x, tile_2d[0] * rows, tile_2d[1])
        yt, yr = h.split(yi, rows)
        h.reorder(yo, xo, yt, xi, yr)
        h.gpu_blocks(yo, xo)
        h.gpu_threads(yt, xi)
        h.unroll(yr)
    else:
        yo, xo, _, _ = h.gpu_tile(y, x, *tile_2d)
    outer = pure[:-2]
    if outer:
        fused = outer[0]
        for o in outer[1:]:
            fused = h.fuse(fused, o)
        h.gpu_blocks(fused, yo, xo)


def tile_spec(spec: str) -> tuple[int, int]:
    """``"ty x tx"`` (the search space's block shapes, ``"8x32"``) as ``(ty, tx)``."""
    ty, tx = spec.split("x")
    return int(ty), int(tx)


def reduction_axes(s: Schedule, name: str) -> tuple[list[str], str, str, list[str]] | None:
    """The loops of root stage ``name`` (not yet transformed) as a GEMM sees them:
    ``(outer, y, x, reduction)``. ``x`` is the innermost pure loop; ``y`` the innermost other
    pure loop that an operand indexed by ``x`` does not index (``i`` of ``A[i, k] * B[k, j]``;
    a convolution's output channel, as in an implicit GEMM), so that a block's ``y x x`` tile
    reads each element of that operand along ``y`` and of another, not indexed by ``x``, along
    ``x``; ``outer`` the remaining pure loops, outermost first. None: no such loops (fewer than
    two pure loops, no reduction loop, no operand read more than once by a tile)."""
    st = s.states[name]
    if st.compute.kind != "root" or st.update is not None or st.loops != [*st.pure, *st.rvars]:
        return None
    pure, red = list(st.pure), list(st.rvars)
    if len(pure) < 2 or not red:
        return None
    operands = [{v.name for e in a.indices for v in free_vars(e)}
                for a in accesses(s.view.definition(name).value)]
    x = pure[-1]
    along_x = [o for o in operands if x in o]
    across = [lp for lp in pure[:-1] if any(lp not in o for o in along_x)]
    if not across or all(x in o for o in operands):
        return None  # no operand a block's tile reads more than once: nothing to stage
    return [lp for lp in pure if lp not in (across[-1], x)], across[-1], x, red


def staged_reduction(s: Schedule, name: str, threads: tuple[int, int], kblock: int,
                     unroll: bool, regs: int = 1, registers: bool = False,
                     tail: TailStrategy = TailStrategy.GuardWithIf,
                     pad_words: int = 0, x_groups: int = 1,
                     copy_tail: TailStrategy = TailStrategy.GuardWithIf) -> None:
    """Tile a root reduction stage as a GPU GEMM (rule 3, and the search space's staged
    points), in place. Its loops as ``reduction_axes`` sees them: ``y, x`` tiled by ``threads``
    (ty, tx) a block and ``regs x regs`` outputs a thread (its register tile, unrolled); the
    other pure loops fused onto ``blockIdx.z``; the outermost reduction loop split by
    ``kblock``, and the tiles of the operands the stage reads for one such block (every other
    reduction loop included: a convolution's window) staged in shared memory per step, each copy
    spread over the block's threads. ``unroll``: unroll the inner reduction loops (the split's
    and those of constant extent inside it); ``registers``: the block's tile computed in each
    thread's registers (``cache_write(..., scope="local")`` at the block loop, that stage tiled
    the same way) and copied out by the same threads; ``tail``: the block tiles' tail strategy;
    ``pad_words``: the rows of a transposed tile (``_tile_layout``) that many 4-byte words
    (banks) past a multiple of 32 apart (``storage_align``): a warp's threads writing down its
    columns fall in different banks; ``x_groups``: a thread's ``regs`` columns in that many
    runs of consecutive ones (where each run keeps ``GEMM_GROUP_VECTOR``), ``tx * regs /
    x_groups`` apart (TVM's virtual threads, CUTLASS's thread map), so that a quarter warp's
    vector reads of a row of ``B``'s tile cover consecutive words, where consecutive columns a
    thread put them 32 bytes apart; ``copy_tail``: the tail strategy of a copy's steps over
    the block's threads (ShiftInwards: where the tile is no multiple of the threads, the last
    step shifted back so that some elements are copied twice, the same values, and no step is
    guarded: a guarded step's load and store keep one load in flight a thread).

    Raises:
        ScheduleError: the stage has no such loops, or a primitive does not apply (the callers
            keep the schedule as it was).
    """
    axes = reduction_axes(s, name)
    if axes is None:
        raise ScheduleError(f"{name} is not a root stage with two pure loops and a reduction")
    outer, y, x, red = axes
    ty, tx = threads
    h = s[name]
    yo, xo, yi, xi = h.tile(y, x, ty * regs, tx * regs, tail)
    h.reorder(*outer, yo, xo, yi, xi)
    if registers:
        out = h
        name = s.cache_write(name, xo, scope="local").func
        if regs > 1:  # the copy out: each thread its register tile, as computed
            yt, xt, yr, xr = _register_tile(out, yi, xi, regs, tx, x_groups)
            out.reorder(yo, xo, yt, xt, yr, *xr)
            yi, xi = yt, xt
        _map_blocks(out, outer, yo, xo)
        out.gpu_threads(yi, xi)
        # the block's tile, in the local stage: y and x span it, the outer loops one point
        h = s[name]
        yi, xi = y, x
    k, rest = red[0], red[1:]
    ko, ki = h.split(k, kblock)
    inner = [ki, *rest]
    if regs > 1:
        yt, xt, yr, xr = _register_tile(h, yi, xi, regs, tx, x_groups)
        h.reorder(*outer, *([] if registers else [yo, xo]), ko, yt, xt, *inner, yr, *xr)
        yi, xi = yt, xt
    else:
        h.reorder(*outer, *([] if registers else [yo, xo]), ko, yi, xi, *inner)
    if not registers:
        _map_blocks(h, outer, yo, xo)
    h.gpu_threads(yi, xi)
    if unroll:
        for lp in (inner[1:] or inner):
            try:
                h.unroll(lp)
            except ScheduleError:  # not of constant extent: kept a loop
                pass
    for tensor in s.view.reads(name):
        layout = _tile_layout(s, name, tensor, y, x) if regs > 1 else None
        try:
            c = s.cache_read(tensor, h, ko, scope="shared", layout=layout)
        except ScheduleError:  # (a read through a boundary condition keeps its order)
            layout = None
            c = s.cache_read(tensor, h, ko, scope="shared")
        # the block's ty x tx threads copy the tile, each a strided share of it: its loops
        # fused into one, consecutive elements on consecutive threads (in the tensor's order:
        # a transposed tile is read row by row, coalesced, and written down its columns)
        loops = list(c.loops)
        if layout is not None:
            loops = [loops[layout.index(d)] for d in range(len(layout))]
            c.reorder(*loops)
            if pad_words:  # (shared memory: 32 banks of 4 bytes)
                size = s.view.func(c.func).dtype.itemsize
                c.storage_align(len(layout) - 2, max(1, 128 // size),
                                max(1, 4 * pad_words // size))
        fused = loops[0]
        for lp in loops[1:]:
            fused = c.fuse(fused, lp)
        if copy_tail is TailStrategy.GuardWithIf:
            fo, qi = c.split(fused, tx)
            fo, ri = c.split(fo, ty)
        else:  # (the same elements a thread; the last step's shifted back, no guard)
            fo, t = c.split(fused, tx * ty, tail=copy_tail)
            ri, qi = c.split(t, tx)
        c.reorder(ri, qi, fo)
        c.gpu_threads(ri, qi)


def _tile_layout(s: Schedule, name: str, tensor: str, y: str, x: str
                 ) -> tuple[int, ...] | None:
    """The order to stage ``tensor``'s tile in so that a thread's register tile reads it
    ``regs`` elements at a time: where its last index does not follow ``x`` but one of its
    dimensions follows ``y`` (``A[i, k]`` of a GEMM, a convolution's ``Wt[co, ci, ry, rx]``),
    that dimension last (``A_shared[k, i]``), as CUTLASS stores A's tile; None: as it is
    (``B[k, j]``), or ``tensor`` is read more than once."""
    reads = [a for a in accesses(s.view.definition(name).value) if a.name == tensor]
    if len(reads) != 1:
        return None
    dims = [{v.name for v in free_vars(e)} for e in reads[0].indices]
    if len(dims) < 2 or x in dims[-1] or y in dims[-1]:
        return None
    along = [d for d, names in enumerate(dims) if y in names and x not in names]
    if len(along) != 1:
        return None
    return tuple(d for d in range(len(dims)) if d != along[0]) + (along[0],)


def _map_blocks(h, outer: Sequence[str], yo, xo) -> None:
    """Map ``yo, xo`` and the ``outer`` pure loops (fused into one, outermost) to blocks."""
    if outer:
        fused = outer[0]
        for o in outer[1:]:
            fused = h.fuse(fused, o)
        h.gpu_blocks(fused, yo, xo)
    else:
        h.gpu_blocks(yo, xo)


def _register_tile(h, y, x, regs: int, tx: int = 1, x_groups: int = 1) -> tuple:
    """Split ``y`` and ``x`` of stage ``h`` by ``regs`` and unroll the inner loops (a thread's
    ``regs x regs`` register tile; with ``x_groups`` its columns in that many runs ``tx * regs /
    x_groups`` apart where each run keeps ``GEMM_GROUP_VECTOR`` columns, ``staged_reduction``);
    returns the thread loops, the register loop along
    ``y`` and the list of those along ``x``."""
    yt, yr = h.split(y, regs)
    h.unroll(yr)
    if x_groups > 1 and regs % x_groups == 0 and regs // x_groups >= GEMM_GROUP_VECTOR:
        xo, xv = h.split(x, regs // x_groups)
        xg, xt = h.split(xo, tx)
        h.unroll(xg)
        h.unroll(xv)
        return yt, xt, yr, [xg, xv]
    xt, xr = h.split(x, regs)
    h.unroll(xr)
    return yt, xt, yr, [xr]
