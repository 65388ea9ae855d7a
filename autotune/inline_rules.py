"""The rule-based schedule's inlining measures: how large an expression inlining builds, and
how many times it computes each point of the inlined producer.

Inlining a pointwise Func into its readers saves its buffer's stores and loads and costs its
expression once per read. Two bounds keep that a gain (``docs/rule-based-schedule.md``, the
rules and the programs behind them): no Func's expression, with the inlined ones substituted,
grows past ``MAX_INLINE_NODES`` (Halide's stencil_chain: 5x5 stages inlined into each other
grow 25-fold per stage), and each point of the producer is computed at most
``MAX_INLINE_RECOMPUTE`` times, ``MAX_CHEAP_RECOMPUTE`` for an expression of at most
``CHEAP_INLINE_NODES`` nodes (Halide's unsharp: a 7-tap blur inlined into a 7-tap blur).
Both are computed from the algorithm's expressions, walked once per pipeline, without building
the inlined expressions. A ``compute_at`` placement is bounded likewise by the stores it
executes (``recompute_factor``, from the lowered nests).
"""

from __future__ import annotations

import functools
import math
from collections import Counter

from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, walk
from tensorlang.func import Func
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule

from .features import store_counts
from .workloads import BoundExtents

#: the largest expression (nodes, counted as a tree) that inlining may build in one Func
MAX_INLINE_NODES = 512
#: the most times inlining may compute each point of a producer whose expression is larger than
#: ``CHEAP_INLINE_NODES`` (a 7-tap blur inlined into a 7-tap blur computes it 7 times; a
#: per-pixel ratio inlined into a per-channel output, 3 times)
MAX_INLINE_RECOMPUTE = 2.0
#: a producer this small (nodes, as a tree) may be computed up to ``MAX_CHEAP_RECOMPUTE`` times
#: per point when inlined (a 3-tap blur into a 3-tap blur: memory traffic saved beats the adds)
CHEAP_INLINE_NODES = 24
MAX_CHEAP_RECOMPUTE = 4.0


def inlined_nodes(p: Pipeline, s: Schedule) -> int:
    """The largest expression, in nodes counted as a tree, of any Func that ``s`` does not
    inline, with every inlined Func it reads substituted (computed without building it)."""
    memo: dict[str, int] = {}
    counts, nodes = _access_counts(p), _node_counts(p)

    def size(f: Func) -> int:
        if f.name not in memo:
            total = nodes[f.name]
            for c in counts[f.name]:
                for name, reads in c.items():
                    st = s.states.get(name)
                    if st is not None and st.compute.kind == "inline":
                        total += reads * (size(p.func(name)) - 1)
            memo[f.name] = total
        return memo[f.name]

    return max((size(f) for f in p.funcs if s.states[f.name].compute.kind != "inline"),
               default=0)


def inline_recompute(p: Pipeline, s: Schedule, f: Func, extents: BoundExtents) -> float:
    """How many times each point of ``f`` would be computed if ``f`` were inlined: the
    evaluations of its expression over ``f``'s points. A Func that is not inlined evaluates its
    expression once per point of each definition (pure and reduction Vars; an update's RDom
    points); an inlined one once per read of it in each evaluation of its readers, so ``f`` is
    evaluated, for each reader, its reads there times that reader's evaluations (summed over
    several readers: gemver's ``A_hat`` read once per point by each of its two sums: 2).
    Readers are the algorithm's Funcs (a stage that rfactor or cache_read derived from one
    evaluates what it does); ``inf`` for an output."""

    def points(stage: str) -> int:
        ranges = extents.binding.ranges[stage]
        return math.prod(max(1, ext) for _, ext in ranges.values())

    def evaluations(g: Func, depth: int) -> float:
        if depth and s.states[g.name].compute.kind != "inline":
            return points(g.name)
        readers = algorithm_readers(p, g.name)
        if not readers or p.is_output(g) or depth > len(p.funcs):
            return float("inf")
        total = 0.0
        for reader in readers:
            reads = _reads_of(p, reader, None, g.name)
            total += reads * evaluations(reader, depth + 1) if reads else 0.0
            for u in reader.updates:  # an update is not inlined: its own points
                reads = _reads_of(p, reader, u.number, g.name)
                total += reads * points(f"{reader.name}.update({u.number})") if reads else 0.0
        return total

    return evaluations(f, 0) / points(f.name)


def algorithm_readers(p: Pipeline, name: str) -> list[Func]:
    """The algorithm's Funcs whose definitions read ``name`` (not the stages a schedule derives
    from them: an rfactor'd sum's intermediate reads what the sum did)."""
    return [r for r in p.funcs if any(c[name] for c in _access_counts(p)[r.name])]


def _reads_of(p: Pipeline, reader: Func, number: int | None, name: str) -> int:
    """How many reads of ``name`` the pure definition (``number`` None) or update ``number``
    of ``reader`` has."""
    return _access_counts(p)[reader.name][0 if number is None else number + 1][name]


@functools.lru_cache(maxsize=8)
def _node_counts(p: Pipeline) -> dict[str, int]:
    """Per Func of ``p``, the nodes of its definitions' expressions, counted as trees."""
    return {f.name: sum(1 for v in (f.definition.value,  # type: ignore[union-attr]
                                    *(u.value for u in f.updates)) for _ in walk(v))
            for f in p.funcs}


@functools.lru_cache(maxsize=8)
def _access_counts(p: Pipeline) -> dict[str, list[Counter]]:
    """Per Func of ``p``, the reads of each Func or input in its pure definition, then in each
    update (walked once per pipeline: the inlining rule asks for every pair)."""
    return {f.name: [Counter(a.name for a in walk(v) if isinstance(a, Access))
                     for v in (f.definition.value,  # type: ignore[union-attr]
                               *(u.value for u in f.updates))]
            for f in p.funcs}


def inline_pays(p: Pipeline, s: Schedule, f: Func, extents: BoundExtents) -> bool:
    """Whether inlining ``f`` computes each of its points few enough times: at most
    ``MAX_INLINE_RECOMPUTE``, or ``MAX_CHEAP_RECOMPUTE`` for an expression of at most
    ``CHEAP_INLINE_NODES`` nodes (``inline_recompute``)."""
    times = inline_recompute(p, s, f, extents)
    nodes = sum(1 for _ in walk(f.definition.value))  # type: ignore[union-attr]
    return times <= MAX_INLINE_RECOMPUTE or (times <= MAX_CHEAP_RECOMPUTE
                                             and nodes <= CHEAP_INLINE_NODES)


def recompute_factor(output: Func, f: Func, before: Schedule, after: Schedule,
                     sizes: dict[str, int]) -> float:
    """How many times more stores of ``f`` the lowered nest of ``after`` executes than that of
    ``before`` (where ``f`` is computed at root) at these sizes: 1.0 when a placement computes
    each point once, the number of host iterations when every iteration needs all of ``f``;
    ``inf`` when ``after`` does not lower."""
    try:
        now = store_counts(lower(output, after), sizes).get(f.name, 0.0)
    except ScheduleError:
        return float("inf")
    was = store_counts(lower(output, before), sizes).get(f.name, 0.0)
    return now / was if was else (1.0 if not now else float("inf"))
