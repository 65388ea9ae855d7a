"""The rule-based schedule's form for a column reduction that streams its matrix from memory
(``y[j] = A[i, j] * x[i]``: PolyBench atax's ``A^T (A x)``, bicg's ``s``, a column mean),
shared with the search space (``space.py``).

Such a reduction reads its matrix once. Where the matrix fits in the last-level cache, the
rule-based schedule keeps a segment of ``ROW_VECTORS`` vectors of ``y`` in registers and walks
the rows under it (``heuristic._stage``). Where it does not, that walk visits a few cache lines
of every row per segment and the hardware prefetchers, which follow one stream within a page,
fetch each row anew: the kernel runs at a fraction of the memory bandwidth. ``column_rows``
instead gives each thread one wide band of columns and walks about ``LANE_ROWS`` rows at once
along it: each row is read in long contiguous runs, several of them in flight, and the band's ``y``
(read and written once per step of rows) stays in L1/L2 — the order of OpenBLAS's ``dgemv_n``
kernels, which add several columns of a column-major matrix (rows of ``A`` here) into a block of
``y`` at once. The order of the sum over ``i`` is kept: no reassociation.
"""

from __future__ import annotations

from tensorlang.backends.llvm.runtime import num_threads
from tensorlang.errors import ScheduleError
from tensorlang.func import Func
from tensorlang.schedule.schedule import Schedule

from .cpu_model import CpuModel, closest_divisor
from .rfactor_rules import LANE_ROWS, ROW_VECTORS, contiguous_in
from .workloads import BoundExtents

#: native vectors of a band's columns per step of its ``LANE_ROWS`` rows (unrolled): one ran
#: faster than two or four on Zen 4 at 1900-4000 columns, 1 and 2 threads (docs/performance.md)
COLUMN_VECTORS = 1
#: the most rows a step takes (``rows_per_step``)
MAX_LANE_ROWS = 12
#: whether pure Vars of extent 1 before the last count as absent (``only_vars_of_one``): a GEMM
#: of one row, ``x^T B``, takes the column reduction's forms (0: as before, the default nest)
UNIT_VARS = 1
#: the fewest bytes of a matrix that a column reduction reads once (``streams_matrix``) for its
#: segments to run in parallel however few its multiply-adds: between the sizes of ``B`` at
#: which a GEMM of one row ran faster on two threads of Zen 4 and those at which it ran faster
#: on one (docs/performance.md, "One row over a large matrix in parallel"). 0: as before (for
#: ``--against``)
MIN_PARALLEL_STREAM_BYTES = 1 << 19
#: 1: a column reduction's parallel row segments narrowed to share its columns evenly among
#: the threads (``segment_width``); 0: ``ROW_VECTORS`` vectors each, as before (for
#: ``--against``)
EVEN_SEGMENTS = 1
#: 1: on a CPU whose L3 is not a victim cache a matrix larger than the threads' L2s counts as
#: streamed (``streams_from_memory``); Emerald Rapids' register segments walked a 1900 x 2100
#: matrix held in its L3 more slowly than the bands did (docs/performance.md). 0: half the L3
#: on every CPU, as before (for ``--against``)
MESH_L3_STREAMS = 1


def only_vars_of_one(names: list[str], extent: dict[str, int]) -> bool:
    """Whether the pure Vars ``names`` (all but the last of a Func) are none, or (``UNIT_VARS``)
    all of extent 1 in ``extent``: the Func is a vector along its last Var."""
    return not names or bool(UNIT_VARS) and all(extent[a] == 1 for a in names)


def streams_from_memory(nbytes: int, cpu: CpuModel) -> bool:
    """Whether data of ``nbytes`` bytes, read once, comes from memory rather than cache, or at
    about memory's pace: more than half the last-level cache (the rest holds the other
    operands, and on a shared machine other programs' data); where the L3 is not a victim cache
    (``CpuModel.victim_l3``: Intel's mesh, each core's share of whose bandwidth is close to
    memory's) and ``MESH_L3_STREAMS``, more than the L2s of the threads together."""
    if MESH_L3_STREAMS and not cpu.victim_l3 \
            and nbytes > cpu.l2.size * max(1, num_threads()):
        return True
    return nbytes > cpu.l3.size // 2


def column_rows_possible(f: Func, extents: BoundExtents, lanes: int, cpu: CpuModel) -> bool:
    """Whether ``column_rows`` applies to ``f``: a column reduction (``matrix_read``) whose
    matrix is larger than ``streams_from_memory`` allows, of at least ``LANE_ROWS`` rows, and a
    band of at least ``COLUMN_VECTORS`` vectors per thread."""
    shape = matrix_read(f, extents)
    if shape is None:
        return False
    cols, rows = shape
    return (rows_per_step(rows) is not None and band(cols, lanes) > 0
            and streams_from_memory(cols * rows * f.dtype.numpy.itemsize, cpu))


