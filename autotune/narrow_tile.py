"""A register tile over a row of at most one native vector: a GEMM-like reduction whose output
has a few columns (``C = A B`` with ``B`` of 4 columns up to one native vector, 8 float64 or 16
float32 on AVX-512: a linear layer with few outputs, a block of right-hand sides).

The rule-based schedule's register tile (``heuristic._stage``: rows unrolled, the reduction
inside, the row's vectors innermost) took only rows longer than a native vector. A narrower
row fell through to the scalar nest: one dot product per output cell, its reduction a chain of
dependent multiply-adds reading ``B`` down a column. A tile of one vector (or a narrower one,
``vectorize`` taking the row whole) over ``accumulator_rows`` rows keeps that many independent
accumulators in registers and reads each row of ``B`` once per tile; fewer rows than that make
one tile of all of them (docs/performance.md, "A register tile over a narrow row"). The tile is
a point of the search space, whose narrowest vector width (4 lanes, ``space.VECTOR_WIDTHS``)
takes a row of 2 or 3 columns whole (``space.whole_loop_vector``, ``NARROW_WHOLE``). Rows of 2
or 3 reduce in vector lanes along a long reduction instead (``rfactor_rules.narrow_columns``,
``NARROW_LANE_TERMS``).

Fewer rows than the tile's make a tile of all of them for rows wider than a vector too
(``FEW_ROWS_WIDE``: a GEMM of 2 rows and 16 columns, which no rule took), and a single row
narrower than a row segment (``x^T B``) a tile of one row (``FEW_ROWS_LEAST``; docs/
performance.md, "A tile of all the rows, whatever the row's width"). ``register_tile`` builds
the tile for ``heuristic._stage``: since stop 82 with a row count that divides few rows
(``divisor_rows``), the column panels in parallel where they share out better than the row tiles
(``panels_parallel``), and four vectors for a tile of one row (``ONE_ROW_VECTORS``; docs/
performance.md, "Few rows: a tile that divides them, the column panels in parallel"); since stop
83 four vectors a row for tiles of few rows under the CPU's FMA latency bound
(``few_rows_vectors``; "Two rows under the latency bound take four vectors a row").
"""

from __future__ import annotations

from math import prod

from tensorlang.backends.llvm.parallel import CHUNKS_PER_THREAD
from tensorlang.func import Definition
from tensorlang.schedule.schedule import Stage

from .cpu_model import BROADCAST_REGISTERS, CpuModel, accumulator_budget
from .few_rows import vector_tile
from .rfactor_rules import ROW_VECTORS

