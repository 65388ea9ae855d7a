"""The search space of GPU schedules: what ``tl.autotune(..., backend="cuda")`` samples.

Decisions, named as Optuna parameters (each a categorical choice), per Func from the output
back to the inputs:

- ``<f>.place``: a pure Func other than an output is ``inline``, ``root`` (its own kernel), or
  ``block`` — computed at the block loop of its one consumer and staged in shared memory by the
  block's threads (a cooperative kernel, ``launches.py``; ``root`` where that tile has no
  constant size or does not fit);
- ``<stage>.tile``: the thread block of a root stage, ``"ty x tx"`` over its two innermost pure
  loops (``gpu_tile``; 32 to 1024 threads), or ``tx`` for a stage with one pure loop; outer pure
  loops fused onto ``blockIdx.z``;
- ``<stage>.thread_rows``: for such a stage with two pure loops (not staged as below), the
  rows of its tile each thread computes, 1, 2, 4 or 8 (``map_pure_loops(rows=)``: a
  ``ty * rows x tx`` tile); a producer staged in its block (``block``) then spreads its
  tile's rows over the block's ``ty`` rows of threads (``stage_in_block(thread_rows=)``);
- ``<f>.kblock``: for a root reduction whose operands a tile reads more than once (GEMM-like,
  batched or not, or a convolution: ``rules.reduction_axes``), none or a split of its
  outermost reduction loop by 4-32 with its operands staged in shared memory per step
  (``cache_read(..., scope="shared")``, each copy spread over the block's threads; a split
  whose tiles do not fit a block's shared memory is not taken);
- ``<f>.regtile``: for such a staged stage, 1, 2, 4 or 8 outputs per thread along each pure
  loop (a register tile, its loops unrolled inside the reduction loop);
- ``<f>.accumulate``: for such a staged stage, where the register tile accumulates across the
  ``k`` blocks: ``output`` (loaded from and stored to ``f``'s buffer at every block) or
  ``registers`` (``cache_write(f, block loop, scope="local")``: each thread's tile stays in its
  registers over the whole reduction, written out once, ``private.py``);
- ``<f>.reduce``: for a root reduction over one loop of rows (``rules.row_like``), ``thread``
  (each thread one output, as above) or ``block`` (a block of ``rules.ROW_THREADS`` threads per
  output, the reduction factored onto them: ``rules.row_reduction``);
- ``<f>.unroll``: unroll the innermost reduction loop (inner part of the split) or not;
- ``<out>.rows``: for an output whose rows are normalised by row reductions (softmax, a layer
  norm: ``rules.normalized_rows``), ``kernels`` (the choices above for each Func) or ``fused``
  (one kernel, a block per row, the reductions computed at its block loop:
  ``rules.row_normalization``).

Every point is a schedule ``tl.check`` then proves or refutes (a refuted one is pruned by the
tuner), that runs on every shape (GuardWithIf tails), and that the emulator checks against NumPy
in ``tests/test_cuda.py`` (random points of this space).

See also: TVM's GPU sketch rules (Ansor, Zheng et al., OSDI 2020: multi-level tiling with
shared-memory staging); Halide's GPU schedules in ``apps/``.
"""

from __future__ import annotations

from typing import Any, Sequence

from tensorlang.errors import ScheduleError
from tensorlang.func import Func, stage_id
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.schedule import Schedule
from tensorlang.schedule.view import AlgorithmView

from .rules import (GEMM_PAD_WORDS, GEMM_X_GROUPS, TILE_1D, TILE_2D, block_loop, launchable,
                    map_pure_loops, normalized_rows, reduction_axes, row_like, row_normalization,
                    row_reduction, stage_in_block, staged_reduction, tile_spec)

TILES_2D = ("1x32", "2x32", "4x32", "8x32", "16x16", "8x16", "4x64", "2x128", "1x256",
            "16x32", "32x32", "8x8")
TILES_1D = ("32", "64", "128", "256", "512")
KBLOCKS = (0, 4, 8, 16, 32)
#: rows of a 2-D root stage's tile each thread computes
THREAD_ROWS = (1, 2, 4, 8)
#: outputs per thread along each of the two pure loops of a staged GEMM-like stage
REG_TILES = (1, 2, 4, 8)
#: where a staged GEMM-like stage's register tile accumulates across its k blocks
ACCUMULATE = ("output", "registers")


