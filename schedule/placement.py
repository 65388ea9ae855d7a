"""Where each Func is computed and stored: the checks of ``compute_at`` / ``store_at`` placements
that need no isl — every reader of a Func computed at a loop is inside that loop, storage is at or
outside the compute level, and no buffer is shared by the iterations of a parallel loop between
them. ``Schedule.check`` (so ``tl.check`` says what ``tl.compile`` accepts) and the lowering
(``realize``) both call ``plan_placements``: one verdict, one place."""

from __future__ import annotations

from typing import Any

from tensorlang.errors import IllegalScheduleError, ScheduleError
from tensorlang.expr import Access, walk
from tensorlang.func import Func

from .ir import CONCURRENT
from .loops import Split, StageState


#: Funcs placed at each (consumer stage, loop)
Placed = dict[tuple[str, str], list[Func]]


def live_funcs(view: Any, states: dict[str, StageState]) -> list[Func]:
    """The view's Funcs that are not inlined, producers first."""
    return [f for f in view.funcs if states[f.name].compute.kind != "inline"]


def live_readers(view: Any, states: dict[str, StageState]) -> dict[str, list[str]]:
    """For each Func not inlined, the stages (``F`` or ``F.update(n)``) that read it, directly or
    through inlined Funcs, in stage order."""
    live = live_funcs(view, states)
    inline = {f.name for f in view.funcs} - {f.name for f in live}
    readers: dict[str, list[str]] = {f.name: [] for f in live}

    memo: dict[str, set[str]] = {}

    def expand(names: list[str]) -> set[str]:
        # an inlined Func stands for what it reads (memoized per Func: a 5x5 stencil inlined
        # into another is expanded once, not once per access)
        out: set[str] = set()
        for n in names:
            if n in inline:
                if n not in memo:
                    memo[n] = expand(view.reads(n))
                out |= memo[n]
            else:
                out.add(n)
        return out

    for c in live:
        stages = [(c.name, view.reads(c.name))] + \
            [(f"{c.name}.update({u.number})",
              list({a.name: None for a in walk(u.value) if isinstance(a, Access)}))
             for u in c.updates]
        for stage, names in stages:
            for name in expand(names):
                if name in readers and name != c.name and stage not in readers[name]:
                    readers[name].append(stage)
    return readers


def plan_placements(view: Any, states: dict[str, StageState],
                    errors: list[tuple[str, ScheduleError]] | None = None) -> tuple[Placed, Placed]:
    """(computed_at, stored_at): the Funcs of ``view`` (an ``AlgorithmView``) computed / stored at
    each (consumer stage, loop) under the stage ``states``.

    Raises:
        ScheduleError: the first placement that cannot be lowered (``placement_error``); with
            ``errors`` given, each one is appended there as (Func name, error) instead.
    """
    readers = live_readers(view, states)
    computed_at: Placed = {}
    stored_at: Placed = {}
    for f in live_funcs(view, states):
        problem = placement_error(f.name, states, readers[f.name]) or fusion_error(
            view, f.name, states)
        if problem is not None:
            if errors is None:
                raise problem
            errors.append((f.name, problem))
            continue
        st = states[f.name]
        if st.compute.kind == "at":
            computed_at.setdefault((st.compute.func, st.compute.loop), []).append(f)
            store = st.store or st.compute
            stored_at.setdefault((store.func, store.loop), []).append(f)
    return computed_at, stored_at


def fusion_error(view: Any, name: str, states: dict[str, StageState]) -> ScheduleError | None:
    """Why Func ``name``'s compute_with (or hosting one) cannot be lowered, or None: the host
    or the fused stage is no longer at root, the shared loops differ (a split or reorder after
    compute_with), or a Func is computed at one of the fused stage's shared loops (that loop is
    the host's)."""
    st = states[name]
    if st.fused is None:
        return None
    host = states.get(st.fused.func)
    if host is None:
        return ScheduleError.in_schedule(name, f"compute_with names {st.fused.func}, not a Func "
                                         f"of this pipeline")
    for s_ in (st, host):
        if s_.compute.kind != "root":
            return ScheduleError.in_schedule(
                name, f"{s_.func} is computed {s_.compute}, but compute_with fuses stages "
                f"computed at root")
    problem = fused_loops_mismatch(st, host, st.fused.loop)
    if problem is not None:
        return ScheduleError.in_schedule(name, f"compute_with({st.fused.func}, "
                                         f"{st.fused.loop}): {problem}")
    shared = set(st.loops[:host.loops.index(st.fused.loop) + 1])
    for other, o in states.items():
        if o.compute.kind == "at" and o.compute.func == name and o.compute.loop in shared:
            return ScheduleError.in_schedule(
                other, f"{other} is computed at {name}.{o.compute.loop}, a loop {name} shares "
                f"with {st.fused.func} (compute_with); compute it at {st.fused.func}'s loop or "
                f"at one of {name}'s own inner loops")
    return None


