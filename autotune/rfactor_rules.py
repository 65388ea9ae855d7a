"""The rule-based schedule's rfactor forms (Suriana, Adams and Kamil, CGO 2017; TVM's rfactor,
Halide's ``Func::rfactor``), shared with the search space (``space.py``):

- ``rfactor_chunks``: a big reduction with fewer pure points than threads (a total, a few long
  rows): chunks of its outermost reduction loop become a parallel pure dimension of ``<F>_rf``;
- ``rfactor_update_chunks``: the same for a reassociable update (a histogram of a whole image);
- ``rfactor_lanes``: a row reduction along a contiguous index (a matrix-vector product, a row
  sum): a native vector of partial sums per row in ``<F>_rf``, ``LANE_ROWS`` rows at a time,
  blocks of rows in parallel.

Each reassociates the reduction (the reduction policy of docs/architecture.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tensorlang.backends.llvm.runtime import num_threads
from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, Expr, Var, walk
from tensorlang.func import Func
from tensorlang.schedule.schedule import Schedule, Stage

from .cpu_model import CpuModel
from .packed_reads import tile_reads
from .serial_share import few_vectors, stage_points
from .workloads import BoundExtents

#: vectors in a row segment of a reduction read along its one pure Var (A^T x), and of the
#: partial sums of a row reduction in vector lanes (``rfactor_lanes``): 8 ran PolyBench's atax,
#: bicg, mvt and gemver faster than 4 or 16 on an AVX-512 Xeon (docs/performance.md)
ROW_VECTORS = 8
#: the most columns of a row reduction into a narrow row that takes vector lanes
#: (``narrow_columns``; 0: none, rows of one element only)
NARROW_LANE_COLUMNS = 3
#: vector registers a block of rows of a narrow row in vector lanes leaves to operands besides
#: its columns' vectors of ``B`` (``rfactor_lanes``: the loads of ``A`` can be FMA operands)
LANE_OPERANDS = 0
#: the reduction of a narrow row (``narrow_columns``) takes vector lanes where at least twice
#: this many vectors long
NARROW_LANE_VECTORS = 2
#: the fewest reduction terms a narrow row (``narrow_columns``) takes vector lanes for, whatever
#: the vector's width: shorter ones take the register tile of one narrow vector per row
#: (``narrow_tile.NARROW_COLUMNS``), whose cost per term does not depend on it, while each row
#: block in lanes pays its guarded last vector, its stores of partial sums and their adding-up
#: (docs/performance.md, "Narrow rows: lanes for long reductions, a tile for short ones"). 0:
#: only ``NARROW_LANE_VECTORS``, as before
NARROW_LANE_TERMS = 256
#: 1: a GEMM into narrow rows (``narrow_columns``) with fewer rows than threads takes vector
#: lanes too, one block of all its rows run serially: always for one row (``x^T B`` with ``B``
#: of 2 or 3 columns: no row loop to share out), for a few where the product is too small for a
#: parallel region (``small_product``); it took the one-row nest, a chain of dependent
#: multiply-adds into each column (``rfactor_lanes_possible``). 0: as before (for ``--against``)
ONE_ROW_LANES = 1
#: rows of a row reduction in vector lanes that read their segments together
#: (``rfactor_lanes``: one vector of partial sums per row, the rows' loads in flight at once, each
#: load of the shared vector used by all; OpenBLAS's dgemv_t kernels take 4 to 8 rows)
LANE_ROWS = 8
#: the fewest row segments (``ROW_VECTORS`` vectors each) the pure Var of a reduction over rows
#: (A^T x) must span for the row-segment form (docs/performance.md, "Short rows in segments")
MIN_ROW_SEGMENTS = 1
#: the fewest loop iterations one parallel region of an update must run (inside a time loop a
#: region starts on every step: a small one costs more in thread wake-ups than it saves)
MIN_PARALLEL_POINTS = 1 << 15
#: chunks of a reduction's outermost loop per thread when rfactor parallelizes it
RFACTOR_CHUNKS_PER_THREAD = 4
#: whether a read that does not vary along the rows (a vector every row reads whole) makes two
#: row reductions siblings (``shared_read``): computing gesummv's two sums together measured
#: slower than apart on the Zen 4 VM (docs/performance.md). An int, for ``--against``
FUSE_INVARIANT_READS = 0
#: whether two row reductions that share only a vector read take vector lanes each
#: (``rfactor_lanes_possible``): -1 as the CPU model says (``CpuModel.sibling_lanes``), 0 never,
#: 1 always. An int, for ``--against``
SIBLING_LANES = -1
#: whether a narrow row in vector lanes (``narrow_columns``) reads ``B[k, j]`` from a copy stored
#: transposed, ``k`` contiguous, made once before the rows (``cache_read`` computed at root), where
#: its rows make more blocks than threads: down a column, ``B``'s elements lie ``N`` apart, so each
#: block gathered its vectors of ``B`` element by element, the gathers its bound (fewer blocks
#: gather ``B`` once each, in parallel, where the copy is serial; docs/performance.md, "A narrow
#: row's columns copied once"). 0: gathered in place, as before
NARROW_COPY = 1
#: whether a narrow row's merge (``f`` adding up each cell's lanes of ``<f>_rf``,
#: ``rfactor_lanes``) runs a block of rows at a time, the cells' adds interleaved
#: (``_merge_in_rows``); 0: the default nest, one cell's chain of ``lanes`` dependent adds after
#: another. A matrix-vector product's merge keeps the default nest, which ran faster there
#: (docs/performance.md, "A narrow row's columns copied once")
MERGE_ROWS = 1


def rfactor_possible(f: Func, extents: BoundExtents) -> bool:
    """Whether ``rfactor_chunks`` applies to ``f``: a pure definition's reduction without an
    ``RDom.where``, on a machine with threads, whose outermost reduction loop has at least two
    chunks per ``RFACTOR_CHUNKS_PER_THREAD`` x threads."""
    d = f.definition
    assert d is not None
    threads = max(1, num_threads())
    if not d.rvars or d.predicate or f.updates or threads < 2:
        return False
    return extents.extent(f.name, d.rvars[0].name) >= 2 * RFACTOR_CHUNKS_PER_THREAD * threads


def rfactor_chunks(s: Schedule, f: Func, extents: BoundExtents) -> None:
    """Split ``f``'s outermost reduction loop into ``RFACTOR_CHUNKS_PER_THREAD`` chunks per
    thread and rfactor the chunk loop, which ``<f>_rf`` runs in parallel (each chunk a serial,
    LLVM-vectorized partial reduction); ``f`` adds the partials up (Suriana, Adams and Kamil,
    CGO 2017; TVM's rfactor + parallel of a reduction). Needs ``rfactor_possible``."""
    d = f.definition
    assert d is not None
    ext = extents.extent(f.name, d.rvars[0].name)
    chunks = RFACTOR_CHUNKS_PER_THREAD * max(1, num_threads())
    outer, _ = s[f].split(d.rvars[0].name, -(-ext // chunks))
    rf = s.rfactor(f, outer)
    rf.parallel(rf.loops[len(d.args)])  # its new pure dimension: the chunk


def _rfactor_stage(s: Schedule, f: Func, extents: BoundExtents) -> bool:
    """A big reduction with fewer pure points than threads (a total, a few long rows) runs
    serially otherwise: ``rfactor_chunks``. Returns whether it applied."""
    d = f.definition
    assert d is not None
    if not rfactor_possible(f, extents):
        return False
    threads = max(1, num_threads())
    pure = 1
    for a in d.args:
        pure *= max(1, extents.extent(f.name, a.name))
    work = pure
    for v in d.rvars:
        work *= max(1, extents.extent(f.name, v.name))
    if pure >= threads or work < MIN_PARALLEL_POINTS * threads:
        return False
    rfactor_chunks(s, f, extents)
    return True


def _rfactor_update_stage(s: Schedule, f: Func, number: int, extents: BoundExtents) -> None:
    """An update with fewer pure points than threads and a big RDom (a histogram of a whole
    image: no pure loop at all) runs serially otherwise: ``rfactor_update_chunks``.

    Raises:
        ScheduleError: the rule does not apply, or rfactor refuses the update (not of the form
            ``F[idx] = F[idx] op value``)."""
    name = f"{f.name}.update({number})"
    st = s.states[name]
    threads = max(1, num_threads())
    pure = math.prod(max(1, extents.extent(name, p)) for p in st.pure)
    work = pure * math.prod(max(1, extents.extent(name, r)) for r in st.rvars)
    outer = next((n for n in st.loops if st.is_reduction_loop(n)), None)
    chunks = RFACTOR_CHUNKS_PER_THREAD * threads
    if threads < 2 or outer is None or pure >= threads or \
            work < MIN_PARALLEL_POINTS * threads or extents.extent(name, outer) < 2 * chunks:
        raise ScheduleError(f"{name}: no rfactor (enough pure points, or too little work)")
    rfactor_update_chunks(s, f, number, extents)


def rfactor_update_chunks(s: Schedule, f: Func, number: int, extents: BoundExtents) -> None:
    """Split update ``number`` of ``f``'s outermost RDom loop into ``RFACTOR_CHUNKS_PER_THREAD``
    chunks per thread and rfactor the chunk loop: ``<f>_rf``'s update runs one part of ``f``
    per chunk, in parallel (a histogram per block of rows), and ``f``'s update adds them up.

    Raises:
        ScheduleError: rfactor refuses the update (``Schedule.rfactor``)."""
    name = f"{f.name}.update({number})"
    st = s.states[name]
    outer = next(n for n in st.loops if st.is_reduction_loop(n))
    ext = extents.extent(name, outer)
    chunks = RFACTOR_CHUNKS_PER_THREAD * max(1, num_threads())
    o, _ = s[f].update(number).split(outer, -(-ext // chunks))
    rf = s.rfactor(s[f].update(number), o)
    rf.parallel(rf.loops[0])  # its new pure dimension: the chunk


def contiguous_in(f: Func, var: str, rank: int = 1, unit: frozenset[str] | set[str] = frozenset()
                  ) -> bool:
    """Some read of ``f`` with at least ``rank`` indices has ``var`` alone as its last
    (contiguous) index (``A[i, k]``: ``k``; with ``rank`` 2 a vector's ``x[k]`` does not
    count, nor a read whose other indices are all Vars of ``unit``, Vars of extent 1: the
    ``A[i, k]`` of a GEMM of one row)."""
    d = f.definition
    assert d is not None
    return any(isinstance(a, Access) and len(a.indices) >= max(1, rank)
               and isinstance(a.indices[-1], Var) and a.indices[-1].name == var
               and not (unit and all(isinstance(x, Var) and x.name in unit
                                     for x in a.indices[:-1]))
               for a in walk(d.value))


def accesses(value: Expr) -> set[tuple[str, tuple]]:
    """The reads in ``value``: (array, index expressions) of each."""
    return {(a.name, tuple(i.key for i in a.indices))
            for a in walk(value) if isinstance(a, Access)}


def shared_read(a: Expr, b: Expr, along: set[str] | frozenset[str]) -> bool:
    """Whether values ``a`` and ``b`` read an array at the same indices that mention a Var of
    ``along`` (their rows' Vars): a row of a matrix both read, which computing the two together
    reads from memory once instead of twice. A read that does not vary along the rows (the
    vector ``x[k]`` of ``A[i, k] * x[k]`` and ``B[i, k] * x[k]``, PolyBench gesummv) counts only
    with ``FUSE_INVARIANT_READS``: every row reads it whole in either schedule."""
    mine = {(r.name, tuple(i.key for i in r.indices)): r
            for r in walk(a) if isinstance(r, Access)}
    theirs = accesses(b)
    return any(FUSE_INVARIANT_READS or any(isinstance(n, Var) and n.name in along
                                           for i in mine[k].indices for n in walk(i))
               for k in mine.keys() & theirs)


def rfactor_lanes_possible(f: Func, extents: BoundExtents, lanes: int,
                           funcs: Sequence[Func] = (), sibling_lanes: bool = True) -> bool:
    """Whether ``rfactor_lanes`` applies to ``f``: a pure definition's reduction over one RVar ``k``
    into one pure Var ``i`` (no ``RDom.where``, no update), ``k`` the contiguous index of a matrix
    read and ``i`` of none (``tmp[i] = A[i, k] * x[k]``: a matrix-vector product, a row sum), or
    into ``i`` and a narrow ``j`` (``narrow_columns``: ``C[i, j] = A[i, k] * B[k, j]`` with ``B`` of
    2 or 3 columns), ``k`` at least ``2 * ROW_VECTORS`` vectors long (a narrow row: twice
    ``NARROW_LANE_VECTORS``, and ``NARROW_LANE_TERMS`` terms) and ``i`` at least as long as there
    are threads (fewer rows: ``rfactor_chunks``; a narrow row also one row, or a few in a small
    product, ``ONE_ROW_LANES``), and no other row reduction among ``funcs`` (its
    pipeline's) that shares a read with it: a row sum and a row max of one matrix read it once
    together (``fuse_siblings``), which beat two passes in vector lanes. Two that share only a
    vector (gesummv's ``A[i, j] * x[j]`` and ``B[i, j] * x[j]``) take lanes where ``sibling_lanes``
    says so (``CpuModel.sibling_lanes``, ``SIBLING_LANES``): on Zen 4 they ran slower in lanes than
    as plain row loops, on Ice Lake-SP and Zen 3 faster (docs/performance.md)."""
    d = f.definition
    assert d is not None
    if len(d.rvars) != 1 or d.predicate or f.updates:
        return False
    if len(d.args) != 1 and not narrow_columns(f, extents):
        return False
    lone = sibling_lanes if SIBLING_LANES < 0 else bool(SIBLING_LANES)
    rows = {d.args[0].name}
    if any(_siblings(f, g) and _row_reduction(g)
           and (len(g.definition.args) == 1 or narrow_columns(g, extents))  # type: ignore
           and (not lone or shared_read(d.value, g.definition.value, rows))  # type: ignore
           for g in funcs):
        return False
    vectors = ROW_VECTORS if len(d.args) == 1 else NARROW_LANE_VECTORS
    terms = 0 if len(d.args) == 1 else NARROW_LANE_TERMS
    rows = extents.extent(f.name, d.args[0].name)
    few_rows_serial = ONE_ROW_LANES and len(d.args) == 2 and (
        rows == 1 or small_product(f, extents))
    return (_row_reduction(f)
            and extents.extent(f.name, d.rvars[0].name) >= max(2 * vectors * lanes, terms)
            and (rows >= max(2, num_threads()) or few_rows_serial))


def small_product(f: Func, extents: BoundExtents) -> bool:
    """Whether ``f``'s pure definition has fewer iterations (pure points times reduction terms)
    than ``MIN_PARALLEL_POINTS`` per thread: too little work for a parallel region, so neither
    ``rfactor_chunks`` nor a parallel loop over its rows takes it."""
    return stage_points(f, None, extents) < MIN_PARALLEL_POINTS * max(1, num_threads())


def narrow_columns(f: Func, extents: BoundExtents) -> bool:
    """Whether ``f`` is a reduction over one RVar into rows ``i`` of 2 up to
    ``NARROW_LANE_COLUMNS`` columns ``j`` (``C[i, j] = A[i, k] * B[k, j]`` with ``B`` of 2
    or 3 columns: too narrow for the register tile's vectors along ``j``, which start at 4
    lanes, ``narrow_tile``): ``rfactor_lanes`` computes each row's few sums in vector lanes
    along ``k``, reading ``B`` down its columns (strided loads) once per block of rows."""
    d = f.definition
    assert d is not None
    return (len(d.args) == 2 and len(d.rvars) == 1
            and 2 <= extents.extent(f.name, d.args[1].name) <= NARROW_LANE_COLUMNS)


def _row_reduction(f: Func) -> bool:
    """``f[i] = ... A[i, k] ...`` (or ``f[i, j]``) over one RVar ``k``: ``k`` the contiguous
    index of a matrix read, ``i`` of none (a column reduction such as PolyBench bicg's
    ``s[j] = r[i] * A[i, j]``, which shares ``A`` with the row reduction ``q``, is not: it walks
    ``A`` in another order, so ``fuse_siblings`` never computes the two together)."""
    d = f.definition
    if d is None or len(d.args) not in (1, 2) or len(d.rvars) != 1:
        return False
    return contiguous_in(f, d.rvars[0].name, rank=2) and not contiguous_in(
        f, d.args[0].name, rank=2)


def _siblings(f: Func, g: Func) -> bool:
    """Whether reductions ``f`` and ``g`` share a read (an array at the same indices) and
    neither reads the other: what ``fuse_siblings`` computes together where the shared read
    varies along the rows (``shared_read``)."""
    if g is f or g.definition is None or not g.definition.rvars or g.updates:
        return False
    mine, theirs = accesses(f.definition.value), accesses(g.definition.value)  # type: ignore
    if f.name in {n for n, _ in theirs} or g.name in {n for n, _ in mine}:
        return False
    return bool(mine & theirs)


def rfactor_lanes(s: Schedule, f: Func, extents: BoundExtents, lanes: int,
                  registers: int = 32) -> None:
    """Split ``f``'s reduction loop ``k`` by one native vector and rfactor the inner loop:
    ``<f>_rf[i, k.i]`` holds a vector of partial sums per row; ``LANE_ROWS`` rows (``i``
    split, unrolled inside ``k.o``) accumulate in as many vector registers as ``k.o`` walks
    them together (contiguous loads, several rows' loads in flight, each load of ``x[k]`` used
    by every row, no chain of dependent adds through one scalar: the form of BLAS's
    ``dgemv_t`` kernels), blocks of rows in parallel; ``f`` adds each row's partials up. Where
    the rows make fewer blocks than threads (or fewer than two blocks), one row at a time with
    ``ROW_VECTORS`` vectors of partial sums instead. A row of a few columns (``narrow_columns``:
    ``<f>_rf[i, j, k.i]``) keeps one vector per column, the columns unrolled inside the rows,
    the rows of a block halved down from ``LANE_ROWS`` until its accumulators, a vector of
    ``B`` per column and ``LANE_OPERANDS`` more fit the target's ``registers`` vector registers
    (fewer rows: one block of all of them), serially where the product is small
    (``serial_share.few_vectors``); where its rows make more blocks than threads, it reads ``B``
    (``N`` elements apart down a column) from a copy with ``k`` contiguous, made once at root
    (``NARROW_COPY``), and ``f`` adds a block's lanes up with its cells' adds interleaved
    (``MERGE_ROWS``). The sum is reassociated (as ``rfactor`` always does). Needs
    ``rfactor_lanes_possible``.

    Raises:
        ScheduleError: ``rfactor`` refuses the reduction."""
    d = f.definition
    assert d is not None
    rows = extents.extent(f.name, d.args[0].name)
    columns = extents.extent(f.name, d.args[1].name) if len(d.args) == 2 else 1
    per_block = LANE_ROWS
    while per_block > 1 and per_block * columns > registers - columns - LANE_OPERANDS:
        per_block //= 2
    block = per_block if rows >= per_block * max(2, num_threads()) else 1
    if columns > 1:  # (a narrow row: each vector of B for every row of a block, however few)
        block = min(per_block, rows)
    # one row alone: ``ROW_VECTORS`` vectors of partial sums; a block of rows, or a narrow
    # row's columns (one row: ``ONE_ROW_LANES``): one vector per row and column, chains enough
    vectors = ROW_VECTORS if block == 1 and columns == 1 else 1
    _, ki = s[f].split(d.rvars[0].name, vectors * lanes, tail="GuardWithIf")
    rf = s.rfactor(f, ki)
    names = [lp.name for lp in rf.loops]
    row, lane, walk_loop = names[0], names[-2], names[-1]
    outer: list[str] = []  # a narrow row's columns: split by their count, outside k.o
    inner: list[str] = []  # and inside (unrolled)
    if len(names) == 4:
        jo, ji = rf.split(names[1], columns)
        outer, inner = [jo.name], [ji.name]
    if block > 1:
        ro, ri = rf.split(row, block)
        rf.reorder(ro, *outer, walk_loop, ri, *inner, lane).unroll(ri)
        row = ro.name
        rf.vectorize(lane)
    else:
        rf.reorder(row, *outer, walk_loop, *inner, lane)
        if vectors == 1:
            rf.vectorize(lane)
        else:
            rf.vectorize(lane, lanes).unroll(f"{lane}.o")
    for name in inner:
        rf.unroll(name)
    if inner and NARROW_COPY and -(-rows // block) > max(1, num_threads()):
        _columns_copied(s, f, rf, row, lanes)
    # (a narrow row's small product serially: ``serial_share.few_vectors``, as the register tile)
    if rows >= 2 and num_threads() > 1 and not (inner and few_vectors(f, extents, lanes)):
        rf.parallel(row)
    if inner and MERGE_ROWS and block > 1:
        _merge_in_rows(s[f], block, columns)


def _merge_in_rows(merge: Stage, block: int, columns: int) -> None:
    """Schedule ``merge`` (``f`` adding up its ``<f>_rf``'s lanes: loops ``i``, [``j``], ``r``)
    in ``rfactor_lanes``'s blocks: ``block`` rows (and ``columns`` columns) unrolled inside the
    lane loop ``r``, so a block's sums are independent chains of adds rather than one cell's
    chain of dependent adds after another. Serially: a parallel region of its own ran no faster
    (docs/performance.md, "A narrow row's columns copied once")."""
    names = [lp.name for lp in merge.loops]
    ro, ri = merge.split(names[0], block)
    outer, inner = [], []
    if columns > 1:
        jo, ji = merge.split(names[1], columns)
        outer, inner = [jo.name], [ji.name]
    merge.reorder(ro, *outer, names[-1], ri, *inner)
    for name in (ri.name, *inner):
        merge.unroll(name)


def _columns_copied(s: Schedule, f: Func, rf: Stage, loop: str, lanes: int) -> None:
    """Make ``rf`` (a narrow row's ``<f>_rf``, ``rfactor_lanes``) read each operand that varies
    along ``f``'s columns ``j`` and its reduction ``k`` with ``k`` not contiguous (``B[k, j]``)
    from a copy with ``k`` last, computed at root (once, serially: ``N`` is at most
    ``NARROW_LANE_COLUMNS``, the copy ``N * K`` elements), its rows of ``k`` in vectors of
    ``lanes``. ``loop`` is ``rf``'s outermost loop, the level ``cache_read`` names."""
    d = f.definition
    assert d is not None
    for op in tile_reads(f, d.args[1].name, last="k"):
        if op.layout is None:  # (k contiguous already: read in place)
            continue
        copy = s.cache_read(op.name, rf, loop, index=op.index, layout=op.layout)
        copy.compute_root()
        copy.vectorize(copy.loops[-1].name, lanes)


def _rfactor_lanes_stage(s: Schedule, f: Func, extents: BoundExtents, lanes: int,
                         funcs: Sequence[Func], cpu: CpuModel) -> None:
    """``rfactor_lanes`` where it applies (siblings in lanes as ``cpu`` says, a block of rows in
    its vector registers), else ScheduleError."""
    if not rfactor_lanes_possible(f, extents, lanes, funcs, cpu.sibling_lanes):
        raise ScheduleError(f"{f.name}: not a row reduction along a contiguous index")
    rfactor_lanes(s, f, extents, lanes, cpu.vector_registers)
