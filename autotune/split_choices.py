"""The split factors the search space (``space.py``) offers a loop: powers of two and divisors of
its extent, the equal ``kc`` blocks of a reduction with no divisor near its target
(``cpu_model.even_block``), and the even row segments of a column reduction run in parallel
(``stream_rules.segment_width``), each where the rule-based schedule can take it, so that the
rule's schedule stays a point of the space.
"""

from __future__ import annotations

import functools

from .cpu_model import closest_divisor, even_block
from .stream_rules import segment_width

#: the largest split factor of a loop other than a GEMM-like reduction's ``kc``
MAX_FACTOR = 256


def factor_choices(extent: int, most: int = MAX_FACTOR, even: bool = False) -> list[int]:
    """1 (no split), then powers of two and divisors of ``extent`` in ``[2, min(extent, most)]``
    (``most``: ``MAX_FACTOR``, or ``heuristic.MAX_KC`` for a GEMM-like reduction's ``kc``).
    With ``even`` (that ``kc``), also the equal blocks the rule-based schedule takes where no
    divisor is near its ``kc`` (``even_kc_choices``: 340 and 510 for a prime 1019)."""
    top = min(extent, most)
    out = {1}
    p = 2
    while p <= top:
        out.add(p)
        p *= 2
    out.update(d for d in range(2, top + 1) if extent % d == 0)
    if even:
        out.update(even_kc_choices(extent, most))
    return sorted(out)


@functools.lru_cache(maxsize=256)
def even_kc_choices(extent: int, most: int) -> tuple[int, ...]:
    """The ``kc`` values ``heuristic._packed_kc`` can take for a reduction of ``extent`` where
    no divisor is near its target (``cpu_model.even_block``), for every target from ``most // 8``
    to ``most``: none where every target has a near divisor (1024, 1200)."""
    found = {even_block(extent, t) for t in range(max(1, most // 8), most + 1)
             if closest_divisor(extent, t, most=most) is None}
    return tuple(sorted(found))


def segment_choice(cols: int, lanes: int, threads: int) -> int:
    """The columns of a parallel row segment of a column reduction over ``cols`` columns that
    shares them evenly among ``threads`` threads (``stream_rules.segment_width`` at ``lanes``
    vector lanes: 56 of 100 float64 columns on two threads), where ``factor_choices`` does not
    hold it already; else 0 (one thread: no segment to share)."""
    if threads <= 1:
        return 0
    width = segment_width(cols, lanes, threads)
    return 0 if width in factor_choices(cols) else width
