"""The rule-based schedule's loop order for an update definition: a loop along which every access
is contiguous goes innermost when the innermost loop as written strides across rows.

An update's loops run as its RDom is written, first dimension innermost. PolyBench lu's Doolittle
loops (``for i: for j: for k: A[i, j] -= A[i, k] * A[k, j]``, then the division by ``A[j, j]`` at
``k == j``) read the column ``A[k, j]`` along ``k``, one cache line per term. Run as ``i, k, j`` —
the ``ikj`` form of the same elimination, one of the six loop orders of Dongarra, Gustavson and
Karp, "Implementing Linear Algebra Algorithms for Dense Matrices on a Vector Pipeline Machine"
(SIAM Review 26(1), 1984) — the loop over ``j`` writes row ``i`` and reads row ``k`` contiguously,
and each cell still receives its terms in increasing ``k`` with the division last: the same
operations in the same order per cell. The legality check (isl) decides whether an order is
allowed; the lowering pass ``hoist_update_reads`` then loads ``A[i, k]`` once per range of ``j``
and hands the range to LLVM's vectorizer (``schedule/invariant_reads.py``).

The rule counts, for each loop ``v`` of the stage, the accesses (the store and every read) that
``v`` indexes in a dimension other than the last: a row-major array's stride there is a whole
row or more; a read in a ``where`` branch taken at one value of ``v`` (lu's pivot ``A[j, j]``
at ``k == j``) does not count. If the innermost loop has such accesses, the innermost other
reduction loop that has none, indexes some access's last dimension and runs at least
``UPDATE_MIN_VECTORS`` vectors moves innermost, the other loops keeping their order. A pure Var
is not moved: a scan along a column is ``update_rules.scan_stage``'s (chunks of columns in
parallel).

``jam_rows``: an update whose innermost loop accumulates into one cell along contiguous rows
(cholesky's ``A[i, j] -= A[i, k] * A[j, k]`` over ``k``) loads both rows on every term, and the
row that does not move with an outer loop (``A[j, k]``, the same for every ``i``) comes from
memory again for each of them. Unroll-and-jam (Allen and Kennedy, "Optimizing Compilers for
Modern Architectures", 2001, section 8.4.2; the register tile of Low et al.'s micro-kernel, one
dimension of it): that outer loop is split by ``jam_block`` (``ROW_BLOCK`` with 32 vector
registers, fewer with 16), its inner part moved inside the reduction loop and unrolled, so
that each term of the shared row is loaded once for the block's cells, which the lowering
pass ``reduce_update_cells`` then accumulates together in registers
(``schedule/cell_reduction.py``). Where a second outer loop's cells share the other row
(cholesky's ``A[i, k]``, the same for every ``j``), both loops are blocked (``jam_tile``: rows
``i`` x rows ``j``, both dimensions of the micro-kernel's tile): each term of either row is
loaded once for the tile's row or column of cells. The order is the legality check's to
allow; the rule keeps it only where the lowered nest does accumulate the block in registers
(trisolv's ``j < i`` moves with its blocked rows: the reduction loop runs up to the block's
first row with the block in registers, the block's own triangle in order).
"""

from __future__ import annotations

from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, Cmp, Expr, Select, Var, children, walk
from tensorlang.func import Func
from tensorlang.schedule.ir import Allocate, walk_stmts
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule

from .workloads import BoundExtents


def _names(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var)}


def _once(cond: Expr, var: str) -> bool | None:
    """For ``where(cond, t, f)``: which branch runs at one value of ``var`` only — True for
    ``t`` (``var == e``), False for ``f`` (``var != e``) — or None."""
    if isinstance(cond, Cmp) and cond.op in ("eq", "ne") and var in _names(cond):
        return cond.op == "eq"
    return None


