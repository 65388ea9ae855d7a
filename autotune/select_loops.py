"""Pure loops of a few iterations that choose between expressions: unrolled, inside the others.

A definition that picks its value by a pure Var of small constant extent — Halide's hist output
``out[c, y, x] = where(c == 0, red, where(c == 1, green, blue))`` — evaluates every branch of
each ``where`` at every point while ``c`` is a loop: a select computes both of its sides (in
vector code always). Unrolled, each copy of the loop body has ``c`` a constant, and the code
generator's constant folding (LLVM's) keeps one branch. Inside the loop over rows, the copies
also read the same row of each producer (the row is in L1 for the second and third channel).
Halide's apps schedule planar colour channels so: apps/hist's output
``reorder(c, x, y).bound(c, 0, 3).unroll(c)``, apps/camera_pipe's colour-corrected stage
(``select(c == 0, r, c == 1, g, b)``) ``reorder(c, x, y)`` ... ``unroll(c)``.

The rule (``select_loops``): a pure Var of a definition without reduction Vars whose domain
extent is a constant of 2 to ``MAX_SELECT_UNROLL`` and which a ``where`` condition of the
definition mentions. ``unroll_selects`` splits each such Var by its extent (``c.o`` of one
iteration outermost, ``c.i``: the form of the search space, whose loops keep the Vars' order
and whose ``<F>.unroll`` unrolls the inner split loop right outside the vector loop), moves
the inner loop right outside the vector loop and unrolls it; the stage's parallel loop is then
the outermost other pure loop with two iterations or more (three channels on two threads left
one thread idle a third of the time). In an update definition (``unroll_update_selects``: the
value added to a histogram's cell by channel, Halide's bilateral_grid) the same Var moves
inside the reduction loops and is unrolled there, where the legality check allows it.

See also: ``heuristic._stage`` and ``heuristic._schedule_update`` (where the rule applies);
Halide's ``unroll`` and ``bound``; LLVM's ``InstSimplify`` (a ``select`` on a constant
condition).
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorlang.affine import const_value
from tensorlang.expr import Expr, Select, Var, walk
from tensorlang.errors import ScheduleError
from tensorlang.func import Func
from tensorlang.schedule.loops import Split, StageState
from tensorlang.schedule.schedule import Stage

from .workloads import BoundExtents

#: the most iterations of a pure loop the rule unrolls to fold the selects on its Var (colour
#: channels: 3 or 4); 0 turns the rule off
MAX_SELECT_UNROLL = 4
#: whether update definitions take the rule too (``unroll_update_selects``); 0: they keep their
#: loop order
UPDATE_SELECTS = 1


def select_loops(f: Func, ext: dict[str, int], vectorized: bool) -> list[str]:
    """The pure Vars of ``f`` (outermost first) whose loops ``unroll_selects`` unrolls: a
    ``where`` condition of the definition mentions them, their domain extent is a constant of 2
    to ``MAX_SELECT_UNROLL`` and so is their loop's extent ``ext[v]`` at these sizes; not the
    innermost Var where it is ``vectorized``. None (an empty list) for a reduction."""
    d = f.definition
    if d is None or d.rvars or f.updates or MAX_SELECT_UNROLL < 2:
        return []
    args = [v.name for v in d.args]
    return [a for a in _tested_dims(f, d.value, args, ext) if not (vectorized and a == args[-1])]


def _tested_dims(f: Func, value: Expr, dims: Sequence[Expr | str], ext: dict[str, int]
                 ) -> list[str]:
    """The pure Vars at ``dims`` (the definition's left side, by dimension of ``f``) that a
    ``where`` condition of ``value`` mentions, whose domain extent is a constant of 2 to
    ``MAX_SELECT_UNROLL`` and their loop's extent ``ext`` the same."""
    tested = {n.name for s in walk(value) if isinstance(s, Select)
              for n in walk(s.cond) if isinstance(n, Var)}
    out = []
    for dim, a in enumerate(dims):
        a = a if isinstance(a, str) else a.name if isinstance(a, Var) else None
        if a is None or a not in tested or a not in ext:
            continue
        domain = const_value(f.bounds[dim][1])
        if domain is not None and 2 <= domain <= MAX_SELECT_UNROLL and ext[a] == domain:
            out.append(a)
    return out


def unroll_selects(st: Stage, f: Func, ext: dict[str, int], lanes: int, vectorized: bool,
                   par: str | None) -> str | None:
    """Unroll ``select_loops`` of ``f``'s stage ``st`` right outside its vector loop of
    ``lanes`` lanes (innermost where it is not ``vectorized``: the last Var is then not split)
    and return the loop to run in parallel: ``par`` where there is nothing to unroll, else the
    outermost other pure loop with two iterations or more, the vector loop's outer loop where
    there is none and it has two, or None."""
    small = select_loops(f, ext, vectorized)
    if not small:
        return par
    d = f.definition
    assert d is not None
    args = [v.name for v in d.args]
    inner = [st.split(a, ext[a])[1].name for a in small]
    outer = [f"{a}.o" if a in small else a for a in args]
    if vectorized:
        outer[-1] = f"{args[-1]}.o"
        st.reorder(*outer, *inner, f"{args[-1]}.i")
    else:
        st.reorder(*outer, *inner)
    for name in inner:
        st.unroll(name)
    others = [a for a in args[:-1] if a not in small and ext[a] >= 2]
    if others:
        return others[0]
    return f"{args[-1]}.o" if vectorized and ext[args[-1]] >= 2 * lanes else None


def unit_loops(st: StageState, f: Func) -> set[str]:
    """The outer loops of ``st`` (a stage of ``f``) that ``unroll_selects`` made: of splits by
    the whole constant domain extent of a pure Var, one iteration each. A producer computed at
    the stage's row loop (``heuristic._row_loop``) looks past them."""
    d = f.definition
    if d is None:
        return set()
    dims = {v.name: dim for dim, v in enumerate(d.args)}
    return {r.outer for r in st.relations if isinstance(r, Split) and r.parent in dims
            and const_value(f.bounds[dims[r.parent]][1]) == r.factor}


def row_loops(st: StageState, f: Func) -> list[str]:
    """The loops of ``st`` (a stage of ``f``), outermost first, less its ``unit_loops``."""
    unit = unit_loops(st, f)
    return [lp for lp in st.loops if lp not in unit]


def unroll_update_selects(st: Stage, f: Func, number: int, extents: BoundExtents,
                          long_loop: int) -> None:
    """Update ``number`` of ``f`` (its stage ``st``; loop extents from ``extents``): each pure
    Var its value's ``where`` conditions test (``_tested_dims``) moved inside the reduction loops,
    innermost or right outside an innermost pure loop of at least ``long_loop`` iterations (one
    the update may vectorize), and unrolled: Halide's bilateral_grid schedules its histogram so
    (``histogram.update().reorder(c, r.x, r.y, x, y).unroll(c)``), and the channels' copies
    share the read, the clamp and the bin of each pixel. The legality check decides whether
    the update's dependences allow the order.

    Raises:
        ScheduleError: nothing to unroll.
    """
    u = f.updates[number]
    if not UPDATE_SELECTS:
        raise ScheduleError("UPDATE_SELECTS is off")
    ext = {ref.name: extents.extent(u.stage, ref.name) for ref in st.loops}
    small = [v for v in _tested_dims(f, u.value, u.index, ext) if v in u.pure]
    if not small:
        raise ScheduleError(f"{f.name}.update({number}): no loop a where() tests to unroll")
    loops = [ref.name for ref in st.loops if ref.name not in small]
    # a pure innermost loop long enough for the update to vectorize stays innermost
    long = bool(loops) and loops[-1] in u.pure and ext[loops[-1]] >= long_loop
    at = len(loops) - 1 if long else len(loops)
    st.reorder(*loops[:at], *small, *loops[at:])
    for name in small:
        st.unroll(name)
