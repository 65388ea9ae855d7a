"""A schedule from rules, for ``tl.compile(F, schedule="auto")`` when no tuning record exists:
never the naive loop nest, never illegal.

Rules, per Func from the output backwards (Halide's "inline cheap pointwise producers, compute
reductions at root" starting point, Ragan-Kelley et al. PLDI 2013; the register tile of
TVM/Ansor's multi-level tiling sketch, Zheng et al. OSDI 2020):

- a pointwise Func with a single pointwise reader is inlined, unless the inlined expression of the
  Func it ends up in would exceed ``MAX_INLINE_NODES`` nodes (a chain of 5x5 stencils inlined into
  each other grows 25-fold per stage), or inlining would compute each of its points more than
  ``MAX_INLINE_RECOMPUTE`` times (``inline_rules.inline_recompute``: a stencil's taps, a reader's
  extra dimensions such as an image's channels; up to ``MAX_CHEAP_RECOMPUTE`` times for an
  expression of at most ``CHEAP_INLINE_NODES`` nodes); a pointwise Func read only by reductions, and
  not placed at a row loop (below), is inlined under the same limits, every reader's evaluations
  counted (gemver's ``A_hat``, read once per point by each of two matrix-vector sums: computed twice
  per point, its N x N buffer never stored and read back); every other Func is computed at root
  (inlined into a reduction that reads each point many times it would be recomputed on every
  reduction iteration: conv2d's padding would be evaluated 9 x CI times per output);
- a reduction with at least two pure Vars gets a register tile of 16 vector accumulators: the
  innermost pure Var split by two native vectors (``ShiftInwards``), vectorized by one native
  vector and the two unrolled (the form the search space gives it), or, when its extent is at
  most four vectors and not a multiple of two vectors, by its whole extent (conv2d's 56-wide
  rows: 16 + 16 + 16 + 8 lanes, not 64 columns for 56); a row Var (GEMM's ``i``, conv2d's
  output channel: not indexing the vector operands) split by the accumulators left per vector
  (8 for two vectors; a divisor of its extent where one is close, up to 24 accumulators,
  ``narrow_tile``: a guarded remainder is slow) and unrolled; the reduction loops inside;
- a GEMM-like reduction (``packed_operand``) whose operand does not fit in L1 is first tried as
  BLIS's packed nest (``_packed_tile``: row blocks in parallel; per reduction block, the row
  block of A and each ``kc x nr`` panel of B copied into contiguous buffers; ``kc`` and the row
  block from the analytical model of ``cpu_model``); the register tile above where the sizes do
  not allow it or B is one panel in L2 (``packed_reads.one_panel_in_l2``: read in place);
- a row reduction along a contiguous index (``tmp[i] = A[i, k] * x[k]``, or into rows of 2-3
  columns) accumulates vectors of partial sums per row, rows together (``rfactor_lanes``);
- a reduction with one pure Var (or others of extent 1) that indexes the last dimension of what
  it reads (``y[j] = A[i, j] * x[i]``) runs its reduction loops outside a segment of ``ROW_VECTORS``
  vectors of that Var: every reduction step then reads a contiguous row segment; where the
  matrix streams from memory (larger than half the L3), each thread instead walks a wide band
  of columns, about ``LANE_ROWS`` rows per step (``stream_rules.column_rows``);
- a pointwise stage vectorizes its innermost pure Var by one native vector;
- a Func the output reads at its outermost loop's Var (softmax's ``e[i, j]`` in row ``i``), and a
  Func read only by such Funcs, is computed at that loop (Halide's compute_at: one row at a time
  stays in cache), with no parallel loop of its own, if its stores executed in the lowered nest stay
  within ``MAX_RECOMPUTE`` times those at root (PolyBench gemver's ``x``, read whole by every row,
  would be recomputed once per row block). A reduction over two or more pure Vars (a register tile)
  or with a row segment (above) stays at root: one row at a time would leave its tile a single row;
- the outermost pure loop of 2 iterations or more (a GEMM's column panels where they share out
  better than its few row tiles: ``narrow_tile``) runs in parallel where the stage does
  ``MIN_PARALLEL_POINTS`` iterations (a reduction's: ``serial_share.MIN_PARALLEL_VECTORS``),
  unless small around a serial largest one; a loop of 2-4 a ``where`` tests is unrolled inside;
- a big reduction with fewer pure points than threads (a total, a few long rows) is split into
  chunks of its outermost reduction loop, which ``rfactor`` makes a pure dimension of a new
  stage run in parallel (``_rfactor_stage``);
- root reductions that read one array at the same indices, varying along their rows, and run the
  same outermost parallel loop share it (``compute_with``, ``fuse_siblings``): a row of the shared
  array is read by each while in cache (a row sum and a row max of one matrix; a vector read whole
  by every row does not count: ``rfactor_rules.FUSE_INVARIANT_READS``); so do two whose
  ``RDom.where`` conditions both mention that loop's Var (``FUSE_UNEVEN``): each block of rows then
  runs both triangles (PolyBench symm's ``k <= i`` and ``k > i``: every row the same work in all); a
  row and a column sum of one large matrix take one pass (``one_pass``: bicg, mvt, atax);
- an update definition (scans, in-place sweeps, time-stepped stencils over an RDom with a time
  dimension) keeps its loop order; its innermost loop is vectorized (when it spans at least
  ``UPDATE_MIN_VECTORS`` vectors and ``UPDATE_MIN_BYTES``; LLVM gets a shorter one) and its
  outermost loop that runs at least ``MIN_PARALLEL_POINTS`` points per parallel region (a
  region a time loop starts on every step: ``MIN_REPEATED_PARALLEL_POINTS``) runs in parallel,
  each only where the dependence analysis proves it (a scan's ``r.x`` is neither; a Jacobi
  step's rows inside its time loop are both); a scan whose contiguous pure Var is outside its
  reduction loops (a column scan) is first tried as chunks of that Var in parallel, the
  reduction loops inside, the chunk's vectors innermost (``scan_stage``; all in ``update_rules``).

Each stage tries these in decreasing ambition (full, then without ShiftInwards tails, then only
vectorize + parallel, then only parallel, then nothing) and keeps the first variant the legality
check proves and lowering accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tensorlang.backends.llvm.runtime import num_threads
from tensorlang.backends.llvm.target import host_target
from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, Var, walk
from tensorlang.func import Func, parse_stage_id
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.ir import ForKind
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule, Stage

from . import few_rows, narrow_tile, rfactor_rules
from .cpu_model import (BROADCAST_REGISTERS, TILE_VECTORS, CpuModel, accumulator_budget,
                        closest_divisor, cpu_model, even_block, gemm_blocking, near_divisor,
                        tile_accumulators, register_tile as model_tile)
from .one_pass import one_pass
from .packed_reads import (Packed, condition_mentions, one_panel_in_l2, packed_operand,  # noqa
                           packed_operands, packer, panel_dim, row_block_reads, row_var,
                           rows_straddle_lines, short_reduction)
from .row_blocks import balanced_down, busy, partial_block, shared, shifted_row_block
from .serial_share import few_vectors, minor_stages, stage_points
from .rfactor_rules import (MIN_PARALLEL_POINTS, ROW_VECTORS, _rfactor_lanes_stage,
                            _rfactor_stage, _rfactor_update_stage, contiguous_in, shared_read)
from .select_loops import row_loops, unroll_selects, unroll_update_selects
from .stream_rules import _column_rows_stage, only_vars_of_one, segment_width, streams_matrix
from .inline_rules import (CHEAP_INLINE_NODES, MAX_CHEAP_RECOMPUTE, MAX_INLINE_NODES,  # noqa: F401
                           MAX_INLINE_RECOMPUTE, algorithm_readers, inline_pays, inline_recompute,
                           inlined_nodes, recompute_factor)
from .update_order import contiguous_innermost, jam_block, jam_rows, jam_tile
from .update_rules import UPDATE_MIN_VECTORS, scan_stage, update_parallel_loops, update_stage
from .vector_width import narrow_kernel, stage_lanes
from .workloads import BoundExtents

if TYPE_CHECKING:
    from tensorlang.backends.llvm.target import Target
    from tensorlang.schedule.loops import StageState

    from .cpu_model import GemmBlocking

ACCUMULATORS = 16  # vector registers a register tile accumulates in (of 32 on AVX-512)
#: the same with 16 vector registers (AVX2): 4 stay free for the loaded and broadcast operands
ACCUMULATORS_AVX2 = 12
MAX_TILE_VECTORS = 4
#: row blocks of a packed GEMM per thread at least: each block copies every panel of B again,
#: so one per thread, as large as the model's ``mc`` allows (docs/performance.md) ...
BLOCKS_PER_THREAD = 1
#: ... but two where rows differ in work (a triangle: ``RDom.where(k > i)``), so that the
#: parallel loop, which hands out blocks as threads free up, can even the threads' time out
UNEVEN_BLOCKS_PER_THREAD = 2
#: whether ``fuse_siblings`` also fuses root reductions whose ``RDom.where`` conditions both
#: mention their shared parallel loop's Var (rows differ in work in each; PolyBench symm's two
#: triangles ``k <= i`` and ``k > i``, each run alone over two row blocks, left a third of
#: the two threads' time idle). An int, for ``--against FUSE_UNEVEN=0``
FUSE_UNEVEN = 1
#: the largest ``kc`` (the search space's largest split factor of a GEMM-like reduction)
MAX_KC = 512
#: the smallest ``kc`` of a packed tile with one packed panel where the model's L1 bound gives
#: less (with two, as syr2k's, half each: both panels stay in L1). The bound keeps A's sliver
#: and B's panel in L1 together; BLIS's x86 configurations ship more (Haswell 256, Skylake-X
#: 384, Zen 4 512 for float64), A's sliver streaming from L2, and on Zen 4 and an AVX-512 Xeon
#: 256 measured faster than the model's 128 (docs/performance.md): half the loads and stores of
#: the C tile, and of the short k loops' starts, per flop. ``mc`` stays the model's (derived
#: from the larger ``kc`` it would halve the row blocks: twice the copies of B). A CPU's
#: ``CpuModel.packed_kc`` replaces it where set (Zen 4: 512)
MIN_KC = 256
#: whether a reduction with no divisor near ``kc`` (a prime) is packed in equal blocks (0: not)
EVEN_KC = 1
#: whether a packed GEMM whose rows make one row block runs its column panels (``few_rows``)
FEW_ROWS = 1
#: whether a packed tile copies its row block of A in panels of the tile's rows
#: (``row_operands``: BLIS's micro-panels of A): -1 where the CPU's model says
#: (``CpuModel.a_panels``: on Zen 3), 0 never, 1 always. On Zen 4 it made GEMM 1024 float64 on
#: one thread 5% faster but PolyBench's 3mm 7-10% and syr2k 3-12% slower (docs/performance.md).
#: An int, for ``benchmarks/gemm_packed.py``'s ``auto:A_PANELS=1``
A_PANELS = -1
#: whether every packed tile with a split reduction runs BLIS's loop order (else only where
#: ``BLIS_ORDER_BLOCKS`` says; with this on, the row blocks are re-chosen as ``BLIS_BLOCK_ROWS``
#: says): for each ``kc`` block, the whole ``kc x N`` block of B is copied once, in ``nr``-wide
#: panels (by the threads together), then the row blocks run in parallel, each copying its
#: ``mc x kc`` block of A (Goto and van de Geijn, TOMS 2008, Fig. 8). Off: each row block copies
#: B's ``kc x nr`` panels itself (docs/performance.md, "BLIS's whole loop order")
BLIS_ORDER = 0
#: how many times the row blocks a thread asked for (``blocks_per_thread``) a packed tile with a
#: split reduction must give each thread to run BLIS's loop order (``BLIS_ORDER``: always): then B's
#: panels are copied once per ``kc`` block, not once per row block. A small L2 makes many blocks:
#: AVX2 code for ``haswell`` (256 KiB L2, 85-row blocks, twelve on one thread at 1024 rows) spent
#: 12-13% of its samples copying B; in BLIS's order 1% (10-12% faster in three runs, even in two
#: later ones); symm's five blocks (two asked for, its rows differ in work) ran slower in it on one
#: thread (docs/performance.md, "AVX2 code on the AVX-512 VM"). 0: never
BLIS_ORDER_BLOCKS = 4
#: whether a packed tile whose rows leave a remainder (the extent not a multiple of the tile's rows)
#: runs BLIS's loop order whatever its number of row blocks: there the remainder is peeled off the
#: tile loop inside the row blocks (``realize.PEEL_SHARED``: B's panels are copied outside them),
#: where the other order runs it as a piece of its own after the parallel loop, on one thread,
#: copying every panel of B again (AVX2 code on Zen 4, float32 1024^3 in 6-row tiles: 15-17% faster
#: on 2 threads, 8% on 1; docs/performance.md, "AVX2 code on Zen 4"). 0: as before
BLIS_ORDER_REMAINDER = 1
#: the packed tile prefetches the next register tile's rows of its output at the top of each
#: tile (``Stage.prefetch``), as BLIS's and OpenBLAS's micro-kernels prefetch C. 0: never; 1:
#: always (no gain that reproduced on rows of whole cache lines: docs/performance.md,
#: "Prefetching C's next tile"); 2: with vectors of at most 256 bits; 3: where the output's rows
#: straddle cache lines (``rows_straddle_lines``; AVX2 code gains most: docs/performance.md,
#: "C's rows across cache lines") or the tile's reduction is short (``short_reduction``)
PREFETCH_TILE = 3
#: how many register tiles ahead (``prefetch``'s ``offset``)
PREFETCH_OFFSET = 1
#: ``CpuModel.packed_vectors`` and ``.packed_accumulators`` in their place (0: the model's), for
#: ``benchmarks/gemm_packed.py``'s ``auto:PACKED_VECTORS=2`` or ``auto:PACKED_ACCUMULATORS=16``
PACKED_VECTORS = PACKED_ACCUMULATORS = 0
#: rows of a row block in BLIS's order, as many blocks as that gives (at least one per
#: thread): B is copied once per ``kc`` block whatever their number, so more, smaller blocks
#: cost only reads of its panels from L3 again, each serving the block's rows, and keep less
#: of A's block in L2; much smaller blocks measured slower (each reads all of B's panels)
BLIS_BLOCK_ROWS = 256
#: the fewest rows of a packed tile's row block: each copied panel of B serves that many rows
#: (doitgen at 8 rows per block spent more time copying than multiplying)
MIN_BLOCK_ROWS = 32
#: whether a packed tile whose row blocks would all be under ``MIN_BLOCK_ROWS`` rows takes
#: fewer, larger blocks than the threads ask for (``_packed_rows``); 0: no packing then, as
#: before (for ``benchmarks/polybench.py --against FEWER_BLOCKS=0``)
FEWER_BLOCKS = 1
#: the least share of the threads' time a packed tile's row blocks keep busy (``_packed_rows``)
MIN_BALANCE = 0.9
#: whether ``row_block`` takes smaller blocks (to half the size) where the model's and the divisor
#: up leave the threads under ``MIN_BALANCE`` busy (``znver3`` float64 1000 x 1100 x 1200, 2
#: threads: 5-row tiles in 8 blocks, not 4-row tiles, 8 accumulators, in 10; docs/performance.md,
#: "Chunks and blocks that share out"). 0: as before (for ``--against``)
BALANCE_DOWN = 1
#: whether ``row_block`` takes each thread's share of the tiles, the last block shorter, where no
#: whole block keeps ``MIN_BALANCE`` of the threads busy (Xeon, 16 threads, float64 1000 x 1100
#: x 1200: 25 blocks of 5 tiles, two rounds; docs/performance.md, "A shorter last row block").
#: 0: whole blocks only, as before (for ``--against``)
PARTIAL_BLOCKS = 1
#: whether ``_packed_rows`` takes the model's tile rows (or more) in blocks with a shorter last
#: one where no whole block divides its tiles, no triangle (``RDom.where``) makes rows differ in
#: work and the reduction is split (``haswell`` float32, 1000 rows: 6-row tiles, 166 of them, not
#: 5-row ones; docs/performance.md, "A shorter last row block"). 0: as before
PARTIAL_ROWS = 1
#: whether a packed tile's rows keep at least ``fma_latency * fma_units`` accumulators where a
#: row count that does is found (Low et al.'s bound, ``RegisterTile.hides_latency``), before
#: balanced row blocks: ``_packed_rows`` took 2-row tiles, 4 accumulators, for blocks that
#: share out (AVX2 code for ``haswell``, float32 800 x 900 x 1000 on 2 threads;
#: docs/performance.md, "Chunks and blocks that share out"). 0: as before (for ``--against``)
LATENCY_ROWS = 1
#: the most accumulators a packed tile takes, past the model's, to share its row blocks evenly
#: over the threads (Xeon AVX-512, 2 threads, float64 1000 x 1100 x 1200: a 10-row tile, 20
#: accumulators, in 4 blocks 166 GFLOP/s; 8 rows in 5 blocks 129, docs/performance.md)
BALANCE_ACCUMULATORS = 20
#: rows of a packed row block below which a later row count with bigger blocks is preferred:
#: each copied panel of B serves them (doitgen, 140 rows per batch: 45-row blocks 11.9 ms,
#: 70-row 8.7-9.3 ms)
REUSE_ROWS = 64
#: whether a row count whose row blocks run BLIS's loop order (``blis_order``) counts as one whose
#: blocks reuse B's panels whatever their rows (``_packed_rows``): B is copied once per ``kc``
#: block there, so ``REUSE_ROWS`` does not push the tile off the model's rows (AVX2 code for
#: ``haswell``, float64 1024^3: 6-row tiles in 60-row blocks, not 5 in 85; docs/performance.md,
#: "The model's rows in BLIS's order"). 0: ``REUSE_ROWS`` alone, as before (for ``--against``)
BLIS_ORDER_REUSE = 1
#: whether an unsplit packed tile whose row blocks run serially in a batch loop copies B's panels
#: once per batch, not per row block (``znver3`` float64 8 x 256^3, one thread: the copy took
#: 11% of the samples; docs/performance.md, "B's panels once per batch"). 0: as before
PANELS_PER_BATCH = 1
#: whether a packed tile whose reduction is not split shifts its last register tile of rows
#: inwards (``ShiftInwards``: its rows past the last whole tile recomputed with the tile before)
#: and its row blocks take that tile (``shifted_row_block``), instead of running the remainder
#: rows as a piece of their own that copies every panel of B again (docs/performance.md, "The
#: rows' remainder of an unsplit reduction, shifted"). Legal there only (each tile initialises
#: and reduces its cells whole), and only where the row blocks run serially. 0: the piece
SHIFT_ROWS = 1
#: 1: an unsplit reduction's column panels past the last whole one take a guarded tail where a
#: vector of the tile is left wholly dead there (the live vectors run alone:
#: ``schedule/live_vectors.py``); 0: the last panel shifted inwards, whole, as before (and
#: where every vector is live: the guarded tail is a piece of its own that copies A again)
GUARD_PANELS = 1
#: the most a compute_at placement may multiply a Func's executed stores over computing it at root
MAX_RECOMPUTE = 2.0
def lanes(f: Func, target: Target | None = None) -> int:
    """Native SIMD lanes of ``f``'s dtype on ``target`` (default: the host; 16 float32 on
    AVX-512, 8 on AVX2)."""
    return max(1, (target or host_target()).vector_bits // (8 * f.dtype.numpy.itemsize))


def accumulators(target: Target | None = None) -> int:
    """Vector registers a register tile may accumulate in on ``target`` (default: the host), from
    the analytical CPU model (``cpu_model.accumulator_budget``): ``ACCUMULATORS`` of AVX-512's
    32, ``ACCUMULATORS_AVX2`` of AVX2's 16."""
    return accumulator_budget(cpu_model(target))


