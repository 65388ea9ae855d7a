"""A thread's own buffer in a cooperative kernel: ``cache_write(..., scope="local")`` at a block
loop.

A buffer allocated at a loop of the block, outside its thread nests, is shared by the block's
threads (``launches._cooperative`` puts it in shared memory). With scope ``"local"`` each thread
keeps only the elements it touches, in its own memory (registers where the indices are constant
after unrolling), and keeps them across the block's serial loops: a GEMM's accumulator tile
lives in registers across the ``k`` blocks whose operands the threads stage in shared memory.
This is Halide's lifting of register allocations out of the thread loops
(``src/FuseGPUThreadLoops.cpp``); here the buffer is shrunk instead of lifted.

Every access of the buffer must be inside a thread nest and name an element
``c . tid + l``: ``tid`` the thread's ids on the axes its nest uses, ``c`` the same integers in
every access (the same tile loops mapped to the same axes), ``l`` an affine index of the
nest's other loops of constant extent (a register tile), the same element set per thread in
every nest. The thread's buffer is indexed by ``l``. Threads may not share an element (``|c|``
at least the extent of ``l`` in each dimension): what the shared buffer would have passed from
one thread to another has no place in a thread's own memory. A thread's elements may also come
in groups (TVM's virtual threads: a thread's 8 columns as two runs of 4, 64 apart, so that a
warp's vector reads of a row cover consecutive words): where one thread loop of ``T``
iterations moves a dimension by ``c`` and ``l`` is a part within ``[0, c)`` plus multiples of
``c T``, each thread's elements are disjoint from the others', and its buffer is indexed by
the part plus ``c`` per multiple (the groups packed together). Anything else is refused with a
``CompileError`` that names the access.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tensorlang.affine import Affine, const_value
from tensorlang.dtypes import int64
from tensorlang.errors import CompileError
from tensorlang.expr import BinOp, Const, Expr, Size, Var, map_children
from tensorlang.func import parse_stage_id
from tensorlang.schedule.ir import (Allocate, For, ForKind, LetStmt, Load, Stmt, Store, map_stmt,
                                    walk_stmts)
from tensorlang.schedule.schedule import Schedule

from .bounds import inline_lets, upper_bound

#: the axes of thread and block ids, innermost first (``threadIdx.x``: the innermost thread
#: loop; ``launches`` maps loops to them)
AXES = ("x", "y", "z")


@dataclass
class _Scope:
    """What an access sees: ``let`` values, the thread loops around it (var -> (axis, min)),
    and its nest's other loops (var -> (min, extent))."""

    lets: dict[str, Expr]
    threads: dict[str, tuple[str, Expr]] = field(default_factory=dict)
    loops: dict[str, tuple[Expr, Expr]] = field(default_factory=dict)
    #: the thread loops' extents (None: no constant bound)
    spans: dict[str, int | None] = field(default_factory=dict)

    def inline(self, e: Expr) -> Expr:
        return inline_lets(e, self.lets)