def placement_error(name: str, states: dict[str, StageState],
                    readers: list[str]) -> ScheduleError | None:
    """Why Func ``name``'s placement cannot be lowered, or None: store_at without compute_at, a
    reader outside the compute loop, store_at with other readers or another consumer, storage
    inside the compute level (``ScheduleError``), or storage outside a parallel loop the Func is
    computed inside, which threads would share (``IllegalScheduleError``)."""
    st = states[name]
    if st.compute.kind != "at":
        return None if st.store is None else ScheduleError.in_schedule(
            name, "store_at needs compute_at (a Func computed at root is stored at root)")
    key = (st.compute.func, st.compute.loop)
    try:
        states[key[0]].resolve(key[1], f"compute_at of {name}")
        if st.store is not None:
            states[st.store.func].resolve(st.store.loop, f"store_at of {name}")
    except ScheduleError as exc:  # the loop is gone (fused or split after the placement)
        return exc
    for r in readers:
        rl = states[r].compute
        if r != st.compute.func and (rl.kind, rl.func, rl.loop) != ("at", *key):
            return ScheduleError.in_schedule(
                name, f"compute_at({st.compute.func}, {st.compute.loop}) needs every reader of "
                f"{name} inside that loop, but {r} is computed {rl}; compute {r} at the same "
                f"loop, inline it, or compute {name} at root")
    if st.store is None:
        return None
    if readers != [st.compute.func]:
        return ScheduleError.in_schedule(
            name, f"store_at needs {st.compute.func} to be the only reader")
    if st.store.func != st.compute.func:
        return ScheduleError.in_schedule(
            name, "store_at and compute_at must name the same consumer")
    cst = states[st.store.func]
    if cst.loops.index(st.store.loop) > cst.loops.index(st.compute.loop):
        return ScheduleError.in_schedule(
            name, f"store_at loop {st.store.loop} is inside compute_at loop "
            f"{st.compute.loop}; storage must be at or outside the compute level")
    between = cst.loops[cst.loops.index(st.store.loop) + 1: cst.loops.index(st.compute.loop) + 1]
    par = [lp for lp in between if cst.kinds[lp] in CONCURRENT]
    if par:
        return IllegalScheduleError.in_schedule(
            name, f"stored at {st.store.loop} but computed inside the parallel loop {par[0]} "
            f"of {st.store.func}: threads would share one buffer; store it inside {par[0]}")
    return None


def fused_loops_mismatch(st: StageState, host: StageState, loop: str) -> str | None:
    """Why stage ``st`` cannot share ``host``'s loops down to ``loop`` (None: it can, up to the
    bounds, which lowering compares). The loops are matched by position, outermost first, as
    Halide's ``compute_with`` matches them: ``st``'s first loops stand for the host's, of
    whatever names. Each pair must be of one kind and pure in both (a reduction loop shared
    would interleave two reductions' iterations); a pair of one name must come from the same
    splits and fuses (the same loop of the same Var)."""
    if loop not in host.loops:
        return f"{host.func} has no loop {loop} (its loops: {', '.join(host.loops)})"
    k = host.loops.index(loop) + 1
    if len(st.loops) < k:
        return (f"compute_with shares {host.func}'s loops down to {loop}, {k} loops, but "
                f"{st.func} has only {len(st.loops)}: fuse at an outer loop of {host.func}")
    for mine, theirs in zip(st.loops[:k], host.loops[:k]):
        pair = theirs if mine == theirs else f"{theirs} (shared with {st.func}'s {mine})"
        if host.is_reduction_loop(theirs) or st.is_reduction_loop(mine):
            return f"loop {pair} iterates a reduction; compute_with shares pure loops only"
        if host.kinds[theirs] is not st.kinds[mine]:
            return (f"loop {pair} is {host.kinds[theirs].value} in {host.func} but "
                    f"{st.kinds[mine].value} in {st.func}; a shared loop has one kind: "
                    f"schedule it alike in both")
        if mine == theirs and _relations_of(st, mine) != _relations_of(host, theirs):
            return (f"loop {pair} is made by different splits/fuses in {host.func} and "
                    f"{st.func}; a shared loop must come from the same ones")
    return None


def _relations_of(st: StageState, loop: str) -> list:
    """The splits and fuses that made ``loop`` (those whose results it descends from)."""
    out, names = [], {loop}
    for rel in reversed(st.relations):
        made = {rel.outer, rel.inner} if isinstance(rel, Split) else {rel.fused}
        if made & names:
            out.append(rel)
            names |= {rel.parent} if isinstance(rel, Split) else {rel.outer, rel.inner}
    return out