def heuristic_schedule(output: Func | Sequence[Func], sizes: dict[str, int],
                       target: Target | None = None) -> Schedule:
    """A legal, tiled / vectorized / parallel schedule of ``output`` for these sizes, for the
    vector width and register count of ``target`` (default: this machine).

    Raises:
        ShapeError: the sizes do not fit the algorithm.
    """
    # variants proven legal as chosen; lowering (slow) once at the end, per variant if that fails
    p, ext = Pipeline(output), BoundExtents(output, sizes)
    s = _build(output, sizes, target, False, frozenset(), p, ext)
    serial = minor_stages(s, p.funcs, ext)  # (small stages around a serial largest one)
    s = _build(output, sizes, target, False, serial, p, ext) if serial else s
    return s if _lowers(output, s) else _build(output, sizes, target, True, serial, p, ext)


def _build(output: Func | Sequence[Func], sizes: dict[str, int], target: Target | None,
           lower_each: bool, serial: frozenset[str], p: Pipeline, extents: BoundExtents
           ) -> Schedule:
    s = Schedule(output)
    host = p.outputs[-1]  # (several outputs: only the last one's row loop hosts producers)
    narrow = narrow_kernel(p.funcs, extents, target)  # (no 512-bit copies around such a stencil)
    for f in reversed(p.funcs):
        if not p.is_output(f):
            d = f.definition
            assert d is not None
            readers = s.view.readers(f.name)
            names = {g.name for g in p.funcs}  # not the copy stages cache_read made (packing)
            base = parse_stage_id(readers[0])[0] if len(readers) == 1 else None
            reader = p.func(base) if base in names else None
            pointwise = d.reduce_op is None and not f.updates
            single = reader is not None and not reader.definition.rvars  # type: ignore[union-attr]
            t = _inlined(p, s, f, extents) if pointwise and single else None
            if t is not None:
                s = t
                continue
            row = _row_loop(s, host, f, readers)
            if row is not None:
                t = _try(s, lambda t, f=f, row=row: t[f].compute_at(t[host], row))
                if t is not None and recompute_factor(output, f, s, t, sizes) <= MAX_RECOMPUTE:
                    s = t
            # read only by reductions, and left at root: inlined where each of its points is
            # still computed only a few times (gemver's A_hat, read once per point by each of
            # two matrix-vector sums: its N x N buffer is never stored and read back). Not
            # into pointwise readers: Halide's hist and camera_pipe ran 7% and 10% slower so
            root = s.states[f.name].compute.kind == "root"
            by_reductions = all(g.definition.rvars  # type: ignore[union-attr]
                                for g in algorithm_readers(p, f.name))
            t = _inlined(p, s, f, extents) if pointwise and root and by_reductions else None
            if t is not None:
                s = t
                continue
        nested = s.states[f.name].compute.kind == "at"
        one = nested or f.name in serial  # (its pure definition on one thread)
        width = stage_lanes(f, None, extents, target, narrow)  # (a stencil in L1: narrower)
        for variant in ("packed", "lanes", "columns", "full", "guard", "simple", "parallel"):
            if variant == "packed":
                t = None if one else _try(s, lambda t, f=f: _packed_tile(
                    t, f, extents, lanes(f, target), target))
            elif variant == "lanes":
                t = None if one else _try(s, lambda t, f=f: _rfactor_lanes_stage(
                    t, f, extents, lanes(f, target), p.funcs, cpu_model(target)))
            elif variant == "columns":
                t = None if one else _try(s, lambda t, f=f: _column_rows_stage(
                    t, f, extents, lanes(f, target), cpu_model(target)))
            else:
                t = _try(s, lambda t, f=f, v=variant, n=one, w=width: _stage(
                    t, f, v, extents, w, n, cpu_model(target)))
            if t is None:
                continue
            if not lower_each or _lowers(output, t):
                s = t
                break
        for u in f.updates:
            s = _schedule_update(s, output, f, u.number, extents,
                                 stage_lanes(f, u.number, extents, target, narrow), nested,
                                 lower_each, cpu_model(target))
            # an innermost loop accumulating into one cell runs as a SIMD reduction in a
            # register (cholesky's dot products; schedule/cell_reduction.py)
            s[f].update(u.number).atomic()
    return one_pass(fuse_siblings(s, p, lambda f, h, t: _lowers(output, t)), p, extents,
                    cpu_model(target), lambda f: lanes(f, target), lambda t: _lowers(output, t))


