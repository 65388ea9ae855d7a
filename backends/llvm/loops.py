"""Statements and serial, vectorized and unrolled loops, with the loop metadata LLVM's vectorizer
reads. Part of ``CodeGen`` (``codegen.py``).
"""

from __future__ import annotations

import llvmlite.ir as ir

from tensorlang.affine import const_value
from tensorlang.errors import CompileError
from tensorlang.expr import BinOp, Expr, Var, walk
from tensorlang.schedule.ir import (
    GPU_KINDS,
    MAX_UNROLL,
    Allocate,
    Block,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    Prefetch,
    ProducerConsumer,
    Stmt,
    Store,
    lane_cap,
    padded_lanes,
)

from .expressions import vector_constant
from .row_bases import row_reads
from .types import I1, I32, I64


class LoopGen:
    """The loops part of ``CodeGen``; a mixin (it uses ``CodeGen``'s state)."""

    def stmt(self, s: Stmt) -> None:
        b = self.builder
        if isinstance(s, Block):
            for c in s.stmts:
                self.stmt(c)
        elif isinstance(s, ProducerConsumer):
            self.stmt(s.body)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, LetStmt):
            self.vars[s.var] = self.expr(s.value)
            outer_let = self.lets.get(s.var)
            self.lets[s.var] = s.value
            self.stmt(s.body)
            del self.vars[s.var]
            if outer_let is None:
                del self.lets[s.var]
            else:
                self.lets[s.var] = outer_let
        elif isinstance(s, IfThenElse):
            if self.vec is not None and not self.lane0 and _mentions(s.cond, self.vec[0]):
                return self.predicated(s)
            cond = self.expr(s.cond)
            if s.otherwise is None:
                with b.if_then(cond):
                    self.stmt(s.then)
            else:
                with b.if_else(cond) as (then, otherwise):
                    with then:
                        self.stmt(s.then)
                    with otherwise:
                        self.stmt(s.otherwise)
        elif isinstance(s, Allocate):
            self.allocate(s)
        elif isinstance(s, Prefetch):
            self.prefetch(s)
        else:
            raise CompileError(f"codegen: unsupported statement {type(s).__name__}")

    def predicated(self, s: IfThenElse) -> None:
        """An ``if`` (no ``else``) whose condition varies across the lanes of the vector loop
        around it (a triangle's diagonal tile: ``if j.i + t <= i``): its stores run under the
        lanes where it holds, ANDed into the lane mask (masked loads and stores), as Halide's
        vectorizer predicates them, instead of leaving the whole loop scalar."""
        b = self.builder
        cond = self.expr(s.cond)
        if not isinstance(cond.type, ir.VectorType):
            cond = self.splat(cond, self.vec[1])  # type: ignore[index]
        outer = self.mask
        self.mask = cond if outer is None else b.and_(outer, cond)
        self.stmt(s.then)
        self.mask = outer

    def masked_vector_loop(self, s: For, cap: int) -> None:
        """A vectorized loop whose extent is not a constant but at most ``cap`` (a GuardWithIf
        tail: ``min(8, N - 8 * x.o)``) as ``cap`` lanes under a mask of the lanes below the
        extent: masked loads and stores (``llvm.masked.load/store/gather/scatter``) touch no
        element past it, where LLVM's vectorizer would leave a loop this short scalar. Each
        chunk of a native vector past the first runs only when some lane of it is live."""
        b = self.builder
        extent = self.expr(s.extent)
        with b.if_then(b.icmp_signed(">", extent, ir.Constant(I64, 0))):
            self.vector_loop(s, cap, live=extent)

    def vector_loop(self, s: For, lanes: int, live: ir.Value | None = None) -> None:
        """Emit the body with the loop variable as a vector of lanes, in chunks no wider than a
        native register (e.g. 32 float32 lanes = 2 x 16 on AVX-512; 56 = 16 + 16 + 16 + 8):
        equal-width loads and stores of each accumulator let LLVM keep it in a register across
        outer loops, and a tile as wide as the image row wastes no lanes."""
        itemsize = max((self.buffer(n).dtype.itemsize for n in _buffers_in(s.body)
                        if n in self.f.buffers or self.scoped.get(n)), default=4)
        native = max(1, self.target.vector_bits // (8 * itemsize))
        outer_vec, outer_base = self.vec, getattr(self, "_vbase", None)
        b = self.builder
        base = self.expr(s.min)
        saved = self.vars.get(s.var)
        start = 0
        while start < lanes:
            # whole native vectors, then a tail of descending powers of two (56 float32 lanes on
            # AVX-512: 16 + 16 + 16 + 8), so no chunk is an odd-width vector LLVM must widen
            width = min(native, 1 << ((lanes - start).bit_length() - 1))
            self._vbase = base if start == 0 else self.int_op("add", base, ir.Constant(I64, start))
            self.vars[s.var] = self._vbase
            left = lanes - start
            if live is None and width < left < native \
                    and self._pads_lanes(s, start + padded_lanes(left)):
                # a register tile's last lanes as one vector under a constant lane mask (7
                # lanes as 8, not 4 + 2 + 1: one multiply-add per row of the tile, not three)
                self._chunk(s, padded_lanes(left), ir.Constant(I64, left))
                break
            if live is None:
                self._chunk(s, width)
            else:
                rest = b.sub(live, ir.Constant(I64, start)) if start else live
                if start == 0:
                    self._chunk(s, width, rest)
                else:
                    with b.if_then(b.icmp_signed(">", rest, ir.Constant(I64, 0))):
                        self._chunk(s, width, rest)
            start += width
        self.vec, self._vbase = outer_vec, outer_base
        if saved is None:
            del self.vars[s.var]
        else:
            self.vars[s.var] = saved

    def _chunk(self, s: For, width: int, rest: ir.Value | None = None) -> None:
        """The body for ``width`` lanes from ``self._vbase``; with ``rest`` (known positive),
        only the lanes below it are live (``self.mask``)."""
        outer_mask = self.mask
        if width == 1:  # (its one lane is live: rest > 0)
            self.vec = None
            self.mask = None
            self.stmt(s.body)
        else:
            self.vec = (s.var, width)
            self.mask = None if rest is None else self.builder.icmp_signed(
                "<", vector_constant(ir.VectorType(I64, width), range(width)),
                self.splat(rest, width))
            self.stmt(s.body)
        self.mask = outer_mask

    def _pads_lanes(self, s: For, end: int) -> bool:
        """Whether vector loop ``s`` may run its lanes up to ``end`` (past its extent) with
        memory accesses under the lane mask: it reads or writes a register tile, each such
        access indexes the tile by the loop's variable alone and the tile is allocated up to
        ``end`` along it (``promote.PAD_VECTORS``), and no integer division or remainder by a
        variable could trap in a dead lane."""
        lo = const_value(s.min)
        if lo is None:
            return False
        found = False
        for name, indices, exprs in _accesses(s.body):
            for e in exprs:
                if any(isinstance(n, BinOp) and n.op in ("div", "floordiv", "mod")
                       and not n.dtype.is_float and const_value(n.b) is None for n in walk(e)):
                    return False
            buf = self.buffer(name) if name is not None else None
            if buf is None or not buf.register:
                continue
            found = True
            for d, ix in enumerate(indices):
                if not _mentions(ix, s.var):
                    continue
                low, ext = const_value(buf.mins[d]), const_value(buf.extents[d])
                if not (isinstance(ix, Var) and ix.name == s.var) or low is None or ext is None \
                        or lo + end > low + ext:
                    return False
        return found

    def _vectorizable(self, s: For, lanes: int) -> bool:
        def mentions(e: Expr) -> bool:
            return _mentions(e, s.var)

        def stores_only(st: Stmt) -> bool:  # what a lane predicate may guard
            if isinstance(st, Block):
                return all(stores_only(c) for c in st.stmts)
            if isinstance(st, IfThenElse):
                return st.otherwise is None and stores_only(st.then)
            return isinstance(st, Store)

        def ok(st: Stmt) -> bool:
            if isinstance(st, Block):
                return all(ok(c) for c in st.stmts)
            if isinstance(st, ProducerConsumer):
                return ok(st.body)
            if isinstance(st, Store):
                return any(mentions(i) for i in st.indices)
            if isinstance(st, For):
                return (st.kind in (ForKind.SERIAL, ForKind.UNROLLED) and not mentions(st.min)
                        and not mentions(st.extent) and ok(st.body))
            if isinstance(st, IfThenElse):
                if mentions(st.cond):  # a lane predicate
                    return st.otherwise is None and stores_only(st.then) and ok(st.then)
                return ok(st.then) and (st.otherwise is None or ok(st.otherwise))
            return False

        return self.vec is None and 1 < lanes <= 64 and ok(s.body)

    def loop(self, s: For) -> None:
        if s.kind in GPU_KINDS:
            raise CompileError(f"loop {s.var} is mapped to the GPU ({s.kind.value}); compile it "
                               f"with target=\"cuda\", or make it parallel for the CPU")
        if s.kind is ForKind.UNROLLED:
            return self.unrolled(s)
        if s.kind is ForKind.PARALLEL and not self.in_parallel:
            return self.parallel(s)
        if s.kind is ForKind.VECTORIZED:
            from tensorlang.affine import const_value

            lanes = const_value(s.extent)
            if lanes is not None and self._vectorizable(s, lanes):
                return self.vector_loop(s, lanes)
            ext = s.extent
            if isinstance(ext, Var) and ext.name in self.lets:
                ext = self.lets[ext.name]
            cap = lane_cap(ext)
            if lanes is None and cap is not None and self._vectorizable(s, cap):
                return self.masked_vector_loop(s, cap)
        b = self.builder
        lo = self.expr(s.min)
        end = b.add(lo, self.expr(s.extent))
        pre = b.block
        header = self.fn.append_basic_block(f"{s.var}.header")
        body = self.fn.append_basic_block(f"{s.var}.body")
        exit_ = self.fn.append_basic_block(f"{s.var}.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name=s.var)
        iv.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", iv, end), body, exit_)
        b.position_at_end(body)
        outer = self.vars.get(s.var)
        self.vars[s.var] = iv
        outer_rows = self.row_keys
        if self.target.triple.startswith("x86_64"):
            self.row_keys = row_reads(s, self._row_stride)
        group, enclosing = None, self.access_group
        if s.independent and s.kind is ForKind.SERIAL and s.width != 1:
            self._loop_md += 1
            group = self.module.add_metadata(
                [ir.MetaDataString(self.module, f"TL_GROUP_{self._loop_md}")])
            self.access_group = group  # the memory accesses of the body join it
        self.stmt(s.body)
        self.access_group = enclosing
        self.row_keys = outer_rows
        nxt = b.add(iv, ir.Constant(I64, 1), flags=["nsw"])
        iv.add_incoming(nxt, b.block)
        br = b.branch(header)
        # a vectorized loop around a loop LLVM keeps (a partial tile of an outer-loop
        # vectorization) is left to LLVM's cost model: forced, its vectorizer refuses the outer
        # loop and prints "loop not vectorized" for every such loop, a tuner's candidates included
        if s.kind is ForKind.VECTORIZED and not _holds_a_loop(s.body):
            self.loop_metadata(br, s.width)
        elif s.kind is ForKind.SERIAL and s.width == 1:
            self.loop_metadata(br, 1, vectorize=False)
        elif group is not None:
            self.loop_metadata(br, 0, parallel_accesses=group)
        b.position_at_end(exit_)
        if outer is None:
            del self.vars[s.var]
        else:
            self.vars[s.var] = outer

    def _row_stride(self, name: str) -> Expr | None:
        """The last extent of buffer ``name`` (the stride of its rows), None if unknown here."""
        if name not in self.f.buffers and not self.scoped.get(name):
            return None
        return self.buffer(name).extents[-1]

    @staticmethod
    def unroll_count(s: For) -> int:
        """The iterations of unrolled loop ``s``.

        Raises:
            CompileError: its extent is not a constant of at most ``MAX_UNROLL``.
        """
        n = const_value(s.extent)
        if n is None or n > MAX_UNROLL:
            raise CompileError(
                f"cannot unroll loop {s.var}: its extent {s.extent} is not a constant of at most "
                f"{MAX_UNROLL}; split it by a constant factor and unroll the inner loop")
        return n

    def unrolled(self, s: For) -> None:
        n = self.unroll_count(s)
        lo = self.expr(s.min)
        outer = self.vars.get(s.var)
        for k in range(n):
            self.vars[s.var] = self.int_op("add", lo, ir.Constant(I64, k))
            self.stmt(s.body)
        if outer is None:
            self.vars.pop(s.var, None)  # (none bound when the loop has no iteration)
        else:
            self.vars[s.var] = outer

    def loop_metadata(self, br: ir.Instruction, width: int, vectorize: bool = True,
                      parallel_accesses: ir.MDValue | None = None) -> None:
        """Ask LLVM's loop vectorizer for ``width`` lanes, or (``vectorize=False``) to leave the
        loop scalar; ``parallel_accesses``: tell it the accesses of that group carry no
        dependence between iterations (LLVM LangRef, ``llvm.loop.parallel_accesses``). The
        ``llvm.loop`` node's self-reference is patched into the text by :func:`generate`."""
        m = self.module
        self._loop_md += 1
        props = [m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.enable"),
                                 ir.Constant(I1, int(vectorize))])]
        if width > 1:
            props.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"),
                                         ir.Constant(I32, width)]))
        if parallel_accesses is not None:
            props.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.parallel_accesses"),
                                         parallel_accesses]))
        node = m.add_metadata([ir.MetaDataString(m, f"TL_LOOP_{self._loop_md}"), *props])
        br.set_metadata("llvm.loop", node)


