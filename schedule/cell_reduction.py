"""Lowering pass ``reduce_update_cells``: an atomic update's innermost loop that accumulates
into one cell runs as a reduction in a register.

An update definition that reads its own Func keeps strict order (the reduction policy of
``docs/architecture.md``), so its innermost loop — PolyBench cholesky's
``A[i, j] = where(k < j, A[i, j] - A[i, k] * A[j, k], A[i, j] / A[j, j])`` over ``k`` — stores
to memory and reloads on every iteration, one latency-bound step at a time. Where the schedule
marks the update ``atomic()`` (Halide's ``Stage::atomic``: the update's accumulation may be
reassociated), this pass rewrites such a loop in two steps:

1. **Index-set splitting** (Halide's loop partitioning of ``select`` conditions; Griebl, Feautrier
   and Lengauer, "Index Set Splitting", IJPP 2000): a comparison affine in the loop variable
   with coefficient +-1 (``k < j``, ``k == j``, a boundary condition's ``j - k - 1 >= 0``) in
   the store's value, indices or guard cuts the loop into the ranges on which it is constant,
   each with the comparison resolved and the ``where``s, ``&``, ``|`` it decides folded; each
   range is cut again by the next comparison (``MAX_CONDITIONS`` deep). isl, given the bounds of
   the enclosing loops and lets (sizes non-negative), drops the ranges it proves empty, keeps
   the cut points free of clamps it proves unneeded, and folds each ``min`` / ``max`` that a
   range decides (a boundary clamp). A guard a range makes false drops it; one left free of
   the loop variable is checked once, outside the range's loop;
2. **Scalar replacement** (Carr and Kennedy, "Scalar Replacement in the Presence of Conditional
   Control Flow", SPE 1994) of each range whose store is ``C = C op value`` (op ``+ - * max
   min``, or a ``where`` of two such: ``C + where(c, a, b)``; the cell ``C`` the same on every
   iteration) and whose ``value`` provably never reads ``C`` — isl proves the index equations
   of every read of ``C``'s buffer against the cell's have no solution in the range, within
   the bounds of the enclosing loops and lets: the cell is loaded once into a one-element
   register buffer, the range accumulates into it as a reduction store (``reassoc``: LLVM's
   vectorizer turns it into SIMD partial sums) and the cell is stored back once. The other
   ranges run as before, in order.

**A block of cells** (unroll-and-jam; ``update_order.jam_rows`` schedules it): where the loop's
whole body is an unrolled loop of constant extent around the one store — cholesky's
``split('r_z', 8)`` with ``r_z.i`` moved inside ``r_x`` and unrolled — or two such loops, one
inside the other (a tile: rows ``i`` x rows ``j``), at most ``MAX_TILE`` cells together, each
iteration accumulates into its own cell. The ranges are shared by the block's cells: a
comparison that moves with the unrolled loops (the tile's ``k < j``) is cut at its hull, its
least and greatest value over them (``HULL_CUTS``; as Halide's loop partitioning finds a
condition's steady state over the loops inside it): below the least it holds for
every cell, past the greatest for none, and between, at most the block's extent long, the
loop keeps it and runs in order. The proof covers every pair of the block's iterations (no
read of one touches the cell of any), and the block's cells live in one register buffer:
loaded before the range, accumulated together in it (each row loaded once per term for the
block's row or column of cells), stored after it. A guard that depends on the unrolled
variables (the rows of the block past the diagonal) is checked per cell; a guard between the
two unrolled loops (a split's tail) moves inside them, and a comparison the enclosing loops
imply (that tail's ``j < N`` where ``j <= i`` and ``i < N`` bound it) is dropped.

The loop is rewritten only where some range becomes a reduction. Nothing else changes: a loop
inside a vectorized loop or a GPU kernel, a loop whose body is not one store (under ifs without
else: one guard, their conjunction), whose cell index moves with the loop or reads memory, or
whose reads cannot be proven apart from the cell is left as it is. The results differ from the
strict order only by the rounding of a reassociated sum, as every reduction of the language may.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import islpy as isl

from tensorlang.affine import (Affine, NonAffine, affine_form, const_value, sadd, sconst, smax,
                               smin, ssub)
from tensorlang.expr import (BinOp, Cmp, Const, Expr, Not, Select, Size, Var, map_children,
                             substitute, walk)

from .ir import (Allocate, Block, Buffer, For, ForKind, IfThenElse, LetStmt, Load, LoweredFunc,
                 Stmt, Store, map_stmt, reads_memory)
from .legality.isl_text import Unrepresentable, quasi_affine
from .nest import conjunction
from .simplify import simplify_expr

#: the reduction ops a range may accumulate with (``sub`` accumulates the negated value)
_OPS = {"add": "sum", "sub": "sum", "mul": "prod", "max": "max", "min": "min"}
_LANES = frozenset({ForKind.VECTORIZED, ForKind.GPU_BLOCK, ForKind.GPU_THREAD})
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
#: the most comparisons of the loop variable a loop is cut by (each at most triples the ranges)
MAX_CONDITIONS = 6
#: the most cells the unrolled loops inside the reduction loop may accumulate together
MAX_TILE = 32
#: a comparison that moves with a block's cells is cut at its hull (``cut_ranges``): the
#: ranges outside it accumulate the block in registers. 0: such a loop is left as it is (for a
#: benchmark's A/B; ``cell_switches`` puts it in ``lower``'s cache key)
HULL_CUTS = 1


def cell_switches() -> tuple[int, ...]:
    """This module's switches now (part of ``lower``'s cache key)."""
    return (HULL_CUTS, MAX_TILE)


def expr_vars(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, (Var, Size))}


def _split_condition(exprs: list[Expr], x: str, skip: tuple[Cmp, ...] = ()
                     ) -> tuple[str, Expr, Cmp] | None:
    """The first comparison in ``exprs`` that is affine in loop variable ``x`` with coefficient
    +-1 (``k - i - 1 >= 0``), as ``(op, e, cmp)`` meaning ``x op e`` with ``e`` free of ``x``;
    None if there is none. Comparisons in ``skip`` are passed over."""
    for root in exprs:
        for c in walk(root):
            if not isinstance(c, Cmp) or c.op not in _FLIP or x not in expr_vars(c):
                continue
            if any(c.same_as(o) for o in skip):
                continue
            if not c.a.dtype.is_int or reads_memory(c.a) or reads_memory(c.b):
                continue
            unit = unit_term(ssub(c.a, c.b), x)
            if unit is None:
                continue
            k, rest = unit
            # x + rest op 0: x op -rest;  -x + rest op 0: x (flipped op) rest
            return (c.op, ssub(sconst(0), rest), c) if k == 1 else (_FLIP[c.op], rest, c)
    return None


def unit_term(e: Expr, x: str) -> tuple[int, Expr] | None:
    """``(k, rest)`` where ``e == k * x + rest``, ``k`` is 1 or -1 and ``rest`` is free of
    ``x``; None when ``e`` is not affine or ``x``'s coefficient is another."""
    try:
        form = affine_form(e)
    except NonAffine:
        return None
    k = form.coeff(x)
    if k not in (1, -1):
        return None
    rest = Affine.make({v: n for v, n in form.coeffs if v != x}, dict(form.params),
                       form.const).to_expr()
    return k, rest


