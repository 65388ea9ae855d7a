"""Hint primitives: prefetch — how memory is brought in, not what is computed or in which order.

``prefetch(tensor, loop, offset)`` adds, at the top of each iteration of one of the stage's
loops, prefetches of the box of ``tensor`` that iteration ``loop + offset`` touches
(``schedule/prefetch.py`` lowers it). A prefetch changes no value and no order: no legality
obligation. The GPU backend ignores it.

See also: Halide ``Func::prefetch``; TVM ``Schedule.prefetch``.
"""

from __future__ import annotations

from typing import Any

from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, walk
from tensorlang.func import parse_stage_id

from ..loops import StageState
from ..trace import Step
from .base import Param, Primitive
from .registry import register


@register
class Prefetch(Primitive):
    """``prefetch(tensor, loop, offset=1)``: at the top of each iteration of ``loop``, fetch into
    the cache what iteration ``loop + offset`` reads of ``tensor`` (or writes, for the stage's
    own Func)."""

    name, family = "prefetch", "hints"
    params = (Param("tensor", "tensor"), Param("loop", "loop"),
              Param("offset", "index", required=False, default=1, keyword=True))

    def check(self, sched, st: StageState, step: Step) -> None:
        st.resolve(step.get("loop"), str(step))
        tensor = step.get("tensor")
        base, number = parse_stage_id(st.func)
        if number is None:
            reads = sched.view.reads(base)
        else:
            u = sched.view.func(base).updates[number]
            reads = list(dict.fromkeys(a.name for a in walk(u.value) if isinstance(a, Access)))
        if tensor != base and tensor not in reads:
            raise ScheduleError.in_schedule(
                st.func, f"prefetch: {st.func} neither reads nor writes {tensor} (it reads "
                f"{', '.join(reads) or 'nothing'})", step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        offset = step.get("offset")
        st.prefetches.append((step.get("tensor"), step.get("loop"),
                              1 if offset is None else offset))
        return None
