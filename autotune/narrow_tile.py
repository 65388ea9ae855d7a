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
the tile for ``heuristic._stage``.
"""

from __future__ import annotations

from tensorlang.func import Definition
from tensorlang.schedule.schedule import Stage

from .few_rows import vector_tile

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


def register_tile(st: Stage, d: Definition, i: str, ext: dict[str, int],
                  tile: tuple[int, int, int], tail: str, nested: bool) -> None:
    """The rule-based schedule's register tile of a GEMM-like reduction's stage ``st`` (pure
    definition ``d``, row Var ``i``, pure Vars' extents ``ext``): ``tile`` = (vector lanes
    ``width``, ``rows``, native ``lanes``); ``i`` split by ``rows`` (at most its extent; one
    row not split), the last pure Var by ``width`` with ``tail``, the reduction loops inside,
    the tile's rows unrolled and its row in native vectors (``few_rows.vector_tile``); the
    outermost tile loop of two iterations or more in parallel unless ``nested``.

    Raises:
        ScheduleError: a primitive refuses the tile."""
    width, rows, lanes = tile
    args = [a.name for a in d.args]
    x = args[-1]
    count = dict(ext)  # each loop's iterations
    outer_row, row = i, None
    if ext[i] > 1:
        io, ii = st.split(i, min(rows, ext[i]))
        outer_row, row, count[io.name] = io.name, ii.name, -(-ext[i] // rows)
    xo, xi = st.split(x, width, tail=tail)
    count[xo.name] = -(-ext[x] // width)
    outer = [outer_row if a == i else a for a in args[:-1]] + [xo.name]
    st.reorder(*outer, *[r.name for r in d.rvars], *([row] if row else []), xi.name)
    # whole native vectors, unrolled (the form the search space gives this tile)
    vector_tile(st, row, xi.name, width, lanes)
    if not nested:  # inside the output's parallel loop: no nested thread pool
        # the outermost tile loop with two iterations or more (as the search space picks)
        st.parallel(next((a for a in outer if count[a] >= 2), outer[0]))