def _index_lists(f: Func, number: int, var: str) -> list[tuple[Expr, ...]]:
    """The index expressions of update ``number``'s store and of every read in its value that
    runs on every iteration of ``var``: not in a ``where`` branch taken at one value of it (lu's
    division by ``A[j, j]`` at ``k == j``)."""
    u = f.updates[number]
    out = [tuple(u.index)]

    def go(e: Expr) -> None:
        if isinstance(e, Select):
            once = _once(e.cond, var)
            go(e.cond)
            if once is not True:
                go(e.t)
            if once is not False:
                go(e.f)
            return
        if isinstance(e, Access) and e.indices:
            out.append(tuple(e.indices))
        for c in children(e):
            go(c)

    go(u.value)
    return out


def strided_accesses(f: Func, number: int, var: str) -> int:
    """How many accesses of update ``number`` of ``f`` loop ``var`` moves across rows: ``var``
    in an index other than the last (``_index_lists``)."""
    return sum(any(var in _names(i) for i in idx[:-1]) for idx in _index_lists(f, number, var))


def contiguous_accesses(f: Func, number: int, var: str) -> int:
    """How many accesses of update ``number`` of ``f`` have ``var`` in their last index only."""
    return sum(var in _names(idx[-1]) and not any(var in _names(i) for i in idx[:-1])
               for idx in _index_lists(f, number, var))


def contiguous_innermost(s: Schedule, f: Func, number: int, extents: BoundExtents,
                         lanes: int, min_vectors: int) -> str:
    """Reorder update ``number`` of ``f`` so that a loop along which no access strides across
    rows runs innermost (module docstring); returns that loop's name.

    Raises:
        ScheduleError: the innermost loop strides across no row already, the stage's loops were
            split or fused, or no loop qualifies.
    """
    st = s[f].update(number)
    name = f"{f.name}.update({number})"
    loops = [ref.name for ref in st.loops]
    u = f.updates[number]
    own = set(u.pure) | {r.name for r in u.rvars}
    if set(loops) != own:
        raise ScheduleError(f"{name}: its loops were already split or fused")
    inner = loops[-1]
    if strided_accesses(f, number, inner) == 0:
        raise ScheduleError(f"{name}: its innermost loop {inner} strides across no row")
    rvars = {r.name for r in u.rvars}
    for v in reversed(loops[:-1]):
        if v in rvars and strided_accesses(f, number, v) == 0 \
                and contiguous_accesses(f, number, v) > 0 \
                and extents.extent(name, v) >= min_vectors * lanes:
            st.reorder(*[n for n in loops if n != v], v)
            return v
    raise ScheduleError(f"{name}: no loop along which every access is contiguous")


#: the cells an unroll-and-jam of an update accumulates together (``jam_rows``) with 32 vector
#: registers (AVX-512): one vector accumulator each (LLVM interleaves two: 16), and the shared
#: row's vectors. Zen 4, cholesky at N = 2000: 4 rows 161 ms, 8 rows 130-145 ms
ROW_BLOCK = 8
#: the same with 16 (AVX2): ``llvm-mca -mcpu=haswell`` on cholesky's jammed loop predicts 7.1
#: float64 FLOP/cycle for 8 rows (its row addresses spill to the stack), 10.6 for 4 and 6
ROW_BLOCK_16_REGISTERS = 4


#: the tile of a two-loop unroll-and-jam (``jam_rows``'s ``tile``: cells along the first loop
#: blocked x along the second) with 32 vector registers: 16 accumulators. Zen 4, cholesky at
#: N = 2000 on one thread: 8 x 1 166 ms, 8 x 2 98, 4 x 4 82, 5 x 4 77, 8 x 4 81. A 1 in it:
#: one loop only, by ``ROW_BLOCK`` (for a benchmark's A/B)
JAM_TILE = (4, 4)
#: the same with 16 (AVX2): 12 accumulators and the 3 vectors of one loaded row block
JAM_TILE_16_REGISTERS = (3, 4)
#: share of L2 the rows of a row block of tiles may take (``jam_row_block``): the block's rows
#: are read again for every block of the second loop, whose own rows (in the rest of L2) then
#: come from L1 or L2 for all the block's tiles, not from L3 once per tile (cholesky's rows
#: ``j``). Blocks of 40 and 80 rows ran alike on Ice Lake-SP, 20 and 8 slower
#: (docs/performance.md). 0: no row block
JAM_ROWS_L2_SHARE = 0.9


