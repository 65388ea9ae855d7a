"""A packed GEMM whose rows make a single row block (a short, wide product: 32 x 4096 x 4096,
a linear layer on a batch of 32): its column panels, not its row blocks, run in parallel.

BLIS parallelizes the loop around the micro-kernel's column panels (its ``jr`` loop) where the
row blocks are too few for the threads (Smith et al., "Anatomy of High-Performance Many-Threaded
Matrix Multiplication", IPDPS 2014). The nest, per ``kc`` block of the reduction: the ``M x kc``
block of the row operand (A, small) copied once, then the column panels in parallel, each
copying its ``kc x nr`` panel of B and running every register tile of rows over it, the last
(remainder) rows as a piece inside the panel, so no panel is copied twice; a reduction of at
most ``kc`` is not split (B's ``K x nr`` panel per column panel). The rule-based
schedule (``heuristic._packed_tile``) takes it where the rows make one row block
(``heuristic.FEW_ROWS``); before, two threads ran such a GEMM unpacked and one thread in BLIS's
order, which copies all of B in panels per ``kc`` block for a few rows. On several threads it
also takes it where one thread's rows would make one row block but the threads' row blocks
would run BLIS's order (``FEW_ROWS_BLIS``) or be small ones each copying all of B
(``FEW_ROWS_BLOCKS``), and inside the batch loop of a batched GEMM whose batch is too short for
the threads (``FEW_BATCH``). B is copied a few column panels at a time (``COPY_ROW_BYTES``).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

from tensorlang.func import Func
from tensorlang.schedule.schedule import Schedule, Stage

from .cpu_model import CpuModel
from .packed_reads import Packed, pack
from .row_blocks import shared
from .serial_share import few_vectors
from .workloads import BoundExtents

#: whether a packed GEMM whose rows fit one row block of the model's ``mc`` but which the threads
#: split into row blocks run in BLIS's loop order (``heuristic.blis_order``: rows that leave a
#: remainder) takes this nest instead, with one thread's tile rows (``heuristic._packed_tile``),
#: where its column panels share out over the threads: in BLIS's order all threads copy B's
#: ``kc x N`` block, wait for each other, then read each panel back from L3, the remainder rows
#: a block of their own on one thread; here each thread copies a panel into its own L2 and runs
#: every row over it (docs/performance.md, "Few rows in BLIS's order"). 0: as before
FEW_ROWS_BLIS = 1
#: whether, with ``FEW_ROWS_BLIS``, such a GEMM (no batch loop) takes this nest also where the
#: threads' row blocks would run in the other order, its reduction split, each block of at
#: most ``heuristic.REUSE_ROWS`` rows copying all of B's panels (64 x 2048 x 2048 on 2
#: threads: two blocks of 32 rows, in 4-row tiles that divide them): here each panel is
#: copied once (docs/performance.md, "Few rows in small row blocks"). 0: only BLIS's order,
#: as before
FEW_ROWS_BLOCKS = 1
#: whether a batched GEMM whose batch loop does not share out over the threads (``short_batch``)
#: and whose rows make one row block takes this nest inside the batch loop, its column panels in
#: parallel (docs/performance.md, "Few rows in a short batch"). 0: the batch loop in parallel,
#: or (a batch of one) the plain register tile, as before
FEW_BATCH = 1
#: the fewest bytes of each row of B that one copy of this nest reads: column panels of the
#: register tile's width are copied several at a time up to that (``copy_panels``; an AVX2
#: float64 tile's 8 columns, one cache line per row of B, copied 8 panels at a time), the
#: tiles of a copy side by side inside it: each copy reads longer runs of B's rows, each row
#: a page or more from the next (docs/performance.md, "Wider copies of B for few rows").
#: 0: one panel per copy, as before
COPY_ROW_BYTES = 512
#: whether ``FEW_ROWS_BLIS`` counts the partial last column panel as what it is, a piece of its
#: own (loop partitioning) that one thread runs after the whole panels, with A's block copied
#: again (``panels_beat_blocks``): float32 500 x 500 x 4000 on 2 threads, 7 whole 64-column
#: panels and 52 columns, ran this nest at half the speed of the threads' two row blocks in
#: BLIS's order (docs/performance.md, "The columns' partial panel alone"). 0: the panels
#: counted as equal, as before
TAIL_ALONE = 1
#: the most register tiles of rows (the row extent over the tile's rows, rounded up) for which
#: this nest reads B where it is instead of copying its panels (``in_place``): a panel copied
#: for so few tiles costs a pass over B, written and read back, that the tiles' own strided
#: reads of B (from L2 after the first tile) do not (docs/performance.md, "Few rows read B in
#: place"). 0: the panels copied, as before
IN_PLACE_TILES = 8
#: the largest share of L2 a tile's column of B (``K x width``) may take where B is read in
#: place (the row tiles after the first read it from L2), and of L3 all of B (the copy
#: prefetches B's rows, the tiles do not: B from memory is worth its copy)
IN_PLACE_L2_SHARE = IN_PLACE_L3_SHARE = 0.25
#: 1: where B is read in place, the rows past the last whole tile are the last tile shifted
#: inwards (its first rows computed twice: legal, each tile reduces its cells whole), not a
#: piece of their own after the column panels (docs/performance.md, "Few rows read B in
#: place"); 0: that piece
IN_PLACE_SHIFT = 1
#: 1: a small product's column panels run serially (``in_parallel``: ``serial_share.few_vectors``,
#: as the register tile's rows do), where waking the pool's threads cost more than the second
#: thread saved (docs/performance.md, "Few rows of a small product serially"); 0: in parallel
#: wherever there are threads, as before
SERIAL_SMALL = 1


def in_parallel(f: Func, extents: BoundExtents, lanes: int, threads: int) -> bool:
    """Whether a few-rows nest of ``f`` (``few_rows_nest``, ``in_place_nest``) runs its column
    panels in parallel: where there are ``threads`` (more than one) and, with ``SERIAL_SMALL``,
    the product is not small (``serial_share.few_vectors`` at ``lanes`` native lanes)."""
    return threads > 1 and not (SERIAL_SMALL and few_vectors(f, extents, lanes))


def few_rows_nest(s: Schedule, st: Stage, row: str, x: str, k: str,
                  tile: tuple[int, int, int, int], kc: int | None, panels: list[Packed],
                  blocks: list[Packed], prefetch: int, parallel: bool,
                  outer: tuple[str, ...] = (), copy: Callable[..., object] = pack) -> None:
    """Schedule ``st`` (a GEMM-like reduction over pure Vars ``row`` and ``x``, the vector Var,
    and the reduction Var ``k``) as the few-rows nest: register tiles of ``tile`` = (rows,
    width, lanes, group): ``rows`` rows unrolled x ``width`` lanes in native vectors of
    ``lanes``; ``kc``-long reduction blocks (``kc`` below the extent of ``k``; None: not split,
    the whole reduction inside each tile); the ``panels`` (B's reads, ``packed_operands``)
    copied ``group`` column panels at a time (``copy_panels``; the loop over a copy's panels
    ``x.o.i``, inside the copies' ``x.o.o``) and the ``blocks`` (A's,
    ``heuristic.row_operands``) per reduction block (per tile where the reduction is not
    split); each tile prefetching the next tile's rows of the output ``prefetch`` tiles ahead
    (0: not); the copies' loop in ``parallel`` (where there are threads); ``outer`` pure Vars
    (a batch too short to share out over the threads) outermost, serial; ``copy`` copying the
    panels and blocks (``packed_reads.pack``, or ``packer``'s, whose copies prefetch B's
    rows)."""
    rows, width, lanes, group = tile
    io, ii = st.split(row, rows, tail="GuardWithIf")
    xo, xi = st.split(x, width, tail="GuardWithIf")
    tiles = []  # (the loop over a copy's panels)
    if group > 1:
        xo, inner = st.split(xo, group, tail="GuardWithIf")
        tiles.append(inner)
    if kc is None:
        st.reorder(*outer, xo, *tiles, io, k, ii, xi)
        at = io.name
    else:
        ko, ki = st.split(k, kc)
        st.reorder(*outer, ko, xo, *tiles, io, ki, ii, xi)
        at = ko.name
    copy(s, st, [*panels, *blocks], [xo.name] * len(panels) + [at] * len(blocks))
    vector_tile(st, ii.name, xi.name, width, lanes)
    if prefetch:
        st.prefetch(st.func, io, offset=prefetch)
    if parallel:
        st.parallel(xo)


def in_place(rows: int, tile_rows: int, column_bytes: int, operand_bytes: int,
             cpu: CpuModel) -> bool:
    """Whether this nest reads B in place (``in_place_nest``) on ``cpu``: ``rows`` rows in
    register tiles of ``tile_rows`` rows make at most ``IN_PLACE_TILES`` tiles, a tile's
    column of B (``column_bytes``: ``K x width`` elements) takes at most ``IN_PLACE_L2_SHARE``
    of L2 and all of B (``operand_bytes``) at most ``IN_PLACE_L3_SHARE`` of L3.

    >>> from tensorlang.autotuner.cpu_model import DESCRIBED
    >>> zen4 = DESCRIBED["znver4"]  # L2 1 MiB, L3 32 MiB
    >>> [in_place(m, 4, 1000 * 32 * 8, 8 * 2 ** 20, zen4) for m in (2, 7, 32, 33)]
    [True, True, True, False]
    >>> in_place(16, 4, 4000 * 32 * 8, 32 * 2 ** 20, zen4)  # a column of 1 MB
    False
    """
    return (-(-rows // tile_rows) <= IN_PLACE_TILES
            and column_bytes <= IN_PLACE_L2_SHARE * cpu.l2.size
            and operand_bytes <= IN_PLACE_L3_SHARE * cpu.l3.size)


def in_place_nest(s: Schedule, st: Stage, row: str, x: str, k: str, tile: tuple[int, int, int],
                  prefetch: int, parallel: bool, outer: tuple[str, ...] = (),
                  row_extent: int = 0) -> None:
    """Schedule ``st`` as ``few_rows_nest`` does, but with nothing copied and the reduction
    whole inside each tile (``in_place``): register tiles of ``tile`` = (rows, width, lanes),
    the column panels in ``parallel``, all the row tiles of a panel over the same columns of B
    one after the other (B's panel, read in place, stays in L2 for the next tile), each tile
    prefetching the next one's rows of the output ``prefetch`` tiles ahead (0: not); rows past
    the last whole tile of ``row_extent`` rows as the last tile shifted inwards
    (``IN_PLACE_SHIFT``)."""
    rows, width, lanes = tile
    shift = IN_PLACE_SHIFT and row_extent > rows and row_extent % rows
    io, ii = st.split(row, rows, tail="ShiftInwards" if shift else "GuardWithIf")
    xo, xi = st.split(x, width, tail="GuardWithIf")
    st.reorder(*outer, xo, io, k, ii, xi)
    vector_tile(st, ii.name, xi.name, width, lanes)
    if prefetch:
        st.prefetch(st.func, io, offset=prefetch)
    if parallel:
        st.parallel(xo)


def copy_panels(extent: int, width: int, row_bytes: int, threads: int, least: float) -> int:
    """Column panels of ``width`` columns (``row_bytes`` bytes of a row of B each) per copy of
    the few-rows nest over ``extent`` columns: the most, a power of two, whose copies read at
    most ``COPY_ROW_BYTES`` of each row (at least one panel) and still share out over
    ``threads`` threads (``panels_share``, ``least``: ``heuristic.MIN_BALANCE``); 1 with
    ``COPY_ROW_BYTES`` 0.

    >>> copy_panels(4096, 8, 64, 2, 0.9), copy_panels(4096, 32, 256, 2, 0.9)
    (8, 2)
    >>> copy_panels(4096, 32, 512, 2, 0.9), copy_panels(96, 8, 64, 2, 0.9)  # 12 panels:
    (1, 2)

    (6 copies of 2 panels share out over 2 threads, 3 of 4 do not.)
    """
    group = 1
    while group * 2 * row_bytes <= COPY_ROW_BYTES and \
            panels_share(extent, width * group * 2, max(threads, 1), least):
        group *= 2
    return group


def short_batch(extents: list[int], threads: int, least: float) -> bool:
    """Whether pure loops of ``extents`` outside a packed tile (a batch) are too few iterations
    to share out over ``threads`` threads (``FEW_BATCH``: less than ``least`` of their time
    busy, ``row_blocks.shared``; ``heuristic.MIN_BALANCE``), so that the few-rows nest runs its
    column panels in parallel inside them instead.

    >>> [short_batch([b], t, 0.9) for b, t in [(1, 2), (3, 2), (8, 2), (3, 1)]]
    [True, True, False, False]
    """
    return bool(FEW_BATCH) and threads > 1 and shared(prod(extents), threads) < least


def short_batch_nest(batch: list[int], extent: int, width: int, threads: int,
                     least: float) -> bool:
    """Whether a packed tile under pure loops of extents ``batch`` takes this nest inside them
    (``FEW_BATCH``): the batch too short to share out over ``threads`` threads
    (``short_batch``, below ``least``) and its ``extent`` columns' panels of ``width`` sharing
    out instead (``panels_share``; 8 products of 256 columns on 16 threads: neither).

    >>> short_batch_nest([3], 1024, 32, 2, 0.9), short_batch_nest([8], 256, 32, 16, 0.9)
    (True, False)
    """
    return short_batch(batch, threads, least) and panels_share(extent, width, threads, least)


def panels_share(extent: int, width: int, threads: int, least: float) -> bool:
    """Whether the column panels of ``width`` over ``extent`` columns (at least two) keep at
    least ``least`` of ``threads`` threads' time busy (``row_blocks.shared``;
    ``heuristic.MIN_BALANCE``): where ``FEW_ROWS_BLIS`` may take this nest.

    >>> [panels_share(n, 32, t, 0.9) for n, t in [(2000, 2), (2000, 16), (100, 16)]]
    [True, True, False]
    """
    return extent >= 2 * width and shared(-(-extent // width), threads) >= least


def panel_balance(extent: int, width: int, threads: int) -> float:
    """The share of ``threads`` threads' time this nest's column panels of ``width`` over
    ``extent`` columns keep busy, the whole panels shared out a round of ``threads`` at a time,
    then the partial last one (a piece of its own: loop partitioning) on one thread alone.

    >>> round(panel_balance(500, 64, 2), 3), panel_balance(4096, 32, 2)
    (0.812, 1.0)
    """
    whole, rest = divmod(extent, width)
    tail = rest / width
    return (whole + tail) / (threads * (-(-whole // threads) + tail))


def panels_beat_blocks(extent: int, width: int, threads: int, least: float,
                       blocks: int) -> bool:
    """Whether ``FEW_ROWS_BLIS`` takes this nest over ``blocks`` row blocks (BLIS's order, or
    small ones) on ``threads`` threads: its column panels share out (``panels_share``) and,
    with ``TAIL_ALONE``, keep the threads busy (``panel_balance``, the partial last panel alone)
    at least ``least`` of their time or as much as the row blocks would (``shared``).

    >>> panels_beat_blocks(500, 64, 2, 0.9, 2), panels_beat_blocks(2000, 32, 16, 0.9, 2)
    (False, True)
    """
    return panels_share(extent, width, threads, least) and (
        not TAIL_ALONE or panel_balance(extent, width, threads)
        >= min(least, shared(blocks, threads)))


def vector_tile(st: Stage, rows: str | None, vector: str, width: int, lanes: int) -> None:
    """A register tile's loops: ``rows`` unrolled (None: a tile of one row, not split),
    ``vector`` (``width`` lanes) vectorized by ``lanes`` native lanes and its vectors unrolled
    where ``width`` is several of them, else vectorized whole (a 56-wide row: 16 + 16 + 16 + 8)."""
    if rows is not None:
        st.unroll(rows)
    if width > lanes and width % lanes == 0:
        st.vectorize(vector, lanes).unroll(f"{vector}.o")
    else:
        st.vectorize(vector)