def fuse_siblings(s: Schedule, p: Pipeline,
                  accept: Callable[[Func, Func, Schedule], bool]) -> Schedule:
    """Root reductions that read a common array at the same indices, which vary along their
    outermost loop (a row sum and a row max of one matrix; ``rfactor_rules.shared_read``), and
    whose outermost loop is the same parallel loop are computed with the first of them at that
    loop (``compute_with``): each row of the shared array is read by all of them while it is in
    cache, instead of once per stage from memory. So are root reductions whose ``RDom.where``
    conditions mention that loop's Vars (``FUSE_UNEVEN``; ``uneven_along``):
    rows differ in work in each, and one parallel loop over both evens the threads' time out
    where the triangles complement each other (PolyBench symm: ``k <= i`` and ``k > i``, every
    row the same work in the two together). Kept where the fusion is proven and ``accept(f,
    host, fused schedule)`` says so (the rule-based schedule: where it lowers, as the stages'
    bounds along the loop must agree; the search space: its decision ``<f>.with_<host>``).
    Pointwise stages are left apart: fusing a Sobel pair or PolyBench fdtd-2d's output copies
    measured no gain (their stores dominate) or a loss (``docs/language.md``)."""
    roots = [f for f in p.funcs if s.states[f.name].compute.kind == "root" and not f.updates
             and s.states[f.name].loops and s.view.definition(f.name).rvars]
    hosts: list[Func] = []
    for f in roots:
        st = s.states[f.name]
        if st.kinds[st.loops[0]] is not ForKind.PARALLEL or st.is_reduction_loop(st.loops[0]):
            continue
        f_value, along = s.view.definition(f.name).value, st.origin[st.loops[0]]
        uneven = uneven_along(f, st)
        for h in hosts:
            if st.loops[0] != s.states[h.name].loops[0]:
                continue
            if not shared_read(f_value, s.view.definition(h.name).value, along) and not (
                    uneven and uneven_along(h, s.states[h.name])):
                continue
            t = _try(s, lambda t, f=f, h=h: t[f].compute_with(t[h], st.loops[0]))
            if t is not None and accept(f, h, t):
                s = t
                break
        else:
            hosts.append(f)
    return s


