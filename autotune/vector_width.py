"""The vector width of one stage of the rule-based schedule (and of the search space's update
forms): the target's native SIMD width, or the CPU model's ``stencil_vector_bits`` for a
stencil along the contiguous dimension.

A stencil reads one array at several constant offsets of the vector Var (``x - 1, x, x + 1``):
of those loads at most one can start on a cache line, so with vectors as wide as a line (512
bits, 64 bytes) every other load straddles two lines in every iteration. Where a straddling
512-bit load costs more than two 256-bit ones (the CPU model's ``stencil_vector_bits`` is 256:
Ice Lake-SP, where it was measured; Intel's other AVX-512 cores, whose L1 also serves a 512-bit
load whole, wait for a measurement), such a stage is vectorized at 256 bits, half of whose
loads then stay within one line. LLVM's tuning for those cores prefers
256-bit vectors (``TuningPrefer256Bit``), and Intel's Optimization Reference Manual asks AVX-512
data aligned to 64 bytes, a misaligned 512-bit access always spanning two lines. Zen 4, which
splits a 512-bit access into two 256-bit halves, keeps the native width. Only where the arrays
fit in L1 (``footprint``): streamed from L2 or memory, the lines' transfers bound the loop and
native vectors measured as fast or faster (docs/performance.md, "Stencils at 256 bits on Ice
Lake-SP").

A kernel with such a stage runs its other stages that accumulate nothing (copies, pointwise
stages, updates that do not read the cell they write) at the same narrow width
(``narrow_kernel``): 512-bit instructions put an Intel core in a lower clock licence for a while
after them, so that a short copy at 512 bits slows the 256-bit stencil that follows it
(docs/performance.md, "No 512-bit copies around a stencil at 256 bits").
Reductions keep native vectors: their FMAs are the work the wider vectors halve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tensorlang.affine import NonAffine, affine_form
from tensorlang.backends.llvm.target import host_target
from tensorlang.expr import Expr, accesses
from tensorlang.func import Func

from .cpu_model import cpu_model

if TYPE_CHECKING:
    from tensorlang.backends.llvm.target import Target

    from .workloads import BoundExtents

#: the vector width of a stencil stage in bits: 0 for the CPU model's ``stencil_vector_bits``
#: (an A/B switch: ``STENCIL_VECTOR_BITS=512`` gives Intel's AVX-512 cores native vectors again,
#: ``=256`` gives Zen 4 the narrower ones)
STENCIL_VECTOR_BITS = 0
#: which kernels vectorize every stage that accumulates nothing at the narrow width
#: (``narrow_kernel``): 1 those with a stencil in L1, 2 all, 0 none (an A/B switch)
NARROW_NON_REDUCTIONS = 1


def shifted_reads(value: Expr) -> bool:
    """Whether ``value`` reads one array at two or more constant offsets of one affine index in
    its last (contiguous) dimension: a stencil along it (``A[i, x - 1] + A[i, x + 1]``).

    >>> import tensorlang as tl
    >>> A = tl.Input("A", (10, 10), "float32")
    >>> i, x = tl.vars("i x")
    >>> shifted_reads(A[i, x - 1] + A[i, x] + A[i, x + 1]), shifted_reads(A[i - 1, x] + A[i, x])
    (True, False)
    """
    offsets: dict[tuple, set[int]] = {}
    for a in accesses(value):
        if not a.indices:
            continue
        try:
            form = affine_form(a.indices[-1])
        except NonAffine:
            continue
        if form.coeffs:
            offsets.setdefault((a.name, form.coeffs, form.params), set()).add(form.const)
    return any(len(c) > 1 for c in offsets.values())


def accumulates(f: Func, number: int | None) -> bool:
    """Whether ``f``'s pure definition (``number`` None) is a reduction over an RDom, or its
    update ``number`` reads the cell it writes (``f[i] = f[i] + ...``)."""
    if number is None:
        return f.definition is not None and bool(f.definition.rvars)
    u = f.updates[number]
    own = tuple(e.key for e in u.index)
    return any(a.name == f.name and tuple(e.key for e in a.indices) == own
               for a in accesses(u.value))


def footprint(f: Func, number: int | None, extents: BoundExtents) -> int | None:
    """Bytes of the arrays that ``f``'s pure definition (``number`` None) or its update
    ``number`` reads and writes, whole, at ``extents``' sizes (None where an array's shape is
    not known there)."""
    d = f.definition if number is None else f.updates[number]
    if d is None:
        return None
    arrays = {f.name: f.dtype.numpy.itemsize}
    arrays.update((a.name, a.dtype.numpy.itemsize) for a in accesses(d.value))
    total = 0
    for name, itemsize in arrays.items():
        if name in extents.shapes:
            shape = extents.shapes[name]
        elif name in extents.binding.bounds:
            shape = tuple(e for _, e in extents.binding.bounds[name])
        else:
            return None
        total += math.prod(shape) * itemsize
    return total


def _narrow(target: Target) -> tuple[int, int]:
    """(native bits, narrow bits) on ``target``: the CPU model's ``stencil_vector_bits`` (or
    ``STENCIL_VECTOR_BITS``), 0 where it is not narrower than native."""
    narrow = STENCIL_VECTOR_BITS or cpu_model(target).stencil_vector_bits
    return target.vector_bits, narrow if 0 < narrow < target.vector_bits else 0


def stencil_in_l1(f: Func, number: int | None, extents: BoundExtents,
                  target: Target | None = None) -> bool:
    """Whether ``f``'s pure definition (``number`` None) or its update ``number`` reads a
    stencil along its contiguous dimension (``shifted_reads``) over arrays that fit in L1
    together (``footprint``) on a CPU with a narrower stencil width than native."""
    target = target or host_target()
    d = f.definition if number is None else f.updates[number]
    if d is None or not _narrow(target)[1] or not shifted_reads(d.value):
        return False
    size = footprint(f, number, extents)
    return size is not None and size <= cpu_model(target).l1.size


def narrow_kernel(funcs: Sequence[Func], extents: BoundExtents,
                  target: Target | None = None) -> bool:
    """Whether every stage of ``funcs`` that accumulates nothing (``accumulates``) takes the
    narrow width (``stage_lanes(..., everywhere=True)``): where one of them is a stencil in L1
    (``stencil_in_l1``; ``NARROW_NON_REDUCTIONS`` 1), always (2) or never (0). 512-bit
    instructions put an Intel core in a lower clock licence for a while after them (Intel's
    AVX-512 frequency licences; LLVM prefers 256-bit vectors on those cores), so a kernel whose
    stencil runs at 256 bits should not copy its arrays at 512."""
    if NARROW_NON_REDUCTIONS != 1:
        return NARROW_NON_REDUCTIONS == 2 and bool(_narrow(target or host_target())[1])
    return any(stencil_in_l1(f, n, extents, target)
               for f in funcs for n in (None, *(u.number for u in f.updates)))


def stage_lanes(f: Func, number: int | None, extents: BoundExtents,
                target: Target | None = None, everywhere: bool = False) -> int:
    """SIMD lanes for ``f``'s pure definition (``number`` None) or its update ``number`` on
    ``target`` (default: the host) at ``extents``' sizes: the native lanes of ``f``'s dtype, or
    the lanes of the CPU model's ``stencil_vector_bits`` (``STENCIL_VECTOR_BITS`` where set)
    where the definition is a stencil in L1 (``stencil_in_l1``): there the loads are the bound
    and each straddling one costs L1 bandwidth; from L2 and beyond the lines' transfers are,
    and native vectors measured as fast or faster (docs/performance.md, "Stencils at 256 bits
    on Ice Lake-SP"). With ``everywhere`` (``narrow_kernel``), every stage that accumulates
    nothing takes the narrow width too."""
    target = target or host_target()
    bits, narrow = _narrow(target)
    if narrow and (everywhere and not accumulates(f, number)
                   or stencil_in_l1(f, number, extents, target)):
        bits = narrow
    return max(1, bits // (8 * f.dtype.numpy.itemsize))
