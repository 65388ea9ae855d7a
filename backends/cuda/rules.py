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
3. A root GEMM-like stage (two pure loops, one reduction loop: ``C[i, j] = sum_k ...``) is
   the textbook GPU GEMM instead (``staged_gemm``; NVIDIA's CUDA C++ Programming Guide, "Shared
   Memory"; Volkov and Demmel, SC 2008, for register tiles): blocks of ``GEMM_THREADS``
   threads, each computing ``GEMM_REGS x GEMM_REGS`` outputs (a 64 x 64 tile per block), the
   reduction in blocks of ``GEMM_KBLOCK`` whose tiles of the operands the threads stage in
   shared memory, each thread's outputs kept in its registers across them
   (``cache_write(..., scope="local")``). The sizes are the field's usual starting point, not
   measured on a GPU here.
4. A step that ``tl.check`` refuses (a pure loop of an update that carries a dependence) is not
   taken; a stage with no mappable loop runs in one thread.

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
#: rule 3's GEMM: threads of a block (y, x), outputs per thread along each pure loop, and the
#: reduction block staged in shared memory per step
GEMM_THREADS = (16, 16)
GEMM_REGS = 4
GEMM_KBLOCK = 16


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
        if not f.updates and _gemm_like(s, f.name):
            t = _try(s, lambda t, f=f: staged_gemm(t, f.name, GEMM_THREADS, GEMM_KBLOCK, True,
                                                   GEMM_REGS, registers=True))
            if t is not s:
                s = t
                continue
        for stage in (f.name, *(stage_id(f.name, u.number) for u in f.updates)):
            s = _try(s, lambda t, st=stage: map_pure_loops(t, st))
    return s


def _gemm_like(s: Schedule, name: str) -> bool:
    """Whether stage ``name`` is computed at root with two pure loops and one reduction loop
    (rule 3)."""
    st = s.states[name]
    red = [lp for lp in st.loops if st.is_reduction_loop(lp)]
    return st.compute.kind == "root" and len(red) == 1 and len(st.loops) == 3


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


def tile_spec(spec: str) -> tuple[int, int]:
    """``"ty x tx"`` (the search space's block shapes, ``"8x32"``) as ``(ty, tx)``."""
    ty, tx = spec.split("x")
    return int(ty), int(tx)


def staged_gemm(s: Schedule, name: str, threads: tuple[int, int], kblock: int,
                unroll: bool, regs: int = 1, registers: bool = False) -> None:
    """Tile a GEMM-like stage over its two pure loops, ``threads`` (ty, tx) a block and
    ``regs x regs`` outputs a thread (its register tile, unrolled), split its reduction loop by
    ``kblock``, and stage the tiles of the operands it reads in shared memory per step (rule 3,
    and the search space's staged points); ``unroll``: unroll the inner reduction loop;
    ``registers``: the block's tile computed in each thread's registers (``cache_write(...,
    scope="local")`` at the block loop, that stage tiled the same way) and copied out by the
    same threads.

    Raises:
        ScheduleError: a primitive does not apply (the callers keep the schedule as it was).
    """
    ty, tx = threads
    if registers:
        st = s.states[name]
        y, x = [lp for lp in st.loops if not st.is_reduction_loop(lp)]
        out = s[name]
        yo, xo, yi, xi = out.tile(y, x, ty * regs, tx * regs)
        name = s.cache_write(name, xo, scope="local").func
        if regs > 1:  # the copy out: each thread its register tile, as computed
            yt, xt, yr, xr = _register_tile(out, yi, xi, regs)
            out.reorder(yo, xo, yt, xt, yr, xr)
            yi, xi = yt, xt
        out.gpu_blocks(yo, xo)
        out.gpu_threads(yi, xi)
    st = s.states[name]
    y, x = [lp for lp in st.loops if not st.is_reduction_loop(lp)]
    (k,) = [lp for lp in st.loops if st.is_reduction_loop(lp)]
    h = s[name]
    if registers:  # the block's tile: y and x span it
        yo = xo = None
        yi, xi = y, x
    else:
        yo, xo, yi, xi = h.tile(y, x, ty * regs, tx * regs)
    ko, ki = h.split(k, kblock)
    outer = [yo, xo] if yo is not None else []
    if regs > 1:
        yt, xt, yr, xr = _register_tile(h, yi, xi, regs)
        h.reorder(*outer, ko, yt, xt, ki, yr, xr)
        yi, xi = yt, xt
    else:
        h.reorder(*outer, ko, yi, xi, ki)
    if outer:
        h.gpu_blocks(*outer)
    h.gpu_threads(yi, xi)
    if unroll:
        h.unroll(ki)
    for tensor in s.view.reads(name):
        c = s.cache_read(tensor, h, ko, scope="shared")
        # the block's ty x tx threads copy the tile, each a strided share of it
        r, q = c.loops[-2:]
        ro, ri = c.split(r, ty)
        qo, qi = c.split(q, tx)
        c.reorder(ri, qi, ro, qo)
        c.gpu_threads(ri, qi)


def _register_tile(h, y, x, regs: int) -> tuple:
    """Split ``y`` and ``x`` of stage ``h`` by ``regs`` and unroll the inner loops (a thread's
    ``regs x regs`` register tile); returns the outer loops, then the inner ones."""
    yt, yr = h.split(y, regs)
    xt, xr = h.split(x, regs)
    h.unroll(yr)
    h.unroll(xr)
    return yt, xt, yr, xr