def _holds_a_loop(s: Stmt) -> bool:
    """Whether ``s`` contains a loop that stays a loop in LLVM's input (not unrolled here)."""
    if isinstance(s, For):
        return s.kind is not ForKind.UNROLLED or _holds_a_loop(s.body)
    if isinstance(s, Block):
        return any(_holds_a_loop(c) for c in s.stmts)
    if isinstance(s, IfThenElse):
        return _holds_a_loop(s.then) or (s.otherwise is not None and _holds_a_loop(s.otherwise))
    body = getattr(s, "body", None)
    return isinstance(body, Stmt) and _holds_a_loop(body)


def _mentions(e: Expr, var: str) -> bool:
    return any(isinstance(n, Var) and n.name == var for n in walk(e))


def _accesses(s: Stmt) -> list[tuple[str | None, tuple[Expr, ...], tuple[Expr, ...]]]:
    """Each store and load in ``s`` as (buffer, indices, the expressions it evaluates), and each
    other expression of a statement (a loop's bounds, a condition) as (None, (), (expr,))."""
    out: list[tuple[str | None, tuple[Expr, ...], tuple[Expr, ...]]] = []

    def exprs(e: Expr) -> None:
        out.append((None, (), (e,)))
        for n in walk(e):
            if isinstance(n, Load):
                out.append((n.buffer, n.indices, ()))

    def go(st: Stmt) -> None:
        if isinstance(st, Store):
            out.append((st.buffer, st.indices, st.indices))
            exprs(st.value)
        elif isinstance(st, Block):
            for c in st.stmts:
                go(c)
        elif isinstance(st, (For, ProducerConsumer, LetStmt, Allocate)):
            if isinstance(st, For):
                exprs(st.min)
                exprs(st.extent)
            elif isinstance(st, LetStmt):
                exprs(st.value)
            go(st.body)
        elif isinstance(st, IfThenElse):
            exprs(st.cond)
            go(st.then)
            if st.otherwise is not None:
                go(st.otherwise)

    go(s)
    return out


def _buffers_in(s: Stmt) -> set[str]:
    out: set[str] = set()

    def exprs(e: Expr) -> None:
        for n in walk(e):
            if isinstance(n, Load):
                out.add(n.buffer)

    def go(st: Stmt) -> None:
        if isinstance(st, Store):
            out.add(st.buffer)
            exprs(st.value)
        elif isinstance(st, Block):
            for c in st.stmts:
                go(c)
        elif isinstance(st, (For, ProducerConsumer, LetStmt, Allocate)):
            go(st.body)
        elif isinstance(st, IfThenElse):
            go(st.then)
            if st.otherwise is not None:
                go(st.otherwise)

    go(s)
    return out

