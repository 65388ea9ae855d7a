"""One pass over a matrix for a row reduction and a column reduction that read it at the same
indices (PolyBench bicg's ``q = A p`` and ``s = A^T r``; mvt's two sums; atax's ``tmp = A x``
and ``y = A^T tmp``, the column sums weighted by the row sums): each block of rows computes its
share of the row sums, then its partial row of the column sums, while the block is in L2, so the
matrix is read from memory once instead of twice (docs/language.md, "Several outputs and
compute_with").

The schedule, for a row reduction ``q[i] = sum_j A[i, j] p[j]`` and a column reduction
``s[j] = sum_i r[i] A[i, j]`` of an ``N x M`` matrix:

- ``q``: its reduction in vector lanes (``q_rf``, as ``rfactor_rules.rfactor_lanes``), rows in
  blocks of ``R`` (``i.o``, in parallel), a few rows a register tile (``TILE_ROWS``);
- ``s``: factored over the same blocks (``split(i, R)``, ``rfactor(s, i.o)``: one partial row
  per block, ``s_rf[j, b]``, stored row by row: ``reorder_storage(b, j)``), as many rows of
  the block per pass along the row, vectors along ``j``, computed with ``q_rf`` at its block
  loop (``compute_with``, the loops matched by position: ``b`` stands for ``i.o``);
- where ``s`` reads ``q`` (atax: ``r`` is ``q``), ``q_rf`` and ``q`` are computed at ``s_rf``'s
  block loop instead (``compute_at``: the block's row sums, then its share of the partial
  row), which needs ``q`` internal and read by ``s`` alone; a partial row then stands for a
  chunk of blocks, the chunks in parallel (``chunk_rows``: the fewest that share out over the
  threads), not for one block;
- ``s`` itself sums the partial rows in vectors along ``j``.

``R`` keeps a block within half the L2 (``cpu_model``), divides the rows into blocks without a
tail, each a whole number of tiles, and gives every thread a block (``block_rows``); a partial
row stands for at least ``MIN_BLOCK_ROWS`` rows (where no such block or chunk exists the pair
keeps its two nests). The pair is taken where the matrix is larger than the threads' L2s
together (smaller, both passes read it from cache anyway); the search space draws it as
``<s>.one_pass_<q>`` (``space.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from tensorlang.backends.llvm.runtime import num_threads
from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, Var, walk
from tensorlang.func import Func, parse_stage_id
from tensorlang.pipeline import Pipeline
from tensorlang.schedule import Schedule

from .cpu_model import CpuModel
from .workloads import BoundExtents

#: whether the rule-based schedule takes the one pass (0: each reduction its own nest)
ONE_PASS = 1
#: rows of a block that one register tile of ``q``'s row sums (and one pass of ``s`` along the
#: block's rows) may take, the first that gives the largest block preferred (``block_rows``)
TILE_ROWS = (8, 6, 4)
#: the fewest rows a partial row of the column sums may stand for: each is zeroed, updated and
#: summed again, traffic that grows as they shrink until it costs more than the second pass
#: over the matrix that the one pass saves (docs/performance.md)
MIN_BLOCK_ROWS = 8
#: whether a partial row of the column sums stands for a chunk of blocks, the fewest chunks that
#: share out over the threads (``chunk_rows``), where the row sums are computed at the blocks
#: (``compute_at``; ``compute_with`` shares no reduction loop); 0: one per block
CHUNKS = 1
#: the most work the busiest thread may take over the average in a share of chunks
CHUNK_BALANCE = 1.1


def _matrix_read(f: Func) -> tuple[str, bool] | None:
    """``(array, rows)`` where ``f`` is a sum over one RVar into one pure Var reading a 2-D array
    at exactly those two Vars once: ``rows`` when the pure Var is its first index (a row
    reduction), not when it is the second (a column reduction); else None."""
    d = f.definition
    if d is None or f.updates or len(d.args) != 1 or len(d.rvars) != 1 or d.predicate \
            or d.reduce_op != "sum":
        return None
    v, r = d.args[0].name, d.rvars[0].name
    hits = [a for a in walk(d.value) if isinstance(a, Access) and len(a.indices) == 2
            and all(isinstance(x, Var) for x in a.indices)
            and sorted(x.name for x in a.indices) == sorted((v, r)) and v != r]
    if len(hits) != 1:
        return None
    return hits[0].name, hits[0].indices[0].name == v  # type: ignore[attr-defined]


def _reads(f: Func, g: Func) -> bool:
    """Whether ``f``'s definitions read ``g``."""
    return any(x is g for x in f.producers)