#: the fewest columns (the output's innermost extent) a register tile of the rule-based
#: schedule takes where a row is at most one native vector; 0: only rows longer than a native
#: vector, as before stop 75. 2: rows of 2 or 3 columns too where their reduction is too short
#: for vector lanes (``rfactor_rules.NARROW_LANE_TERMS``; 4 until stop 80 left them the scalar
#: nest; docs/performance.md, "Narrow rows: lanes for long reductions, a tile for short ones")
NARROW_COLUMNS = 2
#: whether rows longer than a native vector take a tile of all the rows where they are fewer
#: than the tile's (0: only narrow rows, as in stop 75)
FEW_ROWS_WIDE = 1
#: the fewest rows that take a tile of all of them (1: a row vector times a matrix of fewer
#: columns than a row segment, ``x^T B``, whose longer rows take the segment form)
FEW_ROWS_LEAST = 1
#: the most accumulators a tile takes, past the budget's rows (``heuristic.accumulator_rows``),
#: for a row count that divides the rows where the budget's does not (33 rows, 2 vectors a row:
#: 3 tiles of 11 rows, 22 accumulators, not 4 of 8 and a guarded one of 1 on its own), within
#: the registers the row's vectors of B and the broadcasts of A leave (``divisor_rows``; docs/
#: performance.md, "Few rows: a tile that divides them, the column panels in parallel"). 0:
#: the budget's rows, as before
DIVISOR_ACCUMULATORS = 24
#: 1: the column panels' loop outermost and in parallel, the rows' tiles inside it, where the
#: panels share out over the threads better than the row tiles (``panels_parallel``, a 2-D
#: output); 0: the outermost tile loop of two iterations or more, as before
PANELS_PARALLEL = 1
#: the fewest reduction terms per output cell for ``PANELS_PARALLEL``: with fewer the tile is
#: bound by its stores of the output, which the panels' order makes to every row of it at once
#: (one store stream per row, where the row tiles' order writes a tile's rows), not by its
#: multiply-adds (an outer product, 33 x 1000 x 1, ran slower that way)
PANELS_LEAST_TERMS = 16
#: native vectors of a tile of one row (``x^T B``, narrower than the row segment form's
#: ``rfactor_rules.ROW_VECTORS`` vectors) where its row is wider than the tile: the accumulators
#: that rows would take go to the row, each step of the reduction more independent multiply-adds
#: (two vectors a step left the tile bound by the multiply-adds' latency); the last piece guarded
#: (a shifted one computes its columns twice). A power of two: a split the search space offers.
#: 0: the two vectors of every tile, as before
ONE_ROW_VECTORS = 4
#: 1: a tile of one row or a few, run serially, takes whole rows where they are at most the row
#: segment form's ``rfactor_rules.ROW_VECTORS`` vectors and all of them fit the accumulator
#: budget (``x^T B``, or 2 x 33 float64: no piece guarded or computed twice), vectorized whole
#: where a row is not whole vectors (``few_rows.vector_tile``; a point of the search space,
#: ``space.whole_loop_vector``); in parallel the pieces stay, to share out (docs/performance.md,
#: "One row narrower than a segment: the whole row"). 0: ``ONE_ROW_VECTORS``, as before
WHOLE_ROW = 1
#: 1: a GEMM of a few rows whose product is too small to share out over threads, and whose
#: tile would take its rows whole (``whole_rows``), takes this tile, not the packed path's
#: in-place nest of the CPU's packed tile width (``few_rows.in_place_nest``, serially): where
#: that width is two vectors (Zen 5) a 2 x 100 float32 GEMM ran in four panels of two rows x two
#: vectors, four accumulators, under the latency bound (docs/performance.md, "A few rows in
#: place on Zen 5"). 0: the in-place nest, as before
SERIAL_WHOLE_ROWS = 1
#: native vectors a row of a tile of two rows or more takes where its two vectors a row give
#: no more independent multiply-adds than the CPU's latency bound asks (``fma_latency *
#: fma_units``, Low et al.: Zen 4's 4, two rows; Skylake's 8, up to four) and its row is wider:
#: the accumulator budget's (``cpu_model.accumulator_budget``) go to the row, at most this many
#: (a power of two, within ``space.MAX_VECTOR_UNROLL``), as ``ONE_ROW_VECTORS`` for one row.
#: The tile's tail as before. 0: two vectors, as before
FEW_ROWS_VECTORS = 4


def takes(columns: int, lanes: int, row_extent: int, rows: int) -> bool:
    """Whether a GEMM-like reduction whose rows have ``columns`` elements, ``row_extent`` of them,
    takes the register tile of ``rows`` rows (``accumulator_rows``): rows longer than a native
    vector of ``lanes``, or (``NARROW_COLUMNS``) at least that many columns; at least ``rows``
    rows, or (at least ``FEW_ROWS_LEAST`` of them; a wider row than a native vector with
    ``FEW_ROWS_WIDE``) a tile of all of them, which is the search space's ``regs`` rows too
    (``min(extent, accumulator_rows(...))``).

    >>> [takes(n, 8, 37, 16) for n in (1, 2, 3, 4, 8, 9, 1000)]
    [False, True, True, True, True, True, True]
    >>> [takes(n, 8, m, 16) for n, m in [(8, 3), (8, 1), (9, 3), (1000, 3), (3, 1), (1, 3)]]
    [True, True, True, True, True, False]
    """
    if row_extent >= rows:
        return columns > lanes or bool(NARROW_COLUMNS) and columns >= NARROW_COLUMNS
    return (bool(NARROW_COLUMNS) and NARROW_COLUMNS <= columns
            and (columns <= lanes or bool(FEW_ROWS_WIDE)) and row_extent >= FEW_ROWS_LEAST)