def thread_private(alloc: Allocate, axes: dict[str, tuple[str, str]],
                   lets: dict[str, Expr], kernel: str, loops: Sequence[For]) -> Allocate:
    """``alloc`` (at a loop of the block, its thread nests inside) as each thread's own buffer:
    indices ``l`` of the module docstring, extents their constant bounds, mins 0. ``axes``:
    each thread loop's ``("tid", axis)`` (``launches._cooperative``); ``lets``: the ``let``
    values around ``alloc`` and of the host program; ``loops``: the loops around ``alloc``
    (the block loops: where their starts are constants, their variables' least values).

    Raises:
        CompileError: an access outside the thread nests, not affine, naming elements of other
            threads, or mapping the buffer to the threads differently from another access.
    """
    buf = alloc.buffer
    outer = _Scope(dict(lets))
    least = {lp.var: const_value(lp.min) for lp in [*loops, *(
        n for n in walk_stmts(alloc.body) if isinstance(n, For))]}

    def nonneg(var: str) -> bool:  # a loop's variable from a non-negative constant start
        return (least.get(var) if least.get(var) is not None else -1) >= 0

    mins = [linear_form(outer.inline(m), nonneg) for m in buf.mins]
    mapping: list[tuple] = []  # per access: per dimension, the coefficient of each axis
    highs = [0] * buf.rank
    grouped: set[int] = set()  # dimensions a thread holds in groups (``_packed_groups``)

    def fail(why: str, where: str) -> CompileError:
        return CompileError(
            f"{buf.name} is each thread's own buffer (scope=\"local\") in kernel {kernel}, but "
            f"{where} {why}; every stage that touches it must map the same tile loops to the "
            f"same gpu_threads axes, with the rest of its index in unrolled or serial loops of "
            f"constant extent (or use scope=\"shared\")")

    def local(indices: tuple[Expr, ...], sc: _Scope, where: str) -> tuple[Expr, ...]:
        used = {axis for _, (axis, _) in sc.threads.items()}
        if not sc.threads or all(v.startswith("_single") for v in sc.threads):
            raise fail("is outside the thread loops", where)
        sig, out = [], []
        for d, e in enumerate(indices):
            rel = _combine(linear_form(sc.inline(e), nonneg), mins[d], -1)
            coeffs = tuple(sum(rel[0].get(_VAR + v, (None, 0))[1]
                               for v, (a, _) in sc.threads.items() if a == axis)
                           if axis in used else None for axis in AXES)
            rest = rel
            for v, (_, lo) in sc.threads.items():  # the thread's first element: tid = 0
                c = rel[0].get(_VAR + v, (None, 0))[1]
                if c:
                    rest = _combine(_combine(rest, ({_VAR + v: (Var(v), c)}, 0), -1),
                                    linear_form(sc.inline(lo), nonneg), c)
            lo_hi = _range(rest, sc)
            moving = [(v, c) for v in sc.threads
                      if (c := rel[0].get(_VAR + v, (None, 0))[1])]
            if lo_hi is not None and len(moving) == 1 and lo_hi[1] >= abs(moving[0][1]) > 0:
                # a thread's elements in groups c T apart: packed, or refused as shared
                v, c = moving[0]
                packed = _packed_groups(rest, c, sc.spans.get(v), sc)
                if packed is None:
                    raise fail(f"shares elements of dimension {d} between threads (its index "
                               f"spans {lo_hi[1] + 1} per thread, threads {c} apart)", where)
                grouped.add(d)
                rest, lo_hi = packed, _range(packed, sc)
                assert lo_hi is not None
            if lo_hi is None:
                left = " + ".join(str(x) for x, c in rest[0].values())
                raise fail(f"indexes dimension {d} with {left}, which is more than the "
                           f"thread's ids and loops of constant extent", where)
            if lo_hi[0] < 0:
                raise fail(f"reaches below the thread's first element in dimension {d}", where)
            highs[d] = max(highs[d], lo_hi[1])
            sig.append(coeffs)
            out.append(Affine.make({k[len(_VAR):]: c for k, (_, c) in rest[0].items()}, {},
                                   rest[1]).to_expr())
        mapping.append((tuple(sig), where))
        return tuple(out)

    def fix(e: Expr, sc: _Scope, where: str) -> Expr:
        e = map_children(e, lambda c: fix(c, sc, where))
        if isinstance(e, Load) and e.buffer == buf.name:
            return dataclasses.replace(e, indices=local(e.indices, sc, f"a read in {where}"))
        return e

    def go(s: Stmt, sc: _Scope) -> Stmt:
        inner = sc
        if isinstance(s, For):
            inner = _Scope(sc.lets, dict(sc.threads), dict(sc.loops), dict(sc.spans))
            if s.kind is ForKind.GPU_THREAD:
                inner.threads[s.var] = (axes[s.var][1], s.min)
                inner.spans[s.var] = upper_bound(sc.inline(s.extent))
            else:
                inner.loops[s.var] = (s.min, s.extent)
        elif isinstance(s, LetStmt):
            inner = _Scope({**sc.lets, s.var: s.value}, sc.threads, sc.loops, sc.spans)
        where = f"the nest of {next(iter(sc.threads), 'the block')}"
        if isinstance(s, Store) and s.buffer == buf.name:
            return dataclasses.replace(s, indices=local(s.indices, sc, f"a store in {where}"),
                                       value=fix(s.value, sc, where))
        return map_stmt(s, lambda c: go(c, inner), lambda e: fix(e, sc, where))

    body = go(alloc.body, outer)
    first = mapping[0][0] if mapping else ()
    for sig, where in mapping:
        if sig != first:
            raise fail("maps it to the threads differently from the first access "
                       f"(coefficients of threadIdx {', '.join(AXES)} per dimension: {sig} vs "
                       f"{first})", where)
    extents = [h + 1 for h in highs]
    for d, coeffs in enumerate(first):
        moving = [c for c in coeffs if c]
        if len(moving) > 1 or moving and abs(moving[0]) < extents[d] and d not in grouped:
            raise fail(f"shares elements of dimension {d} between threads ({extents[d]} per "
                       f"thread, {moving} apart)", "an access")
    zero = Const(0, int64)
    new = dataclasses.replace(buf, mins=tuple(zero for _ in extents),
                              extents=tuple(Const(n, int64) for n in extents))
    return Allocate(new, body)


