"""A GPU kernel's conditions decided where its context proves them, and the ones left that are
the same in every block moved to the host: one kernel per version.

Loop versioning (``schedule/realize.py``) gives each stage instance a fast version (whole tiles,
no guards, register tiles) and a guarded one, chosen by a condition evaluated per instance. On a
CPU the version not taken costs code size. On a GPU it costs occupancy: ``ptxas`` gives a
kernel the registers of its most demanding path, so a GEMM block's guarded version (each
partial-tile guard, the divisions of its partial copies) sets the registers, and so the blocks
per multiprocessor, of every block, the ones running whole tiles included. Two rewrites, each
proven with isl before the nest is split into launches (``launches.plan``), remove that cost:

- **decide**: a conjunct of an ``if`` that the enclosing loop ranges, ``let`` values and branch
  conditions imply is dropped, and a condition they contradict removes its branch. Inside a
  launch over the whole row blocks ``[0, M // 64)``, "this row block is 64 rows" holds; inside
  the version taken when ``K % 16 == 0``, so does "this ``k`` block is 16 deep", and the copies'
  guarded versions go. A ``let`` or loop bound they prove constant becomes that constant (a
  staged tile's extents: its copy then divides by constants), and a ``max(e, 0)`` clamp they
  prove idle goes (a tile shifted inwards keeps the base its thread loops index with).
- **unswitch**: an ``if`` with an ``else`` on a kernel's spine (inside its block loops, above
  its thread loops and serial loops) whose condition, once decided, reads only sizes and host
  variables is the same in every block: the host tests it and launches one of two kernels, one
  per branch (LLVM's loop unswitching, applied to the grid; Halide's ``Func::specialize``, made
  automatically for the conditions loop versioning leaves).

Conditions isl cannot state (a read of data, a product of two variables) are left as they are;
what isl cannot prove stays tested, so both rewrites keep every result (the emulator's tests
run the rewritten kernels against NumPy). isl manual, "Sets and Relations" (``is_empty``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import islpy as isl

from tensorlang.affine import const_value
from tensorlang.expr import BinOp, Cmp, Const, Expr, Not, Size, Var, map_children, walk
from tensorlang.dtypes import DType
from tensorlang.schedule.ir import (
    GPU_KINDS,
    Allocate,
    Block,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    LoweredFunc,
    ProducerConsumer,
    Stmt,
    map_stmt,
    reads_memory,
    walk_stmts,
)
from tensorlang.schedule.legality.isl_text import Unrepresentable, quasi_affine

from .bounds import conjuncts
from .private import linear_form

#: the isl work one proof may take (isl's operation count): a condition whose proof would take
#: more is kept, not decided
MAX_OPERATIONS = 30000
_ISL = isl.Context()
_ISL.set_max_operations(MAX_OPERATIONS)

_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=", "ne": "!="}


@dataclass(frozen=True)
class _Fact:
    """An isl constraint, the names it mentions (``"v:<var>"``, ``"s:<size>"``, ``"a:<term>"``)
    and the constraints bounding the opaque terms among them (``Context.expr``)."""

    text: str
    names: frozenset[str]
    atoms: tuple[tuple[str, _Fact], ...] = ()

    def negated(self) -> _Fact:
        return _Fact(f"not ({self.text})", self.names, self.atoms)


@dataclass(frozen=True)
class Context:
    """What holds at a point of the nest: per name, the constraint its loop or ``let`` binds
    it by (an inner binding of a name replaces the outer one and what was said through it), the
    loops around (for the bounds of opaque terms), and the conditions of the branches taken to
    get there."""

    bound: tuple[tuple[str, _Fact], ...] = ()
    given: tuple[_Fact, ...] = ()
    loops: tuple[tuple[str, Expr, Expr], ...] = ()

    def bind(self, s: For | LetStmt) -> Context:
        """The context inside ``s``'s body."""
        key = f"v:{s.var}"
        try:
            v = self.expr(Var(s.var))
            if isinstance(s, LetStmt):
                e = self.expr(s.value)
                fact: _Fact | None = _Fact(f"{v.text} = {e.text}", v.names | e.names, e.atoms)
            else:
                lo, ext = self.expr(s.min), self.expr(s.extent)
                fact = _Fact(f"{lo.text} <= {v.text} < {lo.text} + {ext.text}",
                             v.names | lo.names | ext.names, lo.atoms + ext.atoms)
        except Unrepresentable:
            fact = None
        # whatever was said through the outer binding of the name no longer holds
        bound = tuple(b for b in self.bound if b[0] != key and key not in b[1].names)
        given = tuple(g for g in self.given if key not in g.names)
        loops = tuple(lp for lp in self.loops if lp[0] != s.var)
        if isinstance(s, For):
            loops += ((s.var, s.min, s.extent),)
        if fact is not None:
            bound += (*fact.atoms, (key, fact))
        return Context(bound, given, loops)

    def assume(self, fact: _Fact | None) -> Context:
        if fact is None:
            return self
        return Context((*self.bound, *fact.atoms), (*self.given, fact), self.loops)

    def expr(self, e: Expr) -> _Fact:
        """Integer expression ``e`` in isl's syntax (its ``text``), with the names it mentions.
        A subexpression isl cannot state that reads no memory (a division by a size) is an
        *opaque term*: a name standing for its value, the same for the same term; where it
        divides a fused loop's variable by one of the sizes whose product the loop spans
        (``v // H``, ``v % H`` for ``v`` in ``[0, N * H)``), its range is known
        (``[0, N)``, ``[0, H)``).

        Raises:
            Unrepresentable: ``e`` reads memory.
        """
        names: set[str] = set()
        atoms: dict[str, _Fact] = {}

        def var(n: str) -> str:
            names.add(f"v:{n}")
            return _ident(f"v:{n}")

        def size(n: str) -> str:
            names.add(f"s:{n}")
            return _ident(f"s:{n}")

        def opaque(n: Expr) -> str:
            if reads_memory(n):
                raise Unrepresentable("{} reads memory", n)
            key = f"a:{n}"
            names.add(key)
            names.update(f"v:{x.name}" for x in walk(n) if isinstance(x, Var))
            if key not in atoms:
                bound = self._opaque_range(n, key)
                if bound is not None:
                    atoms[key] = bound
            return _ident(key)

        text = quasi_affine(e, var, size, opaque)
        return _Fact(text, frozenset(names), tuple(atoms.items()))

    def _opaque_range(self, n: Expr, key: str) -> _Fact | None:
        if not (isinstance(n, BinOp) and n.op in ("floordiv", "mod")
                and isinstance(n.a, Var) and isinstance(n.b, Size)):
            return None
        loop = next((lp for lp in reversed(self.loops) if lp[0] == n.a.name), None)
        if loop is None or const_value(loop[1]) != 0:
            return None
        ext = loop[2]
        if not (isinstance(ext, BinOp) and ext.op == "mul"):
            return None
        other = ext.b if ext.a.same_as(n.b) else ext.a if ext.b.same_as(n.b) else None
        if other is None:
            return None
        try:
            hi = Context(loops=self.loops).expr(other if n.op == "floordiv" else n.b)
        except Unrepresentable:
            return None
        if hi.atoms:
            return None
        return _Fact(f"0 <= {_ident(key)} < {hi.text}",
                     frozenset({key, f"v:{n.a.name}"}) | hi.names)

    def implies(self, fact: _Fact) -> bool:
        """Whether ``fact`` holds wherever the context does (False where isl cannot tell).
        Asked first of the bindings of the names involved alone, then, if that does not prove
        it, with the branch conditions too (most proofs need none, and a version's condition
        can be long)."""
        return self._implies(fact, ()) or bool(self.given) and self._implies(fact, self.given)

    def _implies(self, fact: _Fact, given: tuple[_Fact, ...]) -> bool:
        bound = dict(self.bound)
        bound.update(fact.atoms)
        names = set(fact.names)
        used: list[_Fact] = list(given)
        for g in given:
            names |= g.names
        todo = list(names)
        while todo:  # the bindings of the names involved, transitively
            f = bound.get(todo.pop())
            if f is not None and f not in used:
                used.append(f)
                todo += [m for m in f.names if m not in names]
                names |= f.names
        ids = sorted(_ident(n) for n in names)
        sizes = [f"{_ident(n)} >= 0" for n in sorted(names) if n.startswith("s:")]
        body = " and ".join([*(f"({u.text})" for u in used), *sizes, f"not ({fact.text})"])
        return _empty(f"[{', '.join(ids)}] -> {{ [] : {body} }}")

    def fold(self, e: Expr) -> Expr:
        """``e`` as a constant where deciding its integer ``min`` / ``max`` makes it one (a
        tile's extent ``min(64 x + 63, N - 1) - 64 x + 1`` inside the launch over whole tiles:
        64); else ``e`` without the constant lower clamps the context proves idle (bounds
        inference's ``max(min(64 x, N - 64), 0)`` of a tile shifted inwards, where ``N >= 64``:
        ``min(64 x, N - 64)``, the same base as the tile's loops, which lets ``private.py`` see
        a thread's elements). Other ``min``s stay: they are the bounds ``launches.plan`` sizes a
        block by."""
        def decided(n: BinOp) -> Expr | None:
            try:
                a, b = self.expr(n.a), self.expr(n.b)
            except Unrepresentable:
                return None
            names, atoms = a.names | b.names, a.atoms + b.atoms
            if self.implies(_Fact(f"{a.text} <= {b.text}", names, atoms)):
                return n.a if n.op == "min" else n.b
            if self.implies(_Fact(f"{b.text} <= {a.text}", names, atoms)):
                return n.b if n.op == "min" else n.a
            return None

        def go(n: Expr, every: bool) -> Expr:
            n = map_children(n, lambda c: go(c, every))
            if not (isinstance(n, BinOp) and n.op in ("min", "max") and n.dtype.is_int):
                return n
            if not every and not (n.op == "max" and (isinstance(n.a, Const)
                                                     or isinstance(n.b, Const))):
                return n
            out = decided(n)
            if out is None or not every and isinstance(out, Const):
                return n
            return out

        whole = go(e, True)
        if whole is not e:
            terms, value = linear_form(whole)  # (min(64 x, N) + 63 - min(64 x, N) + 1: 64)
            if not terms:
                return Const(value, e.dtype)
        return go(e, False)

    def cond(self, c: Expr) -> _Fact | None:
        """Condition ``c`` as an isl constraint (None: isl cannot state it)."""
        try:
            return self._cond(c)
        except Unrepresentable:
            return None

    def _cond(self, c: Expr) -> _Fact:
        if isinstance(c, Cmp) and c.a.dtype.is_int and c.op in _CMP:
            a, b = self.expr(c.a), self.expr(c.b)
            return _Fact(f"{a.text} {_CMP[c.op]} {b.text}", a.names | b.names, a.atoms + b.atoms)
        if isinstance(c, BinOp) and c.op in ("and", "or") and c.dtype is DType.bool_:
            a, b = self._cond(c.a), self._cond(c.b)
            return _Fact(f"({a.text}) {c.op} ({b.text})", a.names | b.names, a.atoms + b.atoms)
        if isinstance(c, Not):
            return self._cond(c.a).negated()
        if isinstance(c, Const) and c.dtype is DType.bool_:
            return _Fact("0 = 0" if c.value else "0 = 1", frozenset())
        raise Unrepresentable("{} is not a quasi-affine condition", c)