def divisor_rows(rows: int, budget: int, vectors: int, extent: int, registers: int) -> int:
    """Rows of a register tile of ``vectors`` vector registers a row over ``extent`` rows, given
    the ``rows`` the accumulator ``budget`` gives (``heuristic.accumulator_rows``, a divisor
    of ``extent`` where one is at least half the budget's rows): with ``DIVISOR_ACCUMULATORS``,
    where ``rows`` leave a remainder, the largest count above the budget's that divides
    ``extent``, at most ``DIVISOR_ACCUMULATORS`` accumulators and what ``registers`` vector
    registers leave past the row's vectors and ``BROADCAST_REGISTERS``; else ``rows``. Fewer
    tiles, none of them a guarded remainder run on its own after the rest (loop
    partitioning), each vector of B serving more rows.

    >>> [divisor_rows(*a) for a in [(8, 16, 2, 33, 32), (5, 16, 2, 100, 32), (6, 12, 2, 33, 16)]]
    [11, 5, 6]
    >>> [divisor_rows(*a) for a in [(8, 16, 2, 17, 32), (8, 16, 2, 1000, 32), (3, 16, 4, 33, 32)]]
    [8, 8, 3]
    """
    least = max(1, budget // max(vectors, 1))
    if not DIVISOR_ACCUMULATORS or extent % rows == 0 or extent <= least:
        return rows
    most = min(DIVISOR_ACCUMULATORS, registers - vectors - BROADCAST_REGISTERS) // max(vectors, 1)
    return next((r for r in range(most, least, -1) if extent % r == 0), rows)


def _span(costs: list[float], threads: int) -> float:
    """The time ``threads`` threads take over iterations of ``costs`` as a parallel loop hands
    them out: chunks of sizes differing by one iteration at most, ``CHUNKS_PER_THREAD`` per
    thread (``backends/llvm/parallel.py``), claimed in order by the thread that frees first."""
    pieces = max(1, min(len(costs), threads * CHUNKS_PER_THREAD))
    size, extra = divmod(len(costs), pieces)
    ends, at = [0.0] * max(1, threads), 0
    for c in range(pieces):
        n = size + (c < extra)
        ends[ends.index(min(ends))] += sum(costs[at:at + n])
        at += n
    return max(ends)


def few_rows_vectors(extent: int, vectors: int, cpu: CpuModel) -> int:
    """Native vectors a row of a tile over ``extent`` rows takes on ``cpu`` where a row of
    ``vectors`` vectors leaves the tile at or under the latency bound (``extent * vectors <=
    fma_latency * fma_units``, ``FEW_ROWS_VECTORS``): the largest power of two up to
    ``FEW_ROWS_VECTORS`` whose rows fit the accumulator budget of rows that wide; else (or
    off) 0.

    >>> from tensorlang.autotuner.cpu_model import DESCRIBED
    >>> [few_rows_vectors(m, 2, DESCRIBED["znver4"]) for m in (1, 2, 3)]
    [0, 4, 0]
    >>> [few_rows_vectors(m, 2, DESCRIBED["skylake-avx512"]) for m in (2, 3, 4, 5)]
    [4, 4, 4, 0]
    >>> [few_rows_vectors(m, 2, DESCRIBED["haswell"]) for m in (2, 3, 4, 5, 6)]
    [4, 2, 2, 2, 0]
    """
    if not FEW_ROWS_VECTORS or extent < 2 or extent * vectors > cpu.fma_latency * cpu.fma_units:
        return 0
    out = 1
    while out * 2 <= FEW_ROWS_VECTORS and extent * out * 2 <= accumulator_budget(cpu, out * 2):
        out *= 2
    return out


def panels_parallel(rows: int, width: int, lanes: int, extent: int, columns: int,
                    terms: int, threads: int) -> bool:
    """Whether a register tile of ``rows`` rows x ``width`` lanes (native vectors of ``lanes``)
    over ``extent`` rows and ``columns`` columns, ``terms`` reduction terms per output cell, runs
    its column panels in parallel, each over every row tile, rather than its row tiles, each
    over every panel (``PANELS_PARALLEL``): where there are ``PANELS_LEAST_TERMS`` terms and
    that spans less of ``threads`` threads' time (``_span``), counted in rows x native vectors,
    the guarded remainder rows (a loop piece of their own, run after the whole tiles) and
    columns at what they compute.

    >>> panels_parallel(11, 32, 16, 33, 100, 256, 2), panels_parallel(8, 32, 16, 1000, 100, 256, 2)
    (True, False)
    >>> panels_parallel(11, 32, 16, 33, 100, 256, 1), panels_parallel(11, 32, 16, 33, 1000, 1, 2)
    (False, False)
    """
    if not PANELS_PARALLEL or threads < 2 or columns <= width or terms < PANELS_LEAST_TERMS:
        return False
    whole, rest = divmod(extent, rows)
    vectors = -(-width // lanes)
    panels = [vectors] * (columns // width) + ([-(-(columns % width) // lanes)] if columns % width
                                                else [])
    by_rows = _span([rows * sum(panels)] * whole, threads) + rest * sum(panels)
    by_panels = _span([whole * rows * p for p in panels], threads) + (
        _span([rest * p for p in panels], threads) if rest else 0)
    return by_panels < by_rows


def whole_rows(rows: int, columns: int, lanes: int, cpu: CpuModel) -> bool:
    """Whether a tile of all ``rows`` rows of ``columns`` elements, run serially, takes them
    whole (``WHOLE_ROW``): at most ``rfactor_rules.ROW_VECTORS`` native vectors of ``lanes``
    a row, and all the rows' vectors within ``cpu``'s accumulator budget.

    >>> from tensorlang.autotuner.cpu_model import DESCRIBED
    >>> [whole_rows(m, 100, 16, DESCRIBED["znver5"]) for m in (1, 2, 3)]  # 7 vectors a row
    [True, True, False]
    """
    return bool(WHOLE_ROW) and columns <= ROW_VECTORS * lanes \
        and rows * -(-columns // lanes) <= accumulator_budget(cpu)


def serial_whole_rows(rows: int, columns: int, lanes: int, cpu: CpuModel) -> bool:
    """Whether the packed path leaves a GEMM that runs serially to this tile
    (``SERIAL_WHOLE_ROWS``): its rows are taken whole (``whole_rows``)."""
    return bool(SERIAL_WHOLE_ROWS) and whole_rows(rows, columns, lanes, cpu)


def register_tile(st: Stage, d: Definition, i: str, ext: dict[str, int],
                  tile: tuple[int, int, int], tail: str, threads: int,
                  cpu: CpuModel) -> None:
    """The rule-based schedule's register tile of a GEMM-like reduction's stage ``st`` (pure
    definition ``d``, row Var ``i``, its Vars' and reduction Vars' extents ``ext``): ``tile`` =
    (vector lanes ``width``, ``rows``, native ``lanes``); ``i`` split by ``rows`` (at most its
    extent; one row not split; a larger count dividing it, ``divisor_rows``, within ``cpu``'s
    vector registers, where ``rows`` came from its accumulator budget and leave a remainder),
    the last pure Var by ``width`` with ``tail``, the reduction loops inside, the tile's rows
    unrolled and its row in native vectors (``few_rows.vector_tile``); the outermost tile loop
    of two iterations or more in parallel on ``threads`` threads (0: none, the stage inside
    the output's parallel loop), or for a 2-D output whose column panels share out better
    (``panels_parallel``) those, outermost, the last panel guarded. A tile of one row (or a
    few whose whole rows fit the accumulators) run serially takes whole rows (``WHOLE_ROW``);
    in parallel, one row wider than ``ONE_ROW_VECTORS`` vectors takes that many, the last
    piece guarded; a tile of few rows under ``cpu``'s latency bound ``few_rows_vectors``
    vectors a row.

    Raises:
        ScheduleError: a primitive refuses the tile."""
    width, rows, lanes = tile
    args = [a.name for a in d.args]
    x = args[-1]
    if not threads and width < ext[x] and whole_rows(ext[i], ext[x], lanes, cpu):
        width = ext[x]  # (all the rows, each whole)
    elif ONE_ROW_VECTORS and ext[i] == 1 and ext[x] > max(width, ONE_ROW_VECTORS * lanes):
        width, tail = ONE_ROW_VECTORS * lanes, "GuardWithIf"
    wide = few_rows_vectors(ext[i], -(-width // lanes), cpu) * lanes
    if width < wide < ext[x]:  # (0 for one row: few_rows_vectors)
        width = wide
    vectors = -(-width // lanes)
    if ext[i] > 1:
        rows = divisor_rows(rows, accumulator_budget(cpu), vectors, ext[i], cpu.vector_registers)
    terms = prod(ext.get(r.name, 1) for r in d.rvars)
    panels = threads > 0 and args == [i, x] and ext[i] > 1 and panels_parallel(
        min(rows, ext[i]), width, lanes, ext[i], ext[x], terms, threads)
    tail = "GuardWithIf" if panels else tail  # (shifted panels would run at once)
    count = dict(ext)  # each loop's iterations
    outer_row, row = i, None
    if ext[i] > 1:
        io, ii = st.split(i, min(rows, ext[i]))
        outer_row, row, count[io.name] = io.name, ii.name, -(-ext[i] // rows)
    xo, xi = st.split(x, width, tail=tail)
    count[xo.name] = -(-ext[x] // width)
    outer = [outer_row if a == i else a for a in args[:-1]] + [xo.name]
    if panels:
        outer = [xo.name, outer_row]
    st.reorder(*outer, *[r.name for r in d.rvars], *([row] if row else []), xi.name)
    # whole native vectors, unrolled (the form the search space gives this tile)
    vector_tile(st, row, xi.name, width, lanes)
    if threads:  # (0: inside the output's parallel loop, no nested thread pool)
        # the outermost tile loop with two iterations or more (as the search space picks)
        st.parallel(next((a for a in outer if count[a] >= 2), outer[0]))
