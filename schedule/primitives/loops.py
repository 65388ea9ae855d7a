"""Loop primitives: split, tile, fuse, reorder — they change a stage's loops, not where it runs.

The rewrites themselves live with the stage state (``schedule/loops.py``: ``apply_split``,
``apply_fuse``, ``apply_reorder``); these primitives add their parameters, preconditions and
legality obligations. A reorder can run a recurrence backwards ("order"); a ShiftInwards tail
recomputes points ("recompute"); a fuse makes a parallel or vectorized outer loop also run its
inner loop's iterations at once ("parallel", "vectorize"); every loop rewrite can leave isl a
time map it cannot state ("unproven"), and a placement whose loop it consumed ("placement").

See also: Halide ``Func::split/tile/fuse/reorder``; TVM ``split/fuse/reorder``
(``src/s_tir/schedule/primitive/loop_transformation.cc``).
"""

from __future__ import annotations

from typing import Any

from ..loops import StageState, apply_fuse, apply_reorder, apply_split
from ..trace import Step, TailStrategy
from .base import Param, Primitive, refuse_shift_on_update, tail_of
from .registry import register

TAIL = Param("tail", "tail", required=False, default=TailStrategy.GuardWithIf.value, keyword=True)


@register
class Split(Primitive):
    """``split(loop, factor, tail)``: ``loop`` becomes ``loop.o`` and ``loop.i``."""

    name, family = "split", "loops"
    params = (Param("loop", "loop"), Param("factor", "factor"), TAIL)
    obligations = frozenset({"recompute", "unproven", "placement"})

    def check(self, sched, st: StageState, step: Step) -> None:
        refuse_shift_on_update(st, step, step.get("loop"), step.get("factor"))

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        return apply_split(st, step.get("loop"), step.get("factor"), tail_of(step), str(step))


@register
class Tile(Primitive):
    """``tile(x, y, fx, fy, tail)``: split both, order ``x.o, y.o, x.i, y.i``."""

    name, family = "tile", "loops"
    params = (Param("x", "loop"), Param("y", "loop"), Param("fx", "factor"),
              Param("fy", "factor"), TAIL)
    obligations = frozenset({"order", "parallel", "vectorize", "recompute", "unproven",
                             "placement"})

    def check(self, sched, st: StageState, step: Step) -> None:
        refuse_shift_on_update(st, step, step.get("x"), step.get("fx"))

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        what, tail = str(step), tail_of(step)
        xo, xi = apply_split(st, step.get("x"), step.get("fx"), tail, what)
        yo, yi = apply_split(st, step.get("y"), step.get("fy"), tail, what)
        apply_reorder(st, [xo, yo, xi, yi], what)
        return (xo, yo, xi, yi)


@register
class Fuse(Primitive):
    """``fuse(outer, inner)``: two adjacent loops become ``outer.inner.fused``."""

    name, family = "fuse", "loops"
    params = (Param("outer", "loop"), Param("inner", "loop"))
    # the fused loop keeps the outer one's kind: a parallel outer loop now also runs the inner
    # loop's iterations at once
    obligations = frozenset({"parallel", "vectorize", "recompute", "unproven", "placement"})

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        return apply_fuse(st, step.get("outer"), step.get("inner"), str(step))


@register
class Reorder(Primitive):
    """``reorder(*loops)``: the loops, outermost first, in the positions they hold together."""

    name, family = "reorder", "loops"
    params = (Param("loops", "loops"),)
    obligations = frozenset({"order", "parallel", "vectorize", "recompute", "unproven",
                             "placement"})

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        apply_reorder(st, list(step.get("loops")), str(step))
        return None

    def python_args(self, step: Step, schedule_name: str) -> list[str]:
        return [repr(lp) for lp in step.get("loops")]
