"""A native entry point for kernel calls: a repeated call of one shape without ctypes.

Calling a compiled kernel through ``ctypes`` and checking its arrays in Python costs several
microseconds a call (argument conversion, ``dtype`` / ``flags`` / overlap checks, one address
lookup per array), more than the whole kernel at small sizes. Here one small function, compiled
with LLVM once per process, is made a CPython builtin (``METH_FASTCALL``, as a C extension's
function is): called with the kernel's input arrays and its output arrays, it checks in native
code what the Python path checks — exact ``numpy.ndarray`` type, the declared dtype, rank,
C-contiguity (and, for an output, writeability), the shapes of the kernel's last *published
plan*, no overlap of an output with an input or another output — and then calls the kernel
with the arrays' data addresses and the plan's size arguments, with the GIL released as
``ctypes`` releases it. Any check failing returns ``False`` and the caller takes the general
path, which raises the errors and publishes the plan of a new shape; nothing is skipped, only
moved. (Numba builds its ``@jit`` wrappers against the same C APIs.)

The CPython object header and NumPy's ``PyArrayObject_fields`` layout (``data``, ``nd``,
``dimensions``, ``descr``, ``flags``: the fields NumPy's own ``PyArray_DATA``-style macros read,
part of its ABI) are probed once on live arrays; where any field is not where expected (another
interpreter, a future NumPy) the entry is not built and every call takes the general path.

A plan is an immutable ``int64`` buffer: each input's extents in input order, each output's
extents, then the kernel's size arguments. A kernel publishes a plan by storing its address in
its one-pointer *slot* (a single store under the GIL), so a call never sees a half-written plan.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import llvmlite.binding as llvm

from tensorlang.errors import CompileError

#: the most buffers + size arguments a kernel may take for the native entry (more: ctypes)
MAX_ARGS = 32
#: 0: no native entry, every call through ctypes (an A/B switch; also ``TENSORLANG_NATIVE_ENTRY=0``)
NATIVE_ENTRY = 1

#: NumPy's array flags (``ndarraytypes.h``): ``NPY_ARRAY_C_CONTIGUOUS``, ``NPY_ARRAY_WRITEABLE``
C_CONTIGUOUS, WRITEABLE = 0x0001, 0x0400
_METH_FASTCALL = 0x0080
_HEADER = 9  # descriptor words before the per-array records
_RECORD = 4  # per array: descr address, rank, itemsize, flags mask


@dataclass(frozen=True)
class ArrayLayout:
    """Byte offsets into a ``numpy.ndarray`` object: its type pointer (the object header's last
    field), and ``data``, ``nd``, ``dimensions``, ``descr``, ``flags`` of
    ``PyArrayObject_fields``."""

    type: int
    data: int
    nd: int
    dims: int
    descr: int
    flags: int


def _word(addr: int) -> int:
    return ctypes.c_uint64.from_address(addr).value


def _int32(addr: int) -> int:
    return ctypes.c_int32.from_address(addr).value


def probe_layout() -> ArrayLayout | None:
    """The array object layout of this interpreter and NumPy, verified on arrays of several
    ranks, dtypes and flags; None when any field is not where the layout says."""
    head = object.__basicsize__  # sizeof(PyObject): 16, larger on free-threaded builds
    lay = ArrayLayout(type=head - 8, data=head, nd=head + 8, dims=head + 16, descr=head + 40,
                      flags=head + 48)
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    frozen = np.ones(7, np.float32)
    frozen.flags.writeable = False
    probes = [base, base.T, base[:, 1], np.empty((2, 1), np.int32), frozen, np.ones((), np.int8)]
    try:
        for a in probes:
            p = id(a)
            flags = _int32(p + lay.flags)
            ok = (_word(p + lay.type) == id(np.ndarray) and _word(p + lay.data) == a.ctypes.data
                  and _int32(p + lay.nd) == a.ndim and _word(p + lay.descr) == id(a.dtype)
                  and bool(flags & C_CONTIGUOUS) == a.flags.c_contiguous
                  and bool(flags & WRITEABLE) == a.flags.writeable
                  and all(_word(_word(p + lay.dims) + 8 * q) == e for q, e in enumerate(a.shape)))
            if not ok:
                return None
    except (ValueError, OverflowError, TypeError):
        return None
    return lay


def entry_ir(lay: ArrayLayout, most: int = MAX_ARGS) -> str:
    """LLVM IR of ``tensorlang_entry(self, args, nargs)``, a ``METH_FASTCALL`` function whose
    ``self`` is a Python int holding the address of the kernel's descriptor (``Entry``)."""
    cases = " ".join(f"i64 {k}, label %c{k}" for k in range(1, most + 1))
    calls = []
    for k in range(1, most + 1):
        loads = "".join(f"  %a{k}.{q}.p = getelementptr i64, ptr %vals, i64 {q}\n"
                        f"  %a{k}.{q} = load i64, ptr %a{k}.{q}.p\n" for q in range(k))
        params = ", ".join(f"i64 %a{k}.{q}" for q in range(k))
        calls.append(f"c{k}:\n{loads}  %r{k} = call i32 %fn({params})\n  br label %done\n")
    phi = ", ".join(f"[%r{k}, %c{k}]" for k in range(1, most + 1))
    return f"""
declare ptr @PyLong_AsVoidPtr(ptr)
declare ptr @PyEval_SaveThread()
declare void @PyEval_RestoreThread(ptr)
declare void @Py_IncRef(ptr)

define ptr @tensorlang_entry(ptr %self, ptr %args, i64 %nargs) {{
entry:
  %vals = alloca [{most} x i64]
  %lo = alloca [{most} x i64]
  %hi = alloca [{most} x i64]
  %d = call ptr @PyLong_AsVoidPtr(ptr %self)
  %nin = load i64, ptr %d
  %nout.p = getelementptr i64, ptr %d, i64 8
  %nout = load i64, ptr %nout.p
  %narr = add i64 %nin, %nout
  %nsz.p = getelementptr i64, ptr %d, i64 4
  %nsz = load i64, ptr %nsz.p
  %total = add i64 %narr, %nsz
  %false.p = getelementptr i64, ptr %d, i64 7
  %false.i = load i64, ptr %false.p
  %false = inttoptr i64 %false.i to ptr
  %okn = icmp eq i64 %nargs, %narr
  %okt = icmp ule i64 %total, {most}
  %ok0 = and i1 %okn, %okt
  br i1 %ok0, label %haveplan, label %slow
haveplan:
  %slot.p = getelementptr i64, ptr %d, i64 2
  %slot.i = load i64, ptr %slot.p
  %slot = inttoptr i64 %slot.i to ptr
  %plan = load ptr, ptr %slot
  %noplan = icmp eq ptr %plan, null
  %ty.p = getelementptr i64, ptr %d, i64 3
  %ty = load i64, ptr %ty.p
  br i1 %noplan, label %slow, label %arr
arr:
  %t = phi i64 [0, %haveplan], [%t.next, %arr.done]
  %pos = phi i64 [0, %haveplan], [%pos.next, %arr.done]
  %obj.p = getelementptr ptr, ptr %args, i64 %t
  %obj = load ptr, ptr %obj.p
  %oty.p = getelementptr i8, ptr %obj, i64 {lay.type}
  %oty = load i64, ptr %oty.p
  %tyok = icmp eq i64 %oty, %ty
  br i1 %tyok, label %fields, label %slow
fields:
  %rec = mul i64 %t, {_RECORD}
  %rec.i = add i64 %rec, {_HEADER}
  %want.p = getelementptr i64, ptr %d, i64 %rec.i
  %want.descr = load i64, ptr %want.p
  %want.nd.p = getelementptr i64, ptr %want.p, i64 1
  %want.nd = load i64, ptr %want.nd.p
  %isz.p = getelementptr i64, ptr %want.p, i64 2
  %isz = load i64, ptr %isz.p
  %mask.p = getelementptr i64, ptr %want.p, i64 3
  %mask64 = load i64, ptr %mask.p
  %mask = trunc i64 %mask64 to i32
  %descr.p = getelementptr i8, ptr %obj, i64 {lay.descr}
  %descr = load i64, ptr %descr.p
  %nd.p = getelementptr i8, ptr %obj, i64 {lay.nd}
  %nd32 = load i32, ptr %nd.p
  %nd = sext i32 %nd32 to i64
  %fl.p = getelementptr i8, ptr %obj, i64 {lay.flags}
  %fl = load i32, ptr %fl.p
  %flm = and i32 %fl, %mask
  %ok1 = icmp eq i64 %descr, %want.descr
  %ok2 = icmp eq i64 %nd, %want.nd
  %ok3 = icmp eq i32 %flm, %mask
  %ok12 = and i1 %ok1, %ok2
  %ok = and i1 %ok12, %ok3
  %dims.p = getelementptr i8, ptr %obj, i64 {lay.dims}
  %dims = load ptr, ptr %dims.p
  br i1 %ok, label %dim, label %slow
dim:
  %q = phi i64 [0, %fields], [%q.next, %dim.next]
  %cnt = phi i64 [1, %fields], [%cnt.next, %dim.next]
  %more = icmp slt i64 %q, %nd
  br i1 %more, label %dim.check, label %arr.done
dim.check:
  %ext.p = getelementptr i64, ptr %dims, i64 %q
  %ext = load i64, ptr %ext.p
  %pi = add i64 %pos, %q
  %pe.p = getelementptr i64, ptr %plan, i64 %pi
  %pe = load i64, ptr %pe.p
  %same = icmp eq i64 %ext, %pe
  br i1 %same, label %dim.next, label %slow
dim.next:
  %cnt.next = mul i64 %cnt, %ext
  %q.next = add i64 %q, 1
  br label %dim
arr.done:
  %data.p = getelementptr i8, ptr %obj, i64 {lay.data}
  %data = load i64, ptr %data.p
  %nbytes = mul i64 %cnt, %isz
  %end = add i64 %data, %nbytes
  %v.p = getelementptr i64, ptr %vals, i64 %t
  store i64 %data, ptr %v.p
  %lo.p = getelementptr i64, ptr %lo, i64 %t
  store i64 %data, ptr %lo.p
  %hi.p = getelementptr i64, ptr %hi, i64 %t
  store i64 %end, ptr %hi.p
  %pos.next = add i64 %pos, %nd
  %t.next = add i64 %t, 1
  %alld = icmp eq i64 %t.next, %narr
  br i1 %alld, label %overlap, label %arr
overlap:
  br label %ovo
ovo:
  %o = phi i64 [%nin, %overlap], [%o.next, %ovo.next]
  %omore = icmp ult i64 %o, %narr
  br i1 %omore, label %ovo.body, label %sz
ovo.body:
  %olo.p = getelementptr i64, ptr %lo, i64 %o
  %olo = load i64, ptr %olo.p
  %ohi.p = getelementptr i64, ptr %hi, i64 %o
  %ohi = load i64, ptr %ohi.p
  %oempty = icmp eq i64 %olo, %ohi
  br label %ov
ov:
  %u = phi i64 [0, %ovo.body], [%u.next, %ov.next]
  %ovmore = icmp ult i64 %u, %o
  br i1 %ovmore, label %ov.body, label %ovo.next
ov.body:
  %alo.p = getelementptr i64, ptr %lo, i64 %u
  %alo = load i64, ptr %alo.p
  %ahi.p = getelementptr i64, ptr %hi, i64 %u
  %ahi = load i64, ptr %ahi.p
  %x1 = icmp ult i64 %olo, %ahi
  %x2 = icmp ult i64 %alo, %ohi
  %aempty = icmp eq i64 %alo, %ahi
  %empty = or i1 %oempty, %aempty
  %x12 = and i1 %x1, %x2
  %noempty = xor i1 %empty, true
  %x = and i1 %x12, %noempty
  br i1 %x, label %slow, label %ov.next
ov.next:
  %u.next = add i64 %u, 1
  br label %ov
ovo.next:
  %o.next = add i64 %o, 1
  br label %ovo
sz:
  %s = phi i64 [0, %ovo], [%s.next, %sz.body]
  %smore = icmp ult i64 %s, %nsz
  br i1 %smore, label %sz.body, label %call
sz.body:
  %psi = add i64 %pos.next, %s
  %ps.p = getelementptr i64, ptr %plan, i64 %psi
  %psv = load i64, ptr %ps.p
  %vi = add i64 %narr, %s
  %vs.p = getelementptr i64, ptr %vals, i64 %vi
  store i64 %psv, ptr %vs.p
  %s.next = add i64 %s, 1
  br label %sz
call:
  %fn.p = getelementptr i64, ptr %d, i64 1
  %fn.i = load i64, ptr %fn.p
  %fn = inttoptr i64 %fn.i to ptr
  %ts = call ptr @PyEval_SaveThread()
  switch i64 %total, label %none [ {cases} ]
{"".join(calls)}none:
  br label %done
done:
  %rc = phi i32 {phi}, [-1, %none]
  call void @PyEval_RestoreThread(ptr %ts)
  %good = icmp eq i32 %rc, 0
  %res.w = select i1 %good, i64 5, i64 6
  %res.p = getelementptr i64, ptr %d, i64 %res.w
  %res.i = load i64, ptr %res.p
  %res = inttoptr i64 %res.i to ptr
  call void @Py_IncRef(ptr %res)
  ret ptr %res
slow:
  call void @Py_IncRef(ptr %false)
  ret ptr %false
}}
"""


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


