"""Loop-kind primitives: unroll, vectorize, parallel, serial — how a loop runs, not which loops
exist.

With a factor each first splits the loop (``parallel`` marks the outer part, the others the inner
part). ``vectorize`` and ``parallel`` oblige legality to prove that no dependence is carried by
the loop (``schedule/legality/check.py``); a parallel loop also must not sit between a Func's
storage and its computation ("placement"). ``unroll`` changes no order and obliges nothing but
what its split does; ``serial`` obliges nothing.

See also: Halide ``Func::unroll/vectorize/parallel/serial``; TVM ``unroll/vectorize/parallel``
(``src/s_tir/schedule/primitive/for_kind.cc``).
"""

from __future__ import annotations

from typing import Any

from ..ir import ForKind
from ..loops import StageState, apply_split
from ..trace import Step
from .base import Param, Primitive, tail_of
from .loops import TAIL
from .registry import register

_SPLIT = frozenset({"recompute", "unproven", "placement"})


class _LoopKind(Primitive):
    family = "loop kinds"
    params = (Param("loop", "loop"), Param("factor", "factor", required=False), TAIL)
    kind: ForKind
    #: which part of the split the kind goes to
    part: str = "inner"

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        what = str(step)
        loop = st.resolve(step.get("loop"), what)
        result = None
        if step.get("factor") is not None:
            outer, inner = apply_split(st, loop, step.get("factor"), tail_of(step), what)
            loop = result = outer if self.part == "outer" else inner
        st.kinds[loop] = self.kind
        return result


@register
class Unroll(_LoopKind):
    """``unroll(loop, factor=None, tail)``: replicate the loop body."""

    name, kind = "unroll", ForKind.UNROLLED
    # an unrolled loop needs a constant extent, known only after bounds inference ("realize")
    obligations = _SPLIT | {"realize"}


@register
class Vectorize(_LoopKind):
    """``vectorize(loop, width=None, tail)``: run the loop as SIMD lanes."""

    name, kind = "vectorize", ForKind.VECTORIZED
    obligations = _SPLIT | {"vectorize"}


@register
class Parallel(_LoopKind):
    """``parallel(loop, factor=None, tail)``: run the loop's iterations on the thread pool."""

    name, kind, part = "parallel", ForKind.PARALLEL, "outer"
    obligations = _SPLIT | {"parallel"}


@register
class Serial(_LoopKind):
    """``serial(loop)``: run the loop in order on one thread (the default kind; undoes
    ``parallel``, ``vectorize`` or ``unroll``, e.g. on a loop of the rule-based schedule)."""

    name, kind = "serial", ForKind.SERIAL
    params = (Param("loop", "loop"),)
    # a serial loop runs every iteration in order: it carries any dependence the way the
    # default loop nest does, and shares no buffer between threads
    obligations = frozenset()
