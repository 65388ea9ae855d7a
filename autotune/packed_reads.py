"""The operand reads of a GEMM-like reduction that a packed register tile copies into
contiguous panels (``cache_read``), and the copies themselves: which read of which tensor, in
which layout, in panels of how many rows (Goto and van de Geijn, "Anatomy of High-Performance
Matrix Multiplication", TOMS 2008: the packed blocks of A and B). The rule-based schedule
(``heuristic``) and the search space (``space``) both build their packed nests from these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from math import prod
from typing import TYPE_CHECKING, NamedTuple

from tensorlang.expr import Access, Var, walk
from tensorlang.func import Func, parse_stage_id
from tensorlang.schedule.prefetch import LINE_BYTES
from tensorlang.schedule.schedule import Schedule, Stage

if TYPE_CHECKING:
    from .cpu_model import CpuModel
    from .workloads import BoundExtents

#: the most reduction steps per register tile (``kc``, or ``K`` unsplit) for which a packed tile
#: of 512-bit vectors prefetches its output's next tile (``short_reduction``); AVX2 code on the
#: same core measured mixed (docs/performance.md, "C's next tile where the reduction is short").
#: 0: only where C's rows straddle cache lines, as before
SHORT_REDUCTION = 128
#: cache lines ahead that the copy of a panel read a row of its tensor at a time (``B[k, j]``:
#: ``nr`` elements from each of ``kc`` rows, the rows ``N`` elements apart) prefetches its
#: tensor's rows (``far_reads``, ``Stage.prefetch`` at the copy's loop over ``k``), in whole
#: rows (8 rows of a 4-line AVX-512 panel, 32 of a 1-line AVX2 float64 one): the hardware
#: prefetchers stop at a page's edge, so with rows a page or more apart each row's lines missed
#: one row at a time (docs/performance.md, "B's rows prefetched while its panels are
#: copied"). 0: no prefetch, as before
PANEL_PREFETCH = 32
#: whether a packed tile over a single column panel reads its row block (A's ``mc x kc``) in
#: place instead of copying it (``row_block_reads``' ``panels``): the copy is there for the
#: panels that read the block again, and one panel reads it once, so the copy only doubled
#: A's traffic (float64 1000 x 32 x 1000 on 2 threads of Ice Lake-SP: 1.22 -> 0.68 ms by
#: hand; docs/performance.md, "One column panel: A read in place"). Transposed reads are still
#: copied. 0: copied, as before
ONE_PANEL_IN_PLACE = 1
#: whether a GEMM-like reduction whose columns make exactly one packed panel (``N`` the tile's
#: width) with the packed operand in L2 (``K x N``) takes no packed tile: its rows are already
#: a contiguous panel, so the copy is all cost, and the register tile over rows
#: (``narrow_tile``) reads it in place, its row tiles in parallel (float32 100 x 16 x 1000 on 2
#: threads of Zen 4: 0.030 -> 0.016 ms; docs/performance.md, "One panel in L2: B read in
#: place"). 0: packed, as before
ONE_PANEL_UNPACKED = 1
#: bytes of a page, whose edge the hardware prefetchers do not cross
PAGE_BYTES = 4096


class Packed(NamedTuple):
    """One operand read that a packed register tile copies into contiguous panels: the
    ``index``-th read of ``name`` in the reduction (``Schedule.cache_read``'s ``index``), over
    reduction Var ``rvar``, stored in ``layout`` (None: as it is) so the row's Var is last,
    and in ``panel`` (``cache_read``'s: the dimension of the tile's rows and their count; None:
    not in panels)."""

    name: str
    rvar: str
    index: int
    layout: tuple[int, ...] | None
    panel: tuple[int, int] | None = None


def tile_reads(f: Func, var: str, last: str, exclude: str | None = None,
                rows: int = 1) -> list[Packed]:
    """The reads of GEMM-like reduction ``f`` (one reduction Var ``k``, two pure Vars or more)
    with ``k`` and pure Var ``var`` as plain indices of their own (no other index mentions
    either), none mentioning ``exclude``, and no boundary mode: each as a ``Packed`` whose
    layout puts index ``last`` (``var`` or ``k``) last, ``index`` counting the reads of its name
    in ``f``'s value, in panels of ``rows`` along ``var``'s dimension where ``rows`` > 1."""
    d = f.definition
    assert d is not None
    if len(d.rvars) != 1 or len(d.args) < 2:
        return []
    k = d.rvars[0].name
    seen: dict[str, int] = {}
    found: list[Packed] = []
    for a in walk(d.value):
        if not isinstance(a, Access):
            continue
        index = seen.get(a.name, 0)
        seen[a.name] = index + 1
        pos = {e.name: n for n, e in enumerate(a.indices) if isinstance(e, Var)}
        used = {v.name for e in a.indices for v in walk(e) if isinstance(v, Var)}
        if var not in pos or k not in pos or exclude in used or a.boundary is not None:
            continue
        others = [e for n, e in enumerate(a.indices) if n not in (pos[var], pos[k])]
        if any(v.name in (var, k) for e in others for v in walk(e) if isinstance(v, Var)):
            continue
        at = pos[k if last == "k" else var]
        layout = None if at == len(a.indices) - 1 else \
            tuple(n for n in range(len(a.indices)) if n != at) + (at,)
        found.append(Packed(a.name, k, index, layout, (pos[var], rows) if rows > 1 else None))
    return found


def packed_operands(f: Func, width: int = 1) -> list[Packed]:
    """The operand reads of a GEMM-like reduction that a packed register tile copies into
    contiguous panels: ``f`` has one reduction Var ``k``, and the read has ``k`` and ``f``'s
    innermost pure Var ``j`` as two of its indices (``B[k, j]`` of ``C[i, j] += A[i, k] *
    B[k, j]``; ``B[b, k, j]`` of a batched GEMM; ``A[j, k]`` of ``C[i, j] += A[i, k] * A[j, k]``,
    packed transposed). Each read is packed alone (``cache_read(..., index=)``): covariance's
    ``d[k, i] * d[k, j]`` packs the panel ``d[k, j]``, not the union of both tiles. With
    ``width`` > 1, stored as panels of ``width`` columns, ``k`` before the column in each
    (``B_local[j // width, k, j % width]``: BLIS's packed block of B, many panels in one copy);
    else with ``j`` last (one panel per copy)."""
    d = f.definition
    assert d is not None
    if not d.args:
        return []
    x = d.args[-1].name
    return tile_reads(f, x, last="k", rows=width) if width > 1 else tile_reads(f, x, "var")


def packed_operand(f: Func) -> Packed | None:
    """The first of ``packed_operands(f)``, or None."""
    found = packed_operands(f)
    return found[0] if found else None


def panel_dim(op: Packed) -> int:
    """The dimension of ``op``'s copy that counts its panels (``cache_read``'s ``panel``: the
    panelled dimension's place in the copy's ``layout``)."""
    assert op.panel is not None
    order = op.layout or tuple(range(op.panel[0] + 1))
    return order.index(op.panel[0])


def rows_straddle_lines(f: Func, row: str, extents: dict[str, int], line: int) -> bool:
    """Whether consecutive rows of ``f``'s output along Var ``row`` start at different offsets
    within a cache line of ``line`` bytes: ``f`` is row-major over its arguments, so the rows
    lie the extents of the arguments after ``row`` times the element size apart (float32
    N = 1100: 4400 bytes, not a multiple of 64). A register tile's row of whole vectors then
    spans one cache line more than it fills, and shares a line with the next tile's."""
    assert f.definition is not None
    args = [v.name for v in f.definition.args]
    stride = f.dtype.numpy.itemsize
    for a in args[args.index(row) + 1:]:
        stride *= extents[a]
    return stride % line != 0


def short_reduction(steps: int, vector_bytes: int) -> bool:
    """Whether a register tile of ``vector_bytes``-byte vectors whose reduction loop runs
    ``steps`` iterations (``kc``, or the whole reduction unsplit) is too short to hide the
    cache misses of its output tile's stores: at most ``SHORT_REDUCTION`` steps, with 512-bit
    vectors (a GEMM of small ``K`` writes C once; an AVX-512 tile's rows span four lines each,
    all missing in cache together). The packed tile then prefetches the next tile's rows of C
    (``heuristic``'s ``PREFETCH_TILE`` = 3), as BLIS's and OpenBLAS's micro-kernels prefetch C
    before the ``k`` loop.

    >>> short_reduction(64, 64), short_reduction(256, 64), short_reduction(64, 32)
    (True, False, False)
    """
    return steps <= SHORT_REDUCTION and vector_bytes >= 64


def read_of(f: Func, op: Packed) -> Access:
    """The read of ``f``'s definition that ``op`` copies: the ``op.index``-th of ``op.name``."""
    assert f.definition is not None
    return [a for a in walk(f.definition.value)
            if isinstance(a, Access) and a.name == op.name][op.index]


def panel_rows(f: Func, op: Packed) -> int | None:
    """The dimension of ``op``'s copy whose loop walks its tensor's rows a panel at a time:
    that of the reduction Var where the read's last index is ``f``'s innermost pure Var
    (``B[k, j]``: the copy reads a panel's width of contiguous elements from each row ``k``, the
    rows a row of B apart); None for a read contiguous along the reduction (``A[i, k]``, a
    transposed panel ``A[j, k]``), whose copy the hardware prefetchers follow."""
    d = f.definition
    assert d is not None
    a = read_of(f, op)
    last = a.indices[-1] if a.indices else None
    if not (isinstance(last, Var) and last.name == d.args[-1].name):
        return None
    at = next(n for n, e in enumerate(a.indices) if isinstance(e, Var) and e.name == op.rvar)
    return (op.layout or tuple(range(len(a.indices)))).index(at)


def far_reads(f: Func, extents: BoundExtents, cache: int, width: int
              ) -> dict[tuple[str, int], int]:
    """The rows ahead (``pack``'s ``far``), by ``(name, index)``, at which the copies of the
    panels of ``f`` (``packed_operands``), ``width`` columns wide, prefetch their tensor's
    rows: ``PANEL_PREFETCH`` lines in whole rows, for reads a row at a time (``panel_rows``)
    whose rows lie at least ``PAGE_BYTES`` apart (the read's extent along ``f``'s innermost Var
    times its element size, at least the tensor's row) and whose region read over ``f``'s loops
    is larger than ``cache`` bytes (the L2; a smaller one stays there between copies:
    doitgen's 160 x 160 ``C4``). Empty with ``PANEL_PREFETCH`` 0."""
    d = f.definition
    if not PANEL_PREFETCH or d is None or not d.args:
        return {}
    far = {}
    for op in packed_operands(f):
        a = read_of(f, op)
        ext = {v.name: extents.extent(f.name, v.name)
               for v in a.indices if isinstance(v, Var)}
        size = a.dtype.numpy.itemsize
        row, region = ext.get(d.args[-1].name, 0) * size, prod(ext.values()) * size
        if panel_rows(f, op) is not None and row >= PAGE_BYTES and region > cache:
            lines = -(-min(width, ext[d.args[-1].name]) * size // LINE_BYTES)
            far[op.name, op.index] = -(-PANEL_PREFETCH // lines)
    return far


def pack(s: Schedule, stage: Stage, operands: list[Packed], loop: str | list[str],
         far: Mapping[tuple[str, int], int] | None = None) -> dict[Packed, Stage]:
    """Copy each packed operand read of ``stage`` at its ``loop`` (``cache_read``); ``loop``:
    one loop for all, or one per operand. The copy of a read in ``far`` (``far_reads``: rows
    ahead by name and index) prefetches its tensor's rows that many ahead at its loop over the
    reduction Var (``panel_rows``). Returns each operand's copy stage."""
    f = s.pipeline.func(parse_stage_id(stage.func)[0])
    loops = [loop] * len(operands) if isinstance(loop, str) else loop
    done: dict[str, int] = {}
    copies: dict[Packed, Stage] = {}
    # in read order: a packed read no longer counts among its name's reads
    for op, at in sorted(zip(operands, loops), key=lambda p: (p[0].name, p[0].index)):
        copies[op] = s.cache_read(op.name, stage, at, index=op.index - done.get(op.name, 0),
                                  layout=op.layout, panel=op.panel)
        done[op.name] = done.get(op.name, 0) + 1
        ahead = (far or {}).get((op.name, op.index), 0)
        row = panel_rows(f, op) if ahead else None
        if row is not None:
            copies[op].prefetch(op.name, f"{copies[op].func}_d{row}", offset=ahead)
    return copies


def packer(f: Func, extents: BoundExtents, cache: int, width: int
           ) -> Callable[..., dict[Packed, Stage]]:
    """``pack`` whose copies of ``f``'s panels, ``width`` columns wide, prefetch their
    tensor's rows where ``far_reads`` (with ``extents`` and ``cache``, the L2's bytes) says."""
    return partial(pack, far=far_reads(f, extents, cache, width))


def row_block_reads(f: Func, row: str, split: bool, rows: int, panels: int = 2
                    ) -> list[Packed]:
    """The reads ``heuristic.row_operands`` copies as a packed tile's row block: indexed by the
    reduction Var and ``row``, not by the vector Var, stored with the reduction Var last, in
    panels of ``rows`` rows where ``rows`` > 1; with the reduction not ``split``, or over
    ``panels`` column panels of one (``ONE_PANEL_IN_PLACE``), only the transposed ones."""
    d = f.definition
    assert d is not None
    if not d.args:
        return []
    found = tile_reads(f, row, last="k", exclude=d.args[-1].name, rows=rows)
    whole = split and (panels > 1 or not ONE_PANEL_IN_PLACE)
    return found if whole else [p for p in found if p.layout is not None]


def row_var(f: Func, args: list[str]) -> str:
    """The pure Var whose split is unrolled as the register tile's rows: the innermost one (other
    than the vector Var ``args[-1]``) that no vector operand is indexed by, so each vector load is
    reused by every row and only a scalar is broadcast per row (GEMM ``C[i, j] += A[i, k] *
    B[k, j]``: ``i``, as B's row vector serves every ``i``; conv2d: the output channel ``co``,
    not the image row ``y``: ``pad[n, ci, y + ry, x + rx]`` differs per ``y``)."""
    d = f.definition
    assert d is not None
    x = args[-1]

    def names(a: Access) -> set[str]:
        return {n.name for i in a.indices for n in walk(i) if isinstance(n, Var)}

    vector_reads = [names(a) for a in walk(d.value) if isinstance(a, Access) and x in names(a)]
    for a in reversed(args[:-1]):
        if not any(a in r for r in vector_reads):
            return a
    return args[-2]


def condition_mentions(f: Func, var: str) -> bool:
    """Whether the condition of ``f``'s reduction (``RDom.where``) mentions the Var ``var``."""
    conds = f.definition.predicate if f.definition is not None else ()
    return any(isinstance(n, Var) and n.name == var for c in conds for n in walk(c))


def one_panel_in_l2(columns: int, width: int, column_bytes: int, cpu: CpuModel) -> bool:
    """Whether a packed tile ``width`` columns wide over ``columns`` columns, each of
    ``column_bytes`` of its packed operand, would copy one panel that is its operand whole
    (``ONE_PANEL_UNPACKED``), of at most ``cpu``'s L2 (of one core).

    >>> from tensorlang.autotuner.cpu_model import DESCRIBED
    >>> [one_panel_in_l2(n, 16, 4000, DESCRIBED["znver4"]) for n in (16, 17, 32)]
    [True, False, False]
    >>> one_panel_in_l2(16, 16, 80000, DESCRIBED["znver4"])  # 1.25 MiB
    False
    """
    return bool(ONE_PANEL_UNPACKED) and columns == width and columns * column_bytes <= cpu.l2.size