@functools.lru_cache(maxsize=4096)
def _empty(text: str) -> bool:
    """Whether the isl set ``text`` is empty (False where isl gives up). Cached: the versions
    of a nest repeat the same tile extents, so the same questions."""
    _ISL.reset_operations()
    try:
        return isl.Set(text, context=_ISL).is_empty()
    except isl.Error:  # (past MAX_OPERATIONS too: not proven)
        return False


def _ident(name: str) -> str:
    """An isl identifier for a tensorlang name (``C_local.i.o`` has dots)."""
    kind, _, rest = name.partition(":")
    return f"{kind}_" + "".join(c if c.isalnum() or c == "_" else f"_{ord(c):x}_" for c in rest)


def _conjunction(cs: list[Expr]) -> Expr:
    out = cs[0]
    for c in cs[1:]:
        out = BinOp("and", out, c, DType.bool_)
    return out


def decide(s: Stmt, ctx: Context) -> Stmt:
    """``s`` with each ``if`` condition's conjuncts that ``ctx`` and the enclosing statements
    imply dropped, each branch whose condition they contradict removed, and the ``let``
    values, loop bounds and buffer origins they fold (``Context.fold``) folded; inside thread
    loops only the loops' extents (``_thread_extents``): a thread's guards (its place in a
    partial tile) vary from thread to thread, and their proofs cost the most."""
    if isinstance(s, For) and s.kind is ForKind.GPU_THREAD:
        return _thread_extents(s, ctx)
    if isinstance(s, LetStmt):
        s = dataclasses.replace(s, value=ctx.fold(s.value))
    elif isinstance(s, Allocate):
        buf = s.buffer
        s = dataclasses.replace(s, buffer=dataclasses.replace(
            buf, mins=tuple(ctx.fold(m) for m in buf.mins)))
    elif isinstance(s, For):
        s = dataclasses.replace(s, min=ctx.fold(s.min), extent=ctx.fold(s.extent))
    if isinstance(s, (For, LetStmt)):
        inner = ctx.bind(s)
        return map_stmt(s, lambda c: decide(c, inner), lambda e: e)
    if isinstance(s, IfThenElse) and not reads_memory(s.cond):
        kept: list[Expr] = []
        for c in conjuncts(s.cond):
            fact = ctx.cond(c)
            if fact is None:
                kept.append(c)
            elif ctx.implies(fact):
                continue
            elif ctx.implies(fact.negated()):
                if s.otherwise is None:
                    return Block(())
                return decide(s.otherwise, ctx)
            else:
                kept.append(c)
        if not kept:
            return decide(s.then, ctx)
        cond = _conjunction(kept)
        fact = ctx.cond(cond)
        then = decide(s.then, ctx.assume(fact))
        other = None
        if s.otherwise is not None:
            other = decide(s.otherwise, ctx.assume(None if fact is None else fact.negated()))
        return IfThenElse(cond, then, other)
    return map_stmt(s, lambda c: decide(c, ctx), lambda e: e)


