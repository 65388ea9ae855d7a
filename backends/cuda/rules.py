"""The rule-based GPU schedule: what ``tl.compile(F, "auto", target="cuda")`` uses when no
tuned kernel is cached, and where GPU tuning starts.

Rules, per Func from the output back to the inputs (Halide's "one thread per output pixel"
starting point, as in its GPU schedules and the GPU autoschedulers' initial states):

1. A pure Func other than an output whose definition reads at most one array element (a
   boundary condition, a cast, a pointwise map of one input) is inlined: recomputing it costs
   less than a round trip through GPU memory.
2. Every other stage is computed at root and its pure loops are mapped to the GPU: the two
   innermost ``y, x`` by ``gpu_tile(y, x, 8, 32)`` (blocks of 256 threads; 32 consecutive ``x``
   in a warp, so a row-major store is coalesced), any pure loops outside them fused into one
   loop mapped to ``blockIdx.z``; a stage with one pure loop by ``gpu_tile(x, 256)``. Reduction
   loops stay serial inside each thread.
3. A step that ``tl.check`` refuses (a pure loop of an update that carries a dependence) is not
   taken; a stage with no mappable loop runs in one thread.

No shared-memory staging or register tiling yet (``launches.py``): a starting point that runs
every algorithm correctly on the GPU, not a fast GEMM.

See also: Halide's ``gpu_tile`` schedules in ``apps/``; Anderson et al., "Efficient automatic
scheduling of imaging and vision pipelines for the GPU" (OOPSLA 2021).
"""

from __future__ import annotations

from typing import Callable, Sequence

from tensorlang.errors import ScheduleError
from tensorlang.expr import accesses
from tensorlang.func import Func, stage_id
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.schedule import Schedule

#: threads of a block for a 2-D tile (y, x) and for one pure loop
TILE_2D = (8, 32)
TILE_1D = 256


def _try(s: Schedule, apply: Callable[[Schedule], object]) -> Schedule:
    t = s.copy()
    try:
        apply(t)
    except ScheduleError:
        return s
    return t if t.check(realize=False).ok else s


def gpu_schedule(output: Func | Sequence[Func]) -> Schedule:
    """The rule-based GPU schedule of ``output`` (see the module docstring); proven legal."""
    p = Pipeline(output)
    s = Schedule(output)
    for f in reversed(p.funcs):
        d = f.definition
        assert d is not None
        if not p.is_output(f) and d.reduce_op is None and not f.updates \
                and len(accesses(d.value)) <= 1:
            t = _try(s, lambda t, f=f: t[f].compute_inline())
            if t is not s:
                s = t
                continue
        for stage in (f.name, *(stage_id(f.name, u.number) for u in f.updates)):
            s = _try(s, lambda t, st=stage: map_pure_loops(t, st))
    return s


def map_pure_loops(s: Schedule, stage: str, tile_2d: tuple[int, int] = TILE_2D,
                   tile_1d: int = TILE_1D) -> None:
    """Map the pure loops of ``stage`` to GPU blocks and threads (rule 2), in place: blocks of
    ``tile_2d`` (ty, tx) threads over the two innermost, or ``tile_1d`` over a single one.

    Raises:
        ScheduleError: a primitive does not apply (the caller keeps the schedule as it was).
    """
    st = s.states[stage]
    pure = [lp for lp in st.loops if not st.is_reduction_loop(lp)]
    if not pure:
        raise ScheduleError(f"{stage} has no pure loop to map")
    h = s[stage]
    if len(pure) == 1:
        h.gpu_tile(pure[0], tile_1d)
        return
    y, x = pure[-2], pure[-1]
    yo, xo, _, _ = h.gpu_tile(y, x, *tile_2d)
    outer = pure[:-2]
    if outer:
        fused = outer[0]
        for o in outer[1:]:
            fused = h.fuse(fused, o)
        h.gpu_blocks(fused, yo, xo)
