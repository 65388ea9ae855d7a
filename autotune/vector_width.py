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
"""

from __future__ import annotations

import math
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


def stage_lanes(f: Func, number: int | None, extents: BoundExtents,
                target: Target | None = None) -> int:
    """SIMD lanes for ``f``'s pure definition (``number`` None) or its update ``number`` on
    ``target`` (default: the host) at ``extents``' sizes: the native lanes of ``f``'s dtype, or
    the lanes of the CPU model's ``stencil_vector_bits`` (``STENCIL_VECTOR_BITS`` where set)
    where the definition reads a stencil along its contiguous dimension (``shifted_reads``)
    over arrays that fit in L1 together (``footprint``): there the loads are the bound and each
    straddling one costs L1 bandwidth; from L2 and beyond the lines' transfers are, and native
    vectors measured as fast or faster (docs/performance.md, "Stencils at 256 bits on Ice
    Lake-SP")."""
    target = target or host_target()
    bits = target.vector_bits
    d = f.definition if number is None else f.updates[number]
    cpu = cpu_model(target)
    narrow = STENCIL_VECTOR_BITS or cpu.stencil_vector_bits
    if d is not None and 0 < narrow < bits and shifted_reads(d.value):
        size = footprint(f, number, extents)
        if size is not None and size <= cpu.l1.size:
            bits = narrow
    return max(1, bits // (8 * f.dtype.numpy.itemsize))
