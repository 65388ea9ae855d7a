"""Parallel loops on the OpenMP runtime: the loop is outlined into a function over a chunk that
receives the buffers and integers its body names (``ParallelGen.closure``), and a trampoline run
by ``GOMP_parallel`` on every pool thread claims chunks dynamically (``CHUNKS_PER_THREAD`` per
thread). Part of ``CodeGen`` (``codegen.py``).
"""

from __future__ import annotations

import llvmlite.ir as ir

from tensorlang.dtypes import int64 as I64_DT
from tensorlang.expr import BinOp, Expr, Size, Var, walk
from tensorlang.schedule.ir import (Allocate, For, ForKind, IfThenElse, LetStmt, Load, Prefetch,
                                    Stmt, Store, walk_stmts)

from .types import I8, I32, I64

#: a parallel loop is cut into about this many chunks per thread, claimed dynamically
CHUNKS_PER_THREAD = 4
#: 1: ``min(extent, threads * CHUNKS_PER_THREAD)`` chunks of sizes differing by one iteration at
#: most, the larger first (``ParallelGen._trampoline``); 0: as before, chunks of the rounded-up
#: grain ``ceil(extent / (threads * CHUNKS_PER_THREAD))``, the last one short (10 row blocks on 2
#: threads: 5 chunks of 2, one thread running 3 of them). For A/B measurement
BALANCED_CHUNKS = 1
#: 1: an outlined loop receives only the buffers and integers its body names (``closure``);
#: 0: as before, every buffer and integer in scope (a pipeline of n stages passed each of its 2n
#: parallel loops all n buffers: code quadratic in n). For A/B measurement
NAMED_CLOSURE = 1