def cut_ranges(op: str, e: Expr, lo: Expr, hi: Expr, ctx: LoopContext,
               tiles: tuple[For, ...] = ()) -> list[tuple[Expr, Expr, bool | None]]:
    """``[lo, hi)`` cut where ``x op e`` changes: (start, end, truth) per range, in order,
    leaving out those ``ctx`` proves empty. Where ``e`` moves with the unrolled loops ``tiles``
    (a block of cells), the cuts are at its least and greatest value over them (the hull):
    outside, ``x op e`` is the same for every cell; between, truth None (it differs)."""
    low, high = _hull(e, tiles)
    if low is None:
        raise Unrepresentable(f"{e} is not affine in the tile")
    mixed = not low.same_as(high)
    if mixed and not HULL_CUTS:  # cut at e itself: ranges that move with the tile
        low = high = e
        mixed = False
    lo1, hi1 = sadd(low, sconst(1)), sadd(high, sconst(1))
    if op in ("eq", "ne"):
        cuts = ([low, hi1], [op == "ne", None, op == "ne"]) if mixed else \
            ([low, lo1], [op == "ne", op == "eq", op == "ne"])
    else:
        first = op in ("lt", "le")
        at = (lo1, hi1) if op in ("le", "gt") else (low, high)
        cuts = ([at[0], at[1]], [first, None, not first]) if mixed \
            else ([at[0]], [first, not first])
    points = [lo, *(ctx.clamp(p, lo, hi) for p in cuts[0]), hi]
    return [(points[k], points[k + 1], truth) for k, truth in enumerate(cuts[1])
            if not ctx.holds(f"{ctx.text(points[k])} >= {ctx.text(points[k + 1])}")]