def _schedule_update(s: Schedule, output: Func, f: Func, number: int, extents: BoundExtents,
                     lanes: int, nested: bool, lower_each: bool, cpu: CpuModel) -> Schedule:
    t = _try(s, lambda t: contiguous_innermost(t, f, number, extents, lanes, UPDATE_MIN_VECTORS))
    if t is not None and (not lower_each or _lowers(output, t)):
        s = t  # the contiguous loop innermost (update_order.py); the steps below start from it
    t = _try(s, lambda t, r=cpu.vector_registers: jam_rows(t, output, f, number, extents, lanes,
                                   UPDATE_MIN_VECTORS, jam_block(r), jam_tile(r), cpu.l2.size))
    if t is not None:
        return t  # a block of cells jammed over a shared row (update_order.py), lowered
    if not nested:
        t = _try(s, lambda t: _rfactor_update_stage(t, f, number, extents))
        if t is not None and (not lower_each or _lowers(output, t)):
            return t
    t = _try(s, lambda t: scan_stage(t, f, number, extents, lanes, nested))
    if t is not None and (not lower_each or _lowers(output, t)):
        return t
    t = _try(s, lambda t: unroll_update_selects(t[f].update(number), f, number, extents,
                                                UPDATE_MIN_VECTORS * lanes))  # (channels)
    s = t if t is not None and (not lower_each or _lowers(output, t)) else s
    pars = [] if nested else update_parallel_loops(s, f, number, extents)
    for vector in (True, False):
        for par in [*pars, None]:
            if not vector and par is None:
                return s
            t = _try(s, lambda t, v=vector, p=par: update_stage(t, f, number, v, p, extents, lanes))
            if t is not None and (not lower_each or _lowers(output, t)):
                return t
    return s


def _inlined(p: Pipeline, s: Schedule, f: Func, extents: BoundExtents) -> Schedule | None:
    """``s`` with ``f`` inlined, if no expression grows past ``MAX_INLINE_NODES`` and each of
    ``f``'s points is computed few enough times (``_inline_pays``); else None."""
    t = _try(s, lambda t: t[f].compute_inline())
    if t is not None and inlined_nodes(p, t) <= MAX_INLINE_NODES and inline_pays(p, s, f, extents):
        return t
    return None


def _lowers(output: Func, s: Schedule) -> bool:
    try:
        lower(output, s)
    except ScheduleError:
        return False
    return True


def _row_loop(s: Schedule, output: Func, f: Func, readers: list[str]) -> str | None:
    """The output's outermost loop, when it is parallel and ``f`` may be computed inside it
    without recomputation:
    the output reads ``f`` at that loop's Var (softmax's ``e[i, j]`` per row ``i``), or every
    reader of ``f`` is itself computed at the output (``mx``, read only by ``e``)."""
    st = s.states[output.name]
    loops = row_loops(st, output)  # past the one-iteration loops of unrolled channels
    if f.updates or not loops or st.kinds.get(loops[0]) != ForKind.PARALLEL:
        return None  # only the output's parallel outermost loop (else the producer loses its own)
    d = f.definition
    if d is not None and d.rvars and (len(d.args) >= 2 or contiguous_in(f, d.args[0].name)):
        return None  # a register-tiled reduction needs whole row blocks (gemm's sum per row: 1
        # row of accumulators streams all of B once per output row); so does a row segment
    loop = loops[0]
    var = loop.split(".")[0]
    others = [r for r in readers if r != output.name]
    if any(s.states[r].compute.func != output.name for r in others):
        return None
    if output.name in readers:
        d = output.definition
        assert d is not None
        reads = [a for a in walk(d.value) if isinstance(a, Access) and a.name == f.name]
        if not reads or not all(any(isinstance(n, Var) and n.name == var for i in a.indices
                                    for n in walk(i)) for a in reads):
            return None
        rows = {tuple(i.key for i in a.indices if any(isinstance(n, Var) and n.name == var
                                                      for n in walk(i))) for a in reads}
        if len(rows) > 1:
            return None  # a stencil along the loop's Var: each iteration needs several rows
    return loop