@functools.cache
def _builder() -> Callable[[int], Callable[..., Any]] | None:
    """Compile the entry (once per process); returns ``make(descriptor address) -> builtin``,
    or None where the entry cannot be built (no CPython C API, an unknown array layout)."""
    if sys.implementation.name != "cpython":
        return None
    lay = probe_layout()
    if lay is None:
        return None
    from .jit import compile_ir
    from .target import host_target, init_llvm

    init_llvm()
    api = ctypes.pythonapi
    for name in ("PyLong_AsVoidPtr", "PyEval_SaveThread", "PyEval_RestoreThread", "Py_IncRef"):
        llvm.add_symbol(name, ctypes.cast(getattr(api, name), ctypes.c_void_p).value)
    try:
        compiled = compile_ir(entry_ir(lay), "tensorlang_entry", host_target(), opt=0,
                              what="the native kernel entry", counted=False)
    except CompileError:
        return None
    method = _MethodDef(b"tensorlang_entry", compiled.address, _METH_FASTCALL, None)
    _KEEP.extend((compiled, method))  # the code and its method record outlive every builtin
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.py_object,
                            ctypes.c_void_p)(("PyCFunction_NewEx", api))
    return lambda descriptor: new(ctypes.addressof(method), descriptor, None)


_KEEP: list[Any] = []