def _hull(e: Expr, tiles: tuple[For, ...]) -> tuple[Expr | None, Expr | None]:
    """The least and greatest value of ``e`` over the iterations of the unrolled loops
    ``tiles`` (each of constant extent), as expressions free of their variables; ``(None,
    None)`` where ``e`` is not affine in them."""
    names = {t.var for t in tiles}
    if not names & expr_vars(e):
        return e, e
    try:
        form = affine_form(e)
    except NonAffine:
        return None, None
    low = high = e
    for t in tiles:
        c = form.coeff(t.var)
        last = sadd(t.min, sconst(const_value(t.extent) - 1))
        small, big = (t.min, last) if c > 0 else (last, t.min)
        low, high = substitute(low, {t.var: small}), substitute(high, {t.var: big})
    return simplify_expr(low), simplify_expr(high)


def _resolve(value: Expr, cond: Cmp, truth: bool) -> Expr:
    """``value`` with ``cond`` replaced by ``truth``, and the ``where``s, ``&``, ``|`` and
    ``~`` it decides folded."""
    def go(n: Expr) -> Expr:
        if isinstance(n, Cmp) and n.same_as(cond):
            return Const(truth, n.dtype)
        n = map_children(n, go)
        if isinstance(n, Select) and isinstance(n.cond, Const):
            return n.t if n.cond.value else n.f
        if isinstance(n, Not) and isinstance(n.a, Const):
            return Const(not n.a.value, n.dtype)
        if isinstance(n, BinOp) and n.op in ("and", "or"):
            for k, other in ((n.a, n.b), (n.b, n.a)):
                if isinstance(k, Const):
                    decides = bool(k.value) == (n.op == "or")
                    return k if decides else other
        return n

    return simplify_expr(go(value))


def _accumulation(value: Expr, cell: Load) -> tuple[str, Expr] | None:
    """``(reduce op, term)`` if ``value`` is ``cell op term`` (either order for the commutative
    ops; ``cell - term`` as the sum of ``-term``), or a ``where`` (whose condition reads no
    memory) of two such with the same op: ``where(c, cell + a, cell - b)`` is ``cell +
    where(c, a, -b)``."""
    if isinstance(value, Select) and not reads_memory(value.cond):
        t, f = _accumulation(value.t, cell), _accumulation(value.f, cell)
        if t is None or f is None or t[0] != f[0]:
            return None
        return t[0], Select(value.cond, t[1], f[1], value.dtype)
    if not isinstance(value, BinOp) or value.op not in _OPS:
        return None
    for mine, other in ((value.a, value.b), (value.b, value.a)):
        if mine.same_as(cell):
            if value.op == "sub":
                if mine is not value.a or value.dtype.is_unsigned or value.dtype.is_bool:
                    return None
                neg = BinOp("mul", Const(-1.0 if value.dtype.is_float else -1, value.dtype),
                            other, value.dtype)
                return "sum", neg
            return _OPS[value.op], other
    return None