def block_rows(n: int, most: int) -> tuple[int, int] | None:
    """``(R, tile rows)``: the largest block of at most ``most`` rows that divides the ``n`` rows
    and is a multiple of one of ``TILE_ROWS`` (a block loop without a tail: a tail would send
    the fused nest to its guarded version), or None.

    >>> block_rows(2100, 34), block_rows(2000, 32), block_rows(2003, 32)
    ((30, 6), (20, 4), None)
    """
    best = None
    for t in TILE_ROWS:
        r = max((r for r in range(t, most + 1, t) if n % r == 0), default=0)
        if r and (best is None or r > best[0]):
            best = (r, t)
    return best


def chunk_rows(n: int, block: int, threads: int) -> int:
    """Rows of a chunk (one partial row of the column sums, a parallel iteration): a whole
    number of ``block``-row blocks, the fewest chunks, at least one per thread, whose share over
    the ``threads`` gives the busiest thread at most ``CHUNK_BALANCE`` times the average; else
    (or without ``CHUNKS``) one block.

    >>> chunk_rows(2100, 30, 2), chunk_rows(1900, 20, 2), chunk_rows(2100, 30, 16)
    (1050, 100, 30)
    """
    blocks = n // block
    for c in range(threads, blocks + 1) if CHUNKS else ():
        if blocks % c == 0 and -(-c // threads) * threads <= CHUNK_BALANCE * c:
            return n // c
    return block


def one_pass_pairs(s: Schedule, p: Pipeline, extents: BoundExtents, cpu: CpuModel
                   ) -> list[tuple[Func, Func, int, int, int]]:
    """``(row reduction, column reduction, R, tile rows, chunk rows)`` for each pair the one pass
    applies to: root stages with no Func computed at their loops and no compute_with of their own,
    reading one array that neither computes, of more bytes than the threads' L2s, whose rows
    make blocks within half the L2 that share them out to the threads (``block_rows``); the
    row reduction reads neither, or the column reduction alone reads it and it is no output."""
    found: list[tuple[Func, Func, int, int, int]] = []
    taken: set[str] = set()
    placed = {st.compute.func for st in s.states.values() if st.compute.kind == "at"}
    fused = {n for n, st in s.states.items() if st.fused is not None} | {
        st.fused.func for st in s.states.values() if st.fused is not None}

    def free(f: Func) -> bool:
        st = s.states[f.name]
        return (st.compute.kind == "root" and f.name not in taken
                and not {f.name, f"{f.name}_rf"} & (placed | fused))

    def pair(q: Func, g: Func) -> bool:  # (compute_with, or q computed at g's blocks)
        if _reads(q, g):
            return False
        return not _reads(g, q) or (
            not p.is_output(q) and not any(_reads(f, q) for f in p.funcs if f is not g))

    reads = {f.name: _matrix_read(f) for f in p.funcs}
    for q in p.funcs:
        rq = reads[q.name]
        if rq is None or not rq[1] or not free(q):
            continue
        for g in p.funcs:
            rg = reads[g.name]
            if rg is None or rg[1] or rg[0] != rq[0] or g is q or not free(g):
                continue
            if rq[0] in (q.name, g.name) or q.dtype != g.dtype or not pair(q, g):
                continue
            qd, gd = q.definition, g.definition
            n, m = extents.extent(q.name, qd.args[0].name), extents.extent(q.name, qd.rvars[0].name)
            if (extents.extent(g.name, gd.args[0].name), extents.extent(g.name, gd.rvars[0].name)
                    ) != (m, n):
                continue
            row = m * q.dtype.numpy.itemsize
            if n * row <= cpu.l2.size * num_threads():
                continue
            blocking = block_rows(n, min(cpu.l2.size // 2 // row, n // num_threads()))
            if blocking is None:
                continue
            # (compute_with shares pure loops only: a chunk's blocks are a reduction loop)
            chunk = chunk_rows(n, blocking[0], num_threads()) if _reads(g, q) else blocking[0]
            if chunk < MIN_BLOCK_ROWS:
                continue
            found.append((q, g, *blocking, chunk))
            taken |= {q.name, g.name}
            break
    return found


def one_pass_stages(s: Schedule, q: Func, g: Func, block: int, rows: int, lanes: int,
                    chunk: int | None = None) -> None:
    """Schedule ``q`` (row reduction) and ``g`` (column reduction) in one pass over their
    matrix in blocks of ``block`` rows, ``rows`` rows a tile, one partial row of ``g`` per
    ``chunk`` rows (a multiple of ``block``; default ``block``), the chunks in parallel (the
    module's recipe), on ``s`` where neither has steps; ``q`` computed at ``g``'s blocks where
    ``g`` reads it.

    Raises:
        ScheduleError: a step does not apply, or chunks of several blocks where ``g`` does not
            read ``q`` (``compute_with``)."""
    chunk = chunk or block
    par = num_threads() > 1
    feeds = _reads(g, q)
    s[q].split(q.definition.rvars[0].name, lanes)  # type: ignore[union-attr]
    qrf = s.rfactor(q, f"{q.definition.rvars[0].name}.i")  # type: ignore[union-attr]
    pure, lane, red = s.states[qrf.func].loops
    if feeds:  # (the block's rows only, inside the block loop)
        qrf.split(pure, rows)
        qrf.reorder(f"{pure}.o", red, f"{pure}.i", lane)
        qrf.unroll(f"{pure}.i").vectorize(lane)
    elif chunk != block:  # (the blocks of a chunk would be a shared reduction loop)
        raise ScheduleError(f"compute_with shares pure loops only: {g.name}'s partial rows "
                            f"stand for one block each, not for chunks of {chunk} rows")
    else:
        qrf.split(pure, block)
        qrf.split(f"{pure}.i", rows)
        qrf.reorder(f"{pure}.o", f"{pure}.i.o", red, f"{pure}.i.i", lane)
        qrf.unroll(f"{pure}.i.i").vectorize(lane)
    s[g].split(g.definition.rvars[0].name, chunk)  # type: ignore[union-attr]
    grf = s.rfactor(g, f"{g.definition.rvars[0].name}.o")  # type: ignore[union-attr]
    j, b, inner = s.states[grf.func].loops
    blocks = [b]
    if chunk != block:
        grf.split(inner, block)
        blocks.append(f"{inner}.o")
        inner = f"{inner}.i"
    grf.split(inner, rows)
    grf.split(j, lanes)
    grf.reorder(*blocks, f"{inner}.o", f"{j}.o", f"{inner}.i", f"{j}.i")
    grf.unroll(f"{inner}.i").vectorize(f"{j}.i")
    if par:
        grf.parallel(b)
    if feeds:
        s[q].compute_at(grf, blocks[-1])
        qrf.compute_at(grf, blocks[-1])
    else:
        if par:
            qrf.parallel(f"{pure}.o")
        grf.compute_with(qrf, f"{pure}.o")
    grf.reorder_storage(b, j)
    j, r = s.states[g.name].loops
    s[g].split(j, lanes)
    s[g].reorder(r, f"{j}.o", f"{j}.i")
    s[g].vectorize(f"{j}.i")


def one_pass(s: Schedule, p: Pipeline, extents: BoundExtents, cpu: CpuModel,
             lanes: Callable[[Func], int], accept: Callable[[Schedule], bool],
             take: Callable[[Func, Func], bool] | None = None) -> Schedule:
    """``s`` with each pair of ``one_pass_pairs`` that ``take(column, row)`` chooses (default:
    ``ONE_PASS``) scheduled in one pass: ``s`` replayed without the pair's steps, then
    ``one_pass_stages``; kept where it applies, is proven legal and ``accept`` says so (the
    rule-based schedule: it lowers)."""
    for q, g, block, rows, chunk in one_pass_pairs(s, p, extents, cpu):
        if not (take(g, q) if take is not None else ONE_PASS):
            continue
        mine = {q.name, g.name, f"{q.name}_rf", f"{g.name}_rf"}
        t = Schedule(s.output)
        try:
            for step in s.steps:
                if parse_stage_id(step.func)[0] not in mine:
                    t.apply(step)
            one_pass_stages(t, q, g, block, rows, lanes(q), chunk)
        except ScheduleError:
            continue
        if t.check(realize=False).ok and accept(t):
            s = t
    return s
