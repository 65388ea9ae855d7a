"""Loop-kind primitives: unroll, vectorize, parallel, serial, and the GPU mappings gpu_blocks,
gpu_threads, gpu_tile — how a loop runs, not which loops exist; and ``atomic``, how an update's
accumulation runs.

With a factor each first splits the loop (``parallel`` marks the outer part, the others the inner
part). ``vectorize`` and ``parallel`` oblige legality to prove that no dependence is carried by
the loop (``schedule/legality/check.py``); a parallel loop also must not sit between a Func's
storage and its computation ("placement"). ``unroll`` changes no order and obliges nothing but
what its split does; ``serial`` obliges nothing.

``gpu_blocks`` / ``gpu_threads`` make loops the blocks of a GPU grid / the threads of a block
(``x`` is the innermost loop named, as in Halide); like ``parallel`` they oblige legality to
prove that no dependence is carried by them. ``gpu_tile`` splits, reorders and maps in one step.
The CUDA backend (``backends/cuda``) decides which loop nests are kernels and checks the shape
of the mapping (block loops outermost, then thread loops, at most three of each).

See also: Halide ``Func::unroll/vectorize/parallel/serial/gpu_blocks/gpu_threads/gpu_tile``;
TVM ``unroll/vectorize/parallel/bind`` (``src/s_tir/schedule/primitive/for_kind.cc``).
"""

from __future__ import annotations

from typing import Any

from tensorlang.errors import ScheduleError

from ..ir import ForKind
from ..loops import StageState, apply_reorder, apply_split
from ..trace import Step
from .base import Param, Primitive, refuse_shift_on_update, tail_of
from .loops import TAIL, Tile
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


@register
class Atomic(Primitive):
    """``atomic()`` on an update stage: its accumulation into a cell may be reassociated
    (Halide's ``Stage::atomic``). Where the update's innermost loop accumulates into one cell no
    read of the loop touches — proven when lowering — the loop then runs as a reduction in a
    register (``schedule/cell_reduction.py``). Changes no loop order: obliges nothing."""

    name, family = "atomic", "loop kinds"
    obligations = frozenset()

    def check(self, sched, st: StageState, step: Step) -> None:
        if st.update is None:
            raise ScheduleError.in_schedule(
                st.func, f"atomic() applies to an update definition's stage, and {st.func} is a "
                f"pure definition (its reductions are reassociable already); use "
                f"s[{st.func!r}].update(n).atomic()", step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        st.atomic = True
        return None


class _GPULoops(Primitive):
    family = "loop kinds"
    params = (Param("loops", "loops"),)
    obligations = frozenset({"parallel"})
    kind: ForKind

    def check(self, sched, st: StageState, step: Step) -> None:
        loops = step.get("loops")
        if len(loops) > 3:
            raise ScheduleError.in_schedule(
                st.func, f"{self.name} maps at most 3 loops (x, y, z), got {len(loops)}; fuse "
                f"some of them first", step)
        if len(set(loops)) != len(loops):
            raise ScheduleError.in_schedule(st.func, f"{self.name} names a loop twice", step)

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        for name in step.get("loops"):
            st.kinds[st.resolve(name, str(step))] = self.kind
        return None

    def python_args(self, step: Step, schedule_name: str) -> list[str]:
        return [repr(lp) for lp in step.get("loops")]


@register
class GPUBlocks(_GPULoops):
    """``gpu_blocks(*loops)``: the loops' iterations become the blocks of the GPU grid (the
    last loop named is ``blockIdx.x``; Halide names them innermost first, we outermost first,
    as ``reorder`` does)."""

    name, kind = "gpu_blocks", ForKind.GPU_BLOCK


@register
class GPUThreads(_GPULoops):
    """``gpu_threads(*loops)``: the loops' iterations become the threads of one block (the last
    loop named is ``threadIdx.x``)."""

    name, kind = "gpu_threads", ForKind.GPU_THREAD


@register
class GPUTile(Primitive):
    """``gpu_tile(x, y, fx, fy, tail)``: tile ``x`` by ``fx`` and ``y`` by ``fy``, order
    ``x.o, y.o, x.i, y.i`` and map the outer loops to blocks, the inner ones to threads
    (``fx * fy`` threads a block). With ``y`` left out (``gpu_tile(x, fx)``): one dimension."""

    name, family = "gpu_tile", "loop kinds"
    params = (Param("x", "loop"), Param("fx", "factor"), Param("y", "loop", required=False),
              Param("fy", "factor", required=False), TAIL)
    obligations = Tile.obligations

    def check(self, sched, st: StageState, step: Step) -> None:
        if (step.get("y") is None) != (step.get("fy") is None):
            raise ScheduleError.in_schedule(
                st.func, "gpu_tile takes both y and its factor fy, or neither", step)
        refuse_shift_on_update(st, step, step.get("x"), step.get("fx"))

    def rewrite(self, sched, st: StageState, step: Step) -> Any:
        what, tail = str(step), tail_of(step)
        xo, xi = apply_split(st, step.get("x"), step.get("fx"), tail, what)
        if step.get("y") is None:
            st.kinds[xo], st.kinds[xi] = ForKind.GPU_BLOCK, ForKind.GPU_THREAD
            return (xo, xi)
        yo, yi = apply_split(st, step.get("y"), step.get("fy"), tail, what)
        apply_reorder(st, [xo, yo, xi, yi], what)
        for loop, kind in ((xo, ForKind.GPU_BLOCK), (yo, ForKind.GPU_BLOCK),
                           (xi, ForKind.GPU_THREAD), (yi, ForKind.GPU_THREAD)):
            st.kinds[loop] = kind
        return (xo, yo, xi, yi)

    def python_args(self, step: Step, schedule_name: str) -> list[str]:
        out = [repr(step.get("x"))]
        if step.get("y") is not None:
            out.append(repr(step.get("y")))
        out.append(repr(step.get("fx")))
        if step.get("fy") is not None:
            out.append(repr(step.get("fy")))
        if step.get("tail") not in (None, TAIL.default):
            out.append(f"tail={step.get('tail')!r}")
        return out