@functools.lru_cache(maxsize=256)
def _known_set(text: str) -> isl.Set | None:
    """The isl set of a loop context's facts (None: isl cannot read it, and nothing is proven
    with it). Parsed once per text: its loop bounds' floors and clamps are most of the parsing,
    and the rule-based schedule lowers many variants of one nest, so the same contexts."""
    try:
        return isl.Set(text)
    except isl.Error:
        return None


@functools.lru_cache(maxsize=8192)
def _empty(known: str, query: str | None) -> bool:
    """Whether the set ``known`` (isl text) meets no point of ``query`` (isl text over the same
    space; None: no further constraint); False where isl cannot tell. Cached by text: the
    variants of a nest ask the same questions."""
    base = _known_set(known)
    if base is None:
        return False
    try:
        return (base if query is None else base.intersect(isl.Set(query))).is_empty()
    except isl.Error:
        return False


class LoopContext:
    """What the enclosing loops and lets of a loop say about its variables, as isl
    constraints (sizes are non-negative): the facts the pass proves its rewrites with. A bound
    isl cannot state is left out: the sets only grow, so what is proven stays proven."""

    def __init__(self, context: tuple[Stmt, ...]) -> None:
        self.names: dict[str, str] = {}
        self.known: list[str] = []
        for c in context:
            try:
                if isinstance(c, For):
                    v, lo = self.text(Var(c.var)), self.text(c.min)
                    self.known.append(f"{lo} <= {v} < {lo} + {self.text(c.extent)}")
                elif isinstance(c, LetStmt):
                    self.known.append(f"{self.text(Var(c.var))} = {self.text(c.value)}")
            except Unrepresentable:
                continue

    def _name(self, v: str) -> str:
        return self.names.setdefault(v, f"p{len(self.names)}")

    def _size(self, v: str) -> str:
        new = v not in self.names
        out = self._name(v)
        if new:
            self.known.append(f"{out} >= 0")
        return out

    def text(self, e: Expr) -> str:
        """``e`` in isl's syntax (raises Unrepresentable)."""
        return quasi_affine(e, self._name, self._size)

    def empty(self, dims: list[str], constraints: list[str]) -> bool:
        """Whether no point of ``dims`` (isl names) meets the context and ``constraints``
        (isl text); False where isl cannot tell (``_empty``)."""
        params = ", ".join(v for v in self.names.values() if v not in dims)
        head = f"[{params}] -> {{ [{', '.join(dims)}] : "
        return _empty(f"{head}{' and '.join(self.known) or 'true'} }}",
                      f"{head}{' and '.join(constraints)} }}" if constraints else None)

    def holds(self, constraint: str, given: tuple[str, ...] = ()) -> bool:
        """Whether ``constraint`` (isl text over known names) holds wherever the context and
        the constraints ``given`` do."""
        return self.empty([], [*given, f"not ({constraint})"])

    def fold(self, e: Expr, given: tuple[str, ...]) -> Expr:
        """``e`` with each integer ``min`` / ``max`` whose outcome the context and ``given``
        decide replaced by that operand (a clamp of a boundary condition inside its range)."""
        def go(n: Expr) -> Expr:
            n = map_children(n, go)
            if isinstance(n, BinOp) and n.op in ("min", "max") and n.dtype.is_int:
                try:
                    a, b = self.text(n.a), self.text(n.b)
                except Unrepresentable:
                    return n
                if self.holds(f"{a} <= {b}", given):
                    return n.a if n.op == "min" else n.b
                if self.holds(f"{b} <= {a}", given):
                    return n.b if n.op == "min" else n.a
            return n

        return go(e)

    def clamp(self, v: Expr, lo: Expr, hi: Expr) -> Expr:
        """``max(lo, min(hi, v))``, without the bounds the context proves unneeded."""
        try:
            tv, tl, th = self.text(v), self.text(lo), self.text(hi)
        except Unrepresentable:
            return smax(lo, smin(hi, v))
        if self.holds(f"{tv} <= {tl}"):
            return lo
        if self.holds(f"{tv} >= {th}"):
            return hi
        above, below = self.holds(f"{tv} >= {tl}"), self.holds(f"{tv} <= {th}")
        return v if above and below else smin(hi, v) if above else smax(lo, v) if below \
            else smax(lo, smin(hi, v))

    def disjoint(self, reads: list[Load], cell: Load, x: str, start: Expr, end: Expr,
                 tiles: tuple[For, ...] = ()) -> bool:
        """Whether no read in ``reads`` touches ``cell`` for any ``x`` in ``[start, end)``; with
        ``tiles`` (unrolled loops inside ``x``'s, in the context), no read of any of their
        iterations touches the cell of any of their iterations."""
        try:
            xs = self._name(x)
            bounds = [f"{self.text(start)} <= {xs} < {self.text(end)}"]
            dims = [xs]
            cell_at = cell.indices
            for tile in tiles:  # the cell's own iteration of the tile: another variable
                other = f"{tile.var}_cell"
                vs = self._name(other)
                dims.append(vs)
                lo = self.text(tile.min)
                bounds.append(f"{lo} <= {vs} < {lo} + {self.text(tile.extent)}")
                cell_at = tuple(substitute(i, {tile.var: Var(other)}) for i in cell_at)
            for r in reads:
                eqs = [f"{self.text(a)} = {self.text(b)}" for a, b in zip(r.indices, cell_at)]
                if not self.empty(dims, bounds + eqs):
                    return False
        except Unrepresentable:
            return False
        return True