def _thread_extents(s: Stmt, ctx: Context, inner: frozenset[str] = frozenset()) -> Stmt:
    """The thread loops of nest ``s`` with each extent that the block's context proves
    constant made that constant (a tile shifted inwards is whole: its 16 threads, where
    ``launches.plan`` could bound ``min(64 x + 63, N - 1) - min(64 x, N - 64) + 1`` by
    nothing); an extent that names a variable bound inside the nest (``inner``) is left."""
    if isinstance(s, LetStmt):
        return dataclasses.replace(s, body=_thread_extents(s.body, ctx, inner | {s.var}))
    if not (isinstance(s, For) and s.kind is ForKind.GPU_THREAD):
        return s
    known = {k[2:] for k, _ in ctx.bound if k.startswith("v:")} - inner
    extent = s.extent
    if all(v.name in known for v in walk(extent) if isinstance(v, Var)):
        extent = ctx.fold(extent)
    return dataclasses.replace(s, extent=extent,
                               body=_thread_extents(s.body, ctx, inner | {s.var}))


def _uniform(c: Expr, host: frozenset[str]) -> bool:
    """Whether ``c`` reads only sizes and the host variables ``host`` (no memory)."""
    if reads_memory(c):
        return False
    return all(n.name in host for n in walk(c) if isinstance(n, Var))


