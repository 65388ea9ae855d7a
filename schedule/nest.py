"""Build the loop nest of one scheduled stage over a region.

From the stage's loop relations (``schedule/loops.py``) every original Var becomes an expression of
the final loops; GuardWithIf tails become tightened loop bounds where an affine guard's innermost
loop can carry it (``for v.i in [0, min(f, e - v.o * f))``) and ``if`` statements elsewhere;
ShiftInwards tails become ``min(v.o * f, e - f)`` bases. A reduction stage initialises each cell
with the reducer's identity just before its outermost reduction loop, in a nest over the pure loops
inside that point (TVM's placement of ``init``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tensorlang.affine import (
    Affine,
    NonAffine,
    affine_form,
    const_value,
    sadd,
    sceildiv,
    sconst,
    sfloordiv,
    smax,
    smin,
    ssub,
)
from tensorlang.dtypes import DType, int64
from tensorlang.errors import IllegalScheduleError, ScheduleError
from tensorlang.expr import BinOp, Cmp, Const, Expr, Var, free_vars, substitute, walk

from .bounds import simplify_in_ranges
from .ir import CONCURRENT, Block, For, ForKind, IfThenElse, Stmt
from .loops import Fuse, Split, StageState
from .trace import TailStrategy

#: The fast version keeps a GuardWithIf split's tail where its guard bounds a serial loop (the
#: split's inner loop, innermost of the guard's loops) with a serial loop inside: ``for i.o.i in
#: [0, min(22, T - 22 * i.o.o))`` costs one ``min`` per row block, against a version condition
#: (the factor divides the extent) that sends every other extent to the guarded version, with
#: its masked vectors and ``if`` per unrolled row (``_serial_tails``; the stage's caller says
#: which Vars may: ``build_stage_nest``'s ``tail_vars``). 0: every GuardWithIf tail is a
#: version condition (for a benchmark's A/B).
SERIAL_TAILS = 1

#: An ``RDom.where`` bound placed on a serial reduction loop of constant range also bounds the
#: loops outside it that it mentions, by what some iteration of that range allows (the loop's
#: projection, as isl's AST generator bounds every loop; ``_bound_outward``): with the
#: reduction ``k <= j`` split into ``kc`` blocks outside ``j``, ``j`` starts at the block's
#: first ``k`` instead of running empty trips from 0. 0: only the innermost loop is bounded
#: (for a benchmark's A/B).
PROJECT_BOUNDS = 1

#: A tile loop outside the reduction loops (a reduction's initialisation inside it: the few
#: rows' nest, ``k`` unsplit inside the row tiles) is peeled on its tail too, each of its two
#: loops initialising its own cells (``StageNest.tail_peels``); 0: only a tile loop inside the
#: first reduction loop is (for a benchmark's A/B:
#: ``auto:tensorlang.schedule.nest.PEEL_WITH_INIT=0``).
PEEL_WITH_INIT = 1


@dataclass
class Leaf:
    """A loop of the final nest: IR variable ``var`` (``name`` unless renamed to avoid shadowing
    an enclosing loop), range ``[min, min + extent)``, kind, and whether it iterates a reduction."""

    name: str
    var: str
    min: Expr
    extent: Expr
    kind: ForKind
    reduction: bool
    guards: list[Expr] = field(default_factory=list)  # if-conditions inside this loop
    full_extent: Expr | None = None  # the extent before tail bounds were tightened
    full_min: Expr | None = None  # the min before an RDom condition raised it
    scalar: bool = False  # a serial loop LLVM must not vectorize (a short tail)
    #: the range the initialisation of a reduction runs over, where an RDom condition of pure
    #: Vars narrowed this loop (it is inside the first reduction loop): ``(min, extent)``
    init_range: tuple[Expr, Expr] | None = None


@dataclass
class Peel:
    """Loop ``loop`` runs ``[min, at)`` and ``[at, end)`` (clamped to its range); ``guard`` (one
    of the nest's core guards) is needed only in the first part (``guarded_first``) or only in
    the second. Halide's loop partitioning of a triangular bound inside a register tile: the
    corner of the triangle keeps the ``if``, the steady state is straight-line code whose
    accumulators stay in registers."""

    loop: str
    at: Expr
    guard: Expr
    guarded_first: bool


@dataclass
class StageNest:
    """The loops of a stage and each original Var as an expression of them."""

    func: str
    leaves: list[Leaf]
    values: dict[str, Expr]
    versions: list[Expr]  # conditions under which the ShiftInwards bases are valid (extent >= f)
    first_reduction: int | None
    #: GuardWithIf splits whose tail bound sits on the inner loop: outer loop variable ->
    #: (iterations with a full inner loop, inner loop variable), for loop partitioning
    partitions: dict[str, tuple[Expr, str]] = field(default_factory=dict)
    #: RDom conditions no loop bound could carry: an ``if`` around the stage's store
    core_guards: list[Expr] = field(default_factory=list)
    #: a core guard that holds for every iteration of the unrolled loops inside ``Peel.loop``
    #: from ``Peel.at`` on (or up to it): that loop runs as two, the guard only in one
    peel: Peel | None = None
    #: GuardWithIf splits whose tail guard sits as an ``if`` on their (unrolled) inner loop:
    #: outer loop variable -> (iterations whose guard holds for the whole inner loop, the inner
    #: loop variable, the guard); that outer loop runs as two loops, the first without the guard
    tail_peels: dict[str, tuple[Expr, str, Expr]] = field(default_factory=dict)

    @property
    def values_leaves(self) -> set[str]:
        return {lf.var for lf in self.leaves}

    def leaf_ranges(self, start: int, loose: bool = False) -> dict[str, tuple[Expr, Expr]]:
        """Inclusive ranges of the leaves at positions >= ``start`` (the varying ones);
        ``loose``: with full tile extents (constant upper bounds, for allocation sizes)."""
        out = {}
        for lf in self.leaves[start:]:
            ext = lf.full_extent if loose and lf.full_extent is not None else lf.extent
            lo = lf.full_min if loose and lf.full_min is not None else lf.min
            out[lf.var] = (lo, ssub(sadd(lo, ext), sconst(1)))
        return out

    def position(self, loop: str) -> int:
        for n, lf in enumerate(self.leaves):
            if lf.name == loop:
                return n
        raise ScheduleError(f"internal: loop {loop} not in stage {self.func}")


def _ceildiv(e: Expr, f: int) -> Expr:

    return sceildiv(e, f)


def build_stage_nest(st: StageState, region: dict[str, tuple[Expr, Expr]], scope: set[str],
                     shift_ok: bool, predicate: tuple[Expr, ...] = (),
                     tail_vars: frozenset[str] = frozenset(),
                     narrow: frozenset[str] = frozenset(),
                     bind: dict[str, str] | None = None) -> StageNest:
    """Loops of stage ``st`` over ``region`` (original Var -> ``(min, extent)``).

    ``predicate``: the stage's ``RDom.where`` conditions (boolean expressions of its original
    Vars); each affine comparison bounds the innermost loop it mentions (of an update, or a
    reduction loop), the rest guard the store (``StageNest.core_guards``).

    ``scope``: IR loop variables of enclosing loops (leaves are renamed ``F.loop`` to avoid them).
    ``shift_ok``: build the fast version: ShiftInwards bases, and no GuardWithIf tails, valid
    under the conditions returned in ``versions`` (else: the always-valid guarded version) ...
    ``tail_vars``: ... except the tails of splits of these original Vars whose guard bounds a
    serial loop (``SERIAL_TAILS``): the caller's choice, as the Vars no producer computed inside
    the stage's loops is read with (its region, and its copy's extents, would vary).
    ``narrow``: original Vars whose region is a partition's remainder (narrower than one tile
    of the split it was partitioned on): their splits' tails are not peeled
    (``StageNest.tail_peels``), which would add a loop of whole tiles that never runs.
    ``bind``: loops of this stage that are the IR variables of enclosing loops (loop name ->
    variable: a compute_with stage's shared loops, which are its host's, matched by position).

    Raises:
        IllegalScheduleError: ShiftInwards where recomputation is not harmless.
    """
    # Relations are resolved in a private namespace ("_in." + name) so that the region's
    # expressions, which name the enclosing consumer's loops, are never captured.
    def iv(n: str) -> Var:
        return Var(_PRIVATE + n)

    ranges: dict[str, tuple[Expr, Expr]] = dict(region)
    defs: dict[str, Expr] = {}
    guards: list[tuple[Expr, Expr, Split]] = []  # (expr, bound, split): expr < bound
    versions: list[Expr] = []
    #: fast-version tails that may stay guards: (index of their version condition, guard)
    soft: list[tuple[int, tuple[Expr, Expr, Split]]] = []
    for rel in st.relations:
        if isinstance(rel, Split):
            pm, pe = ranges[rel.parent]
            f = rel.factor
            o, i = iv(rel.outer), iv(rel.inner)
            ranges[rel.outer] = (sconst(0), _ceildiv(pe, f))
            ranges[rel.inner] = (sconst(0), sconst(f))
            step = BinOp("mul", o, Const(f, int64), int64)
            divides = extent_divides(pe, f)
            if rel.tail is TailStrategy.ShiftInwards and not divides:
                check_shift_inwards(st, rel)
            if rel.tail is TailStrategy.ShiftInwards and shift_ok and not divides:
                base = BinOp("min", step, ssub(pe, sconst(f)), int64)
                defs[_PRIVATE + rel.parent] = sadd(pm, BinOp("add", base, i, int64))
                versions.append(Cmp("ge", pe, sconst(f)))
            else:
                defs[_PRIVATE + rel.parent] = sadd(pm, BinOp("add", step, i, int64))
                if not divides and shift_ok:
                    # fast version: taken only when the factor divides the extent (no tail),
                    # unless the tail bounds a serial loop (``SERIAL_TAILS``; decided below)
                    soft.append((len(versions), (BinOp("add", step, i, int64), pe, rel)))
                    versions.append(Cmp("eq", BinOp("mod", pe, Const(f, int64), int64),
                                        sconst(0)))
                elif not divides:
                    guards.append((BinOp("add", step, i, int64), pe, rel))
        elif isinstance(rel, Fuse):
            (om, _), (im, ie) = ranges[rel.outer], ranges[rel.inner]
            fv = iv(rel.fused)
            ranges[rel.fused] = (sconst(0), BinOp("mul", ranges[rel.outer][1], ie, int64))
            defs[_PRIVATE + rel.outer] = sadd(om, BinOp("floordiv", fv, ie, int64))
            defs[_PRIVATE + rel.inner] = sadd(im, BinOp("mod", fv, ie, int64))
    rename = {n: (bind or {}).get(n, f"{st.func}.{n}" if n in scope else n) for n in st.loops}
    leaf_map: dict[str, Expr] = {_PRIVATE + n: Var(rename[n]) for n in st.loops}

    def resolve(e: Expr) -> Expr:
        # substitute until only leaf variables remain (relations form a tree)
        for _ in range(len(st.relations) + 2):
            ne = substitute(e, {**defs, **leaf_map})
            if ne.same_as(e):
                return ne
            e = ne
        return e

    values = {v: resolve(iv(v)) for v in (*st.pure, *st.rvars)}
    # leaf ranges may mention other (outer) leaves of this stage: map them to IR names too
    ranges = {n: (resolve(lo), resolve(ext)) for n, (lo, ext) in ranges.items()}
    leaves = [Leaf(n, rename[n], ranges[n][0], ranges[n][1], st.kinds[n],
                   st.is_reduction_loop(n), full_extent=ranges[n][1]) for n in st.loops]
    if not shift_ok:
        # the guarded version: an unrolled loop whose extent is only known at run time (a tile
        # at the domain's edge) runs as a serial loop there

        for lf in leaves:
            if lf.kind is ForKind.UNROLLED and const_value(lf.extent) is None:
                lf.kind = ForKind.SERIAL
    first_red = next((k for k, lf in enumerate(leaves) if lf.reduction), None)
    pos = {lf.var: k for k, lf in enumerate(leaves)}
    leaf_vars = {lf.var for lf in leaves}
    kept = _serial_tails([g for g in soft if st.origin[g[1][2].inner] <= tail_vars], resolve,
                         rename, leaves, pos)
    guards += [g for _, g in soft if id(g) in kept]
    dropped = {n for n, g in soft if id(g) in kept}
    versions = [v for n, v in enumerate(versions) if n not in dropped]
    bounded: dict[str, int] = {}  # leaf -> how many guards tightened its extent
    # inner leaf -> (outer leaf, iterations of it whose inner loop is whole), one per bound that
    # knows it; a partition needs every bound of the inner loop to know it, for the same outer
    counts: dict[str, list[tuple[str, Expr]]] = {}
    tail_peels: dict[str, tuple[Expr, str, Expr]] = {}
    for expr, bound, rel in guards:
        e = resolve(expr)
        inner_guards = leaves[pos[rename[rel.inner]]].guards if rel.inner in rename \
            and rename[rel.inner] in pos else []
        placed_before = len(inner_guards)
        tightened = _place_guard(e, bound, leaves, pos)
        if tightened is not None:
            bounded[tightened] = bounded.get(tightened, 0) + 1
        elif len(inner_guards) == placed_before + 1 and rel.inner in rename \
                and not st.origin[rel.inner] <= narrow:
            # the guard became an ``if`` on the inner loop (an unrolled one)
            peeled = _tail_peel(e, resolve(bound), rel.factor, rename[rel.inner], leaves, pos,
                                leaf_vars)
            if peeled is not None and peeled[1] not in tail_peels:
                tail_peels[peeled[1]] = (peeled[0], rename[rel.inner], inner_guards[-1])
        bound = resolve(bound)
        if tightened is not None and rel.outer in rename and rel.inner in rename \
                and tightened == rename[rel.inner] \
                and not any(isinstance(n, Var) and n.name in leaf_vars for n in walk(bound)):
            # outer iterations o < bound // f have a whole inner loop (f * o + f <= bound)
            counts.setdefault(tightened, []).append((rename[rel.outer], BinOp(
                "floordiv", bound, Const(rel.factor, int64), int64)))
    splits = {rename[r.inner]: (rename[r.outer], r.factor) for r in st.relations
              if isinstance(r, Split) and r.inner in rename and r.outer in rename}
    core_guards: list[Expr] = []
    peel: Peel | None = None
    projections: list[tuple[Affine, Leaf]] = []  # bounds placed, for ``_project``
    for cond in predicate:
        cond = substitute(cond, values)
        for part in _predicate_bounds(cond):
            if part is None:  # not an affine comparison: a guard as written
                core_guards.append(cond)
                continue
            placed = _place_bound(part, leaves, pos, st.update is not None, splits, first_red)
            if placed is None:
                guard = _le_zero(part)
                core_guards.append(guard)
                hull = _hull_bound(part, leaves, pos, st.update is not None, splits, first_red)
                if hull is not None:
                    bounded[hull[0]] = bounded.get(hull[0], 0) + 1
                    if peel is None and hull[1] is not None:
                        peel = Peel(hull[0], hull[1][0], guard, hull[1][1])
                continue
            tightened, whole = placed
            bounded[tightened] = bounded.get(tightened, 0) + 1
            projections.append((part, leaves[pos[tightened]]))
            if whole is not None:
                counts.setdefault(tightened, []).append(whole)
    if not counts and not tail_peels:
        # (a loop partition counts its whole iterations from its loop's minimum: none here)
        for part, lf in projections:
            _project(part, lf, leaves, pos, splits, first_red)
    # an inner loop that another guard also bounds (a split of a split's tail) is whole only
    # where all of them allow: partitioned only when each bound gives its count
    partitions: dict[str, tuple[Expr, str]] = {}
    for inner, known in counts.items():
        outers = {o for o, _ in known}
        if len(known) == bounded.get(inner, 0) and len(outers) == 1:
            n = known[0][1]
            for _, other in known[1:]:
                n = smin(n, other)
            partitions[known[0][0]] = (n, inner)
    if not shift_ok and guards and not any(rel.tail is TailStrategy.GuardWithIf
                                           for _, _, rel in guards):
        # only ShiftInwards splits make this version run, and only for a region narrower than
        # their factor: its vector loops are short scalar loops there (asking LLVM to vectorize
        # them tripled each stage's code and its compile time)

        for lf in leaves:
            if lf.kind is ForKind.VECTORIZED and const_value(lf.extent) is None:
                lf.kind = ForKind.SERIAL
                lf.scalar = True
    nest = StageNest(st.func, leaves, values, versions, first_red, partitions)
    nest.core_guards = _dedup(core_guards)
    nest.peel = peel
    nest.tail_peels = tail_peels
    return nest


def _tail_peel(e: Expr, bound: Expr, factor: int, inner: str, leaves: list[Leaf],
               pos: dict[str, int], leaf_vars: set[str]) -> tuple[Expr, str] | None:
    """For the guard ``e < bound`` of a GuardWithIf split placed as an ``if`` on its inner loop
    ``inner`` (an unrolled loop keeps its constant extent): ``(count, outer)``, the serial loop
    ``outer`` and the number of its iterations, from 0, for which the guard holds on every
    inner iteration, when ``e`` is ``factor * outer + inner + rest`` with ``outer`` the
    innermost other loop of this stage in ``e`` and ``rest`` affine in sizes and in loops
    outside ``outer`` (the split's own outer loop, or the innermost loop it was split into: a
    packed GEMM's row tile inside its row block, ``60 * i.o.o + 6 * i.o.i + i.i < M``), and
    ``bound`` names no loop of this stage; else None."""
    if inner not in pos or any(isinstance(n, Var) and n.name in leaf_vars for n in walk(bound)):
        return None
    try:
        form = affine_form(e)
    except NonAffine:
        return None
    mine = [v for v in form.vars if v in pos and v != inner]
    if not mine or form.coeff(inner) != 1 or const_value(leaves[pos[inner]].min) != 0:
        return None
    outer = max(mine, key=lambda v: pos[v])
    if pos[outer] > pos[inner] or form.coeff(outer) != factor \
            or leaves[pos[outer]].kind is not ForKind.SERIAL \
            or const_value(leaves[pos[outer]].min) != 0:
        return None
    rest = form.drop(outer).drop(inner).to_expr()
    # factor * o + (factor - 1) + rest < bound  <=>  o < (bound - rest) // factor
    return BinOp("floordiv", ssub(bound, rest), Const(factor, int64), int64), outer


def nest_switches() -> tuple[int, ...]:
    """This module's switches now (``realize.lowering_switches``: part of ``lower``'s cache
    key)."""
    return (SERIAL_TAILS, PROJECT_BOUNDS, PEEL_WITH_INIT)


def _serial_tails(soft: list[tuple[int, tuple[Expr, Expr, Split]]],
                  resolve: Callable[[Expr], Expr], rename: dict[str, str], leaves: list[Leaf],
                  pos: dict[str, int]) -> set[int]:
    """The ids of the fast version's GuardWithIf tails ``soft`` that stay guards instead of
    version conditions (``SERIAL_TAILS``): the guard ``e < bound`` is affine, its innermost
    loop is the split's inner loop, with coefficient 1, serial, and ``bound`` names no loop, so
    that ``_place_guard`` makes it a tighter bound of that loop; and a serial loop runs inside
    that loop (a row block's tile loop around the reduction loop: one ``min`` per tile); an
    innermost loop, or one around unrolled and vector loops only, keeps its constant trip count
    (LLVM unrolls and vectorizes it)."""
    kept: set[int] = set()
    if not SERIAL_TAILS:
        return kept
    for _, g in soft:
        expr, bound, rel = g
        inner = rename.get(rel.inner)
        if inner not in pos or leaves[pos[inner]].kind is not ForKind.SERIAL \
                or not any(lf.kind is ForKind.SERIAL for lf in leaves[pos[inner] + 1:]):
            continue
        e, b = resolve(expr), resolve(bound)
        if any(isinstance(n, Var) and n.name in pos for n in walk(b)):
            continue
        try:
            form = affine_form(e)
        except NonAffine:
            continue
        mentioned = [v for v in form.vars if v in pos]
        if mentioned and max(mentioned, key=lambda v: pos[v]) == inner \
                and form.coeff(inner) == 1:
            kept.add(id(g))
    return kept


def _dedup(conds: list[Expr]) -> list[Expr]:
    out: list[Expr] = []
    for c in conds:
        if not any(c.same_as(o) for o in out):
            out.append(c)
    return out


def _predicate_bounds(cond: Expr) -> list:
    """A condition as affine forms ``F`` meaning ``F <= 0`` (two for ``==``); ``[None]`` when it
    is not an affine comparison (it stays a guard as written)."""
    if not (isinstance(cond, Cmp) and cond.a.dtype.is_int and cond.b.dtype.is_int
            and cond.op in ("lt", "le", "gt", "ge", "eq")):
        return [None]
    try:
        a, b = affine_form(cond.a), affine_form(cond.b)
    except NonAffine:
        return [None]
    one = Affine((), (), 1)
    return {"lt": [a + b.scale(-1) + one], "le": [a + b.scale(-1)],
            "gt": [b + a.scale(-1) + one], "ge": [b + a.scale(-1)],
            "eq": [a + b.scale(-1), b + a.scale(-1)]}[cond.op]


def _le_zero(form: Affine) -> Expr:
    return Cmp("le", form.to_expr(), sconst(0))


def _place_bound(form: Affine, leaves: list[Leaf], pos: dict[str, int], pure_ok: bool,
                 splits: dict[str, tuple[str, int]], inside: int | None = None
                 ) -> tuple[str, tuple[str, Expr] | None] | None:
    """Make ``form <= 0`` a bound of the innermost loop it mentions, when that loop may carry
    one: not unrolled (its extent stays a constant), and a reduction loop unless ``pure_ok`` (a
    pure loop of a reduction stage also runs the cells' initialisation) or it is inside the
    first reduction loop, position ``inside``, and serial (the initialisation runs before that
    loop, over the loop's ``init_range``: syrk's ``r.where(j <= i)`` skips the tiles above the
    diagonal and still sets them to the reduction's identity; a vector loop keeps its constant
    extent, the tile's hull bounds the loops outside it, ``_hull_bound``). Returns that loop and,
    for an upper bound on the inner loop of a split, ``(outer loop, iterations of it with a
    whole inner loop)`` for loop partitioning; the outer loop is bounded too (a triangle's
    tiles past the diagonal are not visited)."""
    mentioned = [v for v in form.vars if v in pos]
    if not mentioned or any(v not in pos for v in form.vars):
        return None
    inner = max(mentioned, key=lambda v: pos[v])
    lf = leaves[pos[inner]]
    nested = inside is not None and pos[inner] > inside and lf.kind is ForKind.SERIAL
    if lf.kind is ForKind.UNROLLED or not (lf.reduction or pure_ok or nested):
        return None
    if nested and not lf.reduction and not pure_ok and lf.init_range is None:
        lf.init_range = (lf.min, lf.extent)
    c = form.coeff(inner)
    rest = form.drop(inner).to_expr()
    end = sadd(lf.min, lf.extent)
    outer = _outer_ranges(leaves, pos[inner])
    if c > 0:  # c * v + rest <= 0: v <= floor(-rest / c)
        hi = sfloordiv(ssub(sconst(0), rest), c)
        lf.extent = simplify_in_ranges(smin(lf.extent, ssub(sadd(hi, sconst(1)), lf.min)),
                                       outer)
    else:  # rest <= -c * v: v >= ceil(rest / -c)
        if lf.full_min is None:
            lf.full_min = lf.min  # loose ranges keep the box: [full_min, + full_extent)
        lf.min = simplify_in_ranges(smax(lf.min, sceildiv(rest, -c)), outer)
        lf.extent = simplify_in_ranges(ssub(end, lf.min), outer)
    whole = None
    if abs(c) == 1 and lf.var in splits:
        whole = _bound_split_outer(form, lf, splits[lf.var], leaves, pos, c)
    return lf.var, whole


def _hull_bound(form: Affine, leaves: list[Leaf], pos: dict[str, int], pure_ok: bool,
                splits: dict[str, tuple[str, int]], inside: int | None = None
                ) -> tuple[str, tuple[Expr, bool] | None] | None:
    """Where ``form <= 0`` stays a guard because the innermost loop it mentions is unrolled (a
    register tile's rows) or a vector loop of constant extent (its columns), bound the next
    loop ``L`` it mentions by what some iteration of those loops allows: each such ``u`` in
    ``[min, min + extent)`` replaced by the end that makes ``form`` smallest. The guard stays
    exact; the loop no longer visits the points where every point of the tile fails it (trmm's
    ``k > i`` over 5-row tiles skips the triangle above each tile instead of guarding it; the
    split's outer loop is bounded too; syrk's ``j <= i`` skips whole tiles above the diagonal).

    Returns ``L`` and, when ``L`` is a serial loop, where the guard starts to hold for every
    unrolled iteration (each ``u`` at its other end): ``(point, guarded_first)`` — ``L`` below
    the point needs the guard and from it on does not (``guarded_first``), or the reverse; or
    None when no loop is bounded."""
    relaxed = strong = form
    for _ in range(len(leaves)):
        mentioned = [v for v in relaxed.vars if v in pos]
        if not mentioned or any(v not in pos for v in relaxed.vars):
            return None
        inner = max(mentioned, key=lambda v: pos[v])
        lf = leaves[pos[inner]]
        if lf.kind is ForKind.VECTORIZED and (const_value(lf.min) is None
                                              or const_value(lf.extent) is None):
            break
        if lf.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED):
            break
        lo, ext = const_value(lf.min), const_value(lf.extent)
        if lo is None or ext is None or ext < 1:
            return None
        c = relaxed.coeff(inner)
        weak, hard = (lo, lo + ext - 1) if c > 0 else (lo + ext - 1, lo)
        relaxed = relaxed.drop(inner) + Affine((), (), c * weak)
        strong = strong.drop(inner) + Affine((), (), c * hard)
    else:
        return None
    if relaxed is form:
        return None
    lf = leaves[pos[inner]]
    kind = lf.kind
    lo, ext = const_value(lf.min), const_value(lf.extent)
    placed = _place_bound(relaxed, leaves, pos, pure_ok, splits, inside)  # (guarded: no partition)
    if placed is None:
        return None
    if inside is not None and pos[inner] > inside and lo is not None and ext is not None:
        _bound_outward(relaxed, inner, lo, ext, leaves, pos, splits, inside)
    c = strong.coeff(inner)
    if kind is not ForKind.SERIAL or c == 0 or any(
            pos[v] > pos[inner] for v in strong.vars if v != inner):
        return placed[0], None
    rest = strong.drop(inner).to_expr()
    if c < 0:  # holds for every u where inner >= ceil(rest / -c)
        return placed[0], (sceildiv(rest, -c), True)
    # holds where inner <= floor(-rest / c): up to that point, guarded after it
    return placed[0], (sadd(sfloordiv(ssub(sconst(0), rest), c), sconst(1)), False)


def _bound_outward(form: Affine, inner: str, lo: int, ext: int, leaves: list[Leaf],
                   pos: dict[str, int], splits: dict[str, tuple[str, int]], inside: int) -> None:
    """After ``form <= 0`` bounded loop ``inner`` (whose range was the constant ``[lo, lo +
    ext)``), bound the next loop out that ``form`` mentions by what some iteration of ``inner``
    allows, and so on while each loop's range is constant: syrk's column panels to the right
    of a row block's last row are not visited (nor their operand copied)."""
    while True:
        c = form.coeff(inner)
        form = form.drop(inner) + Affine((), (), c * (lo if c > 0 else lo + ext - 1))
        mentioned = [v for v in form.vars if v in pos]
        if not mentioned or any(v not in pos for v in form.vars):
            return
        inner = max(mentioned, key=lambda v: pos[v])
        lf = leaves[pos[inner]]
        lo, ext = const_value(lf.min), const_value(lf.extent)
        if pos[inner] <= inside or _place_bound(form, leaves, pos, False, splits,
                                                inside) is None:
            return
        if lo is None or ext is None:
            return


def _project(form: Affine, lf: Leaf, leaves: list[Leaf], pos: dict[str, int],
             splits: dict[str, tuple[str, int]], inside: int | None) -> None:
    """After ``form <= 0`` bounded ``lf``, a serial reduction loop whose whole range is the
    constant ``[lo, lo + ext)``, bound the loops outside it that ``form`` mentions by what some
    iteration of that range allows (``PROJECT_BOUNDS``): an outer iteration without one runs no
    point of the domain. Only inside the first reduction loop (``inside``), where no
    initialisation runs, and in a nest without loop partitions (``build_stage_nest``: their
    counts of whole iterations start at the loop's minimum, which this may raise)."""
    if not PROJECT_BOUNDS or inside is None or pos[lf.var] <= inside \
            or lf.kind is not ForKind.SERIAL or not lf.reduction:
        return
    lo = const_value(lf.full_min if lf.full_min is not None else lf.min)
    ext = const_value(lf.full_extent) if lf.full_extent is not None else None
    if lo is None or ext is None or ext < 1:
        return
    _bound_outward(form, lf.var, lo, ext, leaves, pos, splits, inside)


def _outer_ranges(leaves: list[Leaf], k: int) -> dict[str, tuple[Expr, Expr]]:
    """The whole ranges (inclusive) of the loops outside position ``k``."""
    out = {}
    for o in leaves[:k]:
        lo = o.full_min if o.full_min is not None else o.min
        ext = o.full_extent if o.full_extent is not None else o.extent
        out[o.var] = (lo, ssub(sadd(lo, ext), sconst(1)))
    return out


def _bound_split_outer(form: Affine, inner: Leaf, split: tuple[str, int], leaves: list[Leaf],
                       pos: dict[str, int], c: int) -> tuple[str, Expr] | None:
    """The bound ``form <= 0`` on split ``parent == f * outer + inner (+ rest)`` also bounds
    ``outer``: ``f * outer + rest' <= 0`` needs ``inner >= 0`` (upper bound: returns ``(outer,
    iterations with a whole inner loop)``), ``f * outer + f - 1 >= rest'`` needs ``inner <=
    f - 1`` (lower bound: the outer loop's minimum moves)."""
    ov, f = split
    if ov not in pos or pos[ov] >= pos[inner.var] or form.coeff(ov) != c * f:
        return None
    o = leaves[pos[ov]]
    rest_form = form.drop(inner.var).drop(ov)
    if any(pos.get(v, len(leaves)) >= pos[ov] for v in rest_form.vars) \
            or o.kind is ForKind.UNROLLED:
        return None
    rest = rest_form.to_expr()
    if inner.init_range is not None and not o.reduction and o.init_range is None:
        # a pure loop inside the first reduction loop: the initialisation still covers the box
        o.init_range = (o.min, o.extent)
    outer = _outer_ranges(leaves, pos[ov])
    end = sadd(o.min, o.extent)
    if c > 0:  # f * o + i + rest <= 0 with i >= 0
        hi = sfloordiv(ssub(sconst(0), rest), f)
        o.extent = simplify_in_ranges(smin(o.extent, ssub(sadd(hi, sconst(1)), o.min)), outer)
        # whole where f * o + f - 1 + rest <= 0: o < floor((1 - rest) / f)
        n = ssub(sfloordiv(ssub(sconst(1), rest), f), o.min)
        return ov, simplify_in_ranges(smax(n, sconst(0)), outer)
    # rest <= f * o + i with i <= f - 1
    if o.full_min is None:
        o.full_min = o.min
    o.min = simplify_in_ranges(smax(o.min, sceildiv(ssub(rest, sconst(f - 1)), f)), outer)
    o.extent = simplify_in_ranges(ssub(end, o.min), outer)
    return None


def _width(lf: Leaf) -> int:

    if lf.kind is ForKind.SERIAL and lf.scalar:
        return 1
    if lf.kind is not ForKind.VECTORIZED or lf.full_extent is None:
        return 0
    c = const_value(lf.full_extent)
    return c if c is not None and 1 < c <= 64 else 0


_PRIVATE = "_in."


def extent_divides(extent: Expr, f: int) -> bool:
    """Whether ``extent`` is provably a multiple of ``f`` (a constant, or ``(e // f) * f``)."""

    c = const_value(extent)
    if f == 1 or (c is not None and c % f == 0):
        return True
    # (e // f) * f, the main part of a partitioned loop (realize.py)
    return isinstance(extent, BinOp) and extent.op == "mul" and any(
        (k := const_value(x)) is not None and k % f == 0 for x in (extent.a, extent.b))


def shift_witness(rel: Split) -> str:
    """Two iterations a ShiftInwards split runs on the same point (extent = factor + 1: the last
    tile starts at 1 instead of factor)."""
    f = rel.factor
    return (f"(witness: with {rel.parent} of extent {f + 1}, iterations ({rel.outer}=0, "
            f"{rel.inner}=1) and ({rel.outer}=1, {rel.inner}=0) both run {rel.parent}=1)")


def check_shift_inwards(st: StageState, rel: Split) -> None:
    """A ShiftInwards split ``rel`` of a reduction stage recomputes cells; legal only when the
    recomputation is complete (``rel.outer`` outside every reduction loop) and not concurrent.

    Raises:
        IllegalScheduleError: with the witness pair of iterations that run the same point.
    """
    if st.is_reduction_loop(rel.outer):
        raise IllegalScheduleError.in_schedule(
            st.func, f"split of {rel.parent} with ShiftInwards would run some "
            f"reduction iterations twice and add their terms twice {shift_witness(rel)}; use "
            f"GuardWithIf")
    if st.rvars:
        par = [n for n in st.loops
               if st.kinds[n] in CONCURRENT and rel.parent in _base_vars(st, n)]
        if par:
            raise IllegalScheduleError.in_schedule(
                st.func, f"ShiftInwards on {rel.parent} makes neighbouring "
                f"tiles recompute the same cells of a reduction, and the parallel loop {par[0]} "
                f"would run them at once (one tile re-initialises a cell while another "
                f"accumulates into it) {shift_witness(rel)}; use GuardWithIf for {rel.parent}")
        red = [n for n in st.loops if st.is_reduction_loop(n)]
        outer_leaves = [n for n in st.loops if rel.outer in _base_vars(st, n)]
        if red and any(st.loops.index(n) > st.loops.index(red[0]) for n in outer_leaves):
            raise IllegalScheduleError.in_schedule(
                st.func, f"ShiftInwards on {rel.parent} recomputes cells of a "
                f"reduction, which is harmless only when {rel.outer} is outside every reduction "
                f"loop (here it is inside {red[0]}) {shift_witness(rel)}; reorder or use "
                f"GuardWithIf")


def _base_vars(st: StageState, loop: str) -> set[str]:
    """Every loop name ``loop`` was derived from (itself, its split parents, fused parts)."""
    out = {loop}
    changed = True
    while changed:
        changed = False
        for rel in st.relations:
            kids = (rel.outer, rel.inner) if isinstance(rel, Split) else (rel.fused,)
            parents = (rel.parent,) if isinstance(rel, Split) else (rel.outer, rel.inner)
            if any(k in out for k in kids):
                for p_ in parents:
                    if p_ not in out:
                        out.add(p_)
                        changed = True
    return out


def _place_guard(e: Expr, bound: Expr, leaves: list[Leaf], pos: dict[str, int]) -> str | None:
    """Place the guard ``e < bound`` on the innermost loop it mentions: as a tighter loop bound
    where it can (then that loop's variable is returned), else as an ``if`` in its body."""
    try:
        form = affine_form(e)
    except NonAffine:
        form = None
    if form is not None:
        mentioned = [v for v in form.vars if v in pos]
        if not mentioned:
            return None
        inner = max(mentioned, key=lambda v: pos[v])
        lf = leaves[pos[inner]]
        if form.coeff(inner) == 1 and lf.kind is not ForKind.UNROLLED:
            rest = form.drop(inner).to_expr()
            lf.extent = smin(lf.extent, ssub(ssub(bound, rest), lf.min))
            return lf.var
        leaves[pos[inner]].guards.append(Cmp("lt", e, bound))
        return None

    vs = [v.name for v in free_vars(e) if v.name in pos]
    if vs:
        leaves[max(pos[v] for v in vs)].guards.append(Cmp("lt", e, bound))
    return None


def emit_nest(nest: StageNest, update: Stmt, init: Stmt | None,
              before: Callable[[Leaf], list[Stmt]], wrap: Callable[[Leaf, Stmt], Stmt],
              partition: bool = False,
              after: Callable[[Leaf], list[Stmt]] | None = None,
              plain: Callable[[Leaf], bool] | None = None,
              prefetch: Callable[[Leaf], list[Stmt]] | None = None,
              init_guard: Expr | None = None) -> Stmt:
    """The statement running ``update`` over the stage's loops, with ``init`` (for a reduction)
    placed before the outermost reduction loop, ``before(leaf)`` statements (compute_at
    producers) at the top of each loop body, ``after(leaf)`` statements (compute_with stages)
    at its end, inside the loop's guards, and ``wrap(leaf, body)`` around it (allocations).

    ``partition`` (only for nests without ``init``, ``before`` or ``wrap`` content: an update
    definition): each outer loop of a GuardWithIf split in ``nest.partitions`` runs as two loops,
    its iterations whose inner loop is whole (that loop then has its constant extent: a vector
    loop without masks) and the rest; the iterations run in the same order (Halide's loop
    partitioning, on the loop rather than on the stage's region, so an update definition keeps
    its order).

    ``plain(leaf)``: nothing is computed, stored or fused at that loop (no ``before``,
    ``wrap`` or ``after`` content); ``nest.peel``'s loop runs as two loops (see ``Peel``) only
    when it and every loop inside it are plain (default: never).

    ``prefetch(leaf)``: statements at the very top of each of that loop's bodies, whichever
    way it is emitted (partitioned, peeled): hints that read no result of the loop
    (``schedule/prefetch.py``).

    ``init_guard``: ``init``'s nest runs only where it holds (an initialisation folded into
    the updates: ``schedule/fold_init.py``)."""

    def top(lf: Leaf, body: Stmt) -> Stmt:
        pf = prefetch(lf) if prefetch is not None else []
        return Block((*pf, body)) if pf else body

    def go_part(k: int, core: Stmt, full: frozenset) -> Stmt:
        if k == len(nest.leaves):
            return core
        lf = nest.leaves[k]
        ext = lf.full_extent if lf.var in full and lf.full_extent is not None else lf.extent
        if lf.var in nest.partitions and lf.var not in full:
            nfull, inner = nest.partitions[lf.var]
            whole = guarded(lf, go_part(k + 1, core, full | {inner}))
            rest = guarded(lf, go_part(k + 1, core, full))
            # (an empty domain, a negative extent, gives a negative count: none are whole; the
            # second loop's extent is then at most 0 too)
            nfull = smin(smax(nfull, sconst(0)), ext)
            return Block((For(lf.var, lf.min, nfull, lf.kind, top(lf, whole), _width(lf)),
                          For(lf.var, sadd(lf.min, nfull), ssub(ext, nfull), lf.kind,
                              top(lf, rest), _width(lf))))
        return For(lf.var, lf.min, ext, lf.kind,
                   top(lf, guarded(lf, go_part(k + 1, core, full))), _width(lf))

    def guarded(lf: Leaf, body: Stmt, drop: frozenset = frozenset()) -> Stmt:
        for g in reversed(lf.guards):
            if id(g) not in drop:
                body = IfThenElse(g, body)
        return body

    def go(k: int, core: Stmt, init_done: bool, drop: frozenset = frozenset()) -> Stmt:
        if init is not None and not init_done and k == nest.first_reduction:
            init_leaves = [lf for lf in nest.leaves[k:] if not lf.reduction]
            first = go_plain(0, init_leaves, init, drop)
            if init_guard is not None:
                first = IfThenElse(init_guard, first)
            return Block((first, go(k, core, True, drop)))
        if k == len(nest.leaves):
            return core
        lf = nest.leaves[k]
        pl = nest.peel
        if (pl is not None and lf.var == pl.loop and steady is not None and plain is not None
                and lf.kind is ForKind.SERIAL and all(plain(x) for x in nest.leaves[k:])
                and (init is None or init_done)):
            return _peeled(lf, pl, top(lf, guarded(lf, go(k + 1, core, init_done, drop), drop)),
                           top(lf, guarded(lf, go(k + 1, steady, init_done, drop), drop)))
        tp = nest.tail_peels.get(lf.var)
        if (tp is not None and plain is not None and lf.kind is ForKind.SERIAL
                and (pl is None or pl.loop != lf.var) and id(tp[2]) not in drop
                and all(plain(x) for x in nest.leaves[k:])
                and peel_keeps_init(nest, k, init is not None)):
            # the iterations whose inner loop is whole first, without the tail's guard (a
            # reduction's initialisation inside the loop: each piece initialises its own cells)
            whole = frozenset(drop | {id(tp[2])})
            return _peeled(lf, Peel(lf.var, tp[0], tp[2], False),
                           top(lf, guarded(lf, go(k + 1, core, init_done, drop), drop)),
                           top(lf, guarded(lf, go(k + 1, core, init_done, whole), whole)))
        inner = go(k + 1, core, init_done, drop)
        pre = before(lf)
        post = after(lf) if after is not None else []
        body = Block((*pre, inner, *post)) if pre or post else inner
        body = wrap(lf, top(lf, guarded(lf, body, drop)))
        return For(lf.var, lf.min, lf.extent, lf.kind, body, _width(lf))

    def go_plain(k: int, leaves: list[Leaf], core: Stmt, drop: frozenset = frozenset()
                 ) -> Stmt:
        if k == len(leaves):
            return core
        lf = leaves[k]
        body = guarded(lf, go_plain(k + 1, leaves, core, drop), drop)
        lo, ext = lf.init_range or (lf.min, lf.extent)
        return For(lf.var, lo, ext, lf.kind, body, _width(lf))

    steady = None  # the store without the peeled guard (nest.peel)
    if nest.peel is not None:
        rest = [g for g in nest.core_guards if not g.same_as(nest.peel.guard)]
        steady = IfThenElse(conjunction(rest), update) if rest else update
    if nest.core_guards:  # RDom conditions no loop bound carries
        update = IfThenElse(conjunction(nest.core_guards), update)
    if partition and init is None and nest.partitions:
        return go_part(0, update, frozenset())
    return go(0, update, init is None)


def peel_keeps_init(nest: StageNest, k: int, init: bool) -> bool:
    """Whether ``nest``'s loop ``k`` may be peeled on a tail as far as its reduction's
    initialisation (``init``: it has one) goes: placed outside the loop, or inside it, each of
    the two loops then initialising its own cells (``PEEL_WITH_INIT``)."""
    if not init:
        return True
    red = nest.first_reduction
    return red is not None and (red < k or bool(PEEL_WITH_INIT))


def _peeled(lf: Leaf, pl: Peel, guarded_body: Stmt, steady_body: Stmt) -> Stmt:
    """Loop ``lf`` as two loops split at ``pl.at`` (clamped to its range), in order: the part
    that needs ``pl.guard`` runs ``guarded_body``, the other ``steady_body``."""
    ext = smax(lf.extent, sconst(0))
    first = smin(smax(ssub(pl.at, lf.min), sconst(0)), ext)
    a, b = (guarded_body, steady_body) if pl.guarded_first else (steady_body, guarded_body)
    return Block((For(lf.var, lf.min, first, lf.kind, a, _width(lf)),
                  For(lf.var, sadd(lf.min, first), ssub(ext, first), lf.kind, b, _width(lf))))


def conjunction(conds: list[Expr]) -> Expr:
    """The conjunction of ``conds`` (at least one)."""
    out = conds[0]
    for c in conds[1:]:
        out = BinOp("and", out, c, DType.bool_)
    return out