class ParallelGen:
    """The parallel part of ``CodeGen``; a mixin (it uses ``CodeGen``'s state)."""

    def parallel(self, s: For) -> None:
        """Outline the loop into ``impl(noalias buffers..., ints..., lo, hi)`` called on each
        thread's chunk by a trampoline that ``GOMP_parallel`` runs on every pool thread."""
        self.uses_parallel = True
        self._outlined += 1
        m, b = self.module, self.builder
        used = self.closure(s.body) if NAMED_CLOSURE else None
        ptr_names = [k for k in self.ptrs if used is None or k in used]
        int_names = [("size", k) for k in self.sizes if used is None or k in used]
        int_names += [("var", k) for k in self.vars if used is None or k in used]
        ptr_types = [self.ptrs[k].type for k in ptr_names]
        impl_ty = ir.FunctionType(I32, ptr_types + [I64] * (len(int_names) + 2))
        impl = ir.Function(m, impl_ty, name=f"{self.fn.name}.par{self._outlined}")
        impl.linkage = "internal"
        for a, k in zip(impl.args, ptr_names):
            a.name = k
            a.add_attribute("noalias")
        # -- caller: closure = [ptrs..., ints..., min, extent, status, next] as i64 ---------------
        nslots = len(ptr_names) + len(int_names) + 4
        closure = self.allocas.alloca(ir.ArrayType(I64, nslots), name=f"closure{self._outlined}")
        slots = [b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, k)]) for k in range(nslots)]
        vals = [b.ptrtoint(self.ptrs[k], I64) for k in ptr_names]
        vals += [self.sizes[k] if kind == "size" else self.vars[k] for kind, k in int_names]
        lo0 = self.expr(s.min)
        vals += [lo0, self.expr(s.extent), ir.Constant(I64, 0), ir.Constant(I64, 0)]
        for slot, v in zip(slots, vals):
            b.store(v, slot)
        tramp = self._trampoline(impl, ptr_types, len(int_names), nslots)
        gomp = self.intrinsic("GOMP_parallel", ir.VoidType(),
                              [tramp.type, I8.as_pointer(), I32, I32])
        b.call(gomp, [tramp, b.bitcast(closure, I8.as_pointer()),
                      ir.Constant(I32, 0), ir.Constant(I32, 0)])  # libgomp's count: see runtime.py
        status = b.load(slots[-2])
        with b.if_then(b.icmp_signed("!=", status, ir.Constant(I64, 0)), likely=False):
            self.fail(b.trunc(status, I32))
        # -- impl: the loop over [lo, hi) with the outer state rebuilt from arguments ------------
        saved = (self.fn, self.builder, self.allocas, self.ptrs, self.sizes, self.vars,
                 self.live_allocs, self.heap_slots, self.cleanup)
        self.fn = impl
        self.allocas, self.builder = self._blocks(impl)
        self.ptrs = dict(zip(ptr_names, impl.args))
        ints = impl.args[len(ptr_names):]
        self.sizes = {k: a for (kind, k), a in zip(int_names, ints) if kind == "size"}
        self.vars = {k: a for (kind, k), a in zip(int_names, ints) if kind == "var"}
        self.live_allocs, self.heap_slots, self.cleanup = [], [], None
        self.in_parallel = True
        lo, hi = ints[-2], ints[-1]

        chunk = For(s.var, Var("__lo"), BinOp("sub", Var("__hi"), Var("__lo"), I64_DT),
                    ForKind.SERIAL, s.body)
        self.vars["__lo"], self.vars["__hi"] = lo, hi
        self.loop(chunk)
        self.builder.ret(ir.Constant(I32, 0))
        self._close()
        self.in_parallel = False
        (self.fn, self.builder, self.allocas, self.ptrs, self.sizes, self.vars,
         self.live_allocs, self.heap_slots, self.cleanup) = saved

    def closure(self, body: Stmt) -> set[str]:
        """The names ``body`` reads from its scope: the buffers it loads, stores or
        prefetches, and the Vars and Sizes of its expressions, of the mins and extents of those
        buffers and of the ones it allocates (their strides), and of the enclosing ``let``s
        those Vars name (``self.lets``), transitively. What an outlined loop must receive, as
        Halide's ``Closure`` (``src/Closure.cpp``) collects the free variables and buffers of a
        parallel loop's body; a name missing from it fails the compilation (a ``KeyError`` in
        the outlined function), never silently."""
        names: set[str] = set()
        exprs: list[Expr] = []

        def name(n: str) -> None:  # one more name, and what it brings: a let's value, strides
            if n in names:
                return
            names.add(n)
            if n in self.lets:
                exprs.append(self.lets[n])
            if n in self.ptrs and (self.scoped.get(n) or n in self.f.buffers):
                exprs.extend([*self.buffer(n).mins, *self.buffer(n).extents])

        for st in walk_stmts(body):
            if isinstance(st, For):
                exprs += [st.min, st.extent]
            elif isinstance(st, Store):
                name(st.buffer)
                exprs += [*st.indices, st.value]
                if st.initial is not None:
                    exprs += [*st.initial[0], st.initial[1]]
            elif isinstance(st, Prefetch):
                name(st.buffer)
                exprs += st.indices
            elif isinstance(st, Allocate):
                exprs += [*st.buffer.mins, *st.buffer.extents]
            elif isinstance(st, IfThenElse):
                exprs.append(st.cond)
            elif isinstance(st, LetStmt):
                exprs.append(st.value)
        while exprs:
            for n in walk(exprs.pop()):
                if isinstance(n, (Var, Size)):
                    name(n.name)
                elif isinstance(n, Load):
                    name(n.buffer)
        return names

    def _trampoline(self, impl: ir.Function, ptr_types: list, n_ints: int,
                    nslots: int) -> ir.Function:
        """The function every pool thread runs: it claims chunks of the loop from a shared
        counter (``atomicrmw add`` on the closure's ``next`` slot) until none are left, and runs
        ``impl`` on each. Dynamic claiming, as Halide's thread pool does, instead of one fixed
        share per thread: a thread the OS deschedules (another process on its core) delays only
        the chunk it holds, and the others take the rest; ``CHUNKS_PER_THREAD`` chunks per
        thread keep the claims' cost (one atomic add each) negligible. The loop is cut into
        ``min(extent, threads * CHUNKS_PER_THREAD)`` chunks whose sizes differ by one iteration
        at most, the larger ones first: threads claiming in turn end within one iteration of
        each other (10 row blocks on 2 threads: 5 each, where chunks of a rounded-up grain, 2,
        gave one thread 3 of the 5 chunks)."""
        m = self.module
        tramp = ir.Function(m, ir.FunctionType(ir.VoidType(), [I8.as_pointer()]),
                            name=f"{impl.name}.tramp")
        tramp.linkage = "internal"
        entry = tramp.append_basic_block("entry")
        head = tramp.append_basic_block("claim")
        body = tramp.append_basic_block("run")
        done = tramp.append_basic_block("done")
        b = ir.IRBuilder(entry)
        arr = b.bitcast(tramp.args[0], ir.ArrayType(I64, nslots).as_pointer())
        slot = [b.gep(arr, [ir.Constant(I32, 0), ir.Constant(I32, k)]) for k in range(nslots)]
        args = [b.inttoptr(b.load(slot[k]), t) for k, t in enumerate(ptr_types)]
        args += [b.load(slot[len(ptr_types) + k]) for k in range(n_ints)]
        base = len(ptr_types) + n_ints
        mn, ext = b.load(slot[base]), b.load(slot[base + 1])
        status, nxt = slot[base + 2], slot[base + 3]
        nt = b.sext(b.call(self.intrinsic("omp_get_num_threads", I32, []), []), I64)
        want = b.mul(nt, ir.Constant(I64, CHUNKS_PER_THREAD))
        one, zero = ir.Constant(I64, 1), ir.Constant(I64, 0)
        if BALANCED_CHUNKS:
            # min(extent, want) chunks (none where the extent is not positive), the first
            # ``extra`` of them one iteration larger than the rest
            pieces = self.call_intrinsic("smax", self.call_intrinsic("smin", ext, want, builder=b),
                                         zero, builder=b)
            divisor = self.call_intrinsic("smax", pieces, one, builder=b)
            size, extra = b.sdiv(ext, divisor), b.srem(ext, divisor)
        else:
            # chunks of the rounded-up grain, the last one short
            size = self.call_intrinsic("smax", b.sdiv(b.sub(b.add(ext, want), one), want), one,
                                       builder=b)
            pieces, extra = b.sdiv(b.sub(b.add(ext, size), one), size), zero
        b.branch(head)
        b.position_at_end(head)
        c = b.atomic_rmw("add", nxt, one, "monotonic")
        b.cbranch(b.icmp_signed("<", c, pieces), body, done)
        b.position_at_end(body)
        lo = b.add(mn, b.add(b.mul(c, size), self.call_intrinsic("smin", c, extra, builder=b)))
        hi = self.call_intrinsic("smin", b.add(lo, b.add(size, b.zext(
            b.icmp_signed("<", c, extra), I64))), b.add(mn, ext), builder=b)
        rc = b.call(impl, args + [lo, hi])
        with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
            b.store_atomic(b.sext(rc, I64), status, "monotonic", 8)
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()
        return tramp