def _try(s: Schedule, apply: Callable[[Schedule], object]) -> Schedule | None:
    """``s`` with ``apply`` done on a copy, if that succeeds and is proven legal."""
    t = s.copy()
    try:
        apply(t)
    except ScheduleError:
        return None
    return t if t.check(realize=False).ok else None  # heuristic_schedule lowers the result


def uneven_along(f: Func, st: StageState) -> bool:
    """Whether ``FUSE_UNEVEN`` is on and the condition of ``f``'s reduction (``RDom.where``)
    mentions a Var of the outermost loop of its stage ``st``: its iterations differ in work."""
    return bool(FUSE_UNEVEN) and any(condition_mentions(f, v) for v in st.origin[st.loops[0]])


def register_tile(width_extent: int, row_extent: int, lanes: int,
                  accumulators: int = ACCUMULATORS, vectors: int = TILE_VECTORS
                  ) -> tuple[int, int]:
    """(vector lanes, rows) of a register tile over a vector loop of ``width_extent`` and a row
    loop of ``row_extent``, for ``lanes`` native SIMD lanes, ``accumulators`` vector
    registers and ``vectors`` native vectors per row (see the module docstring).

    >>> register_tile(1024, 1024, 16), register_tile(56, 64, 16), register_tile(1024, 96, 8, 16, 4)
    ((32, 8), (56, 4), (32, 4))
    """
    width = vectors * lanes
    if width_extent <= MAX_TILE_VECTORS * lanes and width_extent % width:
        width = width_extent
    return width, accumulator_rows(-(-width // lanes), row_extent, accumulators)


def accumulator_rows(vectors: int, row_extent: int, accumulators: int = ACCUMULATORS) -> int:
    """Rows of a register tile whose rows hold ``vectors`` vector registers each: the
    accumulators left (``accumulators // vectors``), moved down to a divisor of ``row_extent``
    when one is at least half of it (no guarded remainder).

    >>> [accumulator_rows(v, n) for v, n in [(2, 1024), (4, 64), (4, 6), (2, 7), (2, 17)]]
    [8, 4, 3, 7, 8]
    """
    rows = max(1, accumulators // max(vectors, 1))
    near = next((r for r in range(rows, 0, -1) if row_extent % r == 0), 1)
    return near if 2 * near >= rows else rows


def row_operands(f: Func, row: str, split: bool = True, rows: int = 1, panels: int = 2,
                 cpu: CpuModel | None = None) -> list[Packed]:
    """The operand reads of a GEMM-like reduction ``f`` that a packed register tile copies as
    its row block (BLIS's ``mc x kc`` block of A): indexed by the reduction Var ``k`` and the
    row Var ``row`` (``row_var``), not by the vector Var; stored with ``k`` last, so the block's
    rows are contiguous (``A[i, k]`` as it is; covariance's ``d[k, i]`` transposed); with the
    reduction ``split`` into blocks and a tile of ``rows`` rows (more than one), in panels of
    them where ``A_PANELS`` says (BLIS's micro-panels of A: the tile's rows adjacent for each
    ``k``; by default where ``cpu``'s ``a_panels`` is set, this machine's model if None).
    Not ``split``, or one of ``panels`` column panels: transposed ones only (row_block_reads)."""
    whole = A_PANELS == 1 or A_PANELS == -1 and (cpu or cpu_model()).a_panels
    return row_block_reads(f, row, split, rows if split and whole else 1, panels)


def row_block(tiles: int, rows: int, mc: int, threads: int,
              per_thread: int = BLOCKS_PER_THREAD, least_rows: int = 0,
              partial: bool = False) -> int:
    """Register tiles per row block of a packed GEMM: the model's ``mc`` rows, fewer where
    the row blocks would not give each of ``threads`` threads ``per_thread`` blocks
    (``blocks_per_thread``), moved down to a divisor of ``tiles`` of at least a quarter of that
    when there is one (no partial block; a smaller block only packs B more often); where those
    blocks keep less than ``MIN_BALANCE`` of the threads' time busy (``shared``), the divisor up
    from the threads' share (up to ``mc``) if its blocks keep that much busy: fewer blocks than
    ``per_thread * threads``, all in one round; else (``BALANCE_DOWN``) the largest divisor
    down to half the block whose blocks do (``balanced_down``). With ``least_rows``, a block of
    fewer rows is raised to the smallest divisor of ``tiles`` (up to ``mc``) that has that many:
    fewer blocks again, some threads idle in the blocks' loop (``_packed_rows`` asks so when no
    row count qualifies otherwise). With ``partial`` (and ``PARTIAL_BLOCKS``), where those
    blocks keep less than ``MIN_BALANCE`` busy, each thread's share of the tiles with a shorter
    last block if that keeps more busy (``partial_block``, ``busy``) and has ``MIN_BLOCK_ROWS``
    rows: ``_packed_rows`` chooses the row count by whole blocks, then asks so.

    >>> row_block(128, 8, 1536, 2), row_block(125, 8, 1536, 2), row_block(128, 8, 96, 16)
    (64, 25, 8)
    >>> row_block(125, 8, 768, 1), row_block(127, 8, 768, 1), row_block(128, 8, 1536, 2, 2)
    (25, 96, 32)
    >>> row_block(125, 8, 1536, 16), row_block(125, 8, 1536, 16, partial=True)  # 16 blocks
    (5, 8)
    >>> row_block(90, 10, 1536, 16), row_block(150, 8, 1536, 16, 2)
    (6, 5)
    >>> row_block(160, 8, 1536, 32, 2), row_block(160, 8, 1536, 32, 2, least_rows=32)
    (1, 4)
    >>> row_block(200, 5, 200, 2)  # 5 blocks of 40 on 2 threads: 3 rounds of work for 2.5
    25
    """
    most = max(1, mc // rows)
    per_block = max(1, min(most, tiles // (per_thread * threads)))
    block = near_divisor(tiles, per_block, shrink=4) or per_block
    if tiles and tiles % block == 0 and shared(tiles // block, threads) < MIN_BALANCE:
        # the divisor up from the threads' share where that one shares out evenly: 90 tiles on
        # 16 threads in 15 blocks of 6 (one round), not 18 of 5 (two, the second 2/16 busy)
        up = next((d for d in range(-(-tiles // (per_thread * threads)), most + 1)
                   if tiles % d == 0), None)
        if up is not None and shared(tiles // up, threads) >= MIN_BALANCE:
            block = up
        elif BALANCE_DOWN:
            block = balanced_down(tiles, block, threads, MIN_BALANCE) or block
    least = min(tiles, -(-least_rows // rows))
    if block < least:
        block = next((d for d in range(least, max(most, least) + 1) if tiles % d == 0), block)
    if partial and PARTIAL_BLOCKS and threads > 1 and busy(tiles, block, threads) < MIN_BALANCE:
        # no whole block shares out (125 tiles on 16 threads: 25 blocks of 5, two rounds, the
        # second 9/16 busy): each thread its share, the last block shorter (16 blocks of 8)
        part = partial_block(tiles, threads, per_thread, most)
        if part is not None and part * rows >= MIN_BLOCK_ROWS \
                and busy(tiles, part, threads) > busy(tiles, block, threads):
            block = part
    return block


def least_block_rows() -> int:
    """The ``least_rows`` of ``row_block`` where no row count of a packed tile qualifies
    otherwise (``_packed_rows``): ``MIN_BLOCK_ROWS``, or 0 with ``FEWER_BLOCKS`` off. The search
    space's "model" row block asks the same, so the rule-based schedule stays a point of it (a
    block that ``least_rows`` raises is one ``_packed_rows``' first pass rejects)."""
    return MIN_BLOCK_ROWS if FEWER_BLOCKS else 0


def blocks_per_thread(f: Func, row: str) -> int:
    """Row blocks per thread of ``f``'s packed tile over its row Var ``row``:
    ``UNEVEN_BLOCKS_PER_THREAD`` where the reduction's condition (``RDom.where``) mentions
    ``row``, so rows differ in work, else ``BLOCKS_PER_THREAD``."""
    return UNEVEN_BLOCKS_PER_THREAD if condition_mentions(f, row) else BLOCKS_PER_THREAD


def _packed_rows(f: Func, extent: int, near: int, width: int, accs: int, threads: int,
                 target: Target | None, per_thread: int = BLOCKS_PER_THREAD,
                 reduction: int = 0) -> tuple[int, GemmBlocking, int]:
    """(rows, blocking, tiles per row block) of a packed tile over a row loop of ``extent``,
    with ``per_thread`` row blocks per thread (``blocks_per_thread``): the model's tile rows
    first, even where they leave remainder rows (loop partitioning runs them as a piece of their
    own: a 6-row tile, a divisor of 900, measured slower than 8 rows and a 4-row remainder,
    docs/performance.md), then more rows, up to ``BALANCE_ACCUMULATORS`` accumulators where the
    registers allow, then fewer (``near``, a divisor of the extent, among them). Of those whose
    row blocks have at least ``MIN_BLOCK_ROWS`` rows, those whose accumulators hide the FMAs'
    latency where there are any (``LATENCY_ROWS``), of them the ones that share out over ``threads``
    with at least ``MIN_BALANCE`` of the threads' time busy (1000 rows on 2 threads: 8-row tiles
    give 5 blocks, 10-row tiles 4), else the best shared; among them one of the model's rows or
    more that leaves no remainder piece (900 rows: 9, not 8 and a 4-row piece, which runs on
    one thread after the blocks and copies B again; on 16 threads 10 in 15 blocks, ``row_block``),
    then the first whose blocks have at least ``REUSE_ROWS`` rows or run BLIS's loop order
    (``blis_order``, for a reduction of extent ``reduction``: B's panels copied once per ``kc``
    block however many rows a block has), else the first; its blocks ``row_block``'s, partial.

    Raises:
        ScheduleError: no row count gives whole row blocks.
    """
    cpu = cpu_model(target)
    vectors = -(-width // cpu.lanes(f.dtype.numpy.itemsize))
    full = max(near, min(extent, accs // vectors))
    free = cpu.vector_registers - vectors - BROADCAST_REGISTERS
    most = max(full, min(extent, max(accs, min(free, BALANCE_ACCUMULATORS)) // vectors))
    # more rows first (more accumulators, each copied panel of B serving more rows), then fewer
    others = [*range(full + 1, most + 1), *range(full - 1, 1, -1)]
    found: list[tuple[float, int, int, int, int, GemmBlocking, int, bool]] = []
    even = not condition_mentions(f, row_var(f, [v.name for v in f.definition.args]))
    # with many threads every row count can give blocks under MIN_BLOCK_ROWS rows (1200 rows,
    # 16 threads, two blocks each): then fewer, larger blocks, of the model's tile rows or more
    # where one gives them, rather than no packing (an unpacked tile reads a transposed operand
    # a column at a time)
    for least_rows in dict.fromkeys((0, least_block_rows())):
        for n, rows in enumerate(dict.fromkeys([full, *others])):
            blocking = packed_blocking(f, rows, width, target)
            tiles = extent // rows
            mb = row_block(tiles, rows, blocking.mc, threads, per_thread, least_rows)
            kc = _packed_kc(reduction, blocking) if reduction else None
            split = kc is not None and kc < reduction
            if tiles % mb and PARTIAL_ROWS and rows >= full and even and split:
                # no whole block of the model's rows or more (166 tiles of 6): a shorter last
                # block rather than a smaller tile (rows even in work, the reduction split)
                mb = row_block(tiles, rows, blocking.mc, threads, per_thread, least_rows, True)
            elif tiles % mb:
                continue
            if mb * rows < MIN_BLOCK_ROWS and mb != tiles:
                continue
            blocks = -(-tiles // mb)
            share = busy(tiles, mb, threads)
            # remainder rows run after the row blocks, as a partitioned piece of their own on
            # one thread that copies every panel of B again; a tile of the model's rows or more
            # that leaves none is preferred
            whole = extent % rows == 0 and rows >= full
            reuse = mb * rows >= REUSE_ROWS or BLIS_ORDER_REUSE and blis_order(
                kc, reduction, blocks, per_thread, threads, extent % rows != 0)
            hides = not LATENCY_ROWS or rows * vectors >= cpu.fma_latency * cpu.fma_units
            found.append((share, whole, reuse, -n, rows, blocking, least_rows, hides))
        if found:
            if least_rows:
                found = [c for c in found if c[4] >= full] or found
            break
    if not found:
        raise ScheduleError(f"{f.name}: no row block for the packed tile")
    # tiles that hide the FMAs' latency first, of them balanced ones, then those whose copied
    # panels of B serve REUSE_ROWS rows, in order
    found = [c for c in found if c[7]] or found
    balanced = [c for c in found if c[0] >= MIN_BALANCE]
    pick = max(balanced, key=lambda c: (c[1], c[2], c[3])) if balanced else \
        max(found, key=lambda c: (c[0], c[3]))
    rows, blocking, least_rows = pick[4], pick[5], pick[6]
    return rows, blocking, row_block(extent // rows, rows, blocking.mc, threads, per_thread,
                                     least_rows, partial=True)


def blis_order(kc: int | None, reduction: int, blocks: int, per_thread: int,
               threads: int, remainder: bool = False) -> bool:
    """Whether a packed tile with ``blocks`` row blocks, its reduction of extent ``reduction``
    split into blocks of ``kc`` (None: not split), runs BLIS's loop order (``_packed_tile``):
    ``BLIS_ORDER``, or row blocks numbering ``BLIS_ORDER_BLOCKS`` times the ``per_thread`` blocks
    each of ``threads`` threads asked for (a small L2's ``mc``: in the other order each block
    would copy all of B's panels again), or rows that leave a ``remainder`` past the whole
    tiles (``BLIS_ORDER_REMAINDER``: in the other order it would copy them again).

    >>> blis_order(256, 1024, 17, 1, 1), blis_order(256, 1024, 2, 1, 1)
    (True, False)
    >>> blis_order(None, 99, 17, 1, 1), blis_order(256, 256, 17, 1, 1)
    (False, False)
    >>> blis_order(256, 1024, 2, 1, 2, remainder=True)
    True
    """
    if kc is None or kc >= reduction:
        return False
    return bool(BLIS_ORDER) or bool(BLIS_ORDER_REMAINDER and remainder) or (
        BLIS_ORDER_BLOCKS > 0 and blocks >= BLIS_ORDER_BLOCKS * per_thread * threads)


def block_threads(outer: list[str], ext: dict[str, int]) -> int:
    """Threads the row blocks of a packed tile are shared by: one when a pure loop outside them
    (doitgen's ``r``, a batch) has the iterations to run in parallel itself, else all."""
    return 1 if any(ext[a] >= 2 for a in outer) else max(1, num_threads())


def packed_blocking(f: Func, rows: int, width: int, target: Target | None = None) -> GemmBlocking:
    """The analytical model's blocking (``cpu_model.gemm_blocking``) of ``f`` on ``target``
    (default: the host) for a register tile of ``rows`` x ``width`` elements, with ``kc`` at
    least ``least_kc`` (shared among ``f``'s packed panels) and at most ``MAX_KC``, and ``mc`` the
    model's for that ``kc``: a ``kc`` raised above the L1 bound with the bound's ``mc`` could
    fill all of L2 with A's block (docs/performance.md, "One row block on one thread"), except
    on a CPU whose L3 is a victim cache of L2 (``CpuModel.victim_l3``), where the bound's
    ``mc`` stays (docs/performance.md, "A's block past L2 on Zen 4")."""
    cpu = cpu_model(target)
    size = f.dtype.numpy.itemsize
    tile = model_tile(cpu, size)
    tile = replace(tile, rows=rows, vectors=max(1, width // tile.lanes))
    model = gemm_blocking(cpu, size, tile)
    kc = min(max(model.kc, least_kc(cpu) // max(1, len(packed_operands(f)))), MAX_KC)
    if kc == model.kc:
        return model
    raised = gemm_blocking(cpu, size, tile, kc=kc)
    return replace(raised, mc=model.mc) if cpu.victim_l3 else raised


def _packed_tile(s: Schedule, f: Func, extents: BoundExtents, lanes: int,
                 target: Target | None) -> None:
    """The BLIS loop nest for a GEMM-like reduction (Goto and van de Geijn, TOMS 2008; blocking
    from ``cpu_model.gemm_blocking``): row blocks of about ``mc`` rows in parallel; in each, for
    each ``kc`` block of the reduction, the ``mc x kc`` block of the row operand (``row_operands``:
    A of ``A[i, k] * B[k, j]``) is copied with ``k`` contiguous and stays in L2, then for each
    ``nr``-wide column panel the ``kc x nr`` panel of the packed operand is copied into a
    contiguous buffer (``cache_read``) that every ``mr``-row register tile of the block reads from
    L1. ``kc`` is the divisor of the reduction's extent closest to the model's or ``least_kc``
    (``MIN_KC`` or the CPU's ``packed_kc``, shared among the packed panels), whichever is
    larger, else equal blocks, the last shorter (``_packed_kc``); the row tile is the model's
    even where it leaves remainder rows (loop partitioning runs them, and the columns past the
    last whole panel, as pieces of their own). A reduction of at most ``kc`` is not split: the
    row block is packed per row block, the whole ``K x nr`` panel per column panel.
    Where each thread gets ``BLIS_ORDER_BLOCKS`` times the row blocks it asked for or more (a
    small L2's ``mc``), BLIS's own order instead: per ``kc`` block, B's ``kc x N`` block copied
    once in panels, then the row blocks (Goto and van de Geijn, TOMS 2008, Fig. 8); where the
    rows make one row block, or one thread's would where the threads split them in BLIS's order
    (``few_rows.FEW_ROWS_BLIS``), its column panels in parallel (``few_rows``), B read in place
    where the rows make few tiles (``few_rows.in_place``, on one thread too).

    Raises:
        ScheduleError: not GEMM-like, its operand fits in L1 or is one panel in L2, no ``kc``
            (``EVEN_KC`` off), or one row block on several threads that ``few_rows`` does not take.
    """
    d = f.definition
    assert d is not None
    operands = packed_operands(f)
    if not operands:
        raise ScheduleError(f"{f.name} is not a GEMM-like reduction")
    operand, k = operands[0].name, operands[0].rvar
    args = [v.name for v in d.args]
    ext = {a: extents.extent(f.name, a) for a in [*args, k]}
    x = args[-1]
    i = row_var(f, args)
    cpu = cpu_model(target)
    size = f.dtype.numpy.itemsize
    if ext[k] * ext[x] * size <= cpu.l1.size:
        raise ScheduleError(f"{operand} fits in L1: no packing")
    # the CPU's packed tile width, but the model's where a triangle over the columns (syrk's
    # j <= i) bounds the tiles: wider ones cross its edge more (syrk, syr2k 3-10% slower 4 vectors
    # wide on Zen 4); one over the row and reduction only (symm's k > i) bounds all columns alike
    vectors = (TILE_VECTORS if condition_mentions(f, args[-1])
               else PACKED_VECTORS or cpu.packed_vectors)
    accs = PACKED_ACCUMULATORS or tile_accumulators(cpu, size, vectors)
    width, near = register_tile(ext[x], ext[i], lanes, accs, vectors)
    outer = [a for a in args[:-1] if a != i]
    threads = block_threads(outer, ext)
    per_thread = blocks_per_thread(f, i)
    rows, blocking, mb = _packed_rows(f, ext[i], near, width, accs, threads, target, per_thread,
                                      ext[k])
    kc = _packed_kc(ext[k], blocking)
    more_per_thread = ext[i] // (BLIS_BLOCK_ROWS * threads)
    if BLIS_ORDER and kc is not None and kc < ext[k] and per_thread < more_per_thread:
        # B copied once per kc block: more row blocks only read its panels again from L3
        more = _packed_rows(f, ext[i], near, width, accs, threads, target, more_per_thread, ext[k])
        more_kc = _packed_kc(ext[k], more[1])
        if more_kc is not None and more_kc < ext[k]:
            (rows, blocking, mb), kc = more, more_kc
    if kc is None or ext[x] < width or one_panel_in_l2(ext[x], width, ext[k] * size, cpu):
        raise ScheduleError(f"{f.name}: no near divisor for the tile, or B one panel in L2")
    # BLIS's order where a small L2's mc gives each thread several row blocks (each copying B)
    n_blocks = -(-(ext[i] // rows) // mb)  # (the last one shorter where mb does not divide)
    blis = blis_order(kc, ext[k], n_blocks, per_thread, threads, ext[i] % rows != 0)
    small = kc < ext[k] and not outer and mb * rows <= REUSE_ROWS  # (each copying all of B)
    if few_rows.FEW_ROWS_BLIS and (blis or few_rows.FEW_ROWS_BLOCKS and small) and n_blocks > 1 \
            and threads > 1 and (not outer or few_rows.FEW_BATCH) and few_rows.panels_beat_blocks(
                ext[x], width, threads, MIN_BALANCE, n_blocks):
        # rows the threads split into blocks (BLIS's order, or small ones each copying all of
        # B's panels, the reduction split): one thread's rows, if one block
        one = _packed_rows(f, ext[i], near, width, accs, 1, target, per_thread, ext[k])
        if -(-(ext[i] // one[0]) // one[2]) == 1:
            (rows, blocking, mb), kc, n_blocks = one, _packed_kc(ext[k], one[1]) or kc, 1
    par = next((a for a in [*outer, "blocks"] if {**ext, "blocks": n_blocks}[a] >= 2), None)
    few = FEW_ROWS and n_blocks == 1 and ext[x] >= 2 * width and (  # few_rows: panels in parallel
        few_rows.short_batch_nest([ext[a] for a in outer], ext[x], width, num_threads(),
                                  MIN_BALANCE) if outer else
        num_threads() > 1 or ext[i] % rows != 0 and kc < ext[k] and not BLIS_ORDER)
    if par is None and num_threads() > 1 and not few:
        raise ScheduleError(f"{f.name}: a single row block has no parallelism")
    st = s[f]
    prefetch = PREFETCH_TILE == 1 or PREFETCH_TILE == 2 and lanes * size <= 32 or \
        PREFETCH_TILE == 3 and (rows_straddle_lines(f, i, ext, cpu.l1.line)
                                or short_reduction(min(kc, ext[k]), lanes * size))
    blocks = row_operands(f, i, split=kc < ext[k], rows=rows, panels=-(-ext[x] // width),
                          cpu=cpu)
    group = few_rows.copy_panels(ext[x], width, width * size, num_threads(), MIN_BALANCE)
    copy = packer(f, extents, cpu.l2.size, width * group if few else width)  # (B's rows)
    in_parallel = few_rows.in_parallel(f, extents, lanes, num_threads())  # (few rows' panels)
    if (few or num_threads() == 1) and FEW_ROWS and n_blocks == 1 and ext[x] >= 2 * width \
            and few_rows.in_place(ext[i], rows, ext[k] * width * size, ext[k] * ext[x] * size, cpu):
        if not in_parallel and narrow_tile.serial_whole_rows(ext[i], ext[x], lanes, cpu):
            raise ScheduleError(f"{f.name}: whole rows, serially (narrow_tile.register_tile)")
        return few_rows.in_place_nest(s, st, i, x, k, (rows, width, lanes), prefetch and
                                      PREFETCH_OFFSET, in_parallel, tuple(outer), ext[i])
    if few:
        return few_rows.few_rows_nest(s, st, i, x, k, (rows, width, lanes, group), kc if
                                      kc < ext[k] else None, operands, blocks, prefetch and
                                      PREFETCH_OFFSET, in_parallel, tuple(outer), copy)
    # an unsplit reduction (each tile reduces its cells whole): the last tile shifted inwards,
    # unless the row blocks run in parallel (two would initialise and accumulate its cells at once)
    shift = SHIFT_ROWS and kc >= ext[k] and ext[i] % rows != 0 and ext[i] > rows and par != "blocks"
    io, ii = st.split(i, rows, tail="ShiftInwards" if shift else "GuardWithIf")
    ioo, ioi = st.split(io, shifted_row_block(ext[i], rows, mb) if shift else mb)
    if kc < ext[k] and blis:
        # BLIS's order: per kc block, B's kc x N block copied in nr-wide panels (by all threads
        # where the row blocks run in parallel), then the row blocks, each with its mc x kc block
        # of A in L2; column panels take a guarded tail (ShiftInwards would add a shifted
        # panel's products twice), which loop partitioning keeps out of the full tiles
        xo, xi = st.split(x, width, tail="GuardWithIf")
        ko, ki = st.split(k, kc)
        st.reorder(*outer, ko, ioo, xo, ioi, ki, ii, xi)
        panels = packed_operands(f, width)
        copies = copy(s, st, [*panels, *blocks], [ko.name] * len(panels) + [ioo.name] * len(blocks))
        if par == "blocks":
            for op in panels:
                # the copy's loop over the panels (``packed_reads.tile_reads``)
                copies[op].parallel(f"{copies[op].func}_d{panel_dim(op)}")
    elif kc < ext[k]:
        # the mc x kc block of A (packed) stays in L2 for every column panel; each row block
        # copies B's kc x nr panels itself
        xo, xi = st.split(x, width, tail="GuardWithIf")
        ko, ki = st.split(k, kc)
        st.reorder(*outer, ioo, ko, xo, ioi, ki, ii, xi)
        copy(s, st, [*operands, *blocks], [xo.name] * len(operands) + [ko.name] * len(blocks))
    elif PANELS_PER_BATCH and outer and par != "blocks" and n_blocks > 1:
        # serial row blocks in a batch: B's panels once per batch (BLIS's order, one k block)
        xo, xi = st.split(x, width, tail="GuardWithIf")
        st.reorder(*outer, ioo, xo, ioi, k, ii, xi)
        panels = packed_operands(f, width)
        copy(s, st, [*panels, *blocks], [outer[-1]] * len(panels) + [ioo.name] * len(blocks))
    else:
        dead = ext[x] % width and -(-(ext[x] % width) // lanes) < -(-width // lanes)
        xo, xi = st.split(x, width, tail="GuardWithIf" if GUARD_PANELS and dead else "ShiftInwards")
        st.reorder(*outer, ioo, xo, ioi, k, ii, xi)
        copy(s, st, [*operands, *blocks], [xo.name] * len(operands) + [ioo.name] * len(blocks))
    few_rows.vector_tile(st, ii.name, xi.name, width, lanes)
    if prefetch:
        st.prefetch(f.name, ioi, offset=PREFETCH_OFFSET)
    if par is not None:
        st.parallel(ioo.name if par == "blocks" else par)


def least_kc(cpu: CpuModel) -> int:
    """The least ``kc`` of a packed tile with one packed panel on ``cpu``: its
    ``CpuModel.packed_kc``, else ``MIN_KC``."""
    return cpu.packed_kc or MIN_KC


def _packed_kc(extent: int, blocking: GemmBlocking) -> int | None:
    """``kc`` of a packed tile over a reduction of ``extent``: the divisor closest to
    ``packed_blocking``'s, else (``EVEN_KC``) equal blocks of at most it, the last shorter
    (``even_block``: 510 for a prime 1019), else None. At most ``MAX_KC``: the search space's
    largest ``kc``; its choices hold the equal blocks too (``space.even_kc_choices``)."""
    target = min(blocking.kc, MAX_KC)
    return closest_divisor(extent, target, most=MAX_KC) or \
        (even_block(extent, target) if EVEN_KC else None)


def _stage(s: Schedule, f: Func, variant: str, extents: BoundExtents, lanes: int,
           nested: bool, cpu: CpuModel) -> None:
    d = f.definition
    assert d is not None
    st: Stage = s[f]
    args = [v.name for v in d.args]
    if not nested and variant in ("full", "guard") and _rfactor_stage(s, f, extents):
        return
    if not args:
        return
    ext = {a: extents.extent(f.name, a) for a in [*args, *(r.name for r in d.rvars)]}
    # a stage with less work than one parallel region is worth runs serially: thread wake-ups
    # would cost more than they save (PolyBench durbin at its SMALL size: 0.78x its default)
    nested = nested or stage_points(f, None, extents) < MIN_PARALLEL_POINTS or few_vectors(
        f, extents, lanes) and not streams_matrix(f, extents)
    tail = "ShiftInwards" if variant == "full" else "GuardWithIf"
    par = next((a for a in args[:-1] if ext[a] >= 2), None)
    i = row_var(f, args) if len(args) >= 2 else args[0]
    width, rows = register_tile(ext[args[-1]], ext[i], lanes, accumulator_budget(cpu))
    if variant in ("full", "guard") and d.rvars and only_vars_of_one(args[:-1], ext) \
            and ext[args[-1]] >= rfactor_rules.MIN_ROW_SEGMENTS * ROW_VECTORS * lanes \
            and contiguous_in(f, args[-1]):
        # rows of a matrix reduced along its one pure Var (A^T x: y[j] += A[i, j] * x[i]; x^T B):
        # the reduction loops outside a row segment of vectors (segment_width), read contiguously
        x = args[-1]
        xo, xi = st.split(x, segment_width(ext[x], lanes, 0 if nested else num_threads()),
                          tail=tail)
        st.reorder(*args[:-1], xo, *[r.name for r in d.rvars], xi)
        st.vectorize(xi, lanes).unroll(f"{xi.name}.o")
        if not nested:
            st.parallel(xo)
        return
    if variant in ("full", "guard") and d.rvars and len(args) >= 2 \
            and narrow_tile.takes(ext[args[-1]], lanes, ext[i], rows):
        return narrow_tile.register_tile(st, d, i, ext, (width, rows, lanes), tail,
                                         0 if nested else num_threads(), cpu)
    if variant != "parallel" and not d.rvars and ext[args[-1]] >= lanes:
        st.vectorize(args[-1], lanes, tail=tail)
        if par is None and ext[args[-1]] >= 2 * lanes:
            par = f"{args[-1]}.o"  # one pure Var: its vector loop's outer loop
    if variant != "parallel" and not d.rvars:  # colour channels picked by where(c == 0, ...)
        par = unroll_selects(st, f, ext, lanes, ext[args[-1]] >= lanes, par)
    if nested:
        return
    if par is not None:
        st.parallel(par)
    elif len(args) == 1 and ext[args[0]] >= 2 and (d.rvars or variant == "parallel"):
        st.parallel(args[0])
