"""Device kernels and the host program of a ``DeviceProgram`` (``launches.py``) as LLVM IR.

Both reuse the CPU code generator (``backends/llvm/codegen.py``: expressions, addresses, loads
and stores, serial / unrolled / vector loops) and change what differs on a GPU:

- :class:`DeviceGen`, one kernel per ``Launch``: ``void @name(buffers..., sizes...,
  host scalars...)`` with the ``ptx_kernel`` calling convention; a mapped loop is not a loop but
  its variable ``min + ctaid.<axis>`` / ``min + tid.<axis>`` (NVVM's special registers), guarded
  where the launch used an upper bound; buffers allocated inside a thread are fixed-size stack
  arrays (local memory); float32 ``exp`` is one ``ex2.approx``, its argument's rounding
  error compensated (:meth:`DeviceGen.exp_f32`), ``log`` and float64's ``exp`` the code
  generator's polynomials (no libdevice); buffer parameters carry ``align 16``
  (``CUDATarget.buffer_align``), from which LLVM proves a vector loop's accesses aligned and
  emits ``ld.global.v4`` / ``st.global.v4``.
- :class:`HostGen`, the host program: ``i32 @name(buffers..., sizes..., launch, alloc, free)``
  where the last three are callbacks (``kernel.py``): it evaluates the launch dimensions,
  allocates root buffers on the device and launches the kernels in order, returning the first
  non-zero status of a callback.

With ``emulate=True`` both are built for the host CPU in one module: the kernels take their
block and thread ids as six extra ``i32`` arguments and the host program runs every block and
thread in order (the ``__call__`` of a ``tl.Kernel``; ``emulate.py``). A mapped loop carries no
dependence (``tl.check``), so any order of its iterations computes the same result: the
emulator checks the code generator and the launch dimensions against NumPy on machines without
a GPU.

See also: Halide ``CodeGen_PTX_Dev`` and ``CodeGen_GPU_Host``; numba's ``cuda/codegen.py`` (LLVM
IR -> PTX through llvmlite).
"""

from __future__ import annotations

import dataclasses
import functools

import llvmlite.ir as ir
import numpy as np

from tensorlang.affine import const_value
from tensorlang.errors import CompileError
from tensorlang.dtypes import DType, int64
from tensorlang.expr import BinOp, Expr, Select, Size, walk
from tensorlang.intervals import Interval, value_range
from tensorlang.schedule.ir import GPU_KINDS, Allocate, For, ForKind, Load, LoweredFunc, Stmt
from tensorlang.schedule.simplify import simplify_expr

from ..llvm.codegen import CodeGen
from ..llvm.memory import MAX_STACK_BYTES
from ..llvm.types import I32, I64, memory_type
from .bounds import inline_lets, unclamped_load, upper_bound
from .launches import (AXES, MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM, DeviceProgram,
                       Launch)

#: the emulator's array for a kernel's buffer sized at launch (``Launch.dynamic``): the most
#: shared memory an H100 block may opt in to; a launch asking for more fails in emulation
EMULATED_DYNAMIC_BYTES = 227 * 1024

#: math functions with no NVPTX instruction and no tensorlang polynomial (tensorlang does not
#: link libdevice): refused with a CompileError instead of LLVM's "no libcall" failure
_NO_DEVICE_MATH = {"sin", "cos", "tanh", "erf"}

VOID = ir.VoidType()
#: ``i32 launch(i64 kernel, i64* dims7, i64* args)`` (grid x y z, block x y z, bytes of dynamic
#: shared memory), ``i64 alloc(i64 bytes)``, ``void free(i64)``
LAUNCH_FN = ir.FunctionType(I32, [I64, I64.as_pointer(), I64.as_pointer()])
ALLOC_FN = ir.FunctionType(I64, [I64])
FREE_FN = ir.FunctionType(VOID, [I64])