def matrix_read(f: Func, extents: BoundExtents) -> tuple[int, int] | None:
    """(columns, rows) of the matrix that ``f``'s pure definition reads once, where it is a
    reduction over one RVar ``i`` (no ``RDom.where``) into one pure Var ``j`` (the others of
    extent 1: ``x^T B`` as a GEMM of one row), ``j`` the contiguous index of a matrix read and
    ``i`` of none (but a row that only Vars of extent 1 pick: the ``A[0, k]`` of that GEMM);
    else None."""
    d = f.definition
    if d is None:
        return None
    unit = {a.name for a in d.args[:-1]}
    if not d.args or len(d.rvars) != 1 or d.predicate or not only_vars_of_one(
            list(unit), {a: extents.extent(f.name, a) for a in unit}):
        return None
    j, i = d.args[-1].name, d.rvars[0].name
    if not contiguous_in(f, j, rank=2) or contiguous_in(f, i, rank=2, unit=unit):
        return None
    return extents.extent(f.name, j), extents.extent(f.name, i)


def streams_matrix(f: Func, extents: BoundExtents) -> bool:
    """Whether ``f`` is a column reduction (``matrix_read``) whose matrix takes at least
    ``MIN_PARALLEL_STREAM_BYTES``: its time goes to reading the matrix once, which the threads
    share, whatever its count of multiply-adds (``serial_share.few_vectors``)."""
    shape = matrix_read(f, extents)
    return bool(MIN_PARALLEL_STREAM_BYTES) and shape is not None \
        and shape[0] * shape[1] * f.dtype.numpy.itemsize >= MIN_PARALLEL_STREAM_BYTES


def segment_width(cols: int, lanes: int, threads: int) -> int:
    """Columns of each segment of a column reduction's row of ``cols`` columns that keeps a
    segment of vectors of ``y`` in registers (``heuristic._stage``): ``ROW_VECTORS`` vectors of
    ``lanes``, or with ``threads`` above 1 (the segments in parallel) and ``EVEN_SEGMENTS``
    the fewest whole vectors that give each thread as many segments (100 columns of float64
    on two threads: segments of 56 and 44 columns, not 64 and 36)."""
    width = ROW_VECTORS * lanes
    if threads <= 1 or not EVEN_SEGMENTS:
        return width
    segments = -(-cols // width)
    per_thread = -(-segments // threads)
    return min(width, -(-cols // (per_thread * threads * lanes)) * lanes)


def rows_per_step(rows: int) -> int | None:
    """Rows per step: the divisor of ``rows`` in ``[LANE_ROWS // 2, MAX_LANE_ROWS]`` closest to
    ``LANE_ROWS`` (no partial step), else ``LANE_ROWS`` (the lowering runs the whole steps
    first, without the tail's guard, then the partial one: ``nest.StageNest.tail_peels``);
    None below ``LANE_ROWS`` rows."""
    if rows < LANE_ROWS:
        return None
    return closest_divisor(rows, LANE_ROWS, most=MAX_LANE_ROWS) or LANE_ROWS


def band(cols: int, lanes: int) -> int:
    """Columns per thread's band: ``cols`` shared among the threads, rounded down to whole steps
    of ``COLUMN_VECTORS`` vectors (rounded up, the last band would run all of its columns in
    the guarded tail nest); 0 where a thread would get less than one step."""
    step = COLUMN_VECTORS * lanes
    return cols // max(1, num_threads()) // step * step


def column_rows(s: Schedule, f: Func, extents: BoundExtents, lanes: int) -> None:
    """Bands of ``band`` columns of ``f``'s pure Var ``j`` in parallel; in each, the reduction
    loop ``i`` split by ``rows_per_step`` rows, the band's steps of ``COLUMN_VECTORS`` vectors
    between ``i``'s outer and (unrolled) inner loop, the step's vectors innermost. Needs
    ``column_rows_possible``.

    Raises:
        ScheduleError: the schedule refuses a step (an RVar that cannot be split)."""
    d = f.definition
    assert d is not None
    j, i = d.args[-1].name, d.rvars[0].name
    width = band(extents.extent(f.name, j), lanes)
    st = s[f]
    jo, ji = st.split(j, width)
    io, ii = st.split(i, rows_per_step(extents.extent(f.name, i)) or LANE_ROWS)
    step, vec = st.split(ji, COLUMN_VECTORS * lanes)
    st.reorder(*[a.name for a in d.args[:-1]], jo, io, step, ii, vec).unroll(ii)
    if COLUMN_VECTORS > 1:
        st.vectorize(vec, lanes).unroll(f"{vec.name}.o")
    else:
        st.vectorize(vec)
    if extents.extent(f.name, j) >= 2 * width:
        st.parallel(jo)


def _column_rows_stage(s: Schedule, f: Func, extents: BoundExtents, lanes: int,
                       cpu: CpuModel) -> None:
    """``column_rows`` where it applies, else ScheduleError."""
    if not column_rows_possible(f, extents, lanes, cpu):
        raise ScheduleError(f"{f.name}: not a column reduction of a matrix streamed from memory")
    column_rows(s, f, extents, lanes)