@dataclasses.dataclass(frozen=True)
class Piece:
    """A range ``[start, end)`` of the loop with its store (and guard: None when there is
    none) resolved for that range."""

    start: Expr
    end: Expr
    guard: Expr | None
    store: Store
    #: comparisons left unresolved here: they differ between the cells of a block
    mixed: tuple[Cmp, ...] = ()


def cut_piece(p: Piece, x: str, depth: int, ctx: LoopContext,
              tiles: tuple[For, ...] = ()) -> list[Piece]:
    """``p`` cut where a comparison of ``x`` in its guard, indices or value changes, then each
    range cut again (at most ``depth`` conditions deep); ranges whose guard is false dropped.
    With a block of cells (the unrolled loops ``tiles``), a comparison that moves with them is
    cut at its hull (``cut_ranges``) and left as it is between."""
    exprs = [*([p.guard] if p.guard is not None else []), *p.store.indices, p.store.value]
    split = _split_condition(exprs, x, p.mixed) if depth else None
    if split is None:
        return [p]
    op, e, cond = split
    out: list[Piece] = []
    try:
        ranges = cut_ranges(op, e, p.start, p.end, ctx, tiles)
    except Unrepresentable:
        return [p]
    for a, b, truth in ranges:
        if a.same_as(b):
            continue
        if truth is None:
            out.extend(cut_piece(dataclasses.replace(p, start=a, end=b, mixed=(*p.mixed, cond)),
                                 x, depth - 1, ctx, tiles))
            continue
        guard = None if p.guard is None else _resolve(p.guard, cond, truth)
        if isinstance(guard, Const):
            if not guard.value:
                continue
            guard = None
        st = dataclasses.replace(p.store, indices=tuple(_resolve(i, cond, truth)
                                                        for i in p.store.indices),
                                 value=_resolve(p.store.value, cond, truth))
        out.extend(cut_piece(Piece(a, b, guard, st, p.mixed), x, depth - 1, ctx, tiles))
    return out


