"""Inputs, Funcs and their definitions; reducers and boundary conditions.

A ``Func`` is defined once, by ``F[i, j] = expr`` (a *pure definition*). Vars on the right that are
not on the left are *reduction variables*: the right side is reduced over them, with ``sum`` unless an
explicit reducer (``tl.sum``, ``tl.prod``, ``tl.max``, ``tl.min``) says otherwise (the einsum rule).
A reducer nested inside a larger expression (``exp(x[i, j] - tl.max(x[i, k]))``) is lifted into an
anonymous Func over the left-side Vars it uses, as Halide's inline reductions are; in an update
definition also over the RDom variables the update iterates, so it is computed per iteration.

See also: Halide ``Func``/``Var``/``RDom``, "Halide: A Language and Compiler for Optimizing
Parallelism, Locality, and Recomputation in Image Processing Pipelines" (PLDI 2013); TVM ``te.compute``
and ``te.sum``; Tensor Comprehensions' einsum-like notation (Vasilache et al., 2018).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from .affine import NonAffine, affine_form, sadd, sconst, smul, ssub
from .domain import Constraint, infer_ranges
from .dtypes import DType, as_dtype, int64
from .errors import DefinitionError
from .expr import (
    Access,
    BinOp,
    Boundary,
    Cast,
    Const,
    Expr,
    Reduce,
    Size,
    Var,
    as_expr,
    cast,
    check_name,
    const,
    free_vars,
    children,
    map_children,
    substitute,
    walk,
)
from .rdom import RVar, as_index


def _as_shape(shape: Any, owner: str) -> tuple[Expr, ...]:
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    out: list[Expr] = []
    for d, s in enumerate(shape):
        if isinstance(s, Expr) and s.dtype.is_int and not s.dtype.is_bool:
            if not _quasi_affine(s):
                raise DefinitionError(
                    f"shape of {owner}: dimension {d} ({s}) is not an affine expression of "
                    f"sizes, or one with // and % by positive constants, minimum and maximum "
                    f"(W // 2 + 1)")
            if any(isinstance(n, Var) for n in walk(s)):
                raise DefinitionError(f"shape of {owner}: dimension {d} ({s}) uses a Var; "
                                      f"shapes are sizes")
            out.append(s)
        elif isinstance(s, int) and not isinstance(s, bool) and s >= 0:
            out.append(sconst(s))
        else:
            raise DefinitionError(
                f"shape of {owner}: dimension {d} is {s!r}; use a non-negative int, a tl.sizes() "
                f"symbol or an affine expression of them (H + 2)")
    return tuple(out)


def _quasi_affine(e: Expr) -> bool:
    """Whether ``e`` is built from constants, sizes and Vars with +, -, * by a constant, // and
    % by a positive constant, minimum and maximum (what isl states exactly, and a pyramid's
    level sizes need: ``(W + 3) // 4``)."""
    try:
        affine_form(e)
        return True
    except NonAffine:
        pass
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return _quasi_affine(e.value)
    if not (isinstance(e, BinOp) and e.dtype.is_int):
        return False
    if e.op in ("add", "sub", "max", "min"):
        return _quasi_affine(e.a) and _quasi_affine(e.b)
    if e.op == "mul":
        return (isinstance(e.b, Const) and _quasi_affine(e.a)) or \
            (isinstance(e.a, Const) and _quasi_affine(e.b))
    if e.op in ("floordiv", "mod"):
        return isinstance(e.b, Const) and int(e.b.value) > 0 and _quasi_affine(e.a)
    return False


def _index_tuple(idx: Any) -> tuple:
    items = idx if isinstance(idx, tuple) else (idx,)
    return tuple(as_index(i) for i in items)


def _make_access(producer: Any, name: str, rank: int | None, dtype: DType, idx: Any,
                 boundary: Boundary | None) -> Access:
    items = _index_tuple(idx)
    if rank is not None and len(items) != rank:
        raise DefinitionError(
            f"{name} has {rank} dimension{'s' if rank != 1 else ''} but is read with "
            f"{len(items)} ind{'ices' if len(items) != 1 else 'ex'}: {name}[{', '.join(map(str, items))}]")
    indices: list[Expr] = []
    for d, it in enumerate(items):
        if isinstance(it, slice) or it is Ellipsis:
            raise DefinitionError(f"{name}[...]: index {d} is a slice; index with tl.vars()")
        e = as_expr(it)
        if not e.dtype.is_int:
            raise DefinitionError(f"{name}[...]: index {d} ({e}) has type {e.dtype}; indices are "
                                  f"integers")
        if e.dtype is not int64:
            e = cast(int64, e)
        for n in walk(e):
            if isinstance(n, Reduce):
                raise DefinitionError(f"{name}[...]: index {d} ({e}) holds a reducer; compute "
                                      f"it as a Func and read that")
        # any integer expression may index: affine ones exactly, others (// and %, clamp,
        # where, values read from arrays) are proven in bounds when the sizes are known
        indices.append(e)
    return Access(name, tuple(indices), dtype, boundary, producer)


class Input:
    """An input array of the algorithm: ``Input(name, shape, dtype)``.

    Args:
        name: identifier; the keyword under which the kernel takes the array.
        shape: tuple of ``tl.sizes`` symbols and/or non-negative ints (its rank is its length).
        dtype: one of float32, float64, int32, int64, bool (NumPy names or dtypes accepted).
    """

    def __init__(self, name: str, shape: Any, dtype: Any = "float32") -> None:
        self.name = check_name(name, "Input")
        self.shape = _as_shape(shape, f"Input {name}")
        for d, s in enumerate(self.shape):
            if not isinstance(s, (Size, Const)):
                raise DefinitionError(f"shape of Input {name}: dimension {d} ({s}) must be a "
                                      f"size symbol or an int (sizes are bound from the arrays)")
        self.dtype = as_dtype(dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def bounds(self) -> tuple[tuple[Expr, Expr], ...]:
        """Per dimension ``(min, extent)``: ``(0, shape[d])``."""
        return tuple((sconst(0), s) for s in self.shape)

    def __getitem__(self, idx: Any) -> Access:
        return _make_access(self, self.name, self.rank, self.dtype, idx, None)

    def __setitem__(self, idx: Any, value: Any) -> None:
        raise DefinitionError(f"{self.name} is an Input and cannot be defined; use a tl.Func")

    def __repr__(self) -> str:
        return f"Input({self.name!r}, ({', '.join(map(str, self.shape))}), {self.dtype})"


@dataclass(frozen=True, eq=False)
class Definition:
    """The pure definition ``func[args] = reduce_op(value)`` and the inferred ranges of its Vars.

    ``reduce_op`` is None for a pointwise definition, else one of REDUCE_OPS over ``rvars``.
    ``ranges`` maps each Var name (pure then reduction) to ``(min, extent)`` size expressions.
    """

    func: str
    args: tuple[Var, ...]
    value: Expr
    reduce_op: str | None
    rvars: tuple[Var, ...]
    ranges: tuple[tuple[str, Expr, Expr], ...]
    #: conditions restricting the reduction to some points of its RDoms (``RDom.where``)
    predicate: tuple[Expr, ...] = ()

    def range_of(self, var: str) -> tuple[Expr, Expr]:
        for name, lo, ext in self.ranges:
            if name == var:
                return lo, ext
        raise KeyError(var)

    @property
    def key(self) -> tuple:
        return ("Definition", self.func, tuple(a.name for a in self.args), self.value.key,
                self.reduce_op, tuple(r.name for r in self.rvars),
                tuple((n, lo.key, ext.key) for n, lo, ext in self.ranges),
                tuple(c.key for c in self.predicate))

    def lhs_str(self) -> str:
        return f"{self.func}[{', '.join(a.name for a in self.args)}]"

    def __str__(self) -> str:
        v = str(self.value)
        if self.reduce_op:
            v = f"{self.reduce_op}({v})  # over {', '.join(r.name for r in self.rvars)}"
            if self.predicate:
                v += f" where {' and '.join(map(str, self.predicate))}"
        return f"{self.lhs_str()} = {v}"


def stage_id(func: str, number: int | None = None) -> str:
    """The name of a Func's stage: ``F`` for its pure definition, ``F.update(n)`` for update
    definition ``n`` (how schedules, traces and loop nests name stages)."""
    return func if number is None else f"{func}.update({number})"


def parse_stage_id(stage: str) -> tuple[str, int | None]:
    """``(func, number)`` of a stage name written by :func:`stage_id` (number None: the pure
    definition)."""
    func, sep, rest = stage.partition(".update(")
    return (func, int(rest.rstrip(")"))) if sep else (func, None)


@dataclass(frozen=True, eq=False)
class Update:
    """Update definition number ``number`` of ``func``: ``func[index] = value``, run after the
    pure definition and the earlier updates, for every value of its pure Vars (the Func's domain in
    those dimensions, in any order: they are independent) and every point of its RVars in
    lexicographic order, first RDom dimension innermost (Halide's semantics).

    ``index``: per dimension the pure Var of that position (``pure`` lists them) or an affine
    expression of RVars; ``value`` may read ``func`` itself.
    """

    func: str
    number: int
    index: tuple[Expr, ...]
    value: Expr
    pure: tuple[str, ...]
    rvars: tuple[Any, ...]
    #: conditions restricting the update to some points of its RDoms (``RDom.where``)
    predicate: tuple[Expr, ...] = ()

    @property
    def key(self) -> tuple:
        return ("Update", self.func, self.number, tuple(i.key for i in self.index),
                self.value.key, self.pure, tuple(r.key for r in self.rvars),
                tuple(c.key for c in self.predicate))

    @property
    def stage(self) -> str:
        """This update's stage name, ``F.update(n)``."""
        return stage_id(self.func, self.number)

    def lhs_str(self) -> str:
        return f"{self.func}[{', '.join(map(str, self.index))}]"

    def __str__(self) -> str:
        where = f"  # where {' and '.join(map(str, self.predicate))}" if self.predicate else ""
        return f"{self.lhs_str()} = {self.value}{where}"


class Func:
    """A function over an integer domain, defined once by ``F[i, j, ...] = expr``.

    Args:
        name: identifier used in loop nests, errors and the workload key.
        shape: optional extents (ints or sizes); without it the domain is inferred from the reads
            ("valid" semantics, see ``tensorlang.domain``) and may start above 0: ``F[x] =
            In[x - 1] + In[x + 1]`` has domain ``[1, N - 1)`` and its array holds ``x = 1`` at index 0.
        dtype: optional element type; the definition's value is converted to it. Default: the
            value's type under NumPy promotion.

    Raises:
        DefinitionError: on a bad name, shape or dtype, and at ``F[...] = ...`` for a repeated
            left-side Var, a non-Var left index, a second definition, a read of an undefined Func,
            a rank mismatch, or a Var whose range cannot be inferred or is empty.
    """

    def __init__(self, name: str, shape: Any = None, dtype: Any = None) -> None:
        self.name = check_name(name, "Func")
        self.shape = None if shape is None else _as_shape(shape, f"Func {name}")
        self._dtype = None if dtype is None else as_dtype(dtype)
        self.definition: Definition | None = None
        self.updates: list[Update] = []
        self._bounds: tuple[tuple[Expr, Expr], ...] | None = None

    @classmethod
    def from_definition(cls, name: str, like: Func, definition: Definition) -> Func:
        """A Func named ``name`` with ``like``'s shape, dtype and domain and the given definition
        (used by schedules that add stages, e.g. ``cache_write``)."""
        f = cls(name, shape=like.shape, dtype=like.dtype)
        f.definition = definition
        f._bounds = like.bounds
        return f

    # -- properties --------------------------------------------------------------------------
    @property
    def rank(self) -> int | None:
        if self.definition is not None:
            return len(self.definition.args)
        return None if self.shape is None else len(self.shape)

    @property
    def dtype(self) -> DType | None:
        if self._dtype is not None:
            return self._dtype
        return None if self.definition is None else self.definition.value.dtype

    @property
    def bounds(self) -> tuple[tuple[Expr, Expr], ...]:
        """Per dimension ``(min, extent)`` of the domain, as size expressions."""
        if self._bounds is None:
            raise DefinitionError(f"Func {self.name} has no definition yet; define it with "
                                  f"{self.name}[i, ...] = expr")
        return self._bounds

    @property
    def producers(self) -> list[Input | Func]:
        """Inputs and Funcs this Func's definition reads, in order of first read."""
        if self.definition is None:
            return []
        seen: dict[int, Any] = {}
        for e in (self.definition.value, *(u.value for u in self.updates)):
            for n in walk(e):
                if isinstance(n, Access) and n.producer is not self and \
                        id(n.producer) not in seen:
                    seen[id(n.producer)] = n.producer
        return list(seen.values())

    # -- reads and the definition --------------------------------------------------------------
    def __getitem__(self, idx: Any) -> Access:
        if self.definition is None:
            raise DefinitionError(
                f"Func {self.name} is read but has no definition yet; define "
                f"{self.name}[...] = ... before using it")
        return _make_access(self, self.name, self.rank, self.dtype, idx, None)

    def __setitem__(self, idx: Any, value: Any) -> None:
        self.define(idx, value)

    def define(self, idx: Any, value: Any) -> None:
        """Give this Func its pure definition (``F[idx] = value`` calls this)."""
        lhs = _index_tuple(idx)
        if self.definition is not None:
            self._define_update(lhs, value)
            return
        lhs_text = f"{self.name}[{', '.join(map(str, lhs))}]"
        seen: set[str] = set()
        for d, v in enumerate(lhs):
            if isinstance(v, RVar):
                raise DefinitionError(
                    f"In definition of {lhs_text}: index {d} is the reduction variable {v.name}; "
                    f"give {self.name} a pure definition first (F[x] = 0), then update it over "
                    f"the RDom")
            if not isinstance(v, Var):
                raise DefinitionError(
                    f"In definition of {lhs_text}: left index {d} ({v}) is not a Var; a pure "
                    f"definition is indexed by distinct Vars, e.g. {self.name}[i, j] = ...")
            if v.name in seen:
                raise DefinitionError(
                    f"In definition of {lhs_text}: Var {v.name} appears twice on the left (index "
                    f"{d}); use distinct Vars, and read a diagonal on the right: F[i] = A[i, i]")
            seen.add(v.name)
        if self.shape is not None and len(self.shape) != len(lhs):
            raise DefinitionError(
                f"In definition of {lhs_text}: {self.name} was declared with shape of rank "
                f"{len(self.shape)} but is defined with {len(lhs)} indices")
        expr = as_expr(value)
        op: str | None = None
        if isinstance(expr, Reduce):
            op, expr = expr.op, expr.value
        pure = [v.name for v in lhs]
        expr = self._lift_reductions(expr, pure, lhs_text)
        self._check_reads(expr, lhs_text)
        rvars = [v for v in free_vars(expr) if v.name not in seen]
        whole = _collect_rvars((expr,), f"In definition of {lhs_text}")
        rvars += [r for r in whole.values() if r.name not in {v.name for v in rvars}]
        if rvars and op is None:
            op = "sum"
        if not rvars:
            op = None
        dtype = self._dtype or expr.dtype
        if op is not None and dtype.is_bool:
            if op in ("max", "min"):
                raise DefinitionError(f"In definition of {lhs_text}: {op} of a bool expression; "
                                      f"cast it with tl.cast(tl.int32, ...)")
            dtype = int64
        expr = cast(dtype, expr)
        predicate = _predicate(rvars, seen, f"In definition of {lhs_text}")
        constraints = self._constraints(expr)
        fixed = {r.name: (r.min, ssub(sadd(r.min, r.extent), sconst(1)))
                 for r in rvars if isinstance(r, RVar)}
        ranges = infer_ranges(self.name, lhs_text, pure, [r.name for r in rvars], constraints,
                              self.shape, fixed)
        table = tuple(
            (v, lo, _extent(lo, hi)) for v, (lo, hi) in
            ((n, ranges[n]) for n in pure + [r.name for r in rvars]))
        self._dtype = dtype
        self.definition = Definition(self.name, tuple(lhs), expr, op, tuple(rvars), table,
                                     predicate)
        self._bounds = tuple((lo, ext) for _, lo, ext in table[: len(pure)])

    def _define_update(self, lhs: tuple, value: Any) -> None:
        d = self.definition
        assert d is not None
        lhs_text = f"{self.name}[{', '.join(map(str, lhs))}]"
        where = f"In update definition {len(self.updates)} of {self.name} ({lhs_text} = ...)"
        pure_names = [a.name for a in d.args]
        if len(lhs) != len(pure_names):
            raise DefinitionError(f"{where}: {self.name} has {len(pure_names)} dimensions but "
                                  f"the left side has {len(lhs)} indices")
        index: list[Expr] = []
        pure_used: list[str] = []
        for pos, ix in enumerate(lhs):
            e = as_expr(ix)
            if not e.dtype.is_int:
                raise DefinitionError(f"{where}: index {pos} ({e}) is not an integer")
            if isinstance(e, Var) and not isinstance(e, RVar):
                if e.name != pure_names[pos]:
                    raise DefinitionError(
                        f"{where}: index {pos} is Var {e.name}, but the pure Var of dimension "
                        f"{pos} is {pure_names[pos]}; a pure Var keeps its position in every "
                        f"definition (use an RDom to index other points)")
                pure_used.append(e.name)
            else:
                # an expression of RVars: affine, or any integer expression (a scatter,
                # H[I[r]] = H[I[r]] + 1, proven in bounds when the sizes are known)
                for n in walk(e):
                    if isinstance(n, Reduce) or (isinstance(n, Access) and n.producer is self):
                        raise DefinitionError(
                            f"{where}: index {pos} ({e}) "
                            + ("holds a reducer; compute it as a Func first"
                               if isinstance(n, Reduce) else
                               f"reads {self.name} itself; compute the index as another Func"))
                e = cast(int64, e)
            index.append(e)
        for pos, e in enumerate(index):
            if isinstance(e, Var) and not isinstance(e, RVar):
                continue
            # a pure Var may appear inside a data-dependent index (H[y, I[y, r]]) when it also
            # holds its own position: distinct values of it still update distinct cells
            plain = [n.name for n in walk(e) if isinstance(n, Var) and not isinstance(n, RVar)
                     and (n.name not in pure_used or not _inside_read(e, n.name))]
            if plain:
                raise DefinitionError(
                    f"{where}: index {pos} ({e}) uses Var {plain[0]}; index an update with "
                    f"the pure Var of that position or an expression of RDom variables")
        value = as_expr(value)
        expr = self._lift_reductions(value, pure_used, lhs_text,
                                     _iterated_rvars((*index, value)), where)
        for n in walk(expr):
            if isinstance(n, Var) and not isinstance(n, RVar) and n.name not in pure_used:
                raise DefinitionError(
                    f"{where}: Var {n.name} is free on the right side; an update reduces only "
                    f"over RDom variables (tl.RDom) — use one, or a pure Var of the left side")
        for a in walk(expr):
            if isinstance(a, Access) and a.producer is self and a.boundary is not None \
                    and a.boundary.kind in FOLDING_BOUNDARIES:
                raise DefinitionError(
                    f"{where}: {self.name} reads itself through {a.boundary.kind}; an update "
                    f"may read its own Func directly, through clamp_edge or through "
                    f"constant_exterior only (a folded read's dependence on other iterations "
                    f"cannot be proven)")
            if isinstance(a, Access) and a.producer is self:
                for pos, p in enumerate(pure_names):
                    if p in pure_used and not (isinstance(a.indices[pos], Var)
                                               and a.indices[pos].name == p):  # type: ignore
                        raise DefinitionError(
                            f"{where}: the read {a} uses {a.indices[pos]} in dimension {pos}, "
                            f"where the left side has the pure Var {p}; read {self.name} at {p} "
                            f"there (each value of {p} is updated independently), or make that "
                            f"dimension an RDom")
        assert self.dtype is not None
        expr = cast(self.dtype, expr)
        rvars = _collect_rvars((*index, expr), where)
        predicate = _predicate(list(rvars.values()), set(pure_used), where)
        self.updates.append(Update(self.name, len(self.updates), tuple(index), expr,
                                   tuple(pure_used), tuple(rvars.values()), predicate))

    def _lift_reductions(self, expr: Expr, pure: list[str], lhs_text: str,
                         iterated: dict[str, RVar] | None = None, where: str = "") -> Expr:
        """Lift each reducer nested in ``expr`` into its own Func over the left-side Vars it
        uses. In an update definition, ``iterated`` holds the RVars the update itself runs over
        (those used outside every nested reducer, with the rest of their RDoms): the reducer is
        computed per iteration, so they become pure dimensions of the lifted Func, read back at
        the update's RVars, and only the reducer's other RVars are reduced (Halide's inline
        reductions).

        Raises:
            DefinitionError: in an update, a reducer reads the Func being updated (the lifted
                Func is computed before the update runs, so it would read values the update has
                not written yet), or reduces only over RVars the update already iterates.
        """
        counter = itertools.count()  # per definition: names stay deterministic across programs

        def go(n: Expr) -> Expr:
            n = map_children(n, go)
            if not isinstance(n, Reduce):
                return n
            # in the left side's order: syr2k's sum(A[j, k] * B[i, k] ...) inside out[i, j] is
            # out_sum0[i, j], not out_sum0[j, i] (a transposed read of it, loops in reverse)
            free = {v.name: v for v in free_vars(n.value)}
            for c in _reducer_predicates(n.value):  # a condition's pure Vars: g's too
                for v in free_vars(c):
                    free.setdefault(v.name, v)
            inner_pure = [free[p] for p in pure if p in free]
            name = f"{self.name}_{n.op}{next(counter)}"
            if iterated is None:
                g = Func(name)
                g[tuple(inner_pure)] = n
                return g[tuple(inner_pure)]
            text = f"tl.{n.op}({n.value})"
            if any(isinstance(a, Access) and a.producer is self for a in walk(n.value)):
                raise DefinitionError(
                    f"{where}: {text} reads {self.name}, the Func this update defines; a nested "
                    f"reducer is computed as its own Func before the update runs, so it would "
                    f"not see what earlier iterations of the update wrote. Reduce inside the "
                    f"update instead: add the reduction's dimension to the update's RDom and "
                    f"accumulate into {self.name} (updates run over their RDom in order)")
            per_iteration = [v for v in free.values() if v.name in iterated]
            # its own RDom's variables, or plain Vars reduced by the einsum rule (tl.sum(A[i, k]))
            reduced = [v for v in free.values() if v.name not in iterated and v.name not in pure]
            if per_iteration and not reduced:
                raise DefinitionError(
                    f"{where}: {text} reduces over nothing: its RDom variables "
                    f"({', '.join(v.name for v in per_iteration)}) are iterated by the update "
                    f"itself (an update runs over the whole RDom of every RDom variable it "
                    f"uses); write the term without the reducer, or give the nested reduction "
                    f"an RDom of its own")
            params = [Var(f"{name}_{k}") for k in range(len(per_iteration))]
            body = substitute(n, {v.name: p for v, p in zip(per_iteration, params)})
            g = Func(name)
            g[(*inner_pure, *params)] = body
            return g[(*inner_pure, *per_iteration)]

        return go(expr)

    def _check_reads(self, expr: Expr, lhs_text: str) -> None:
        for a in walk(expr):
            if not isinstance(a, Access) or not isinstance(a.producer, Func):
                continue
            p = a.producer
            if p is self:
                raise DefinitionError(
                    f"In definition of {lhs_text}: {self.name} reads itself; a pure definition "
                    f"cannot be recursive (recurrences are update definitions)")

    def _constraints(self, expr: Expr) -> list[Constraint]:
        """The bounds each read puts on its Vars: an affine index ``lo <= a <= hi``, an index
        ``a // c`` (``a`` affine, ``c`` > 0) ``c * lo <= a <= c * hi + c - 1``; other indices
        bound nothing (they are checked when the sizes are known)."""
        out = []
        for a in walk(expr):
            if isinstance(a, Access) and a.boundary is None:
                for d, (ix, (lo, ext)) in enumerate(zip(a.indices, a.producer.bounds)):
                    hi = ssub(sadd(lo, ext), sconst(1))
                    c = 1
                    if isinstance(ix, BinOp) and ix.op == "floordiv" and \
                            isinstance(ix.b, Const) and int(ix.b.value) > 0:
                        c, ix = int(ix.b.value), ix.a
                    try:
                        form = affine_form(ix)
                    except NonAffine:
                        continue
                    out.append(Constraint(a, d, form, smul(lo, c),
                                          sadd(smul(hi, c), sconst(c - 1))))
        return out

    def __repr__(self) -> str:
        if self.definition is None:
            return f"Func({self.name!r})"
        ups = "".join(f"; {u}" for u in self.updates)
        return f"Func({self.definition}{ups})"


def _inside_read(e: Expr, var: str) -> bool:
    """Whether every occurrence of Var ``var`` in ``e`` is inside an index of a read."""
    def go(n: Expr, inside: bool) -> bool:
        if isinstance(n, Var) and n.name == var:
            return inside
        return all(go(c, inside or isinstance(n, Access)) for c in children(n))

    return go(e, False)


def _iterated_rvars(exprs: tuple) -> dict[str, RVar]:
    """The RVars an update runs over: those in ``exprs`` outside every nested reducer, and the
    other variables of their RDoms (a definition iterates the whole RDom)."""
    out: dict[str, RVar] = {}

    def go(n: Expr) -> None:
        if isinstance(n, Reduce):
            return
        if isinstance(n, RVar):
            for r in n.domain:
                out.setdefault(r.name, r)
        for c in children(n):
            go(c)

    for e in exprs:
        go(e)
    return out


def _collect_rvars(exprs: tuple, where: str) -> dict[str, Any]:
    """The RVars in ``exprs`` by name, with every other variable of their RDoms (a definition
    iterates the whole RDom, as in Halide); two different RDom variables with one name are
    refused."""
    out: dict[str, Any] = {}
    for e in exprs:
        for n in walk(e):
            if not isinstance(n, RVar):
                continue
            for r in n.domain:
                other = out.setdefault(r.name, r)
                if other is not r and not other.same_as(r):
                    raise DefinitionError(
                        f"{where}: two different RDoms both have a variable named {r.name}; "
                        f"give them distinct names, e.g. tl.RDom(..., name='s')")
    return out


def _reducer_predicates(e: Expr) -> list[Expr]:
    """The ``RDom.where`` conditions of the RVars in ``e``."""
    out: list[Expr] = []
    for n in walk(e):
        if isinstance(n, RVar):
            out += [c for c in n.predicates if all(not c.same_as(o) for o in out)]
    return out


def _predicate(rvars: list, pure: set[str], where: str) -> tuple[Expr, ...]:
    """The ``RDom.where`` conditions of the RDoms ``rvars`` belong to (each RDom once, in order
    of first use), which are then marked used. A condition's plain Vars must be pure Vars of
    the definition (``pure``).

    Raises:
        DefinitionError: a condition uses a Var that is not on the left side.
    """
    out: list[Expr] = []
    seen: set[tuple] = set()
    for r in rvars:
        if not isinstance(r, RVar):
            continue
        r.mark_used()
        for c in r.predicates:
            if c.key in seen:
                continue
            seen.add(c.key)
            for n in walk(c):
                if isinstance(n, Var) and not isinstance(n, RVar) and n.name not in pure:
                    raise DefinitionError(
                        f"{where}: the RDom condition {c} uses Var {n.name}, which is not on the "
                        f"left side; a condition may use the RDom's variables, the left side's "
                        f"pure Vars and sizes")
            out.append(c)
    return tuple(out)


def _extent(lo: Expr, hi: Expr) -> Expr:
    return sadd(ssub(hi, lo), sconst(1))


class BoundaryView:
    """An unbounded view of an Input or Func: any index may be read (see ``clamp_edge``)."""

    def __init__(self, producer: Input | Func, boundary: Boundary) -> None:
        if not isinstance(producer, (Input, Func)):
            raise DefinitionError(f"boundary conditions apply to an Input or Func, not "
                                  f"{type(producer).__name__}")
        if isinstance(producer, Func) and producer.definition is None:
            raise DefinitionError(f"Func {producer.name} needs a definition before a boundary "
                                  f"condition can wrap it")
        self.producer = producer
        self.boundary = boundary
        self.name = producer.name
        self.rank = producer.rank

    def __getitem__(self, idx: Any) -> Access:
        p = self.producer
        return _make_access(p, p.name, p.rank, p.dtype, idx, self.boundary)


def clamp_edge(f: Input | Func) -> BoundaryView:
    """A view of ``f`` whose reads outside its domain return the nearest edge element.

    ``clamp_edge(In)[x, y] == In[clamp(x, 0, W - 1), clamp(y, 0, H - 1)]`` (NumPy ``mode='edge'``).
    See also: Halide ``BoundaryConditions::repeat_edge``.
    """
    return BoundaryView(f, Boundary("clamp_edge"))


def repeat_edge(f: Input | Func) -> BoundaryView:
    """Halide's name of :func:`clamp_edge` (NumPy ``mode='edge'``)."""
    return clamp_edge(f)


def repeat_image(f: Input | Func) -> BoundaryView:
    """A view of ``f`` tiled periodically: ``repeat_image(In)[x] == In[x mod W]`` per dimension
    (NumPy ``np.pad(mode='wrap')``). See also: Halide ``BoundaryConditions::repeat_image``."""
    return BoundaryView(f, Boundary("repeat_image"))


def mirror_image(f: Input | Func) -> BoundaryView:
    """A view of ``f`` reflected at its edges, the edge element repeated (``... 1 0 | 0 1 2 ...``;
    NumPy ``np.pad(mode='symmetric')``). See also: Halide ``BoundaryConditions::mirror_image``."""
    return BoundaryView(f, Boundary("mirror_image"))


def mirror_interior(f: Input | Func) -> BoundaryView:
    """A view of ``f`` reflected about its edge elements, which are not repeated
    (``... 2 1 | 0 1 2 ...``; NumPy ``np.pad(mode='reflect')``; an extent of 1 repeats its one
    element). See also: Halide ``BoundaryConditions::mirror_interior``."""
    return BoundaryView(f, Boundary("mirror_interior"))


#: boundary conditions that fold an index back into the domain (every read lands anywhere in it)
FOLDING_BOUNDARIES = ("repeat_image", "mirror_image", "mirror_interior")


def constant_exterior(f: Input | Func, value: Any = 0) -> BoundaryView:
    """A view of ``f`` whose reads outside its domain return ``value`` (converted to f's dtype).

    See also: Halide ``BoundaryConditions::constant_exterior``; NumPy ``np.pad(mode='constant')``.
    """
    dtype = f.dtype if f.dtype is not None else DType.float32
    return BoundaryView(f, Boundary("constant_exterior", const(value, dtype)))
