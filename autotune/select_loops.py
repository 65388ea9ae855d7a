"""Pure loops of a few iterations that choose between expressions: unrolled, inside the others.

A definition that picks its value by a pure Var of small constant extent — Halide's hist output
``out[c, y, x] = where(c == 0, red, where(c == 1, green, blue))`` — evaluates every branch of
each ``where`` at every point while ``c`` is a loop: a select computes both of its sides (in
vector code always). Unrolled, each copy of the loop body has ``c`` a constant, and the code
generator's constant folding (LLVM's) keeps one branch. Inside the loop over rows, the copies
also read the same row of each producer (the row is in L1 for the second and third channel).
Halide's apps schedule planar colour channels so: apps/hist and apps/camera_pipe write
``output.reorder(c, x, y).bound(c, 0, 3).unroll(c)``.

The rule (``select_loops``): a pure Var of a definition without reduction Vars whose domain
extent is a constant of 2 to ``MAX_SELECT_UNROLL`` and which a ``where`` condition of the
definition mentions. ``unroll_selects`` splits each such Var by its extent (``c.o`` of one
iteration outermost, ``c.i``: the form of the search space, whose loops keep the Vars' order
and whose ``<F>.unroll`` unrolls the inner split loop right outside the vector loop), moves
the inner loop right outside the vector loop and unrolls it; the stage's parallel loop is then
the outermost other pure loop with two iterations or more (three channels on two threads left
one thread idle a third of the time).

See also: ``heuristic._stage`` (the pure stage it is part of); Halide's ``unroll`` and
``bound``; LLVM's ``InstSimplify`` (a ``select`` on a constant condition).
"""

from __future__ import annotations

from tensorlang.affine import const_value
from tensorlang.expr import Select, Var, walk
from tensorlang.func import Func
from tensorlang.schedule.loops import Split, StageState
from tensorlang.schedule.schedule import Stage

#: the most iterations of a pure loop the rule unrolls to fold the selects on its Var (colour
#: channels: 3 or 4); 0 turns the rule off
MAX_SELECT_UNROLL = 4


def select_loops(f: Func, ext: dict[str, int], vectorized: bool) -> list[str]:
    """The pure Vars of ``f`` (outermost first) whose loops ``unroll_selects`` unrolls: a
    ``where`` condition of the definition mentions them, their domain extent is a constant of 2
    to ``MAX_SELECT_UNROLL`` and so is their loop's extent ``ext[v]`` at these sizes; not the
    innermost Var where it is ``vectorized``. None for a reduction."""
    d = f.definition
    if d is None or d.rvars or f.updates or MAX_SELECT_UNROLL < 2:
        return []
    tested = {n.name for s in walk(d.value) if isinstance(s, Select)
              for n in walk(s.cond) if isinstance(n, Var)}
    args = [v.name for v in d.args]
    out = []
    for dim, a in enumerate(args):
        if a not in tested or (vectorized and a == args[-1]):
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