#: a linear form: atom key -> (atom, coefficient), and a constant; atoms are Vars (keyed by
#: ``_VAR`` + name) and any other subexpression (keyed by its text: ``max(8 * j.o, 0)``), so
#: that the same bound in a loop's min and a buffer's min cancels
Linear = tuple[dict[str, tuple[Expr, int]], int]
_VAR = "var:"


def linear_form(e: Expr, nonneg: Callable[[str], bool] = lambda v: False) -> Linear:
    """``e`` as a sum of atoms times integers plus a constant (see ``Linear``); ``max`` and
    ``min`` of two forms one of which is provably the larger (every term of the difference
    non-negative: ``nonneg`` says which Vars are; by default none) are that form: bounds
    inference clamps a tile's start with ``max(8 * j.o + t, 0)`` where the tile's own loops
    start at ``8 * j.o + t``; a floor division by a positive constant of a form whose atoms
    cancel is its constant (``(min(64 x, N) + 63 - min(64 x, N) + 1) // 4``: 16)."""
    c = const_value(e)
    if c is not None:
        return {}, c
    if isinstance(e, Var):
        return {_VAR + e.name: (e, 1)}, 0
    if isinstance(e, BinOp) and e.op in ("add", "sub"):
        return _combine(linear_form(e.a, nonneg), linear_form(e.b, nonneg),
                        1 if e.op == "add" else -1)
    if isinstance(e, BinOp) and e.op == "mul":
        a, b = linear_form(e.a, nonneg), linear_form(e.b, nonneg)
        if not a[0]:
            return _combine(({}, 0), b, a[1])
        if not b[0]:
            return _combine(({}, 0), a, b[1])
    if isinstance(e, BinOp) and e.op in ("max", "min"):
        a, b = linear_form(e.a, nonneg), linear_form(e.b, nonneg)
        if _nonneg(_combine(a, b, -1), nonneg):  # a >= b
            return a if e.op == "max" else b
        if _nonneg(_combine(b, a, -1), nonneg):
            return b if e.op == "max" else a
    if isinstance(e, BinOp) and e.op == "floordiv":  # a constant once its terms cancel
        a, d = linear_form(e.a, nonneg), const_value(e.b)
        if not a[0] and d is not None and d > 0:
            return {}, a[1] // d
    return {"expr:" + str(e): (e, 1)}, 0


def _nonneg(form: Linear, nonneg: Callable[[str], bool]) -> bool:
    """Whether ``form`` is at least 0 for every value of its atoms: a non-negative constant and
    positive multiples of non-negative atoms (Vars ``nonneg`` names, sizes, their floor
    division and remainder by a positive constant or a size)."""
    return form[1] >= 0 and all(c > 0 and _atom_nonneg(atom, nonneg)
                                for atom, c in form[0].values())


