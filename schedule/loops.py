"""The state of one Func's stage under a schedule, and the loop rewrites (split, fuse, reorder).

A stage starts with one loop per Var: the pure Vars in left-side order, then the reduction Vars
(outermost first), exactly the default loop nest. Each rewrite replaces loops by new ones with
deterministic names and records the relation, from which ``schedule/nest.py`` rebuilds every
original Var as an expression of the final loops:

- ``split(v, f)``: ``v == v.min + v.o * f + v.i`` with ``v.i`` in ``[0, f)``;
- ``fuse(a, b)``: ``a == a.min + fused // extent(b)``, ``b == b.min + fused % extent(b)``.

See also: Halide ``Func::split/fuse/reorder`` (``src/Func.cpp``), TVM ``split/fuse/reorder``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorlang.errors import ScheduleError
from tensorlang.func import Func

from .ir import ForKind
from .trace import TailStrategy


@dataclass(frozen=True)
class Split:
    parent: str
    outer: str
    inner: str
    factor: int
    tail: TailStrategy


@dataclass(frozen=True)
class Fuse:
    outer: str
    inner: str
    fused: str


@dataclass(frozen=True)
class Location:
    """Where a Func is computed or stored: ``root``, ``inline``, or ``at`` loop ``loop`` of
    Func ``func``'s stage."""

    kind: str
    func: str | None = None
    loop: str | None = None

    def __str__(self) -> str:
        return self.kind if self.kind != "at" else f"at {self.func}.{self.loop}"


ROOT = Location("root")
INLINE = Location("inline")


