"""Stages that run serially because their kernel's largest stage does: Amdahl's bound on what
their parallel loops can save, against the join every parallel region waits on.

A kernel whose largest stage (the most loop iterations, ``stage_points``) runs serially — a
time loop's sweep, whose dependences keep its loops in order (PolyBench's heat-3d copies its two
input arrays into one buffer, sweeps it twice per time step and copies the result out) — spends
most of its time on one thread whatever the other stages do. A small stage run in parallel there
saves at most half its own time on two threads, a few percent of the kernel, while its parallel
region ends only when every thread has arrived: on a machine whose other cores are sometimes
busy (a shared host taking a virtual CPU away for a while) one late thread stretches that
region, and with it the call, by as long as it is away. So the rule-based schedule
(``heuristic.heuristic_schedule``) runs such stages serially: those whose pure definition has at
most ``MINOR_SHARE`` of the serial stage's iterations. The search space keeps both choices
(``<F>.parallel``). See also: Amdahl, "Validity of the single processor approach to achieving
large scale computing capabilities" (AFIPS 1967).

A stage too small for one parallel region runs serially too: with fewer than
``rfactor_rules.MIN_PARALLEL_POINTS`` iterations, or, where each of its points reduces at least
a native vector's worth of terms (its time goes to multiply-adds, not stores), fewer than
``MIN_PARALLEL_VECTORS`` vectors of them (``few_vectors``): waking the pool's threads and
waiting for the last costs about as much as such a stage's work.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorlang.func import Func, stage_id
from tensorlang.schedule.ir import CONCURRENT
from tensorlang.schedule.schedule import Schedule

from .workloads import BoundExtents

#: the largest share of the iterations of a kernel's largest stage, where that stage runs
#: serially, that another stage's pure definition may have to run serially too (heat-3d: its
#: copies are 1.2% and 0.6% of its sweep's; docs/performance.md, "Serial copies around a serial
#: sweep"). 0: every stage as the rules make it, as before (for ``--against``)
MINOR_SHARE = 1 / 32

#: the fewest native vectors of iterations (``lanes`` each) a stage whose points each reduce at
#: least ``lanes`` terms needs to run in parallel (``few_vectors``): GEMMs up to 56^3 ran faster
#: serially on two threads of Ice Lake-SP, 64^3 even (docs/performance.md, "Small reductions
#: serially"). 0: off, as before (for ``--against``)
MIN_PARALLEL_VECTORS = 1 << 14


def few_vectors(f: Func, extents: BoundExtents, lanes: int) -> bool:
    """Whether ``f``'s pure definition reduces at least ``lanes`` terms per point (the product
    of its RVars' extents) and has fewer than ``MIN_PARALLEL_VECTORS * lanes`` iterations."""
    d = f.definition
    if d is None or not d.rvars or not MIN_PARALLEL_VECTORS:
        return False
    terms = 1
    for r in d.rvars:
        terms *= max(1, extents.extent(f.name, r.name))
    return terms >= lanes and stage_points(f, None, extents) < MIN_PARALLEL_VECTORS * lanes


def stage_points(f: Func, number: int | None, extents: BoundExtents) -> int:
    """Iterations of ``f``'s pure definition (``number`` None) or of its update ``number``, as
    the algorithm defines them (before any ``rfactor``): the product of the extents of its pure
    Vars and RVars at ``extents``' sizes (1 for an empty one)."""
    if number is None:
        d = f.definition
        assert d is not None
        stage, names = f.name, [*(v.name for v in d.args), *(r.name for r in d.rvars)]
    else:
        u = f.updates[number]
        stage, names = u.stage, [*u.pure, *(r.name for r in u.rvars)]
    points = 1
    for v in names:
        points *= max(1, extents.extent(stage, v))
    return points


def runs_parallel(s: Schedule, stage: str) -> bool:
    """Whether a loop of stage ``stage`` of ``s`` runs on several threads (or GPU lanes)."""
    return any(kind in CONCURRENT for kind in s.states[stage].kinds.values())


def minor_stages(s: Schedule, funcs: Sequence[Func], extents: BoundExtents) -> frozenset[str]:
    """The Funcs of ``funcs`` whose pure definition ``s`` runs in parallel though it has at most
    ``MINOR_SHARE`` of the iterations of the largest stage (pure or update definition), where
    ``s`` runs that one serially; empty where it runs in parallel, or with ``MINOR_SHARE`` 0.
    Only stages computed at root count: an inlined Func has no loops of its own, and one
    computed at a consumer's loop runs inside that loop, in parallel where it is."""
    root = [f for f in funcs if f.definition is not None and f.name in s.states
            and s.states[f.name].compute.kind == "root"]
    points = {stage_id(f.name, n) if n is not None else f.name: stage_points(f, n, extents)
              for f in root for n in (None, *(u.number for u in f.updates))}
    stages = [name for name in points if name in s.states]
    if not stages or MINOR_SHARE <= 0:
        return frozenset()
    most = max(points[name] for name in stages)
    if any(runs_parallel(s, name) for name in stages if points[name] == most):
        return frozenset()
    largest = next(name for name in stages if points[name] == most)
    return frozenset(f.name for f in funcs if f.name in points and f.name != largest
                     and runs_parallel(s, f.name)
                     and points[f.name] <= MINOR_SHARE * points[largest])