def _atom_nonneg(atom: Expr, nonneg: Callable[[str], bool]) -> bool:
    if isinstance(atom, Var):
        return nonneg(atom.name)
    if isinstance(atom, Size):
        return True
    if isinstance(atom, BinOp) and atom.op in ("floordiv", "mod"):  # by a size: >= 1
        c = 1 if isinstance(atom.b, Size) else const_value(atom.b)
        return c is not None and c > 0 and _nonneg(linear_form(atom.a, nonneg), nonneg)
    return False


def _combine(a: Linear, b: Linear, scale: int) -> Linear:
    """``a + scale * b``, zero terms dropped."""
    terms = dict(a[0])
    for k, (atom, c) in b[0].items():
        terms[k] = (atom, terms.get(k, (atom, 0))[1] + scale * c)
    return {k: v for k, v in terms.items() if v[1]}, a[1] + scale * b[1]


def _packed_groups(rest: Linear, c: int, span: int | None, sc: _Scope) -> Linear | None:
    """``rest`` (a thread's index ``l`` in one dimension, ``c`` its thread's stride, ``span``
    the thread loop's extent) with its groups packed: ``l = p + m c T`` with the part ``p``
    within ``[0, c)`` and ``m >= 0`` becomes ``p + m c``; None where ``l`` is not of that form
    (its elements could then be another thread's)."""
    if span is None or c <= 0:
        return None
    period = c * span
    low = {k: t for k, t in rest[0].items() if t[1] % period}
    high = {k: (atom, a // period * c) for k, (atom, a) in rest[0].items() if not a % period}
    q, r = divmod(rest[1], period)
    part = _range((low, r), sc)
    if part is None or part[0] < 0 or part[1] >= c:
        return None
    packed = ({**low, **high}, r + q * c)
    whole = _range(packed, sc)
    return packed if whole is not None and whole[0] >= 0 else None


def _range(form: Linear, sc: _Scope) -> tuple[int, int] | None:
    """The least and greatest value of ``form`` over its loops' ranges, or None where it has
    an atom that is no loop of constant bounds around the access."""
    lo = hi = form[1]
    for key, (_, c) in form[0].items():
        v = key[len(_VAR):]
        if not key.startswith(_VAR) or v not in sc.loops:
            return None
        start = const_value(sc.inline(sc.loops[v][0]))
        ext = upper_bound(sc.inline(sc.loops[v][1]))  # a partial tile's min(4, N - ...)
        if start is None or ext is None or ext < 1:
            return None
        a, b = c * start, c * (start + ext - 1)
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def private_buffers(schedule: Schedule | None) -> frozenset[str]:
    """The stages asked for in each thread's own memory (``scope="local"``): ``plan`` keeps
    them per thread where they are computed at a loop of the block (``thread_private``)."""
    if schedule is None:
        return frozenset()
    return frozenset(n for n, st in schedule.states.items() if st.memory == "local")


def pure_stages(schedule: Schedule | None) -> frozenset[str]:
    """The stages whose value at a point is a function of the point (neither an update nor a
    reduction): ``plan`` lets two thread nests of a block write one of them without a barrier
    between them (``launches.barriers``)."""
    if schedule is None:
        return frozenset()
    view = schedule.view
    funcs = {parse_stage_id(n)[0] for n in schedule.states}
    return frozenset(n for n in funcs
                     if not view.func(n).updates and not view.definition(n).rvars)


def double_buffered(schedule: Schedule | None) -> frozenset[str]:
    """The copies in shared memory asked to be double buffered (``Stage.double_buffer()``):
    ``plan`` gives them two slots (``double_buffer.py``)."""
    if schedule is None:
        return frozenset()
    return frozenset(n for n, st in schedule.states.items() if st.double_buffer)


def shared_copies(schedule: Schedule | None) -> frozenset[str]:
    """The copies asked for in shared memory (``cache_read(..., scope="shared")``): ``plan``
    may size one a kernel when launching (a whole row, ``launches.Launch.dynamic``), where a
    stage computed at a block loop must have a constant size."""
    if schedule is None:
        return frozenset()
    return frozenset(n for n, st in schedule.states.items() if st.memory == "shared")