def _spine_if(s: Stmt, host: frozenset[str]) -> IfThenElse | None:
    """The first ``if``-``else`` on ``s``'s spine (block loops, lets, allocations, guards
    without ``else``, the statements of a sequence) whose condition is uniform; None when there
    is none."""
    node = s
    while True:
        if isinstance(node, IfThenElse) and node.otherwise is not None:
            return node if _uniform(node.cond, host) else None
        if isinstance(node, For) and node.kind is ForKind.GPU_BLOCK:
            node = node.body
        elif isinstance(node, (LetStmt, Allocate, ProducerConsumer)):
            node = node.body
        elif isinstance(node, IfThenElse):
            node = node.then
        elif isinstance(node, Block):  # (the other statements go to both kernels)
            return next((b for b in (_spine_if(c, host) for c in node.stmts) if b is not None),
                        None)
        else:
            return None


def _take(s: Stmt, branch: IfThenElse, then: bool) -> Stmt:
    """``s`` with the spine's ``branch`` replaced by one of its branches."""
    if s is branch:
        return branch.then if then else branch.otherwise  # type: ignore[return-value]
    if isinstance(s, IfThenElse):
        return dataclasses.replace(s, then=_take(s.then, branch, then))
    if isinstance(s, Block):
        return Block(tuple(_take(c, branch, then) if _contains(c, branch) else c
                           for c in s.stmts))
    return dataclasses.replace(s, body=_take(s.body, branch, then))  # type: ignore[call-arg]