class GPUSearchSpace:
    """GPU schedules of ``output`` at ``sizes`` (by size name); ``sample(trial)`` draws one.

    Raises:
        ShapeError: the sizes do not fit the algorithm.
    """

    def __init__(self, output: Func | Sequence[Func], sizes: dict[str, int]) -> None:
        self.output = output
        self.pipeline = Pipeline(output)
        self.algorithm = AlgorithmView(self.pipeline)
        self.sizes = dict(sizes)
        #: the Inputs' shapes at these sizes (what the tuner's measuring workers allocate)
        self.shapes = self.pipeline.input_shapes(self.sizes)

    def sample(self, trial: Any) -> Schedule:
        p = self.pipeline
        s = Schedule(self.output)
        placed: set[str] = set()  # placed by the output's "rows" choice (rule 5)
        #: root stages whose threads compute several rows each -> their rows of threads
        thread_rows: dict[str, int] = {}
        for f in reversed(p.funcs):
            d = f.definition
            assert d is not None
            if f.name in placed:
                continue
            rows = normalized_rows(s, f.name) if p.is_output(f) and not f.updates else []
            if rows and trial.suggest_categorical(f"{f.name}.rows",
                                                  ("kernels", "fused")) == "fused" \
                    and _try(s, lambda t, f=f, rows=rows: row_normalization(t, f.name, rows)):
                placed.update(g.name for g in p.funcs if g is not f)
                continue
            readers = s.view.readers(f.name)
            if not p.is_output(f) and d.reduce_op is None and not f.updates:
                # the same choices in every trial (Optuna's categorical parameters are fixed):
                # "block" where the algorithm has one reader, taken where it is a root stage
                # with block loops (not where an earlier choice inlined or staged it)
                single = len(self.algorithm.readers(f.name)) == 1
                options = ["root", "inline", *(["block"] if single else [])]
                where = trial.suggest_categorical(f"{f.name}.place", options)
                one = len(readers) == 1 and readers[0] in s.states and \
                    s.states[readers[0]].compute.kind == "root"
                if where == "inline":
                    if _try(s, lambda t, f=f: t[f].compute_inline()):
                        continue
                elif where == "block" and one and block_loop(s, readers[0]) is not None:
                    host = readers[0]
                    if _try(s, lambda t, f=f, h=host: stage_in_block(t, f.name, h,
                                                                     thread_rows.get(h))):
                        continue
            self._root_stage(trial, s, f, thread_rows)
            for u in f.updates:
                _try(s, lambda t, st=stage_id(f.name, u.number): map_pure_loops(t, st))
        return s

    def _root_stage(self, trial: Any, s: Schedule, f: Func,
                    thread_rows: dict[str, int]) -> None:
        st = s.states[f.name]
        pure = [lp for lp in st.loops if not st.is_reduction_loop(lp)]
        red = [lp for lp in st.loops if st.is_reduction_loop(lp)]
        if not pure:
            return
        tile2 = trial.suggest_categorical(f"{f.name}.tile", TILES_2D) if len(pure) >= 2 \
            else None
        tile1 = trial.suggest_categorical(f"{f.name}.tile", TILES_1D) if len(pure) == 1 \
            else None
        if not f.updates and row_like(s, f.name) and trial.suggest_categorical(
                f"{f.name}.reduce", ("thread", "block")) == "block" \
                and _try(s, lambda t: row_reduction(t, f.name)):
            return
        kblock, regs, registers = 0, 1, False
        if reduction_axes(s, f.name) is not None:
            kblock = trial.suggest_categorical(f"{f.name}.kblock", KBLOCKS)
            if kblock:
                regs = trial.suggest_categorical(f"{f.name}.regtile", REG_TILES)
                registers = trial.suggest_categorical(f"{f.name}.accumulate",
                                                      ACCUMULATE) == "registers"
        unroll = bool(red) and trial.suggest_categorical(f"{f.name}.unroll", [False, True])
        threads = tile_spec(tile2 or "16x16")
        if kblock and _try(s, lambda t: _staged(t, f.name, threads, kblock, unroll, regs,
                                                registers)):
            return
        tile = tile_spec(tile2) if tile2 else TILE_2D
        rows = trial.suggest_categorical(f"{f.name}.thread_rows", THREAD_ROWS) if tile2 \
            else 1
        if rows > 1 and _try(s, lambda t: map_pure_loops(t, f.name, tile, rows=rows)):
            thread_rows[f.name] = tile[0]
        else:
            _try(s, lambda t: map_pure_loops(t, f.name, tile, int(tile1) if tile1 else TILE_1D))
        if unroll and not kblock:
            inner = s.states[f.name].loops[-1]
            if s.states[f.name].is_reduction_loop(inner):
                _try(s, lambda t: t[f.name].unroll(inner, 4))


def _try(s: Schedule, apply) -> bool:
    """Apply to ``s`` in place if it succeeds and stays legal; whether it did."""
    t = s.copy()
    try:
        apply(t)
    except ScheduleError:
        return False
    if not t.check(realize=False).ok:
        return False
    s.__dict__.update(t.__dict__)  # t is a deep copy: s becomes it
    return True


def _staged(s: Schedule, name: str, threads: tuple[int, int], kblock: int, unroll: bool,
            regs: int, registers: bool) -> None:
    """``staged_reduction`` in place (a transposed tile's rows padded, and a thread's columns
    in runs, as rule 3 has them), refused where its kernels could not launch (a convolution's
    tiles over a block's shared memory)."""
    staged_reduction(s, name, threads, kblock, unroll, regs, registers,
                     pad_words=GEMM_PAD_WORDS, x_groups=GEMM_X_GROUPS)
    if not launchable(s):
        raise ScheduleError(f"the tiles of {name} staged per {kblock} do not fit a block")
