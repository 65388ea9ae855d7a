"""The search space of schedules, generated from the algorithm (no per-workload templates).

Decisions are made define-by-run (Optuna's ``trial.suggest_*``), from the output backwards, so a
producer's placement can refer to loops its consumer already has. Per stage (the output and every
Func computed at root or at a consumer loop):

- ``<F>.<v>.split``: each pure Var ``v`` split by a factor, or not (1). Factors: powers of two and
  divisors of the extent, from 2 up to ``min(extent, 256)`` (divisors make tails disappear). A
  factor equal to the extent still splits: the inner loop then has a constant extent, which
  unrolling and vectorization need (conv2d's whole 56-wide row as one register tile).
- ``<F>.<v>.even``, after the last pure Var's ``.split``, for a column reduction that reads a
  matrix once (``stream_rules.matrix_read``: ``A^T x``, a GEMM of one row) on several threads:
  instead of that factor, the row segment that shares the columns evenly among the threads
  (``split_choices.segment_choice``, the rule-based schedule's), where the factors lack it.
- ``<F>.<v>.shift``: when a pure split leaves a tail, whether the last tile shifts inwards
  (``ShiftInwards``: every tile full, so constant-extent SIMD and unrolling; refused by the
  legality check where it would recompute a reduction) or is guarded (``GuardWithIf``).
- ``<F>.<r>.split``: each reduction Var likewise (reduction tiling / cache blocking).
- ``<F>.<v>.rows``, instead of ``.split``, for the register tile's row Var of a reduction with
  at least two pure Vars (``heuristic.row_var``: GEMM's ``i``, conv2d's ``co``, the innermost
  pure Var the vector operands are not indexed by): a factor as for ``.split``, or ``"regs"``:
  as many rows as the accumulators the vector tile leaves (``heuristic.accumulator_rows`` with
  the target's budget, ``heuristic.accumulators``: with AVX-512's 16, 8 rows of a 2-vector tile,
  4 of conv2d's 56-wide row; in the ``packed`` order the CPU's own for its wide tile,
  ``cpu_model.tile_accumulators``: Ice Lake-SP's 24, 6 rows of 4 vectors), unrolled right
  outside the vector loop. Decided after the vector Var's split and the vector width, so the
  search draws a whole register tile in one choice (Ansor's multi-level tiling derives the
  innermost tile from the register budget the same way): with independent factors, conv2d's
  row-wide tile was about one draw in 560.
- ``<F>.order``: the loop order family. ``tile``: outer pure loops, outer reduction loops, inner
  reduction loops, inner pure loops (register tiles: the reduction runs around the tile,
  GEMM-style);
  ``dot``: outer pure, outer reduction, inner pure, inner reduction (dot products innermost);
  ``packed``, for a GEMM-like reduction (``heuristic.packed_operand``: ``B[k, j]`` of ``C[i, j]
  += A[i, k] * B[k, j]``) with a register tile: BLIS's loop nest (Goto and van de Geijn, TOMS
  2008): row blocks, reduction blocks, column panels, then the register tiles of the row block;
  the row block of the row operand (``heuristic.row_operands``: A) is copied at the reduction
  block loop (at the row block loop when the reduction is not split), the operand's ``kc x nr``
  panel at the column panel loop (``cache_read``), into contiguous buffers read from L2 and L1.
- ``<F>.blis``, with ``packed`` and a split reduction or a batch: BLIS's own loop order
  instead — per reduction block, the operand's ``kc x N`` block copied once in ``nr``-wide
  panels (by the threads together where the row blocks run in parallel), then the row blocks,
  each copying its block of the row operand, then the column panels
  (``heuristic.BLIS_ORDER_BLOCKS``); with an unsplit reduction and a pure loop outside the row
  blocks (a batch), the operand's ``K x N`` block copied once per batch in panels, then the row
  blocks (``heuristic.PANELS_PER_BATCH``).
- ``<F>.<row>.block``, with ``packed``: register tiles per row block (``mc / mr``): ``"model"``
  (``heuristic.row_block``: the analytical model's ``mc``, at least ``blocks_per_thread`` blocks
  per thread), ``"all"`` (one row block, its tile loop inside the column panels, unsplit, the
  parallel loop then the column panels: ``few_rows``) or 1 to 64.
- ``<F>.<x>.copy``, with the ``"all"`` row block: column panels per copy of the packed operand
  (1, 2, 4, 8; ``few_rows.copy_panels``), the loop over them outside the row's tiles; or 0:
  nothing copied, the operands read in place (``few_rows.in_place_nest``).
- ``<F>.prefetch``, with a ``packed`` row block: each register tile prefetches the next tile's
  rows of ``F`` (``Stage.prefetch``; ``heuristic.PREFETCH_TILE``), or not.
- ``<F>.vectorize``: the innermost pure loop as SIMD of width 4/8/16, or not. An inner split loop
  of constant extent up to 4 widths (``x.i`` of 32 at width 16) becomes that many unrolled
  vectors: the register tile of the split, kept in registers. When that extent is not a multiple
  of the width (56 at width 16), the whole loop is one vector loop, which the code generator
  emits as native vectors and a narrower tail (16 + 16 + 16 + 8): no lane is wasted. At width
  4, a loop of 2 or 3 iterations is one vector of that many lanes (``NARROW_WHOLE``: a register
  tile's row of 3 columns, ``narrow_tile``).
- ``<F>.unroll``: the next pure inner loop unrolled (when it has a constant extent <= 16), or not
  (a colour channel split by its whole extent: the rule-based schedule's ``select_loops``).
- ``<F>.parallel``: the outermost pure loop with more than one iteration in parallel, or not;
  with the ``"all"`` row block under a batch too short for the threads (``few_rows.short_batch``),
  the column panels' loop.
- ``<F>.rfactor``, first, for a root reduction whose outermost reduction loop is long enough
  (``rfactor_rules.rfactor_possible``): chunks of that loop made a parallel pure dimension of
  ``<F>_rf`` (``rfactor_rules.rfactor_chunks``, the rule-based schedule's form), instead of the
  decisions above; or not.
- ``<F>.rfactor_lanes``, next, for a root row reduction along a contiguous index
  (``rfactor_rules.rfactor_lanes_possible``: a matrix-vector product, a row sum, a GEMM into rows
  of 2-3 columns): the reduction in vector lanes of ``<F>_rf``, rows in parallel
  (``rfactor_rules.rfactor_lanes``, the rule-based schedule's form), instead of the decisions
  above; or not.
- ``<F>.column_rows``, next, for a root column reduction of a matrix streamed from memory
  (``stream_rules.column_rows_possible``: ``A^T x`` of a matrix larger than half the L3, or
  where the L3 is no victim cache than the threads' L2s): a band of columns per thread, a few
  rows at a time along it (``stream_rules.column_rows``, the rule-based schedule's form),
  instead of the decisions above; or not.
- ``<P>.where`` for each non-output Func: ``root``, ``inline`` (pointwise Funcs only) or ``at<k>``
  (computed at the k-th loop, outermost first, of its single consumer — or of the output when
  every reader is the output or computed inside it, as softmax's ``exp``, or when every reader is
  computed at the output's outermost loop, as ``max`` read by ``exp`` in the output's row;
  clamped to that Func's loops). ``at`` is not offered where the consumer is already at the end
  of a chain of ``MAX_AT_CHAIN`` Funcs each computed at the next (PolyBench covariance's mean at
  centered at dtd at the output: each level composes the bounds of the ones above it, and
  proving that one candidate took 10 s; the rule-based schedule nests one level).
- Update definitions keep their order, or (``<F>.update<i>.contiguous``, where
  ``update_order.contiguous_innermost`` proposes a legal order) run a reduction loop along
  which every access is contiguous innermost (lu's ``i, k, j``); otherwise
  ``<F>.update<i>.rfactor``, for a reassociable update (``F[idx] = F[idx] op value``: a
  histogram) whose outermost RDom loop is long enough: chunks of that loop become parts of
  ``<F>_rf`` updated in parallel (``rfactor_rules.rfactor_update_chunks``, the rule-based
  schedule's form), or not; otherwise ``<F>.update<i>.jam`` (where ``update_order.jam_rows``
  finds a loop whose cells share a row of the innermost reduction: cholesky's rows) blocks that
  loop by 3, 4, 8 or 16 cells accumulated together in registers (unroll-and-jam), or 0: not;
  where a second loop's cells share the other row (cholesky's ``j``), ``<F>.update<i>.jam2``
  blocks it too by 2 or 4 (a tile of cells), or 1: not; a tile takes row blocks that stay in
  L2 (``<F>.update<i>.jam_rows``: ``update_order.jam_row_block``'s, as the rule-based schedule
  does) or not.
  An update left in its order as written, of a Func at root, takes ``<F>.update<i>.form``
  where the legality check proves one of the rule-based schedule's forms at that order: its
  innermost loop vectorized and/or one of ``update_rules.update_parallel_loops`` in parallel
  (``vector``, ``vector+parallel:<loop>``, ``parallel:<loop>``: PolyBench jacobi's and
  fdtd-2d's sweeps), or ``scan`` (``update_rules.scan_stage``: deriche's column filters), or
  ``none``; without a form, ``<F>.update<i>.parallel`` runs its outermost pure
  loop in parallel when it has one; ``<F>.update<i>.atomic`` marks the update ``atomic()``
  (an innermost loop accumulating into one cell runs as a reduction in a register:
  ``schedule/cell_reduction.py``; the rule-based schedule marks every update), or not.
- ``<F>.with_<H>``, last, for root reductions that the rule-based schedule would fuse
  (``heuristic.fuse_siblings``: one array read at the same indices, varying along the loop, or
  ``RDom.where`` conditions that both mention the Var of the same outermost parallel loop):
  whether F is computed with H at that loop (``compute_with``), or not.
- ``<G>.one_pass_<Q>``, after them, for a column reduction G and a row reduction Q of one
  matrix that the rule-based schedule would take in one pass (``one_pass.one_pass_pairs``):
  both in blocks of rows sharing one loop (``one_pass.one_pass_stages``), or not.

Not decisions: ``cache_write`` — the lowering's ``promote_accumulators`` already keeps every
register tile (unrolled and vectorized loops inside a reduction) in a local buffer where that is
legal, which is what TVM's ``cache_write(C, "local")`` is for; ``cache_read`` other than the
``packed`` order's — on conv2d's best hand schedule, copying ``Wt`` per channel tile or per row
made it slower and copying ``pad`` per row gained little (``docs/performance.md``,
"Measurements behind code choices").

``SearchSpace.point`` finds the decisions that reproduce a given schedule (the tuner places the
rule-based schedule of ``heuristic.py`` in the space with it, which is a point of it for every
built-in workload). Every choice set is fixed for a given algorithm and shape, as TPE requires.
Samples may still be illegal (a parallel loop over a scan's rows is fine, over a reduction it is
not); the tuner proves each one with the legality check before compiling it. See also: Ansor's
sketch rules (Zheng et al., OSDI 2020), Halide's Adams2019 decision order (consumers first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tensorlang.backends.llvm.runtime import num_threads
from tensorlang.backends.llvm.target import host_target
from tensorlang.errors import ScheduleError
from tensorlang.func import Func, parse_stage_id
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.ir import ForKind
from tensorlang.schedule.loops import Fuse, Location, Split
from tensorlang.schedule.primitives.staging import associative_update
from tensorlang.schedule.schedule import Schedule
from tensorlang.schedule.trace import TailStrategy

from .cpu_model import cpu_model, tile_accumulators
from .few_rows import short_batch
from .heuristic import (MAX_KC, MIN_BALANCE, Packed, accumulator_rows, accumulators,
                        block_threads, blocks_per_thread, fuse_siblings, lanes, least_block_rows,
                        packed_blocking, packed_operand, packed_operands, panel_dim, row_block,
                        row_operands, row_var, shifted_row_block)
from .one_pass import one_pass
from .packed_reads import packer
from .rfactor_rules import (RFACTOR_CHUNKS_PER_THREAD, ROW_VECTORS, rfactor_chunks,
                            rfactor_lanes, rfactor_lanes_possible, rfactor_possible,
                            rfactor_update_chunks)
from .split_choices import (MAX_FACTOR, even_kc_choices,  # noqa: F401
                            factor_choices, segment_choice)
from .stream_rules import column_rows, column_rows_possible, matrix_read
from .update_order import (contiguous_innermost, jam, jam_block, jam_rows, jam_tile,
                           update_row_block)
from .update_rules import UPDATE_MIN_VECTORS, scan_stage, update_parallel_loops, update_stage
from .vector_width import narrow_kernel, stage_lanes
from .workloads import BoundExtents

if TYPE_CHECKING:
    from tensorlang.backends.llvm.target import Target

MAX_TILE_ROWS = 16
VECTOR_WIDTHS = (0, 4, 8, 16)
#: whether the narrowest vector width takes a loop of fewer iterations (2 or more) whole as one
#: narrower vector (``whole_loop_vector``: the rule-based schedule's tile over rows of 2-3
#: columns, ``narrow_tile.NARROW_COLUMNS``); 0: leaves it scalar, as before stop 80
NARROW_WHOLE = 1
AT_LEVELS = 4
#: the longest chain of Funcs each computed at the next that ``<P>.where`` can build (f at g
#: at the output: 2)
MAX_AT_CHAIN = 2
MAX_VECTOR_UNROLL = 4
#: the blocks of cells an update's unroll-and-jam may accumulate together (``<F>.update<i>.jam``)
JAM_BLOCKS = (3, 4, 8, 16)
#: ... and the second loop's (``<F>.update<i>.jam2``; 1: that loop is not blocked)
JAM_BLOCKS2 = (1, 2, 4)
#: register tiles per row block of the ``packed`` order ("model": ``heuristic.row_block``;
#: "all": one row block, its tiles inside the column panels, ``few_rows``)
ROW_BLOCKS = ("model", "all", 1, 2, 4, 8, 16, 32, 64)
#: column panels per copy of the packed operand with the "all" row block (``<F>.<x>.copy``;
#: ``few_rows.copy_panels``); 0: no copies, the operands read in place (``few_rows.in_place``)
COPY_GROUPS = (0, 1, 2, 4, 8)


class Trial(Protocol):
    """What the space needs from a sampler (an ``optuna.Trial`` fits)."""

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


def row_choices(extent: int) -> list[int]:
    """A register tile's row counts: ``factor_choices``, and every count up to
    ``MAX_TILE_ROWS`` (the rule-based schedule's packed tile may leave remainder rows)."""
    return sorted(set(factor_choices(extent)) | set(range(2, min(extent, MAX_TILE_ROWS) + 1)))


def whole_loop_vector(extent: int, width: int, most: int = MAX_VECTOR_UNROLL) -> bool:
    """Whether ``vectorize`` at ``width`` takes an inner loop of constant ``extent`` whole (one
    vector: of ``width`` lanes, or at the narrowest width of 2 or more fewer lanes, where
    ``NARROW_WHOLE``: a tile's row of 3 columns, ``narrow_tile``; or up to ``most`` vectors with
    a narrower tail: 56 at 16 is 16 + 16 + 16 + 8 lanes; ``most`` is ``ROW_VECTORS`` for a tile
    of whole rows, ``narrow_tile.WHOLE_ROW``) rather than splitting it by ``width``. A loop
    narrower than a wider width stays scalar."""
    narrowest = min(w for w in VECTOR_WIDTHS if w)
    return (extent == width or bool(NARROW_WHOLE) and 2 <= extent < width == narrowest
            or width < extent <= most * width and extent % width != 0)


def _at_depth(s: Schedule, func: str) -> int:
    """How many Funcs ``func`` is computed inside: 0 at root, 1 at a root Func's loop, ..."""
    depth = 0
    st = s.states.get(func)
    while st is not None and st.compute.kind == "at" and depth <= len(s.states):
        depth += 1
        st = s.states.get(parse_stage_id(st.compute.func)[0])  # type: ignore[arg-type]
    return depth


class SearchSpace:
    """Schedules of ``output`` for concrete ``sizes`` (by size name), with register tiles
    sized for ``target`` (default: this machine): its SIMD lanes and accumulator budget, as the
    rule-based schedule (``heuristic_schedule``) sizes them, so that it is a point of the space.

    Raises:
        ShapeError: the sizes do not fit the algorithm (through ``Pipeline.bind``).
    """

    def __init__(self, output: Func | Sequence[Func], sizes: dict[str, int],
                 target: Target | None = None) -> None:
        self.target = target or host_target()  # its lanes and register budget size the tiles
        self.output = output
        self.pipeline = Pipeline(output)
        self.extents = BoundExtents(output, sizes)
        self.binding, self.shapes = self.extents.binding, self.extents.shapes
        self._contiguous: dict[tuple[str, int], bool] = {}
        self._jam: dict[tuple[str, int], str | None] = {}
        self._forms: dict[tuple[str, int], list[str]] = {}
        self._narrow = narrow_kernel(self.pipeline.funcs, self.extents, self.target)

    def extent(self, func: str, var: str) -> int:
        return self.extents.extent(func, var)

    def sample(self, trial: Trial) -> Schedule:
        """Draw one schedule (decisions named as in the module docstring)."""
        s = Schedule(self.output)
        for f in reversed(self.pipeline.funcs):
            if not self.pipeline.is_output(f):
                where = self._place(trial, s, f)
                if where == "inline":
                    continue
            self._loops(trial, s, f)
            for u in f.updates:
                as_written = False
                if self._contiguous_possible(f, u.number) and trial.suggest_categorical(
                        f"{f.name}.update{u.number}.contiguous", [True, False]):
                    contiguous_innermost(s, f, u.number, self.extents,
                                         self._lanes(f, u.number),
                                         UPDATE_MIN_VECTORS)
                elif self._update_rfactor_possible(s, f, u) and trial.suggest_categorical(
                        f"{f.name}.update{u.number}.rfactor", [False, True]):
                    rfactor_update_chunks(s, f, u.number, self.extents)
                elif (jammed := self._jam_loop(f, u.number)) is not None and (block := (
                        trial.suggest_categorical(f"{f.name}.update{u.number}.jam",
                                                  [0, *JAM_BLOCKS]))):
                    z, z2 = jammed
                    block2 = 1 if z2 is None else trial.suggest_categorical(
                        f"{f.name}.update{u.number}.jam2", list(JAM_BLOCKS2))
                    rows = 1 if block2 == 1 else update_row_block(
                        s, f, u.number, self.extents, z, block, cpu_model(self.target).l2.size)
                    if rows > 1 and not trial.suggest_categorical(
                            f"{f.name}.update{u.number}.jam_rows", [True, False]):
                        rows = 1
                    jam(s, f, u.number, z, block, z2, block2, rows)
                else:
                    as_written = True
                form = "none"
                if as_written and s.states[f.name].compute.kind == "root" \
                        and (forms := self._update_forms(f, u.number)):
                    form = trial.suggest_categorical(f"{f.name}.update{u.number}.form",
                                                     ["none", *forms])
                    self._apply_form(s, f, u.number, form)
                st = s[f].update(u.number)
                if u.pure and form == "none" and trial.suggest_categorical(
                        f"{f.name}.update{u.number}.parallel", [False, True]):
                    st.parallel(u.pure[0])
                if trial.suggest_categorical(f"{f.name}.update{u.number}.atomic", [True, False]):
                    st.atomic()
        s = fuse_siblings(s, self.pipeline, lambda f, h, t: trial.suggest_categorical(
            f"{f.name}.with_{h.name}", [False, True]))
        return one_pass(s, self.pipeline, self.extents, cpu_model(self.target), lambda f: lanes(
            f, self.target), lambda t: True, lambda g, q: trial.suggest_categorical(
            f"{g.name}.one_pass_{q.name}", [False, True]))

    def _lanes(self, f: Func, number: int) -> int:
        """SIMD lanes of update ``number`` of ``f``, as the rule-based schedule takes them
        (``vector_width.stage_lanes``, ``narrow_kernel``)."""
        return stage_lanes(f, number, self.extents, self.target, self._narrow)

    def _contiguous_possible(self, f: Func, number: int) -> bool:
        """Whether ``update_order.contiguous_innermost`` proposes a loop order for update
        ``number`` of ``f`` that the legality check accepts (decided once per update)."""
        key = (f.name, number)
        if key not in self._contiguous:
            t = Schedule(self.output)
            try:
                contiguous_innermost(t, f, number, self.extents,
                                     self._lanes(f, number), UPDATE_MIN_VECTORS)
                self._contiguous[key] = t.check(realize=False).ok
            except ScheduleError:
                self._contiguous[key] = False
        return self._contiguous[key]

    def _jam_loop(self, f: Func, number: int) -> tuple[str, str | None] | None:
        """The loops ``update_order.jam_rows`` blocks in update ``number`` of ``f`` from the
        default order, with the rule-based schedule's blocks for the target, or None (decided
        once per update)."""
        key = (f.name, number)
        if key not in self._jam:
            registers = cpu_model(self.target).vector_registers
            try:
                self._jam[key] = jam_rows(Schedule(self.output), self.output, f, number,
                                          self.extents, self._lanes(f, number),
                                          UPDATE_MIN_VECTORS, jam_block(registers),
                                          jam_tile(registers))
            except ScheduleError:
                self._jam[key] = None
        return self._jam[key]

    def _update_forms(self, f: Func, number: int) -> list[str]:
        """The rule-based schedule's forms of update ``number`` of ``f`` in the order as
        written that the legality check proves (``update_rules.update_stage``: ``vector``,
        ``vector+parallel:<loop>``, ``parallel:<loop>``; ``update_rules.scan_stage``: ``scan``),
        the Func at root (decided once per update)."""
        key = (f.name, number)
        if key not in self._forms:
            forms = []
            pars = update_parallel_loops(Schedule(self.output), f, number, self.extents)
            for form in ["scan", *(f"vector+parallel:{p}" for p in pars), "vector",
                         *(f"parallel:{p}" for p in pars)]:
                t = Schedule(self.output)
                try:
                    self._apply_form(t, f, number, form)
                except ScheduleError:
                    continue
                if t.check(realize=False).ok:
                    forms.append(form)
            self._forms[key] = forms
        return self._forms[key]

    def _apply_form(self, s: Schedule, f: Func, number: int, form: str) -> None:
        if form == "scan":
            scan_stage(s, f, number, self.extents, self._lanes(f, number), False)
        elif form != "none":
            vector, _, par = form.partition("parallel:")
            update_stage(s, f, number, vector.startswith("vector"), par or None, self.extents,
                         self._lanes(f, number))

    def _update_rfactor_possible(self, s: Schedule, f: Func, u: Any) -> bool:
        """Whether ``rfactor_update_chunks`` applies to update ``u`` of ``f``: a reassociable
        update (``F[idx] = F[idx] op value``) without ``RDom.where``, on a machine with threads,
        whose outermost RDom loop has at least two chunks per thread's share."""
        if u.predicate or num_threads() < 2 or associative_update(f, u) is None:
            return False
        st = s.states[f"{f.name}.update({u.number})"]
        outer = next((n for n in st.loops if st.is_reduction_loop(n)), None)
        return outer is not None and self.extent(f"{f.name}.update({u.number})", outer) >= \
            2 * RFACTOR_CHUNKS_PER_THREAD * num_threads()

    def _place(self, trial: Trial, s: Schedule, f: Func) -> str:
        readers = s.view.readers(f.name)
        options = ["root"]
        if f.definition is not None and f.definition.reduce_op is None and not f.updates:
            options.append("inline")
        host = None
        out = self.pipeline.outputs[-1].name  # (several outputs: the last one hosts)
        row = s.states[out].loops[:1]
        # every reader lives in the output's loops (softmax's e, read by the output and computed
        # in its row), or every reader is computed at the output's outermost loop (mx, read only
        # by e, with e per row): at the output's loops, as the heuristic places it (at e's
        # one-iteration row loop it ran 4-6% slower); with e deeper, at e's own loops
        inside = out in readers and all(r == out or s.states[r].compute.func == out
                                        for r in readers)
        in_row = bool(row) and all(s.states[r].compute == Location("at", out, row[0])
                                   for r in readers)
        if readers and not f.updates and (inside or in_row):
            host = out
        elif len(readers) == 1 and not f.updates and parse_stage_id(readers[0])[1] is None:
            host = readers[0]
        if host is not None and _at_depth(s, host) < MAX_AT_CHAIN:
            options += [f"at{k}" for k in range(AT_LEVELS)]
        else:
            host = None
        # the choice set must be fixed per parameter name (Optuna): whether ``at`` is possible
        # depends on the readers' placements, so it is part of the name
        name = f"{f.name}.where" if host is not None else f"{f.name}.where_root_or_inline"
        where = trial.suggest_categorical(name, options)
        if where == "inline":
            s[f].compute_inline()
        elif where.startswith("at"):
            consumer = s[host]
            loops = consumer.loops
            k = min(int(where[2:]), len(loops) - 1)
            try:
                s[f].compute_at(consumer, loops[k])
            except ScheduleError:
                return "root"
        return where

    def _loops(self, trial: Trial, s: Schedule, f: Func) -> None:
        d = f.definition
        assert d is not None
        if s.states[f.name].compute.kind == "root" and rfactor_possible(f, self.extents) \
                and trial.suggest_categorical(f"{f.name}.rfactor", [False, True]):
            rfactor_chunks(s, f, self.extents)
            return
        width = lanes(f, self.target)
        if s.states[f.name].compute.kind == "root" and \
                rfactor_lanes_possible(f, self.extents, width, self.pipeline.funcs,
                                       cpu_model(self.target).sibling_lanes) and \
                trial.suggest_categorical(f"{f.name}.rfactor_lanes", [False, True]):
            rfactor_lanes(s, f, self.extents, width, cpu_model(self.target).vector_registers)
            return
        if s.states[f.name].compute.kind == "root" and \
                column_rows_possible(f, self.extents, width, cpu_model(self.target)) and \
                trial.suggest_categorical(f"{f.name}.column_rows", [False, True]):
            column_rows(s, f, self.extents, width)
            return
        stage = s[f]
        args = [v.name for v in d.args]
        rvars = [r.name for r in d.rvars]
        row = row_var(f, args) if rvars and len(args) >= 2 else None
        packed = packed_operands(f) if row is not None else []
        factor: dict[str, int] = {}
        tails: dict[str, str] = {}

        def decide(v: str, fac: int, pure: bool, name: str) -> None:
            ext = self.extent(f.name, v)
            if fac > 1 and (fac < ext or fac == ext and pure):
                tail = "GuardWithIf"
                if pure and ext % fac and trial.suggest_categorical(f"{name}.shift",
                                                                    [False, True]):
                    tail = "ShiftInwards"
                factor[v], tails[v] = fac, tail

        for v in args + rvars:
            if v != row:
                fac = trial.suggest_categorical(f"{f.name}.{v}.split", factor_choices(
                    max(self.extent(f.name, v), 1), MAX_KC if packed and v in rvars
                    else MAX_FACTOR, even=bool(packed) and v in rvars))
                even = [v] == args[-1:] and matrix_read(f, self.extents) is not None and \
                    segment_choice(self.extent(f.name, v), lanes(f, self.target), num_threads())
                if even and trial.suggest_categorical(f"{f.name}.{v}.even", [False, True]):
                    fac = even
                decide(v, fac, v in args, f"{f.name}.{v}")
        order = "tile"
        if d.rvars:
            order = trial.suggest_categorical(f"{f.name}.order", ["tile", "dot", "packed"]
                                              if packed else ["tile", "dot"])
        width = trial.suggest_categorical(f"{f.name}.vectorize", list(VECTOR_WIDTHS))
        regs = False
        if row is not None:
            ext = self.extent(f.name, row)
            rows = trial.suggest_categorical(f"{f.name}.{row}.rows",
                                             ["regs", *row_choices(max(ext, 1))])
            if rows == "regs":  # as many rows as the accumulators (a packed tile: the CPU's)
                regs = True
                vectors = self._row_vectors(f, factor.get(args[-1]), width)
                accs = (tile_accumulators(cpu_model(self.target), f.dtype.numpy.itemsize,
                                          vectors) if order == "packed"
                        else accumulators(self.target))
                rows = min(ext, accumulator_rows(vectors, ext, accs))
            decide(row, rows, True, f"{f.name}.{row}")
        block = 0
        if order == "packed":
            if row in factor and args[-1] in factor:
                answer = trial.suggest_categorical(f"{f.name}.{row}.block", list(ROW_BLOCKS))
                block = self._row_block(f, row, factor[row], factor[args[-1]], answer,
                                        shifted=tails[row] == "ShiftInwards"
                                        and rvars[0] not in factor)
            else:
                order = "tile"  # no register tile to pack for
        outer_p, inner_p, outer_r, inner_r, mid = [], [], [], [], []
        inner_of: dict[str, str] = {}
        outer_of: dict[str, str] = {}
        group = 1
        for v in args + rvars:
            group_o, group_i = (outer_p, inner_p) if v in args else (outer_r, inner_r)
            if v in factor:
                o, i = stage.split(v, factor[v], tail=tails[v])
                if block < 0 and v == args[-1]:  # the "all" row block: panels per copy
                    group = trial.suggest_categorical(f"{f.name}.{v}.copy", list(COPY_GROUPS))
                    if group > 1:
                        o, oi = stage.split(o, group, tail="GuardWithIf")
                        mid.insert(0, oi.name)  # (outside the row's tiles)
                if v == row and block > 0:
                    # BLIS's row block (mc): its tiles inside the packed panel's loops
                    o, oi = stage.split(o, block)
                    mid.append(oi.name)
                outer_of[v] = o.name
                if v == row and block < 0:  # one row block: every tile inside the panels
                    mid.append(o.name)
                else:
                    group_o.append(o.name)
                group_i.append(i.name)
                inner_of[v] = i.name
            else:
                group_o.append(v)
        tile_rows = inner_of.get(row) if regs and args[-1] in inner_of else None
        if tile_rows is not None:
            # the tile's rows right outside its vector loop (conv2d: co.i, then x.i)
            inner_p.remove(tile_rows)
            inner_p.insert(inner_p.index(inner_of[args[-1]]), tile_rows)
        # pure loops outside the row blocks and column panels (a batch)
        batch = [lp for lp in outer_p if lp not in (outer_of.get(args[-1]), outer_of.get(row))]
        blis = order == "packed" and (rvars[0] in factor or bool(batch)) and block > 0 and \
            trial.suggest_categorical(f"{f.name}.blis", [False, True])
        if blis and rvars[0] not in factor:
            # an unsplit reduction: B's K x N block copied once per batch in panels, then the
            # row blocks, the column panels, the whole reduction (heuristic.PANELS_PER_BATCH)
            loops = batch + [outer_of[row], outer_of[args[-1]]] + mid + outer_r + inner_r \
                + inner_p
        elif blis:
            # BLIS's order: per k block B's kc x N block copied once in panels, then the row
            # blocks, each with its block of A, then the column panels
            loops = batch + outer_r + [outer_of[row], outer_of[args[-1]]] + mid + inner_r \
                + inner_p
        elif order == "packed" and rvars[0] in factor:
            # per k block the row block of A, then per column panel the kc x nr panel of B
            panel = outer_of[args[-1]]
            loops = [lp for lp in outer_p if lp != panel] + outer_r + [panel] + mid + inner_r \
                + inner_p
        elif order == "packed":  # the whole K x nr panel per column panel
            loops = outer_p + mid + outer_r + inner_r + inner_p
        elif order == "tile":
            loops = outer_p + outer_r + inner_r + inner_p
        else:
            loops = outer_p + outer_r + inner_p + inner_r
        stage.reorder(*loops)
        panels: list[Packed] = []
        copies: dict = {}
        if order == "packed":  # (copies of B's panels prefetch its rows: packed_reads.far_reads)
            copy = packer(f, self.extents, cpu_model(self.target).l2.size,
                          factor.get(args[-1], self.extent(f.name, args[-1])) * max(group, 1))
        if blis:
            # (heuristic._packed_tile's BLIS branch) B's panels at the k block loop, A's row
            # block at the row block loop
            split = rvars[0] in factor
            blocks = row_operands(f, row, split=split,
                                  rows=factor.get(row, 1),
                                  panels=self._panels(f, factor),
                                  cpu=cpu_model(self.target))
            panels = packed_operands(f, factor[args[-1]])
            copies = copy(s, stage, [*panels, *blocks], [outer_r[0] if split else batch[-1]]
                          * len(panels) + [outer_of[row]] * len(blocks))
        elif order == "packed" and group:
            # the row block at the k block loop (at the row block loop: the whole reduction)
            blocks = row_operands(f, row, split=rvars[0] in factor,
                                  rows=factor.get(row, 1),
                                  panels=self._panels(f, factor),
                                  cpu=cpu_model(self.target))
            at = outer_r[0] if rvars[0] in factor else outer_of[row]
            copy(s, stage, [*packed, *blocks], [outer_of[args[-1]]] * len(packed)
                 + [at] * len(blocks))
        pure_order = [lp for lp in loops if lp in outer_p + mid + inner_p]
        if pure_order and width:
            last = pure_order[-1]
            ext = self._loop_extent(s, f, last)
            # (no row tile, or all its rows' whole vectors within the accumulators: as many
            # vectors as the rule's A^T x segment, rfactor_rules.ROW_VECTORS; WHOLE_ROW)
            most = max(MAX_VECTOR_UNROLL, ROW_VECTORS) if row is None or ext is not None and \
                self.extent(f.name, row) * -(-ext // width) <= accumulators(self.target) \
                else MAX_VECTOR_UNROLL
            if ext is not None and whole_loop_vector(ext, width, most):
                stage.vectorize(last)
            elif ext is None or ext > width:
                stage.vectorize(last, width)
                if ext is not None and ext % width == 0 and ext // width <= most:
                    # a tile of several whole vectors (x.i of 32 as two of 16): unrolled, so the
                    # register tile stays in registers (promote_accumulators needs it)
                    stage.unroll(f"{last}.o")
                else:
                    pure_order[-1] = f"{last}.o"
        if tile_rows is not None:
            stage.unroll(tile_rows)  # at most ACCUMULATORS iterations
        elif len(pure_order) >= 2 and trial.suggest_categorical(f"{f.name}.unroll",
                                                                [False, True]):
            cand = pure_order[-2]
            ext = self._loop_extent(s, f, cand)
            if ext is not None and ext <= 16 and cand in inner_p:
                stage.unroll(cand)
        if mid and trial.suggest_categorical(f"{f.name}.prefetch", [False, True]):
            stage.prefetch(f.name, mid[-1])  # the next register tile's rows of the output
        if pure_order and trial.suggest_categorical(f"{f.name}.parallel", [False, True]):
            # the outermost pure loop that has more than one iteration (conv2d's batch of 1
            # would give the thread pool nothing to share)
            par = next((lp for lp in pure_order if lp in outer_p and
                        self._outer_extent(s, f, lp) > 1), pure_order[0])
            if block < 0 and batch and short_batch([self._outer_extent(s, f, lp) for lp in batch],
                                                   num_threads(), MIN_BALANCE):
                par = outer_of[args[-1]]  # a short batch: the column panels (few_rows.FEW_BATCH)
            stage.parallel(par)
            if blis and par == outer_of[row]:
                # the row blocks in parallel: B's panels copied by the threads together
                for op in panels:
                    copies[op].parallel(f"{copies[op].func}_d{panel_dim(op)}")

    def signature(self, s: Schedule) -> dict[str, tuple]:
        """``stage_signature`` of ``s`` at this space's sizes."""

        def extent(func: str, var: str) -> int | None:
            ranges = self.binding.ranges.get(func, {})
            return ranges[var][1] if var in ranges else None

        return stage_signature(s, extent)

    def point(self, target: Schedule, attempts: int = 64) -> tuple[dict, dict] | None:
        """The decisions with which ``sample`` reproduces ``target`` (the same stage signature:
        ``stage_signature``), and each decision's choices; None when ``target`` is not a point
        of the space (or none was found: at most ``attempts`` samples varying the guesses, as
        many climbing).

        The tuner uses it to place the rule-based schedule (``heuristic.py``) in the space, so
        the search refines it (TVM's MetaSchedule likewise seeds its evolutionary search with
        the schedules of earlier records). The first sample answers every decision with its
        guess from ``target``; the ambiguous ones (rows as ``regs`` or a factor, the loop order
        family, the vector width) are then varied, fewest changes first (one decision, then
        one answer to the same decision of every stage that has it: symm's two packed sums,
        whose rule-based rows differ alike from ``regs``, then two decisions). Where that fails
        (three or more changes: several stages each off by one or two), a hill climb keeps
        every single change that brings the sample's stages closer to ``target``'s (more equal
        parts of their signatures), until they match or no change helps."""
        import itertools

        want = self.signature(target)
        queue: list[dict[str, Any]] = [{}]
        tried: set[tuple] = set()
        budget = attempts
        while queue and budget > 0:
            fixed = queue.pop(0)
            key = tuple(sorted(fixed.items()))
            if key in tried:
                continue
            tried.add(key)
            budget -= 1
            oracle, got = self._try_point(target, fixed)
            if got == want:
                return oracle.params, oracle.choices
            if not fixed:  # single changes first, then mirrored ones, then pairs
                singles = [{n: a} for n, alts in oracle.alternatives for a in alts]
                queue += singles
                queue += _mirrored(oracle.alternatives)
                queue += [{**a, **b} for a, b in itertools.combinations(singles, 2)
                          if a.keys() != b.keys()]
        return self._climb(target, want, attempts)

    def _try_point(self, target: Schedule, fixed: dict[str, Any]
                   ) -> tuple[_Oracle, dict[str, tuple] | None]:
        """A sample answered from ``target`` but for ``fixed``, and its signature (None: the
        sample failed)."""
        oracle = _Oracle(target, fixed)
        try:
            return oracle, self.signature(self.sample(oracle))
        except (_NoAnswer, ScheduleError):
            return oracle, None

    def _climb(self, target: Schedule, want: dict[str, tuple], attempts: int
               ) -> tuple[dict, dict] | None:
        """``point``'s hill climb over single changes (first improvement), at most
        ``attempts`` samples."""
        fixed: dict[str, Any] = {}
        oracle, got = self._try_point(target, fixed)
        score = _likeness(want, got)
        while attempts > 0:
            for name, alts in oracle.alternatives:
                better = None
                for alt in alts:
                    if attempts <= 0 or fixed.get(name) == alt:
                        continue
                    attempts -= 1
                    trial = {**fixed, name: alt}
                    o2, g2 = self._try_point(target, trial)
                    if g2 == want:
                        return o2.params, o2.choices
                    if _likeness(want, g2) > score:
                        better = (trial, o2, g2)
                        break
                if better is not None:
                    fixed, oracle, got = better
                    score = _likeness(want, got)
                    break
            else:
                return None
        return None

    def _row_vectors(self, f: Func, tile: int | None, width: int) -> int:
        """Vector registers one row of the register tile holds: the vector Var's inner split
        ``tile`` in vectors of ``width`` (at most the native lanes) when that loop is a register
        tile (at most ``MAX_VECTOR_UNROLL`` vectors), else 1."""
        if not width or tile is None or tile > MAX_VECTOR_UNROLL * width:
            return 1
        return -(-tile // min(width, lanes(f, self.target)))

    def _row_block(self, f: Func, row: str, rows: int, width: int, answer: Any,
                   shifted: bool = False) -> int:
        """Register tiles per row block for the ``.block`` decision ``answer``; ``shifted``: the
        last tile of rows is shifted inwards (an unsplit reduction), the model's blocks take it
        (``heuristic.shifted_row_block``)."""
        extent = self.extent(f.name, row)
        tiles = max(1, extent // rows)  # whole tiles (heuristic._packed_tile)
        if answer == "all":
            return -1  # (no row-block split: the tile loop inside the column panels)
        if answer != "model":
            return min(int(answer), tiles)
        args = [v.name for v in f.definition.args]  # type: ignore[union-attr]
        outer = [a for a in args[:-1] if a != row]
        threads = block_threads(outer, {a: self.extent(f.name, a) for a in outer})
        block = row_block(tiles, rows, packed_blocking(f, rows, width, self.target).mc, threads,
                          blocks_per_thread(f, row), least_block_rows(), partial=True)
        return shifted_row_block(extent, rows, block) if shifted else block

    def _outer_extent(self, s: Schedule, f: Func, loop: str) -> int:
        """The extent of a loop: a Var's, ``ceil(extent / factor)`` for ``v.o`` (of a split
        loop's extent for ``v.o.o``), the factor for ``v.i``."""
        for rel in s.states[f.name].relations:
            if isinstance(rel, Split) and rel.outer == loop:
                return -(-self._outer_extent(s, f, rel.parent) // rel.factor)
            if isinstance(rel, Split) and rel.inner == loop:
                return rel.factor
        return self.extent(f.name, loop)

    def _panels(self, f: Func, factor: dict[str, int]) -> int:
        """Column panels of a packed tile of ``f`` whose splits are ``factor`` (Var -> factor):
        ``row_operands``' ``panels``."""
        x = f.definition.args[-1].name  # type: ignore[union-attr]
        return -(-self.extent(f.name, x) // factor.get(x, self.extent(f.name, x)))

    @staticmethod
    def _loop_extent(s: Schedule, f: Func, loop: str) -> int | None:
        """The constant extent of an inner split loop (``v.i`` of ``split(v, factor)``)."""
        for rel in s.states[f.name].relations:
            if isinstance(rel, Split) and rel.inner == loop:
                return rel.factor
        return None


# -- a given schedule as a point of the space -----------------------------------------------------
def _mirrored(alternatives: list[tuple[str, list]]) -> list[dict[str, Any]]:
    """Changes of one answer to the same decision of several stages (``<F>.i.rows``: 10 for
    every stage whose alternatives have it), for ``SearchSpace.point``: stages the rule-based
    schedule treats alike differ alike from the guesses."""
    by: dict[tuple[str, Any], dict[str, Any]] = {}
    for name, alts in alternatives:
        decision = name.partition(".")[2]
        for alt in alts:
            by.setdefault((decision, alt), {})[name] = alt
    return [change for change in by.values() if len(change) > 1]


class _NoAnswer(Exception):
    """The schedule being matched has no answer among a decision's choices."""


def stage_signature(s: Schedule, extent: Callable[[str, str], int | None]) -> dict[str, tuple]:
    """What a schedule does to each stage — its loops in order, their kinds, its splits and
    fuses, where it is computed and stored, the stage it shares loops with — independent of the
    steps that did it. ``extent(func, var)`` gives a Var's extent (None: unknown). A split whose
    factor divides its loop's extent has no tail at these sizes, so its tail strategy is left
    out (the space does not ask it there): two schedules with the same signature compute the
    same points in the same order, and their loop nests differ at most in a tail's index
    arithmetic (the kernel is compiled for any size, and at sizes the factor does not divide
    the tail strategy matters)."""
    out = {}
    for name, st in s.states.items():
        ext: dict[str, int | None] = {v: extent(name, v) for v in (*st.pure, *st.rvars)}
        rels: list[Any] = []
        for r in st.relations:
            if isinstance(r, Split):
                e = ext.get(r.parent)
                ext[r.outer] = None if e is None else -(-e // r.factor)
                ext[r.inner] = r.factor
                rels.append(r if e is None or e % r.factor else (r.parent, r.outer, r.inner,
                                                                 r.factor))
            elif isinstance(r, Fuse):
                a, b = ext.get(r.outer), ext.get(r.inner)
                ext[r.fused] = None if a is None or b is None else a * b
                rels.append(r)
        out[name] = (tuple(st.loops), tuple(sorted((k, v.value) for k, v in st.kinds.items())),
                     tuple(rels), st.compute, st.store, st.fused, tuple(st.prefetches))
    return out


def _likeness(want: dict[str, tuple], got: dict[str, tuple] | None) -> int:
    """How close the stage signatures ``got`` are to ``want``: the number of equal parts of the
    stages both have, less one for each stage only one of them has; -1 for no sample."""
    if got is None:
        return -1
    score = 0
    for name in want.keys() | got.keys():
        a, b = want.get(name), got.get(name)
        score += -1 if a is None or b is None else sum(x == y for x, y in zip(a, b))
    return score


class _Oracle:
    """A sampler that answers each decision of ``SearchSpace.sample`` from ``target`` (its
    best guess of the answer that reproduces it), except for the decisions in ``fixed``; it
    records every decision with its choices and the alternatives to the guess."""

    def __init__(self, target: Schedule, fixed: dict[str, Any]) -> None:
        self.target = target
        self.fixed = fixed
        self.params: dict[str, Any] = {}
        self.choices: dict[str, list] = {}
        self.alternatives: list[tuple[str, list]] = []

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        choices = list(choices)
        guesses = [g for g in self._guess(name, choices) if g in choices]
        if name in self.fixed and self.fixed[name] in choices:
            answer = self.fixed[name]
        elif guesses:
            answer = guesses[0]
        else:
            raise _NoAnswer(name)
        self.params[name], self.choices[name] = answer, choices
        others = [c for c in choices if c != answer and c in guesses]
        if others:
            self.alternatives.append((name, others))
        return answer

    def _guess(self, name: str, choices: list) -> list:
        func, _, rest = name.partition(".")
        states = self.target.states
        if rest.startswith("with_") or rest.startswith("one_pass_"):
            one = rest.startswith("one_pass_")  # (the rfactor stages of the pair are fused)
            st = states.get(f"{func}_rf" if one else func)
            host = f"{rest[9:]}_rf" if one else rest[5:]
            done = st is not None and st.fused is not None and st.fused.func == host
            q = states.get(rest[9:]) if one else None  # (computed at the column sums' blocks)
            done = done or (q is not None and q.compute.kind == "at"
                            and q.compute.func == f"{func}_rf")
            return [done, not done]
        if rest.startswith("update") and rest.endswith(".rfactor"):
            done = any(n.startswith(f"{func}_rf") and n.endswith(".update(0)") for n in states)
            return [done, not done]
        if rest.startswith("update") and rest.endswith(".contiguous"):
            number = int(rest[6:-11])
            up = states.get(f"{func}.update({number})")
            done = up is not None and up.loops != list(up.pure) + list(up.rvars) \
                and not up.relations  # (a jam splits and reorders too)
            return [done, not done]
        if rest.startswith("update") and rest.endswith(".parallel"):
            up = states.get(f"{func}.update({rest[6:-9]})")
            par = up is not None and ForKind.PARALLEL in up.kinds.values()
            return [par, not par]
        if rest.startswith("update") and rest.endswith(".jam_rows"):
            up = states.get(f"{func}.update({rest[6:-9]})")  # (a split of a tile's outer loop)
            done = any(isinstance(r, Split) and up.kinds.get(r.inner) is not ForKind.UNROLLED
                       for r in (up.relations if up is not None else ()))
            return [done, not done]
        if rest.startswith("update") and (rest.endswith(".jam") or rest.endswith(".jam2")):
            number, second = rest[6:].split(".")
            up = states.get(f"{func}.update({number})")
            blocks = [r.factor for r in (up.relations if up is not None else ())
                      if isinstance(r, Split) and up.kinds.get(r.inner) is ForKind.UNROLLED]
            # (``update_order.jam`` splits the first loop, then the second)
            if second == "jam2":
                block = blocks[1] if len(blocks) > 1 else 1
            else:
                block = blocks[0] if blocks else 0
            return [block, *(c for c in choices if c != block)]
        if rest.startswith("update") and rest.endswith(".form"):
            up = states.get(f"{func}.update({rest[6:-5]})")
            kinds = up.kinds if up is not None else {}
            vector = ForKind.VECTORIZED in kinds.values()
            par = next((n for n, k in kinds.items() if k is ForKind.PARALLEL), None)
            if vector and ForKind.UNROLLED in kinds.values():
                form = "scan"
            elif par is not None:
                split = {r.outer: r.parent for r in up.relations if isinstance(r, Split)}
                form = ("vector+" if vector else "") + f"parallel:{split.get(par, par)}"
            else:
                form = "vector" if vector else "none"
            return [form, *(c for c in choices if c != form)]
        if rest.startswith("update") and rest.endswith(".atomic"):
            up = states.get(f"{func}.update({rest[6:-7]})")
            done = up is not None and up.atomic
            return [done, not done]
        if func not in states:
            return list(choices)  # a decision of a custom space: every choice, in order
        st = states[func]
        splits = {r.parent: r for r in st.relations if isinstance(r, Split)}
        kinds = st.kinds
        if rest in ("rfactor", "rfactor_lanes"):
            # the two forms: the chunk loop in parallel, or the partial sums in vector lanes
            rf = states.get(f"{func}_rf")
            lanes_form = rf is not None and ForKind.VECTORIZED in rf.kinds.values()
            done = rf is not None and lanes_form == (rest == "rfactor_lanes")
            return [done, not done]
        if rest == "column_rows":
            # its form: a reduction loop unrolled between pure loops (a step of rows)
            loops = st.loops
            done = any(st.is_reduction_loop(lp) and kinds.get(lp) is ForKind.UNROLLED
                       and not st.is_reduction_loop(loops[-1]) for lp in loops)
            return [done, not done]
        if rest in ("where", "where_root_or_inline"):
            loc = st.compute
            if loc.kind != "at":
                return [loc.kind]
            if loc.func not in {f.name for f in self.target.pipeline.funcs}:
                return ["root"]  # (at an rfactor stage's blocks: the one pass places it)
            host = states[loc.func].loops  # type: ignore[index]
            k = host.index(loc.loop) if loc.loop in host else AT_LEVELS
            return [f"at{k}"] if k < AT_LEVELS else []
        if rest == "order":
            if _copies(self.target, func):
                return ["packed"]
            last = st.loops[-1]
            # (the "all" row block reading its operands in place copies nothing)
            return ["dot", "tile", "packed"] if st.is_reduction_loop(last) else \
                ["tile", "dot", "packed"]
        if rest == "blis":
            # BLIS's order: the first reduction loop outside the row blocks' loop
            fn = self.target.pipeline.func(func)
            row = row_var(fn, [v.name for v in fn.definition.args])  # type: ignore[union-attr]
            loops = st.loops
            red = next((n for n, lp in enumerate(loops) if st.is_reduction_loop(lp)), None)
            done = red is not None and f"{row}.o.o" in loops and red < loops.index(f"{row}.o.o")
            return [done, not done]
        if rest == "prefetch":
            done = any(t == func for t, _, _ in st.prefetches)
            return [done, not done]
        if rest == "vectorize":
            vec = [lp for lp, k in kinds.items() if k == ForKind.VECTORIZED]
            if not vec:
                return [0]
            inner = {r.inner: r.factor for r in splits.values()}
            ext = inner.get(vec[0])
            widths = [w for w in reversed(VECTOR_WIDTHS) if w]
            first = [w for w in widths if ext is not None and whole_loop_vector(ext, w)]
            return [*first, *[w for w in widths if w not in first]]
        if rest == "unroll":
            un = ForKind.UNROLLED in kinds.values()
            return [un, not un]
        if rest == "parallel":
            par = ForKind.PARALLEL in kinds.values()
            return [par, not par]
        var, _, what = rest.partition(".")
        rel = splits.get(var)
        if what == "split":  # (a factor not among them: an even segment, ``.even`` answers)
            fac = rel.factor if rel is not None else 1
            return [fac if fac in choices else choices[0]]
        if what == "even":
            done = rel is not None and self.params.get(f"{func}.{var}.split") != rel.factor
            return [done, not done]
        if what == "shift":
            return [rel is not None and rel.tail is TailStrategy.ShiftInwards]
        if what == "rows":
            return ["regs", rel.factor if rel is not None else 1]
        if what == "block":
            blk = splits.get(f"{var}.o")
            if blk is None and not _copies(self.target, func):
                return ["all", "model"]  # (the packed order without copies: in place)
            return ["model", *([blk.factor] if blk is not None else ["all"])]
        if what == "copy":  # panels per copy (a split of the panels' loop), or none copied
            grp = splits.get(f"{var}.o")
            return [grp.factor if grp is not None else 1] if _copies(self.target, func) else [0]
        return list(choices)


def _copies(s: Schedule, func: str) -> bool:
    """Whether a stage of ``s`` copies ``func``'s packed operand at one of ``func``'s loops:
    ``A_local``, or ``A_local2``... where another stage copies the same operand (symm's two
    sums)."""
    found = packed_operand(s.pipeline.func(func))
    base = f"{found[0]}_local" if found else None
    return base is not None and any(
        (n == base or (n.startswith(base) and n[len(base):].isdigit()))
        and local.compute.func == func for n, local in s.states.items())
