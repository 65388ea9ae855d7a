"""Buffers: addresses, scalar / contiguous-vector / gathered loads and stores, and the allocation
of internal buffers (static stack slots up to ``MAX_STACK_BYTES``, else the heap, 2 MB-aligned
and advised onto transparent huge pages from ``HUGE_ALLOC_MIN``). Part of ``CodeGen``
(``codegen.py``).
"""

from __future__ import annotations

import llvmlite.ir as ir

from tensorlang.affine import const_value
from tensorlang.dtypes import DType
from tensorlang.expr import BinOp, Cast, Const, Expr, Var, walk
from tensorlang.schedule.flat_index import flat_offset
from tensorlang.schedule.ir import Allocate, Buffer, Load, Prefetch, Store

from .types import F32, I8, I32, I64, REDUCE_FLAGS, memory_type

MAX_STACK_BYTES = 64 * 1024
#: heap buffers of at least this many bytes are asked to live on transparent huge pages (Linux)
HUGE_ALLOC_MIN = 4 << 20
HUGE_PAGE_BYTES = 2 << 20
MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux
#: the alignment of every other heap buffer, bytes (a cache line, as the stack slots'): glibc's
#: ``malloc`` gives 16, so a packed panel's vectors straddled lines (a 64-byte vector at 16 bytes
#: into a line loads from two). 0: ``malloc``'s 16, as before (for a benchmark's ``--against``)
HEAP_ALIGN = 64


def _space(ptr: ir.Value) -> int:
    """The address space of pointer ``ptr`` (or of a vector of pointers): 0, or the GPU's
    shared memory (3), whose accesses LLVM can only merge into vector loads when it sees the
    address space (``backends/cuda/codegen.py``)."""
    t = ptr.type.element if isinstance(ptr.type, ir.VectorType) else ptr.type
    return t.addrspace


def _pointer_to(t: ir.Type, like: ir.Value) -> ir.Type:
    """A pointer to ``t`` in the address space of pointer ``like``."""
    return t.as_pointer(_space(like))