class DeviceGen(CodeGen):
    """One GPU kernel (a ``Launch``); built into ``module`` by :meth:`build`."""

    def __init__(self, program: DeviceProgram, launch: Launch, target,
                 module: ir.Module, emulate: bool = False) -> None:
        lowered = program.lowered
        bufs = tuple(lowered.buffers[n] for n in launch.buffers)
        f = LoweredFunc(launch.name, bufs, (), lowered.sizes, lowered.buffers, launch.body)
        self.launch = launch
        self.emulate = emulate
        super().__init__(f, target, module)
        if not emulate:  # (on the host, NumPy arrays are only as aligned as their dtype)
            for arg in self.fn.args[:len(bufs)]:
                arg.attributes.align = target.buffer_align
        first = len(bufs) + len(lowered.sizes)
        for name, arg in zip(launch.scalars, self.fn.args[first:]):
            arg.name = name
            self.vars[name] = arg
        self._ids = {}
        #: the values each loop variable of the kernel takes, where constants bound them
        self.ranges: dict[str, Interval] = {}
        if emulate:
            ids = self.fn.args[first + len(launch.scalars):]
            for k, arg in enumerate(ids):
                reg, axis = ("ctaid", "tid")[k // 3], AXES[k % 3]
                arg.name = f"{reg}.{axis}"
                self._ids[(reg, axis)] = arg

    def declare(self, arg_types: list[ir.Type]) -> ir.Function:
        types = arg_types + [I64] * len(self.launch.scalars) + ([I32] * 6 if self.emulate else [])
        fn = ir.Function(self.module, ir.FunctionType(VOID, types), name=self.f.name)
        if not self.emulate:
            fn.calling_convention = "ptx_kernel"
        return fn

    def build(self) -> ir.Module:
        self.stmt(self.f.body)
        self.builder.ret_void()
        self._close()
        return self.module

    def special(self, reg: str, axis: str) -> ir.Value:
        """``blockIdx.<axis>`` (``reg="ctaid"``) or ``threadIdx.<axis>`` (``"tid"``), int64."""
        if self.emulate:
            v = self._ids[(reg, axis)]
        else:
            fn = self.intrinsic(f"llvm.nvvm.read.ptx.sreg.{reg}.{axis}", I32, [])
            v = self.builder.call(fn, [])
        return self.builder.zext(v, I64)

    def loop(self, s: For) -> None:
        outer_range = self.ranges.pop(s.var, None)
        reg, axis = self.launch.axes.get(s.var, ("", ""))
        if reg == "tid":  # min + threadIdx, below the block's size
            count = const_value(self.launch.block[AXES.index(axis)])
        else:
            count = None if s.kind in GPU_KINDS else self.count_bound(s.extent)
        first = self.range_of(s.min)
        if first is not None and count is not None and count >= 1:
            self.ranges[s.var] = first[0], first[1] + count - 1
        try:
            self._loop(s)
        finally:
            self.ranges.pop(s.var, None)
            if outer_range is not None:
                self.ranges[s.var] = outer_range

    def count_bound(self, extent: Expr) -> int | None:
        """A constant bound of a serial loop's iteration count ``extent`` (the largest value
        of its range, or of its structure where sizes leave it no range: a partial tile's
        copy, ``((min(8 o + 7, CI - 1) - 8 o + 1) * 174 + 13) // 14``), or None."""
        r = self.range_of(extent)
        if r is not None:
            return r[1]
        return upper_bound(simplify_expr(inline_lets(extent, self.lets)))

    def range_of(self, e: Expr) -> Interval | None:
        """The values integer expression ``e`` takes in the kernel where constants bound its
        loop variables (``let`` variables replaced by their values), or None."""
        e = inline_lets(e, self.lets)
        if any(isinstance(n, Size) for n in walk(e)):
            return None
        return value_range(e, self.ranges, {})

    def _expr(self, e: Expr) -> ir.Value:
        """A floor division or modulo of a value known to lie in ``[0, 2**31)`` by a positive
        constant is an unsigned 32-bit one: a GPU has no 64-bit integer divider, and a signed
        64-bit division by a constant is a long sequence of 32-bit multiplies and fix-ups (a
        fused copy loop's coordinates, ``f // 58 // 3 % 8``; the 64-bit form is kept where
        the value's range is unknown: a block index, a size)."""
        if isinstance(e, BinOp) and e.op in ("floordiv", "mod") and e.dtype == int64 and \
                self.vec is None:
            c = const_value(inline_lets(e.b, self.lets))
            r = self.range_of(e.a) if c is not None and 0 < c < 2 ** 31 else None
            if r is not None and r[0] >= 0 and r[1] < 2 ** 31:
                b = self.builder
                x = b.trunc(self.expr(e.a), I32)
                y = ir.Constant(I32, c)
                return b.zext(b.udiv(x, y) if e.op == "floordiv" else b.urem(x, y), I64)
        if isinstance(e, Select) and self.vec is None:
            load = unclamped_load(e)
            if load is not None and load.dtype in (DType.float32, DType.float64):
                return self._guarded_load(e.cond, load, e.f)
        return super()._expr(e)

    def _guarded_load(self, cond: Expr, load: Load, other: Expr) -> ir.Value:
        """``load`` where ``cond`` holds, else ``other`` (``bounds.unclamped_load``), with no
        branch: the address where ``cond`` holds, else the buffer's first element (read where
        the clamped indices would have read some element), loaded unconditionally so that
        ptxas can issue a thread's loads together (a branch around each load made every load
        wait for the one before), then the value selected."""
        b = self.builder
        c = self.expr(cond)
        f = self.expr(other)
        ptr = self.address(load.buffer, load.indices)
        safe = b.select(c, ptr, self.ptrs[load.buffer])
        v = b.load(safe, align=load.dtype.itemsize)
        return b.select(c, v, f)

    def _loop(self, s: For) -> None:
        if s.kind in GPU_KINDS:
            b = self.builder
            idx = self.special(*self.launch.axes[s.var])
            outer = self.vars.get(s.var)
            self.vars[s.var] = b.add(self.expr(s.min), idx, flags=["nsw"])
            cond = None
            if s.var in self.launch.guarded:
                cond = b.icmp_signed("<", idx, self.expr(s.extent))
            nest = self.launch.nests.get(s.var)
            if nest is not None:  # a nest of a cooperative kernel: the axes it does not use
                for axis in AXES:  # run at threadIdx 0
                    if axis not in nest:
                        zero = b.icmp_signed("==", self.special("tid", axis), ir.Constant(I64, 0))
                        cond = zero if cond is None else b.and_(cond, zero)
            if cond is not None:
                with b.if_then(cond):
                    self.stmt(s.body)
            else:
                self.stmt(s.body)
            if s.var in self.launch.barriers:
                self.barrier()
            if outer is None:
                del self.vars[s.var]
            else:
                self.vars[s.var] = outer
            return
        if s.kind is ForKind.PARALLEL:
            raise CompileError(f"loop {s.var} is parallel (the CPU thread pool) inside GPU "
                               f"kernel {self.launch.name}; on target cuda map it with "
                               f"gpu_blocks / gpu_threads, or make it serial")
        if self.emulate and s.kind is ForKind.UNROLLED:
            # emulated, a serial loop: the same iterations in the same order, where unrolling
            # a register tile in Python and then in LLVM took most of an emulated kernel's build
            self.unroll_count(s)  # (refused as the GPU's code generator refuses it)
            s = dataclasses.replace(s, kind=ForKind.SERIAL)
        super().loop(s)

    def barrier(self) -> None:
        """Wait until every thread of the block got here, their writes visible (``bar.sync 0``;
        emulated: ``GOMP_barrier`` of the team running the block)."""
        if self.emulate:
            self.builder.call(self.intrinsic("GOMP_barrier", VOID, []), [])
        else:
            self.builder.call(self.intrinsic("llvm.nvvm.barrier0", VOID, []), [])

    def _allocate(self, s: Allocate) -> None:
        if s.buffer.name in self.launch.shared or (
                self.launch.dynamic is not None and s.buffer.name == self.launch.dynamic[0]):
            return self._shared(s)
        buf = s.buffer
        exts = [const_value(e) for e in buf.extents]
        total = buf.dtype.itemsize
        for c in exts:
            total = total * max(int(c), 0) if c is not None else -1
        if total < 0 or total > MAX_STACK_BYTES:
            size = "a size known only at run time" if total < 0 else f"{total} bytes"
            raise CompileError(
                f"{buf.name} is allocated inside GPU kernel {self.launch.name} with {size}; a "
                f"thread's own buffer needs a constant size of at most {MAX_STACK_BYTES} bytes: "
                f"compute it at a loop whose region has a constant size (inside the "
                f"gpu_threads loops, after a split by a constant factor), or at root")
        super()._allocate(s)

    def _shared(self, s: Allocate) -> None:
        """A buffer of the block in shared memory (``.shared``, address space 3): a static
        array of the kernel, or the kernel's dynamic shared memory (``.extern .shared``, sized
        at launch) for the buffer ``Launch.dynamic`` names; emulated, a global of the module
        (one block runs at a time; ``EMULATED_DYNAMIC_BYTES`` for the dynamic one)."""
        buf = s.buffer
        elem = memory_type(buf.dtype)
        dynamic = self.launch.dynamic is not None and self.launch.dynamic[0] == buf.name
        if dynamic and not self.emulate:
            name = f"{self.launch.name}_dynamic_shared"  # (PTX names take no dots)
            gv = self.module.globals.get(name)
            if gv is None:
                gv = ir.GlobalVariable(self.module, ir.ArrayType(elem, 0), name, addrspace=3)
                gv.linkage = "external"
                gv.align = 16
            return self._in_shared(s, gv)
        n = EMULATED_DYNAMIC_BYTES // buf.dtype.itemsize if dynamic \
            else self.launch.shared[buf.name]
        arr = ir.ArrayType(elem, max(n, 1))
        # one array per buffer of the kernel, sized by its largest allocation: loop
        # partitioning may allocate a buffer in several versions of a nest (a whole tile's and
        # a partial one's), of which one runs (an allocation inside one of the same buffer,
        # were there one, gets an array of its own)
        name = f"{self.launch.name}.{buf.name}"
        gv = self.module.globals.get(name) if buf.name not in self.ptrs else None
        if gv is None:
            gv = ir.GlobalVariable(self.module, arr, self.module.get_unique_name(name),
                                   addrspace=0 if self.emulate else 3)
            gv.linkage = "internal"
            gv.initializer = ir.Constant(arr, ir.Undefined)
            gv.align = 16
        self._in_shared(s, gv)

    def _in_shared(self, s: Allocate, gv: ir.GlobalVariable) -> None:
        """Generate ``s``'s body with its buffer at the start of array ``gv``."""
        buf = s.buffer
        # addressed in the shared space itself (``float addrspace(3)*``), not through a generic
        # pointer: LLVM then knows the array's alignment and merges a thread's consecutive
        # loads into ``ld.shared.v4`` (through ``addrspacecast`` it sees neither)
        ptr = self.builder.gep(gv, [ir.Constant(I64, 0), ir.Constant(I64, 0)], inbounds=True)
        self.scoped.setdefault(buf.name, []).append(buf)
        outer = self.ptrs.get(buf.name)
        self.ptrs[buf.name] = ptr
        try:
            self.stmt(s.body)
        finally:
            self.scoped[buf.name].pop()
            if outer is None:
                del self.ptrs[buf.name]
            else:
                self.ptrs[buf.name] = outer

    def exp_f32(self, x: ir.Value) -> ir.Value:
        """``exp`` of float32 on the GPU: ``2**p * (1 + e ln 2)`` with ``p = x log2 e`` rounded
        to float32 and ``e`` what that rounding dropped (``fma(x, L, -p)`` is exact, plus
        ``x`` times the part of log2 e that ``L``, its float32, lacks), so that ``2**(p + e)`` is
        ``x``'s ``exp`` and the one power of two not an integer takes the multiprocessor's
        special function unit once (PTX ``ex2.approx.ftz.f32``, the instruction of CUDA's
        ``exp2f``, which CUDA documents within 2 ulp); ``|e|`` is below ``2**-17``, so the
        first-order factor's error (``(e ln 2)**2 / 2``) is below float32's resolution. Within
        a few ulp over the whole range. The argument is clamped to ``[-104, 89]`` first:
        ``inf`` above 88.72 (``2**128``), 0 where the result is below the normal numbers
        (``x`` below about -87.3, as on the CPU; the instruction flushes subnormals), NaN for
        NaN. In the emulator the power is LLVM's ``exp2``, flushed the same way. See also:
        CUDA's ``__expf`` and Triton's ``exp`` (``ex2.approx`` of ``p`` alone, whose error
        grows with ``|x|``); the compensated product is Dekker's (via a fused multiply-add)."""
        b = self.builder
        t = x.type
        c = functools.partial(self.const, t)
        log2e = 1.4426950408889634
        hi = float(np.float32(log2e))
        xc = self.call_intrinsic("minnum", self.call_intrinsic("maxnum", x, c(-104.0)), c(89.0))
        p = self.fop("fmul", xc, c(hi), flags=())  # (not contracted: e is what it rounds off)
        e = self.call_intrinsic("fma", xc, c(hi), self.fop("fsub", c(-0.0), p, flags=()))
        e = self.call_intrinsic("fma", xc, c(log2e - hi), e)
        one_plus = self.call_intrinsic("fma", e, c(0.6931471805599453), c(1.0))
        res = self.fop("fmul", self._ex2(p), one_plus)  # (inf times a factor near 1: inf)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    def _ex2(self, x: ir.Value) -> ir.Value:
        """``2**x`` of float32 scalars or vectors (lane by lane), results below the normal
        numbers flushed to 0: ``ex2.approx.ftz.f32`` on the GPU, LLVM's ``exp2`` in the
        emulator."""
        b = self.builder
        if self.emulate:
            p = self.call_intrinsic("exp2", x)
            tiny = b.fcmp_ordered("<", p, self.const(x.type, 2.0 ** -126))
            return b.select(tiny, self.const(x.type, 0.0), p)
        fn = self.intrinsic("llvm.nvvm.ex2.approx.ftz.f", ir.FloatType(), [ir.FloatType()])
        if not isinstance(x.type, ir.VectorType):
            return b.call(fn, [x])
        out: ir.Value = ir.Constant(x.type, None)
        for k in range(x.type.count):
            lane = b.extract_element(x, ir.Constant(I32, k))
            out = b.insert_element(out, b.call(fn, [lane]), ir.Constant(I32, k))
        return out

    def call(self, name: str, x: ir.Value, d: DType) -> ir.Value:
        if name in _NO_DEVICE_MATH or (
                name in ("exp", "log") and d not in (DType.float32, DType.float64)):
            raise CompileError(f"{name} of {d.value} has no GPU implementation in tensorlang "
                               f"yet (it links no libdevice); exp and log of float32 and float64 "
                               f"do")
        return super().call(name, x, d)


class HostGen(CodeGen):
    """The host program of a ``DeviceProgram`` (see the module docstring)."""

    def __init__(self, program: DeviceProgram, target, module: ir.Module,
                 devices: list[ir.Function] | None = None, launch: Launch | None = None
                 ) -> None:
        self.program = program
        self.devices = devices  # emulation: the kernels, called directly
        #: with ``launch``: a function running that one launch (emulated), taking its kernel's
        #: arguments: ``i32 @<kernel>.run(buffers..., sizes..., scalars...)``
        self.only = launch
        f = program.lowered
        if launch is not None:
            f = LoweredFunc(f"{launch.name}.run", tuple(f.buffers[n] for n in launch.buffers),
                            (), f.sizes, f.buffers, launch)
        super().__init__(f, target, module)
        n = len(self.f.inputs) + len(self.f.outputs) + len(self.f.sizes)
        if launch is not None:
            for a, name in zip(self.fn.args[n:], launch.scalars):
                a.name = name
                self.vars[name] = a
        elif devices is None:
            self.launch_fn, self.alloc_fn, self.free_fn = self.fn.args[n:n + 3]
            for a, name in zip(self.fn.args[n:], ("launch", "alloc", "free")):
                a.name = name

    def declare(self, arg_types: list[ir.Type]) -> ir.Function:
        if self.only is not None:
            arg_types = arg_types + [I64] * len(self.only.scalars)
        elif self.devices is None:
            arg_types = arg_types + [LAUNCH_FN.as_pointer(), ALLOC_FN.as_pointer(),
                                     FREE_FN.as_pointer()]
        return ir.Function(self.module, ir.FunctionType(I32, arg_types), name=self.f.name)

    def build(self) -> ir.Module:
        self.stmt(self.program.host if self.only is None else self.only)
        self.builder.ret(ir.Constant(I32, 0))
        self._close()
        return self.module

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Launch):
            return self.launch(s)
        return super().stmt(s)

    def launch(self, launch: Launch) -> None:
        b = self.builder
        dims = [self.expr(e) for e in (*launch.grid, *launch.block)]
        dynamic = ir.Constant(I64, 0) if launch.dynamic is None else \
            self.expr(launch.dynamic[1])
        some = b.and_(b.icmp_signed(">", dims[0], ir.Constant(I64, 0)),
                      b.icmp_signed(">", dims[1], ir.Constant(I64, 0)))
        for d in dims[2:]:
            some = b.and_(some, b.icmp_signed(">", d, ir.Constant(I64, 0)))
        args = [self.ptrs[n] for n in launch.buffers] + [self.sizes[n] for n in self.f.sizes] \
            + [self.vars[n] for n in launch.scalars]
        with b.if_then(some):
            if self.devices is not None:
                if launch.dynamic is not None:  # more than the emulator's array: an error
                    over = b.icmp_signed(">", dynamic, ir.Constant(I64, EMULATED_DYNAMIC_BYTES))
                    with b.if_then(over, likely=False):
                        self.free_all()
                        b.ret(ir.Constant(I32, 1))
                self._emulate(launch, dims, args)
            else:
                self._launch(launch, dims + [dynamic], args)

    def _launch(self, launch: Launch, dims: list[ir.Value], args: list[ir.Value]) -> None:
        b = self.builder
        dim_arr = self.allocas.alloca(I64, 7, name=f"dims{launch.index}")
        arg_arr = self.allocas.alloca(I64, max(len(args), 1), name=f"args{launch.index}")
        for k, d in enumerate(dims):
            b.store(d, b.gep(dim_arr, [ir.Constant(I64, k)]))
        for k, a in enumerate(args):
            v = b.ptrtoint(a, I64) if isinstance(a.type, ir.PointerType) else a
            b.store(v, b.gep(arg_arr, [ir.Constant(I64, k)]))
        rc = b.call(self.launch_fn, [ir.Constant(I64, launch.index), dim_arr, arg_arr])
        with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
            self.free_all()
            b.ret(rc)

    def _emulate(self, launch: Launch, dims: list[ir.Value], args: list[ir.Value]) -> None:
        if launch.cooperative:
            return self._emulate_team(launch, dims, args)
        fn = self.devices[launch.index]  # type: ignore[index]
        ids: list[ir.Value] = [ir.Constant(I32, 0)] * 6
        # blockIdx z, y, x outermost, then threadIdx z, y, x: slot k of ids is ctaid/tid x y z
        order = [2, 1, 0, 5, 4, 3]

        def nest(level: int) -> None:
            if level == len(order):
                self.builder.call(fn, [*args, *ids])
                return
            slot = order[level]
            self._count(dims[slot], lambda iv: (ids.__setitem__(
                slot, self.builder.trunc(iv, I32)), nest(level + 1)))

        nest(0)

    def _emulate_team(self, launch: Launch, dims: list[ir.Value], args: list[ir.Value]
                      ) -> None:
        """Each block in turn, its threads an OpenMP team (``GOMP_parallel`` with one thread per
        CUDA thread), so that the kernel's barriers (``GOMP_barrier``) hold as on a GPU."""
        b = self.builder
        tramp = self._team_trampoline(launch, [a.type for a in args])
        n = 6 + len(args)
        closure = self.allocas.alloca(ir.ArrayType(I64, n), name=f"team{launch.index}")
        slots = [b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, k)]) for k in range(n)]
        for k, a in enumerate(args):
            b.store(b.ptrtoint(a, I64) if isinstance(a.type, ir.PointerType) else a,
                    slots[6 + k])
        for k in range(3):  # block dims
            b.store(dims[3 + k], slots[3 + k])
        team = b.trunc(b.mul(b.mul(dims[3], dims[4]), dims[5]), I32)
        gomp = self.intrinsic("GOMP_parallel", VOID, [tramp.type, ir.IntType(8).as_pointer(),
                                                      I32, I32])

        def block(level: int) -> None:
            if level == 3:
                b.call(gomp, [tramp, b.bitcast(closure, ir.IntType(8).as_pointer()), team,
                              ir.Constant(I32, 0)])
                return
            axis = 2 - level  # blockIdx z, y, x outermost
            self._count(dims[axis], lambda iv: (b.store(iv, slots[axis]), block(level + 1)))

        block(0)

    def _team_trampoline(self, launch: Launch, arg_types: list[ir.Type]) -> ir.Function:
        """``void tramp(i8* closure)``: thread ``omp_get_thread_num()`` of the team is CUDA
        thread (x, y, z) of the block whose ids and dims the closure holds."""
        m = self.module
        if f"{launch.name}.team" in m.globals:  # the host program made it already
            return m.globals[f"{launch.name}.team"]
        fn = ir.Function(m, ir.FunctionType(VOID, [ir.IntType(8).as_pointer()]),
                         name=f"{launch.name}.team")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        arr = b.bitcast(fn.args[0], I64.as_pointer())
        vals = [b.load(b.gep(arr, [ir.Constant(I64, k)])) for k in range(6 + len(arg_types))]
        tnum = b.sext(b.call(self.intrinsic("omp_get_thread_num", I32, []), []), I64)
        bx, by = vals[3], vals[4]
        tx = b.srem(tnum, bx)
        ty = b.srem(b.sdiv(tnum, bx), by)
        tz = b.sdiv(tnum, b.mul(bx, by))
        args = [b.inttoptr(v, t) if isinstance(t, ir.PointerType) else v
                for v, t in zip(vals[6:], arg_types)]
        ids = [b.trunc(v, I32) for v in (vals[0], vals[1], vals[2], tx, ty, tz)]
        b.call(self.devices[launch.index], [*args, *ids])  # type: ignore[index]
        b.ret_void()
        return fn

    def _count(self, n: ir.Value, body) -> None:
        """``for iv in [0, n): body(iv)``."""
        b = self.builder
        pre = b.block
        header = self.fn.append_basic_block("emu.header")
        inner = self.fn.append_basic_block("emu.body")
        done = self.fn.append_basic_block("emu.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64)
        iv.add_incoming(ir.Constant(I64, 0), pre)
        b.cbranch(b.icmp_signed("<", iv, n), inner, done)
        b.position_at_end(inner)
        body(iv)
        iv.add_incoming(b.add(iv, ir.Constant(I64, 1)), b.block)
        b.branch(header)
        b.position_at_end(done)

    def _allocate(self, s: Allocate) -> None:
        if self.devices is not None:  # emulation: host memory
            return super()._allocate(s)
        b = self.builder
        buf = s.buffer
        raw = b.call(self.alloc_fn, [self.buffer_bytes(buf)])
        with b.if_then(b.icmp_signed("==", raw, ir.Constant(I64, 0)), likely=False):
            self.free_all()
            b.ret(ir.Constant(I32, 1))
        self.ptrs[buf.name] = b.inttoptr(raw, memory_type(buf.dtype).as_pointer())
        self.live_allocs.append(raw)
        self.stmt(s.body)
        self.live_allocs.pop()
        self.builder.call(self.free_fn, [raw])
        del self.ptrs[buf.name]

    def free_all(self) -> None:
        if self.devices is not None:
            return super().free_all()
        for raw in reversed(self.live_allocs):
            self.builder.call(self.free_fn, [raw])


def device_module(program: DeviceProgram, target) -> ir.Module:
    """The kernels of ``program`` as one NVPTX module (``target``: a ``CUDATarget``)."""
    module = ir.Module(name=program.lowered.name)
    module.triple = target.triple
    module.data_layout = target.data_layout
    for launch in program.launches:
        gen = DeviceGen(program, launch, target, module)
        gen.build()
        _launch_bounds(module, gen.fn, launch)
    return module


def _launch_bounds(module: ir.Module, fn: ir.Function, launch: Launch) -> None:
    """State the most threads a block of ``launch`` has (``.maxntid`` in PTX, CUDA C++'s
    ``__launch_bounds__``) where each block dimension has a constant bound and the block could
    otherwise ask for more registers than a multiprocessor has (more than 256 threads): ptxas
    then keeps the kernel's registers within what a block of that size may use (spilling if it
    must), so that a launch never fails for lack of registers
    (``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``). Smaller blocks fit at any register count, and
    there the bound would only change ptxas's choices (it caps a 256-thread kernel at 128).
    See the NVVM IR specification, "Kernel and function directives" (``maxntid``)."""
    dims = [upper_bound(e) for e in launch.block]
    if any(d is None for d in dims) or \
            dims[0] * dims[1] * dims[2] * MAX_REGISTERS_PER_THREAD <= REGISTERS_PER_SM:
        return
    for axis, d in zip(AXES, dims):
        module.add_named_metadata("nvvm.annotations",
                                  [fn, f"maxntid{axis}", ir.Constant(I32, max(int(d), 1))])


def host_module(program: DeviceProgram, target, emulate: bool = False,
                launchers: bool = False) -> ir.Module:
    """The host program of ``program`` for the host CPU ``target``; with ``emulate`` the kernels
    too, run block by block and thread by thread on the CPU; with ``launchers`` (and
    ``emulate``) also, per launch, ``i32 @<kernel>.run(kernel arguments...)`` running that launch
    alone (what a test's stand-in for the CUDA driver calls)."""
    module = ir.Module(name=program.lowered.name)
    module.triple = target.triple
    devices = None
    if emulate:
        devices = []
        for launch in program.launches:
            gen = DeviceGen(program, launch, target, module, emulate=True)
            gen.fn.linkage = "internal"
            gen.build()
            devices.append(gen.fn)
    HostGen(program, target, module, devices).build()
    if emulate and launchers:
        for launch in program.launches:
            HostGen(program, target, module, devices, launch=launch).build()
    return module


__all__ = ["DeviceGen", "HostGen", "device_module", "host_module"]