def _tiles(loop: For) -> tuple[tuple[For, ...], Stmt]:
    """The unrolled loops of constant extent, each the whole body of the one outside it (the
    first ``loop``'s), whose bounds are free of ``loop``'s and their variables and whose
    iterations number at most ``MAX_TILE`` together — one cell per iteration, a register tile
    of one or two dimensions — and the statement inside them; ``((), loop.body)`` when there
    are none."""
    tiles: list[For] = []
    conds: list[Expr] = []
    t, cells = loop.body, 1
    names = {loop.var}
    while True:
        ifs, inner = _strip_ifs(t)
        n = const_value(inner.extent) if isinstance(inner, For) else None
        if not isinstance(inner, For) or inner.kind is not ForKind.UNROLLED or n is None \
                or n < 1 or cells * n > MAX_TILE or names & expr_vars(inner.min) \
                or reads_memory(inner.min):
            break
        # an ``if`` between two loops of the tile (a split's tail guard) moves inside them
        conds += ifs
        tiles.append(inner)
        names.add(inner.var)
        cells *= n
        t = inner.body
    ifs, body = _strip_ifs(t)  # (nested ifs around the store: one guard, their conjunction)
    conds += ifs
    return tuple(tiles), IfThenElse(conjunction(conds), body) if conds else body


def _strip_ifs(s: Stmt) -> tuple[list[Expr], Stmt]:
    """The conditions of the ``if``s without ``else`` nested around ``s``'s body, outermost
    first, and that body."""
    conds = []
    while isinstance(s, IfThenElse) and s.otherwise is None:
        conds.append(s.cond)
        s = s.then
    return conds, s


_ISL_OPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "="}


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op == "and":
        return [*_conjuncts(e.a), *_conjuncts(e.b)]
    return [e]


def _drop_implied(guard: Expr | None, ctx: LoopContext, given: tuple[str, ...]) -> Expr | None:
    """``guard`` without the comparisons the enclosing loops, the tile's and ``given`` imply (a
    split's tail guard on rows that the triangle's bound keeps inside the domain); None when
    none is left."""
    if guard is None:
        return None
    kept = []
    for c in _conjuncts(guard):
        try:
            implied = isinstance(c, Cmp) and c.op in _ISL_OPS and c.a.dtype.is_int and \
                ctx.holds(f"{ctx.text(c.a)} {_ISL_OPS[c.op]} {ctx.text(c.b)}", given)
        except Unrepresentable:
            implied = False
        if not implied:
            kept.append(c)
    return conjunction(kept) if kept else None