@dataclass
class StageState:
    """Mutable replay state of one stage (rebuilt from the trace; never stored)."""

    func: str
    pure: tuple[str, ...]
    rvars: tuple[str, ...]
    loops: list[str]
    kinds: dict[str, ForKind]
    origin: dict[str, frozenset[str]]
    relations: list[Split | Fuse] = field(default_factory=list)
    consumed: dict[str, str] = field(default_factory=dict)
    compute: Location = ROOT
    store: Location | None = None
    update: int | None = None  # the update definition this stage runs (None: the pure one)
    #: compute_with: this stage's loops from the outermost to ``fused.loop`` are those of
    #: ``fused.func``'s stage (Location kind ``"with"``); None: its own loop nest
    fused: Location | None = None
    #: where a cache_read copy lives on a GPU (``"shared"`` by a block's threads, ``"local"``
    #: to one thread), as its ``scope`` asked; None: wherever its compute level puts it
    memory: str | None = None
    #: atomic(): the update's accumulation into a cell may be reassociated (Halide's
    #: ``Stage::atomic``; ``schedule/cell_reduction.py``)
    atomic: bool = False
    #: storage_align: storage dimension -> (factor, offset), its stride in elements made
    #: ``factor * n + offset`` by padding the dimension inside it (TVM's ``storage_align``)
    align: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: reorder_storage: the pure Vars in storage order, outermost first (None: the arguments')
    storage_order: tuple[str, ...] | None = None
    #: double_buffer(): a GPU copy in shared memory gets two slots, the next step's tile copied
    #: while the current one is used (TVM's ``double_buffer``; ``backends/cuda/double_buffer.py``)
    double_buffer: bool = False
    #: prefetch(): (tensor, loop, offset) — at the top of each iteration of ``loop``, fetch the
    #: box of ``tensor`` that iteration ``loop + offset`` touches (``schedule/prefetch.py``)
    prefetches: list[tuple[str, str, int]] = field(default_factory=list)

    @staticmethod
    def initial_update(f: Func, number: int) -> StageState:
        """The stage of update ``number`` of ``f``: pure Vars outermost (left-side order), then
        the RVars with each RDom's first dimension innermost (Halide's default)."""
        u = f.updates[number]
        pure = tuple(u.pure)
        rv = sorted(u.rvars, key=lambda r: (r.name.rsplit("_", 1)[0], -r.dim))
        rvars = tuple(r.name for r in rv)
        loops = [*pure, *rvars]
        return StageState(f"{f.name}.update({number})", pure, rvars, loops,
                          {n: ForKind.SERIAL for n in loops}, {n: frozenset([n]) for n in loops},
                          update=number)

    @staticmethod
    def initial(f: Func) -> StageState:
        d = f.definition
        assert d is not None
        pure = tuple(a.name for a in d.args)
        rvars = tuple(r.name for r in d.rvars)
        loops = [*pure, *rvars]
        return StageState(f.name, pure, rvars, loops, {n: ForKind.SERIAL for n in loops},
                          {n: frozenset([n]) for n in loops})

    def is_reduction_loop(self, loop: str) -> bool:
        return bool(self.origin[loop] & set(self.rvars))

    def resolve(self, loop: str, primitive: str) -> str:
        """Check that ``loop`` is a current loop of this stage, else raise a ScheduleError."""
        if loop in self.loops:
            return loop
        if loop in self.consumed:
            raise ScheduleError.in_schedule(
                self.func, f"got loop {loop}, which no longer exists: {self.consumed[loop]} "
                f"replaced it; use the loops it returned (current loops: "
                f"{', '.join(self.loops)})", primitive)
        raise ScheduleError.in_schedule(
            self.func, f"got unknown loop {loop!r}; the loops of {self.func} are "
            f"{', '.join(self.loops)}", primitive)

    def _fresh(self, name: str, primitive: str) -> str:
        if name in self.loops or name in self.consumed:
            raise ScheduleError.in_schedule(
                self.func, f"would create loop {name}, which already exists", primitive)
        return name


def apply_split(st: StageState, loop: str, factor: int, tail: TailStrategy,
                what: str) -> tuple[str, str]:
    """Replace ``loop`` by ``loop.o`` (outer) and ``loop.i`` (inner, extent ``factor``)."""
    st.resolve(loop, what)
    outer, inner = st._fresh(f"{loop}.o", what), st._fresh(f"{loop}.i", what)
    at = st.loops.index(loop)
    st.loops[at: at + 1] = [outer, inner]
    st.relations.append(Split(loop, outer, inner, factor, tail))
    kind = st.kinds.pop(loop)
    st.kinds[outer] = kind
    st.kinds[inner] = ForKind.SERIAL
    st.origin[outer] = st.origin[inner] = st.origin[loop]
    st.consumed[loop] = what
    return outer, inner


def apply_fuse(st: StageState, outer: str, inner: str, what: str) -> str:
    """Replace the adjacent loops ``outer``, ``inner`` by one loop ``outer.inner.fused``."""
    st.resolve(outer, what)
    st.resolve(inner, what)
    a, b = st.loops.index(outer), st.loops.index(inner)
    if b != a + 1:
        raise ScheduleError.in_schedule(
            st.func, f"needs {inner} directly inside {outer}, but the loop order is "
            f"{', '.join(st.loops)}; reorder them first", what)
    if st.is_reduction_loop(outer) != st.is_reduction_loop(inner):
        raise ScheduleError.in_schedule(
            st.func, f"would fuse a pure loop with a reduction loop ({outer}, {inner}); fuse "
            f"pure loops with pure loops only", what)
    fused = st._fresh(f"{outer}.{inner}.fused", what)
    st.loops[a: b + 1] = [fused]
    st.relations.append(Fuse(outer, inner, fused))
    st.kinds[fused] = st.kinds.pop(outer)
    st.kinds.pop(inner)
    st.origin[fused] = st.origin[outer] | st.origin[inner]
    st.consumed[outer] = st.consumed[inner] = what
    return fused


def apply_reorder(st: StageState, loops: list[str], what: str) -> None:
    """Permute ``loops`` (outermost first) among the positions they occupy together (whether
    the new order respects the dependences is proven by ``schedule.legality``)."""
    for lp in loops:
        st.resolve(lp, what)
    if len(set(loops)) != len(loops):
        raise ScheduleError.in_schedule(st.func, "lists a loop twice", what)
    positions = sorted(st.loops.index(lp) for lp in loops)
    new = list(st.loops)
    for pos, lp in zip(positions, loops):
        new[pos] = lp
    st.loops[:] = new


def default_states(funcs: list[Func]) -> dict[str, StageState]:
    """The default stage of every Func and of each of its update definitions."""
    out: dict[str, StageState] = {}
    for f in funcs:
        out[f.name] = StageState.initial(f)
        for k in range(len(f.updates)):
            st = StageState.initial_update(f, k)
            out[st.func] = st
    return out