def _contains(s: Stmt, node: Stmt) -> bool:
    return any(n is node for n in walk_stmts(s))


def unswitch(s: Stmt, host: frozenset[str]) -> Stmt:
    """Region ``s`` (one kernel) as ``if c: kernel_then else: kernel_else``, the first uniform
    ``if`` on its spine outermost, and so on in each branch."""
    branch = _spine_if(s, host)
    if branch is None:
        return s
    return IfThenElse(branch.cond, unswitch(_take(s, branch, True), host),
                      unswitch(_take(s, branch, False), host))


def has_gpu_loops(s: Stmt) -> bool:
    """Whether ``s`` holds a loop mapped to the GPU (``gpu_blocks`` / ``gpu_threads``)."""
    return any(isinstance(n, For) and n.kind in GPU_KINDS for n in walk_stmts(s))


def specialize(lowered: LoweredFunc) -> LoweredFunc:
    """``lowered`` with the conditions of its GPU regions decided and the uniform ones moved
    to the host (see the module docstring). The host statements are walked as
    ``launches.plan`` walks them; every nest with a GPU loop that ``plan`` makes a kernel of is
    rewritten."""

    def host(s: Stmt, ctx: Context, names: frozenset[str]) -> Stmt:
        if isinstance(s, Block):
            return Block(tuple(host(c, ctx, names) for c in s.stmts))
        if isinstance(s, (ProducerConsumer, Allocate)):
            return dataclasses.replace(s, body=host(s.body, ctx, names))
        if isinstance(s, LetStmt) and not reads_memory(s.value):
            return LetStmt(s.var, s.value, host(s.body, ctx.bind(s), names | {s.var}))
        if isinstance(s, IfThenElse) and not reads_memory(s.cond):
            fact = ctx.cond(s.cond)
            neg = None if fact is None else fact.negated()
            return IfThenElse(s.cond, host(s.then, ctx.assume(fact), names),
                              None if s.otherwise is None
                              else host(s.otherwise, ctx.assume(neg), names))
        if isinstance(s, For) and s.kind not in GPU_KINDS and has_gpu_loops(s.body):
            return dataclasses.replace(s, body=host(s.body, ctx.bind(s), names | {s.var}))
        if not has_gpu_loops(s):
            return s
        return unswitch(decide(s, ctx), names)

    return dataclasses.replace(lowered, body=host(lowered.body, Context(), frozenset()))


__all__ = ["Context", "conjuncts", "decide", "has_gpu_loops", "specialize", "unswitch"]
