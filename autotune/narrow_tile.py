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
a point of the search space, whose vector widths start at 4 (``space.VECTOR_WIDTHS``): rows of
2 or 3 reduce in vector lanes along the reduction instead (``rfactor_rules.narrow_columns``).
"""

from __future__ import annotations

#: the fewest columns (the output's innermost extent) a register tile of the rule-based
#: schedule takes where a row is at most one native vector; 0: only rows longer than a native
#: vector, as before
NARROW_COLUMNS = 4


def takes(columns: int, lanes: int, row_extent: int, rows: int) -> bool:
    """Whether a GEMM-like reduction whose rows have ``columns`` elements, ``row_extent`` of them,
    takes the register tile of ``rows`` rows (``accumulator_rows``): rows longer than a native
    vector of ``lanes``, or (``NARROW_COLUMNS``) at least that many columns; at least ``rows``
    rows, or (a narrow row, at least two of them) a tile of all of them, which is the search
    space's ``regs`` rows too (``min(extent, accumulator_rows(...))``).

    >>> [takes(n, 8, 37, 16) for n in (2, 3, 4, 8, 9, 1000)]
    [False, False, True, True, True, True]
    >>> [takes(n, 8, m, 16) for n, m in [(8, 3), (8, 1), (9, 3), (1000, 3)]]
    [True, False, False, False]
    """
    if row_extent >= rows:
        return columns > lanes or bool(NARROW_COLUMNS) and columns >= NARROW_COLUMNS
    return bool(NARROW_COLUMNS) and NARROW_COLUMNS <= columns <= lanes and row_extent >= 2