def jam_block(vector_registers: int) -> int:
    """The cells ``jam_rows`` blocks by on a CPU with that many vector registers."""
    return ROW_BLOCK if vector_registers >= 32 else ROW_BLOCK_16_REGISTERS


def jam_tile(vector_registers: int) -> tuple[int, int]:
    """The cells ``jam_rows`` blocks two loops by on a CPU with that many vector registers."""
    return JAM_TILE if vector_registers >= 32 else JAM_TILE_16_REGISTERS


def jam_row_block(extent: int, tile_rows: int, row_bytes: int, l2_bytes: int) -> int:
    """Tiles per row block of a jammed tile of ``tile_rows`` rows over a loop of ``extent``:
    the most ``m >= 2`` whose block (``m * tile_rows`` rows of ``row_bytes`` each) takes at
    most ``JAM_ROWS_L2_SHARE`` of an L2 of ``l2_bytes`` and divides ``extent`` into at least two
    blocks (a block that does not divide it leaves every tile of the nest guarded: much slower);
    1 where none does.

    >>> jam_row_block(2000, 4, 16000, 1280 * 1024), jam_row_block(1999, 4, 16000, 1 << 20)
    (10, 1)
    """
    limit = int(JAM_ROWS_L2_SHARE * l2_bytes) // max(1, row_bytes)
    fits = [m for m in range(2, limit // max(1, tile_rows) + 1)
            if extent % (m * tile_rows) == 0 and extent // (m * tile_rows) >= 2]
    return max(fits, default=1)


def jam_rows(s: Schedule, output: Func, f: Func, number: int, extents: BoundExtents,
             lanes: int, min_vectors: int, block: int = ROW_BLOCK,
             tile: tuple[int, int] | None = None, l2_bytes: int = 0) -> tuple[str, str | None]:
    """Unroll-and-jam update ``number`` of ``f`` by ``block`` over the outermost loop whose
    cells share a row of the innermost loop's reduction (module docstring) or, with ``tile``
    ``(a, b)`` and a second such loop, by ``a`` over the first and ``b`` over the second;
    returns the names of the blocked loops (the second None when there is one only). A tile
    also takes row blocks of ``jam_row_block`` tiles for an L2 of ``l2_bytes`` (0: none) where
    they lower jammed too: the second loop's blocks run inside a row block, its tiles inside
    them (``jam(..., rows=)``), as a GEMM's row block of A stays in L2 for every panel of B
    (Goto and van de Geijn, "Anatomy of High-Performance Matrix Multiplication", TOMS 2008).

    Raises:
        ScheduleError: the innermost loop is not a contiguous reduction into one cell of at
            least ``min_vectors`` vectors, the stage's loops were split or fused, or no outer
            loop's block is proven legal and accumulated in registers.
    """
    name = f"{f.name}.update({number})"
    loops = _own_loops(s, f, number)
    x = loops[-1]
    u = f.updates[number]
    store = tuple(u.index)
    if x not in {r.name for r in u.rvars} or any(x in _names(i) for i in store) \
            or strided_accesses(f, number, x) or not contiguous_accesses(f, number, x) \
            or extents.extent(name, x) < min_vectors * lanes:
        raise ScheduleError(f"{name}: its innermost loop {x} is no contiguous reduction")
    reads = _index_lists(f, number, x)[1:]

    def sharing(z: str, b: int) -> bool:  # a read along x the same for every z; z's cells
        return any(x in _names(idx[-1]) and not any(z in _names(i) for i in idx)
                   for idx in reads) and any(z in _names(i) for i in store) \
            and extents.extent(name, z) >= 2 * b

    def works(z: str, b: int, z2: str | None = None, b2: int = 1, rows: int = 1) -> bool:
        t = s.copy()
        try:
            if not jam(t, f, number, z, b, z2, b2, rows).check(realize=False).ok:
                return False
            t[f].update(number).atomic()  # the cell reduction the lowered nest is checked for
            return _jammed(lower(output, t), f.name, b * b2)
        except ScheduleError:
            return False

    for z in loops[:-1]:
        if tile is not None and min(tile) > 1 and sharing(z, tile[0]):
            for z2 in loops[:-1]:
                if z2 == z or not sharing(z2, tile[1]):
                    continue
                rows = update_row_block(s, f, number, extents, z, tile[0], l2_bytes)
                for r in dict.fromkeys((rows, 1)):  # (row blocks where they work)
                    if works(z, tile[0], z2, tile[1], r):
                        jam(s, f, number, z, tile[0], z2, tile[1], r)
                        return z, z2
        if sharing(z, block) and works(z, block):
            jam(s, f, number, z, block)
            return z, None
    raise ScheduleError(f"{name}: no outer loop's cells share a row in registers")


def update_row_block(s: Schedule, f: Func, number: int, extents: BoundExtents, z: str,
              tile_rows: int, l2_bytes: int) -> int:
    """``jam_row_block`` for update ``number`` of ``f`` (not yet jammed in ``s``) jammed by
    ``tile_rows`` along ``z``: a row is the innermost loop's extent of ``f``'s elements."""
    name, x = f"{f.name}.update({number})", _own_loops(s, f, number)[-1]
    row_bytes = extents.extent(name, x) * f.dtype.itemsize
    return jam_row_block(extents.extent(name, z), tile_rows, row_bytes, l2_bytes)


def jam(s: Schedule, f: Func, number: int, z: str, block: int, z2: str | None = None,
        block2: int = 1, rows: int = 1) -> Schedule:
    """``s`` with update ``number`` of ``f`` split along ``z`` by ``block``, the inner loop
    moved innermost and unrolled (the steps of ``jam_rows``, unchecked); with ``z2``, that loop
    split by ``block2`` too, its inner loop unrolled right outside ``z``'s (a ``block2`` of 1
    leaves it alone); with ``rows`` > 1 (and ``z2`` blocked), ``z``'s outer loop split by
    ``rows`` tiles too, its inner loop (the tiles of a row block) moved right outside the
    innermost own loop, inside ``z2``'s outer loop.

    Raises:
        ScheduleError: the stage's loops were already split or fused, or ``z`` is not one."""
    loops = _own_loops(s, f, number)
    st = s[f].update(number)
    zo, zi = st.split(z, block)
    outer, inner = {z: zo.name}, [zi]
    if z2 is not None and block2 > 1:
        z2o, z2i = st.split(z2, block2)
        outer[z2] = z2o.name
        inner.insert(0, z2i)
    order = [outer.get(n, n) for n in loops]
    if rows > 1 and z2 is not None and block2 > 1:
        zoo, zoi = st.split(zo.name, rows)
        order[order.index(zo.name)] = zoo.name
        order.insert(len(order) - 1, zoi.name)
    st.reorder(*order, *inner)
    for v in inner:
        st.unroll(v)
    return s


def _own_loops(s: Schedule, f: Func, number: int) -> list[str]:
    loops = [ref.name for ref in s[f].update(number).loops]
    u = f.updates[number]
    if set(loops) != set(u.pure) | {r.name for r in u.rvars}:
        raise ScheduleError(f"{f.name}.update({number}): its loops were already split or fused")
    return loops


def _jammed(lowered, func: str, block: int) -> bool:
    """Whether the lowered nest accumulates ``block`` cells of ``func`` in one register
    buffer (``reduce_update_cells`` jammed the block)."""
    return any(isinstance(s, Allocate) and s.buffer.name.startswith(f"{func}.cell")
               and s.buffer.register and len(s.buffer.extents) == 1
               and getattr(s.buffer.extents[0], "value", None) == block
               for s in walk_stmts(lowered.body))