class Entry:
    """The native entry of one kernel: call ``entry(*inputs, *outs)``; it returns
    None (the kernel ran and succeeded), True (it ran and could not allocate an internal buffer)
    or False (a check failed or no plan matches: take the general path; nothing ran).

    Args:
        address: the kernel's entry point (``int32 fn(void* inputs..., void* outputs...,
            int64 sizes...)``).
        dtypes: the inputs' NumPy dtypes then the outputs'.
        ranks: the inputs' ranks then the outputs'.
        n_sizes: the kernel's size arguments.
        n_outputs: how many of ``dtypes`` are outputs (the last ones).
    """

    def __init__(self, address: int, dtypes: Sequence[np.dtype], ranks: Sequence[int],
                 n_sizes: int, make: Callable[[int], Callable[..., Any]],
                 n_outputs: int = 1) -> None:
        n_arr = len(dtypes)
        n_in = n_arr - n_outputs
        words = [0] * (_HEADER + _RECORD * n_arr)
        self._slot = (ctypes.c_void_p * 1)()
        words[:_HEADER] = [n_in, address, ctypes.addressof(self._slot), id(np.ndarray), n_sizes,
                           id(None), id(True), id(False), n_outputs]
        for t, (dt, rank) in enumerate(zip(dtypes, ranks)):
            dt = np.dtype(dt)
            mask = C_CONTIGUOUS | (WRITEABLE if t >= n_in else 0)
            words[_HEADER + _RECORD * t:_HEADER + _RECORD * (t + 1)] = [
                id(dt), rank, dt.itemsize, mask]
        self._dtypes = tuple(np.dtype(d) for d in dtypes)  # the descr singletons stay alive
        self._descriptor = (ctypes.c_int64 * len(words))(*words)
        self._plans: dict[tuple, Any] = {}
        self.call = make(ctypes.addressof(self._descriptor))

    def publish(self, shapes: Sequence[tuple[int, ...]], size_args: Sequence[int]) -> None:
        """Make the plan of these inputs'-then-outputs' extents and size arguments the one the
        entry checks calls against (kept for the kernel's life: a plan is never freed while a
        call might read it)."""
        key = (tuple(shapes), tuple(size_args))
        buf = self._plans.get(key)
        if buf is None:
            words = [e for s in shapes for e in s] + list(size_args)
            buf = (ctypes.c_int64 * max(1, len(words)))(*words)
            self._plans[key] = buf
        self._slot[0] = ctypes.addressof(buf)


def entry_enabled() -> bool:
    """Whether kernels made now get a native entry (``NATIVE_ENTRY`` and
    ``TENSORLANG_NATIVE_ENTRY``; a kernel decides when it is made)."""
    return bool(NATIVE_ENTRY) and os.environ.get("TENSORLANG_NATIVE_ENTRY", "1") != "0"


def make_entry(address: int, dtypes: Sequence[np.dtype], ranks: Sequence[int],
               n_sizes: int, n_outputs: int = 1) -> Entry | None:
    """The native entry of a kernel, or None where it is switched off or cannot be built (too
    many arguments, no CPython C API, an unknown array layout)."""
    if not entry_enabled() or len(dtypes) + n_sizes > MAX_ARGS:
        return None
    make = _builder()
    if make is None:
        return None
    return Entry(address, dtypes, ranks, n_sizes, make, n_outputs)