def _try(loop: For, buffers: dict[str, Buffer], counter: list[int],
         context: tuple[Stmt, ...]) -> Stmt | None:
    tiles, body = _tiles(loop)
    tile_vars = {t.var for t in tiles}
    guard = None
    if isinstance(body, IfThenElse) and body.otherwise is None:
        body, guard = body.then, body.cond
    if loop.kind is not ForKind.SERIAL or not isinstance(body, Store) \
            or body.reduce_op is not None or not body.reassociable:
        return None
    dtype = buffers[body.buffer].dtype
    if dtype.is_bool:
        return None
    x = loop.var
    ctx = LoopContext(context + tiles)
    pieces = cut_piece(Piece(loop.min, sadd(loop.min, loop.extent), guard, body), x,
                       MAX_CONDITIONS, ctx, tiles)
    if any(tile_vars & (expr_vars(p.start) | expr_vars(p.end)) for p in pieces):
        return None  # the ranges differ between the tile's cells: they cannot share the loop

    def in_tile(s: Stmt) -> Stmt:
        for t in reversed(tiles):
            s = dataclasses.replace(t, body=s)
        return s

    # the cell of each iteration of the tiles: their iterations numbered row-major
    cells, flat = 1, sconst(0)
    for t in reversed(tiles):
        flat = sadd(flat, BinOp("mul", ssub(Var(t.var), t.min), sconst(cells), flat.dtype))
        cells *= const_value(t.extent)

    out: list[Stmt] = []
    reduced = False
    for p in pieces:
        try:
            given = (f"{ctx.text(p.start)} <= {ctx.text(Var(x))} < {ctx.text(p.end)}",)
            st = dataclasses.replace(p.store, indices=tuple(ctx.fold(i, given)
                                                            for i in p.store.indices),
                                     value=ctx.fold(p.store.value, given))
            p = dataclasses.replace(p, guard=_drop_implied(p.guard, ctx, given))
        except Unrepresentable:
            st = p.store
        extent = smax(sconst(0), ssub(p.end, p.start))
        cell = Load(st.buffer, st.indices, dtype)
        acc = None
        if not any(x in expr_vars(i) or reads_memory(i) for i in st.indices) and (
                p.guard is None or not (x in expr_vars(p.guard) or reads_memory(p.guard))):
            acc = _accumulation(st.value, cell)
        if acc is not None:
            rop, term = acc
            reads = [n for n in walk(term) if isinstance(n, Load) and n.buffer == st.buffer]
            if ctx.disjoint(reads, cell, x, p.start, p.end, tiles):
                counter[0] += 1
                buf = Buffer(f"{st.buffer}.cell{counter[0]}", dtype, (sconst(0),),
                             (sconst(cells),), "internal", register=True)
                buffers[buf.name] = buf
                reg = (simplify_expr(flat),)
                # a guard free of x holds for the whole range: checked once, outside (per cell
                # of the tile when it depends on the cell)
                inner = None if p.guard is None or not tile_vars & expr_vars(p.guard) \
                    else p.guard

                def each(s: Stmt, inner: Expr | None = inner) -> Stmt:
                    return in_tile(s if inner is None else IfThenElse(inner, s))

                nest: Stmt = Allocate(buf, Block((
                    each(Store(buf.name, reg, cell)),
                    dataclasses.replace(loop, min=p.start, extent=extent,
                                        body=each(Store(buf.name, reg, term, rop))),
                    each(Store(st.buffer, st.indices, Load(buf.name, reg, dtype))))))
                out.append(nest if p.guard is None or inner is not None
                           else IfThenElse(p.guard, nest))
                reduced = True
                continue
        inner_st: Stmt = st if p.guard is None else IfThenElse(p.guard, st)
        out.append(dataclasses.replace(loop, min=p.start, extent=extent, body=in_tile(inner_st)))
    return Block(tuple(out)) if reduced else None


def rewrite_loops(f: LoweredFunc, rewrite: Callable[..., Stmt | None]) -> LoweredFunc:
    """``f`` with ``rewrite(loop, buffers, counter, context)`` tried on every loop outside SIMD
    lanes and GPU threads (there a one-cell register would be shared), outermost first: where it
    returns a statement, that replaces the loop. ``buffers`` (by name) takes the buffers it
    adds, ``counter`` (a one-element list) numbers them, ``context`` holds the enclosing loops
    and lets."""
    buffers = dict(f.buffers)
    counter = [0]

    def go(s: Stmt, lanes: bool = False, context: tuple[Stmt, ...] = ()) -> Stmt:
        if isinstance(s, For) and not lanes:
            r = rewrite(s, buffers, counter, context)
            if r is not None:
                return r
        inner = lanes or (isinstance(s, For) and s.kind in _LANES)
        ctx = context + (s,) if isinstance(s, (For, LetStmt)) else context
        return map_stmt(s, lambda c: go(c, inner, ctx), lambda e: e)

    body = go(f.body)
    if body is f.body:
        return f
    return dataclasses.replace(f, body=body, buffers=buffers)


def reduce_update_cells(f: LoweredFunc) -> LoweredFunc:
    """Apply the rewrite to every qualifying innermost loop (module docstring)."""
    return rewrite_loops(f, _try)
