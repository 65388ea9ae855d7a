"""Lowering: algorithm (and, later, schedule) to loop-nest IR, as a flat list of named passes.

Reading this file tells the whole story (Halide ``src/Lower.cpp``):

1. ``realize``  — the loop nest of every Func where the schedule puts it (root, inline, at a
   consumer loop, with bounds inference), its loops split/fused/reordered and their kinds set,
   boundary conditions as clamped loads, intermediates allocated (``schedule/realize.py``);
2. ``simplify`` — integer constant folding and identities (``schedule/simplify.py``);
3. ``check_loops`` — refuse unrolled loops without a constant extent;
4. ``promote_accumulators`` — a reduction's register tile accumulates in a local buffer that
   LLVM keeps in registers (``schedule/promote.py``);
4a. ``forward_initialisations`` — a register tile right after its cells' initialisation starts
   from the initial value instead of reading ``C`` back, and the initialisation's stores go
   (``schedule/forward_init.py``);
4b. ``version_live_vectors`` — the loop around a register tile whose last vectors may be wholly
   dead (the last column panel) is versioned on how many are live (``schedule/live_vectors.py``);
4c. ``widen_tile_tails`` — a masked vector loop of a register tile's update runs whole vectors
   where its loads cover the dead lanes (``schedule/tile_tails.py``);
5. ``reduce_update_cells`` — an ``atomic()`` update's innermost loop that accumulates into one
   cell, split where a ``where`` on its variable changes, runs as a reduction in a register
   (``schedule/cell_reduction.py``);
6. ``hoist_update_reads`` — an update's innermost loop that reads the buffer it stores to at a
   cell fixed over the loop is split around the iteration that writes that cell, and the read
   loaded once per range (``schedule/invariant_reads.py``);
7. ``hoist_invariants`` — loop-invariant index arithmetic computed once per loop, shared between
   equal expressions (``schedule/hoist.py``).

Set ``TENSORLANG_DUMP=1`` to print the loop nest after each pass (on standard error).
"""

from __future__ import annotations

import os
import sys
from typing import Sequence
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable

from tensorlang.affine import const_value
from tensorlang.errors import ScheduleError
from tensorlang.func import Func
from tensorlang.pipeline import Pipeline

from .cell_reduction import cell_switches, reduce_update_cells
from .hoist import hoist_invariants
from .invariant_reads import hoist_update_reads
from .ir import MAX_UNROLL, For, ForKind, LoweredFunc, ProducerConsumer, map_stmt
from .promote import promote_accumulators, promoting
from .fold_init import folding
from .forward_init import forward_initialisations, forwarding
from .realize import lowering_switches, realize
from .simplify import range_folding, simplify
from .live_vectors import version_live_vectors, versioning
from .tile_tails import widen_tile_tails, widening

if TYPE_CHECKING:
    from .schedule import Schedule


def check_loops(f: LoweredFunc) -> LoweredFunc:
    """Refuse what codegen cannot honour: an unrolled loop without a constant extent (known only
    after bounds inference, so not when the unroll step is applied)."""

    def go(s, func: str):
        if isinstance(s, ProducerConsumer):
            func = s.func
        if isinstance(s, For) and s.kind is ForKind.UNROLLED:
            n = const_value(s.extent)
            if n is None or n > MAX_UNROLL:
                raise ScheduleError.in_schedule(
                    func, f"cannot unroll loop {s.var}: its extent {s.extent} is not a constant "
                    f"of at most {MAX_UNROLL}; split it by a constant factor and unroll the "
                    f"inner loop", loop=s.var)
        return map_stmt(s, lambda c: go(c, func), lambda e: e)

    go(f.body, f.name)
    return f


PASSES: list[tuple[str, Callable[[LoweredFunc], LoweredFunc]]] = [
    ("simplify", simplify),
    ("check_loops", check_loops),
    ("promote_accumulators", promote_accumulators),
    ("forward_initialisations", forward_initialisations),
    ("version_live_vectors", version_live_vectors),
    ("widen_tile_tails", widen_tile_tails),
    ("reduce_update_cells", reduce_update_cells),
    ("hoist_update_reads", hoist_update_reads),
    ("hoist_invariants", hoist_invariants),
]


def lower(output: Func | Sequence[Func] | Pipeline,
          schedule: Schedule | None = None) -> LoweredFunc:
    """Lower the algorithm computing ``output`` under ``schedule`` (default: every Func at root,
    loops in definition order) to loop-nest IR.

    Raises:
        DefinitionError: ``output`` is not a defined Func, or the pipeline has name clashes.
        ScheduleError: the schedule is for another algorithm or cannot be realized.
    """
    p = output if isinstance(output, Pipeline) else Pipeline(output)
    states = None
    view = None
    if schedule is not None:
        if schedule.pipeline.workload_key() != p.workload_key():
            raise ScheduleError(f"the schedule was made for {schedule.pipeline.name}'s algorithm, "
                                f"not this one; build it with tl.Schedule({p.name})")
        p = schedule.pipeline
        states = schedule.states
        view = schedule.view
    dump = os.environ.get("TENSORLANG_DUMP", "") not in ("", "0")
    # (a benchmark switches the passes' switches between two lowerings)
    key = (p.workload_key(), None if schedule is None else schedule.to_json(),
           folding(), lowering_switches(), range_folding(), widening(), versioning(), promoting(),
           cell_switches(), forwarding())
    if not dump and key in _RECENT:
        _RECENT.move_to_end(key)
        return _RECENT[key]
    f = realize(view or p, states)
    if dump:
        print(f"--- after realize ---\n{f}", file=sys.stderr)
    for name, run in PASSES:
        f = run(f)
        if dump:
            print(f"--- after {name} ---\n{f}", file=sys.stderr)
    _RECENT[key] = f
    if len(_RECENT) > RECENT_LOWERINGS:
        _RECENT.popitem(last=False)
    return f


#: lowered kernels kept per process, by (workload key, schedule trace): the IR is immutable and
#: lowering is deterministic, so ``tl.compile(F, "auto")`` reuses the heuristic's last lowering
RECENT_LOWERINGS = 8
_RECENT: OrderedDict[tuple, LoweredFunc] = OrderedDict()
