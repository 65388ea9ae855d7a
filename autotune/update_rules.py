"""The rule-based schedule's forms of an update definition as written (its loop order kept):
its innermost loop vectorized and one of its loops in parallel (``update_stage``, over the
candidates of ``update_parallel_loops``), or a column scan in parallel chunks (``scan_stage``,
Halide's schedule for a scan along a non-contiguous dimension). ``heuristic._schedule_update``
tries them after the loop orders of ``update_order``; the search space's update forms
(``space.SearchSpace._update_forms``) are the same functions, so the rule stays a point of it.
The legality check (isl) refuses what an update's dependences forbid."""

from __future__ import annotations

from tensorlang.errors import ScheduleError
from tensorlang.func import Func
from tensorlang.schedule.schedule import Schedule

from .rfactor_rules import MIN_PARALLEL_POINTS
from .workloads import BoundExtents

#: the fewest native vectors an update's innermost loop must span to be vectorized (a shorter
#: one is left to LLVM's own loop vectorizer, as in the default schedule): inside a time loop
#: every row pays the vector loop's start and its tail (PolyBench heat-3d's 18- and 38-point
#: rows; docs/rule-based-schedule.md)
UPDATE_MIN_VECTORS = 8
#: ... and the fewest bytes (``update_stage``): 8 vectors of AVX-512, 16 of AVX2, so heat-3d's
#: 38-point float64 rows are left to LLVM on AVX2 too, where four lanes made 9.5 vectors and the
#: explicit vector loop ran slower than the default schedule (docs/rule-based-schedule.md)
UPDATE_MIN_BYTES = 512
#: the fewest points of a parallel region that a serial loop around it starts again and again
#: (an update's sweep inside its time loop): every start waits for all threads, and on a
#: machine whose other cores are sometimes busy one late thread delays each of them
#: (PolyBench heat-3d's sweeps; docs/rule-based-schedule.md has the measurements)
MIN_REPEATED_PARALLEL_POINTS = 1 << 17
#: vectors of a scan's contiguous pure Var per chunk (the chunks run in parallel, the scan's
#: reduction loops inside each, the chunk's vectors innermost)
SCAN_CHUNK_VECTORS = 4


def update_parallel_loops(s: Schedule, f: Func, number: int, extents: BoundExtents) -> list[str]:
    """Loops of update ``number`` of ``f`` (outermost first) that could run in parallel with
    enough work: at least two iterations and ``MIN_PARALLEL_POINTS`` points in one iteration
    of the loops outside them (one parallel region), ``MIN_REPEATED_PARALLEL_POINTS`` where
    those loops start the region more than once (a time step's sweep)."""
    name = f"{f.name}.update({number})"
    loops = [ref.name for ref in s[f].update(number).loops]
    ext = {n: extents.extent(name, n) for n in loops}
    out, points, repeats = [], 1, 1
    for n in loops:
        points *= ext[n]
    for n in loops:
        least = MIN_PARALLEL_POINTS if repeats == 1 else MIN_REPEATED_PARALLEL_POINTS
        if ext[n] >= 2 and points >= least:
            out.append(n)
        points //= max(1, ext[n])
        repeats *= max(1, ext[n])
    return out


def update_stage(s: Schedule, f: Func, number: int, vector: bool, parallel: str | None,
                  extents: BoundExtents, lanes: int) -> None:
    """Update ``number`` of ``f`` with its innermost loop vectorized (``vector``: where it
    spans ``UPDATE_MIN_VECTORS`` vectors and ``UPDATE_MIN_BYTES`` bytes, else ``ScheduleError``)
    and loop ``parallel`` in parallel; the legality check refuses what the update's dependences
    forbid."""
    st = s[f].update(number)
    name = f"{f.name}.update({number})"
    inner = st.loops[-1].name
    if vector:
        points = extents.extent(name, inner)
        if points < UPDATE_MIN_VECTORS * lanes or points * f.dtype.itemsize < UPDATE_MIN_BYTES:
            raise ScheduleError(f"{name}: innermost loop too short to vectorize")
        st.vectorize(inner, lanes, tail="GuardWithIf")
    if parallel is not None:
        st.parallel(f"{parallel}.o" if parallel == inner and vector else parallel)


def scan_stage(s: Schedule, f: Func, number: int, extents: BoundExtents, lanes: int,
                nested: bool) -> None:
    """A scan along a non-contiguous dimension (``Z[r, j] = Z[r, j] + b * Z[r - 1, j]``, the
    pure Var ``j`` contiguous): ``j`` in chunks of ``SCAN_CHUNK_VECTORS`` vectors, the chunks in
    parallel outermost, the reduction loops inside, each chunk's vectors innermost (Halide's
    schedule for a column scan). Refused (ScheduleError) where it does not apply."""
    u = f.updates[number]
    st = s[f].update(number)
    name = f"{f.name}.update({number})"
    last = f.definition.args[-1].name  # type: ignore[union-attr]
    loops = [ref.name for ref in st.loops]
    if last not in u.pure or loops[-1] == last:
        raise ScheduleError(f"{name}: no contiguous pure Var outside the reduction loops")
    chunk = SCAN_CHUNK_VECTORS * lanes
    if extents.extent(name, last) < 2 * chunk:
        raise ScheduleError(f"{name}: {last} too short to split into chunks")
    po, pi = st.split(last, chunk, tail="GuardWithIf")
    st.reorder(po.name, *[n for n in loops if n != last], pi.name)
    st.vectorize(pi, lanes).unroll(f"{pi.name}.o")
    if not nested:
        st.parallel(po)