class MemoryGen:
    """The memory part of ``CodeGen``; a mixin (it uses ``CodeGen``'s state)."""

    def buffer(self, name: str) -> Buffer:
        """The geometry of ``name``: from the innermost enclosing Allocate, else the argument."""
        scoped = self.scoped.get(name)
        return scoped[-1] if scoped else self.f.buffers[name]

    def address(self, name: str, indices: tuple[Expr, ...], read: bool = False) -> ir.Value:
        """The address of ``name[indices]``; a ``read`` among the current loop's row reads
        (``row_bases``) is addressed from its row's base pointer."""
        b = self.builder
        buf = self.buffer(name)
        fused = flat_offset(indices, buf.mins, buf.extents)  # (a fused loop's index, whole)
        if fused is not None:
            return b.gep(self.ptrs[name], [self.expr(fused)], inbounds=True)
        if read and (name, indices[:-1]) in self.row_keys:
            row = b.gep(self.ptrs[name], [self.int_op("mul", self._flat(indices[:-1], buf),
                                                      self.expr(buf.extents[-1]), ("nsw",))],
                        inbounds=True)
            barrier = ir.InlineAsm(ir.FunctionType(row.type, [row.type]), "", "=r,0",
                                   side_effect=False)
            row = b.call(barrier, [row], attrs=("nounwind", "readnone"))
            last = self.int_op("sub", self.expr(indices[-1]), self.expr(buf.mins[-1]), ("nsw",))
            return b.gep(row, [last], inbounds=True)
        return b.gep(self.ptrs[name], [self._flat(indices, buf)], inbounds=True)

    def _flat(self, indices: tuple[Expr, ...], buf: Buffer) -> ir.Value:
        """Row-major offset of ``indices`` in ``buf`` (elements, from its mins)."""
        flat: ir.Value | None = None
        for d, (ix, lo) in enumerate(zip(indices, buf.mins)):
            rel = self.int_op("sub", self.expr(ix), self.expr(lo), ("nsw",))
            if flat is None:
                flat = rel
            else:
                flat = self.int_op("add", self.int_op("mul", flat, self.expr(buf.extents[d]),
                                                      ("nsw",)), rel, ("nsw",))
        return ir.Constant(I64, 0) if flat is None else flat

    def _pattern(self, indices: tuple[Expr, ...]) -> str:
        """How an access varies with the vector loop variable: ``scalar`` (not at all),
        ``contiguous`` (unit stride in the last dimension) or ``gather`` (anything else)."""
        if self.vec is None or self.lane0:
            return "scalar"
        var = self.vec[0]
        coefs = []
        for ix in indices:
            c = _linear_coeff(ix, var)
            if c is None:
                return "gather"
            coefs.append(c)
        if not any(coefs):
            return "scalar"
        if coefs[-1] == 1 and not any(coefs[:-1]):
            return "contiguous"
        return "gather"

    def _lane(self, lane: int) -> None:
        var, _ = self.vec  # type: ignore[misc]
        self.lane0 = True
        self.vars[var] = self._vbase if lane == 0 else self.int_op(
            "add", self._vbase, ir.Constant(I64, lane))

    def _end_lane(self) -> None:
        self.lane0 = False
        self.vars[self.vec[0]] = self._vbase  # type: ignore[index]

    def load(self, e: Load) -> ir.Value:
        b = self.builder
        mt = memory_type(e.dtype)
        pattern = self._pattern(e.indices)
        if pattern == "scalar":
            v = b.load(self.address(e.buffer, e.indices, read=True), align=e.dtype.itemsize)
            if self.access_group is not None:
                v.set_metadata("llvm.access.group", self.access_group)
        elif self._masked(e.buffer):
            v = self._masked_load(e, pattern, mt)
        elif pattern == "contiguous":
            lanes = self.vec[1]  # type: ignore[index]
            self._lane(0)
            ptr = self.address(e.buffer, e.indices, read=True)
            self._end_lane()
            v = b.load(b.bitcast(ptr, _pointer_to(ir.VectorType(mt, lanes), ptr)),
                       align=e.dtype.itemsize)
        else:
            lanes = self.vec[1]  # type: ignore[index]
            v = ir.Constant(ir.VectorType(mt, lanes), ir.Undefined)
            for lane in range(lanes):
                self._lane(lane)
                x = b.load(self.address(e.buffer, e.indices), align=e.dtype.itemsize)
                self._end_lane()
                v = b.insert_element(v, x, ir.Constant(I32, lane))
        if e.dtype is DType.float16:
            return b.fpext(v, self.shaped(F32, v))
        if e.dtype is DType.bfloat16:
            return self.bf16_widen(v)
        return b.icmp_unsigned("!=", v, self.const(v.type, 0)) if e.dtype.is_bool else v

    def store(self, s: Store) -> None:
        self._cse = {}  # the Store's value, indices and address: one basic block
        try:
            self._store(s)
        finally:
            self._cse = None

    def _store(self, s: Store) -> None:
        b = self.builder
        d = self.buffer(s.buffer).dtype
        value = self.expr(s.value)
        pattern = self._pattern(s.indices)
        if pattern != "scalar" and not isinstance(value.type, ir.VectorType):
            value = self.splat(value, self.vec[1])  # type: ignore[index]
        if s.reduce_op is not None:
            old = self.load(Load(s.buffer, s.indices, d))
            if s.initial is not None:  # a folded initialisation: the identity at first
                conds, first = s.initial
                cond = self.expr(conds[0])
                for c in conds[1:]:
                    cond = b.and_(cond, self.expr(c))
                start, old = self.unify(self.expr(first), old)
                old = b.select(cond, start, old)
            op = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}[s.reduce_op]
            value = self.binop(op, old, value, d, flags=REDUCE_FLAGS)
        if d.is_bool:
            value = b.zext(value, self.shaped(I8, value))
        elif d is DType.float16:
            value = self.to_half(value)
        elif d is DType.bfloat16:
            value = self.bf16_bits(value)
        if pattern == "scalar":
            st = b.store(value, self.address(s.buffer, s.indices), align=d.itemsize)
            if self.access_group is not None:
                st.set_metadata("llvm.access.group", self.access_group)
        elif self._masked(s.buffer):
            self._masked_store(s, pattern, value, d.itemsize)
        elif pattern == "contiguous":
            self._lane(0)
            ptr = self.address(s.buffer, s.indices)
            self._end_lane()
            b.store(value, b.bitcast(ptr, _pointer_to(value.type, ptr)), align=d.itemsize)
        else:
            for lane in range(self.vec[1]):  # type: ignore[index]
                self._lane(lane)
                ptr = self.address(s.buffer, s.indices)
                self._end_lane()
                b.store(b.extract_element(value, ir.Constant(I32, lane)), ptr, align=d.itemsize)

    def prefetch(self, s: Prefetch) -> None:
        """``llvm.prefetch`` of ``s.buffer[s.indices]``: a read, kept in every cache level
        (locality 3: x86 ``prefetcht0``), of data (cache type 1). Inside a vector loop the
        first lane's address stands for the line."""
        b = self.builder
        if self.vec is not None and not self.lane0:
            self._lane(0)
            addr = self.address(s.buffer, s.indices)
            self._end_lane()
        else:
            addr = self.address(s.buffer, s.indices)
        fn = self.intrinsic(f"llvm.prefetch.p{_space(addr)}", ir.VoidType(),
                            [addr.type, I32, I32, I32])
        b.call(fn, [addr, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    def _masked(self, name: str) -> bool:
        """Whether a vector access of ``name`` takes the lane mask: inside a masked vector loop,
        unless ``name`` is a register tile, whose shape covers the dead lanes too (a plain
        access lets LLVM keep it in registers; a masked one pins it to memory)."""
        return self.mask is not None and not self.buffer(name).register

    def _lane_pointers(self, name: str, indices: tuple[Expr, ...]) -> ir.Value:
        """The vector of each lane's element address (a gather's or scatter's)."""
        b = self.builder
        lanes = self.vec[1]  # type: ignore[index]
        addrs = []
        for lane in range(lanes):
            self._lane(lane)
            addrs.append(self.address(name, indices))
            self._end_lane()
        ptrs = ir.Constant(ir.VectorType(addrs[0].type, lanes), ir.Undefined)
        for lane, ptr in enumerate(addrs):
            ptrs = b.insert_element(ptrs, ptr, ir.Constant(I32, lane))
        return ptrs

    def _masked_load(self, e: Load, pattern: str, mt: ir.Type) -> ir.Value:
        """``e``'s lanes under ``self.mask`` (LLVM's ``masked.load``/``masked.gather``); dead
        lanes read nothing and hold zero."""
        b = self.builder
        lanes = self.vec[1]  # type: ignore[index]
        vt = ir.VectorType(mt, lanes)
        align = ir.Constant(I32, e.dtype.itemsize)
        zero = ir.Constant(vt, None)
        if pattern == "contiguous":
            self._lane(0)
            addr = self.address(e.buffer, e.indices)
            ptr = b.bitcast(addr, _pointer_to(vt, addr))
            self._end_lane()
            fn = self.intrinsic(f"llvm.masked.load.{self._suffix(vt)}.p{_space(ptr)}", vt,
                                [ptr.type, I32, self.mask.type, vt])
            return b.call(fn, [ptr, align, self.mask, zero])
        ptrs = self._lane_pointers(e.buffer, e.indices)
        fn = self.intrinsic(f"llvm.masked.gather.{self._suffix(vt)}.v{lanes}p{_space(ptrs)}", vt,
                            [ptrs.type, I32, self.mask.type, vt])
        return b.call(fn, [ptrs, align, self.mask, zero])

    def _masked_store(self, s: Store, pattern: str, value: ir.Value, itemsize: int) -> None:
        """Store ``value``'s lanes under ``self.mask`` (``masked.store``/``masked.scatter``)."""
        b = self.builder
        vt = value.type
        align = ir.Constant(I32, itemsize)
        if pattern == "contiguous":
            self._lane(0)
            addr = self.address(s.buffer, s.indices)
            ptr = b.bitcast(addr, _pointer_to(vt, addr))
            self._end_lane()
            fn = self.intrinsic(f"llvm.masked.store.{self._suffix(vt)}.p{_space(ptr)}",
                                ir.VoidType(), [vt, ptr.type, I32, self.mask.type])
            b.call(fn, [value, ptr, align, self.mask])
            return
        ptrs = self._lane_pointers(s.buffer, s.indices)
        fn = self.intrinsic(f"llvm.masked.scatter.{self._suffix(vt)}.v{vt.count}p{_space(ptrs)}",
                            ir.VoidType(), [vt, ptrs.type, I32, self.mask.type])
        b.call(fn, [value, ptrs, align, self.mask])

    def allocate(self, s: Allocate) -> None:
        self.scoped.setdefault(s.buffer.name, []).append(s.buffer)
        try:
            self._allocate(s)
        finally:
            self.scoped[s.buffer.name].pop()

    def _allocate(self, s: Allocate) -> None:
        b = self.builder
        buf = s.buffer

        sizes = [const_value(e) for e in buf.extents]
        if all(c is not None for c in sizes):
            total = buf.dtype.itemsize
            for c in sizes:
                total *= max(int(c), 0)  # type: ignore[arg-type]
            if total <= MAX_STACK_BYTES:
                arr = self.allocas.alloca(memory_type(buf.dtype),
                                          max(total // buf.dtype.itemsize, 1), name=buf.name)
                arr.align = 64
                outer = self.ptrs.get(buf.name)
                self.ptrs[buf.name] = arr
                self.stmt(s.body)
                if outer is None:
                    del self.ptrs[buf.name]
                else:
                    self.ptrs[buf.name] = outer
                return
        null = ir.Constant(I8.as_pointer(), None)
        raw = b.call(self._heap_alloc(), [self.buffer_bytes(buf)])
        slot = self.allocas.alloca(I8.as_pointer(), name=f"{buf.name}.heap")
        self.allocas.store(null, slot)  # null from the function's entry: nothing to free yet
        self.heap_slots.append(slot)
        with b.if_then(b.icmp_unsigned("==", raw, null), likely=False):
            self.fail(ir.Constant(I32, 1))
        b.store(raw, slot)
        self.ptrs[buf.name] = b.bitcast(raw, memory_type(buf.dtype).as_pointer())
        self.stmt(s.body)
        self.builder.call(self.heap_free(), [raw])
        self.builder.store(null, slot)
        del self.ptrs[buf.name]

    def buffer_bytes(self, buf: Buffer) -> ir.Value:
        """The bytes of ``buf`` at run time (at least 1: an empty buffer still gets an
        address), int64."""
        n: ir.Value = ir.Constant(I64, buf.dtype.itemsize)
        for e in buf.extents:
            n = self.builder.mul(n, self.expr(e))
        return self.call_intrinsic("smax", n, ir.Constant(I64, 1))

    def _heap_alloc(self) -> ir.Function:
        """``i8* @tl.alloc(i64 n)``, the kernel's heap allocator (freed with ``tl.free``).

        It asks ``malloc`` for ``n`` bytes plus one alignment and returns the first aligned
        address past the block's start, with the block's own address in the 8 bytes before it
        (Halide's runtime allocator does the same: ``halide_default_malloc``). The alignment
        is a ``HEAP_ALIGN``-byte cache line (BLIS and OpenBLAS align their packed buffers
        likewise: a packed panel's vectors then never straddle two lines), except that on
        Linux a buffer of at least ``HUGE_ALLOC_MIN`` bytes is 2 MB-aligned, its size rounded
        up to whole 2 MB pages, and advised onto transparent huge pages
        (``madvise(MADV_HUGEPAGE)``, as NumPy does for its arrays of >= 4 MB): in 2 MB pages a
        64 MB buffer takes 32 first-touch faults instead of 16384. Over-allocating through
        ``malloc`` rather than calling ``aligned_alloc(2 MB, ..)`` keeps glibc's dynamic mmap
        threshold working: glibc's aligned allocation frees a block smaller than the one it
        maps, so the threshold never rose past the request and every call of a kernel with a
        4-32 MB buffer mapped and faulted it in afresh; now the second call reuses the heap
        block, as for any ``malloc`` of that size (above 32 MB glibc maps each call anyway).
        ``docs/performance.md``, "Measurements behind code choices", has both measurements."""
        fn = self.module.globals.get("tl.alloc")
        if fn is not None:
            return fn
        ptr = I8.as_pointer()
        malloc = self.intrinsic("malloc", ptr, [I64])
        fn = ir.Function(self.module, ir.FunctionType(ptr, [I64]), name="tl.alloc")
        fn.linkage = "internal"
        (n,) = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        null = ir.Constant(ptr, None)
        # a size past 2^62 is an overflowed product of extents: malloc fails on it whole
        with b.if_then(b.icmp_unsigned(">", n, ir.Constant(I64, 1 << 62))):
            b.ret(null)
        linux = "linux" in self.target.triple
        heap_align = HEAP_ALIGN if HEAP_ALIGN and any(
            s in self.target.triple for s in ("linux", "darwin", "apple")) else 16
        huge = b.and_(ir.Constant(ir.IntType(1), int(linux)),
                      b.icmp_unsigned(">=", n, ir.Constant(I64, HUGE_ALLOC_MIN)))
        align = b.select(huge, ir.Constant(I64, HUGE_PAGE_BYTES), ir.Constant(I64, heap_align))
        size = b.and_(b.add(n, b.sub(align, ir.Constant(I64, 1))), b.neg(align))
        raw = b.call(malloc, [b.add(size, align)])
        with b.if_then(b.icmp_unsigned("==", raw, null), likely=False):
            b.ret(null)
        start = b.ptrtoint(raw, I64)
        addr = b.and_(b.add(start, align), b.neg(align))  # at least 16 bytes past raw
        p = b.inttoptr(addr, ptr)
        header = b.inttoptr(b.sub(addr, ir.Constant(I64, 8)), ptr.as_pointer())
        b.store(raw, header)
        if linux:
            with b.if_then(huge):
                madvise = self.intrinsic("madvise", I32, [ptr, I64, I32])
                b.call(madvise, [p, size, ir.Constant(I32, MADV_HUGEPAGE)])
        b.ret(p)
        return fn

    def heap_free(self) -> ir.Function:
        """``void @tl.free(i8* p)``: frees a ``tl.alloc`` buffer (the ``malloc`` block whose
        address sits in the 8 bytes before ``p``); null does nothing."""
        fn = self.module.globals.get("tl.free")
        if fn is not None:
            return fn
        ptr = I8.as_pointer()
        free = self.intrinsic("free", ir.VoidType(), [ptr])
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [ptr]), name="tl.free")
        fn.linkage = "internal"
        (p,) = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        with b.if_then(b.icmp_unsigned("!=", p, ir.Constant(ptr, None))):
            header = b.inttoptr(b.sub(b.ptrtoint(p, I64), ir.Constant(I64, 8)),
                                ptr.as_pointer())
            b.call(free, [b.load(header)])
        b.ret_void()
        return fn

    def fail(self, status: ir.Value) -> None:
        """End the current block in the function's one failure exit, which frees the heap
        buffers live there and returns ``status`` (i32, not 0): every failure point of a
        function (an allocation, a parallel loop's status) branches to one block, where a free
        per live buffer at each point made a pipeline's code quadratic in its stages (a 32-stage
        stencil chain: about 2500 calls to ``free``). Each buffer's stack slot holds it while it
        is live and null otherwise (``free(NULL)`` does nothing); ``close_cleanup`` fills the
        block once the function is complete."""
        if self.cleanup is None:
            block = self.fn.append_basic_block("cleanup")
            self.cleanup = (block, ir.IRBuilder(block).phi(I32, name="status"))
        block, phi = self.cleanup
        phi.add_incoming(status, self.builder.block)
        self.builder.branch(block)

    def close_cleanup(self) -> None:
        """Fill the current function's failure exit (``fail``), if any: free every heap buffer
        slot, return the status."""
        if self.cleanup is None:
            return
        block, phi = self.cleanup
        b = ir.IRBuilder(block)
        b.position_at_end(block)
        free = self.heap_free()
        for slot in reversed(self.heap_slots):
            b.call(free, [b.load(slot)])
        b.ret(phi)

    def free_all(self) -> None:
        """Free the current function's live heap buffers here, for a failure that returns
        right after (the CUDA host code's; this backend's own failures use ``fail``)."""
        free = self.heap_free()
        for slot in reversed(self.heap_slots):
            self.builder.call(free, [self.builder.load(slot)])


def _linear_coeff(e: Expr, var: str) -> int | None:
    """``c`` if ``e == c * var + (terms without var)``, whatever those terms are (min, //, ...);
    None if ``var`` occurs non-linearly."""
    if isinstance(e, Var):
        return 1 if e.name == var else 0
    if not any(isinstance(n, Var) and n.name == var for n in walk(e)):
        return 0
    if isinstance(e, BinOp) and e.dtype.is_int:
        if e.op in ("add", "sub"):
            a, b = _linear_coeff(e.a, var), _linear_coeff(e.b, var)
            if a is None or b is None:
                return None
            return a + b if e.op == "add" else a - b
        if e.op == "mul":
            for x, y in ((e.a, e.b), (e.b, e.a)):
                if isinstance(y, Const):
                    c = _linear_coeff(x, var)
                    return None if c is None else c * int(y.value)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return _linear_coeff(e.value, var)
    return None

