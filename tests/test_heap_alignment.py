"""Internal buffers too large for the stack (``MAX_STACK_BYTES``) are allocated on a cache line
(``HEAP_ALIGN`` bytes, ``aligned_alloc``), as the stack slots are and as BLIS and OpenBLAS align
their packed buffers: glibc's ``malloc`` gives 16 bytes, on which a packed panel's 64-byte
vectors straddled two lines. The kernel stays correct on sizes that are not a multiple of it."""

from __future__ import annotations

import re

import numpy as np
from algorithms import matmul

import tensorlang as tl
from tensorlang.backends.llvm import memory


def _packed_gemm():
    C, arrays = matmul()
    s = tl.Schedule(C)
    s[C].split("j", 8)
    s[C].reorder("j.o", "i", "k", "j.i")
    s.cache_read("B", s[C], "j.o")  # B's K x 8 panel, on the heap past 2048 rows
    s[C].vectorize("j.i")
    return C, arrays, s


def _alloc_function(ir_text: str) -> str:
    return re.search(r"define internal i8\* @\"?tl\.alloc\"?\(.*?\n}\n", ir_text, re.S).group(0)


def test_heap_buffers_are_allocated_on_a_cache_line(rng, monkeypatch):
    C, arrays, s = _packed_gemm()
    kern = tl.compile(C, s)
    alloc = _alloc_function(kern.llvm_ir())
    assert re.search(rf'@"?aligned_alloc"?\(i64 {memory.HEAP_ALIGN},', alloc)
    for m, n, k in [(3, 13, 2500), (1, 8, 2049), (5, 1, 4099)]:  # 8 x K float32 >= 64 KiB
        arrs = arrays(rng, m, n, k)
        np.testing.assert_allclose(kern(**arrs), arrs["A"] @ arrs["B"], rtol=1e-4)
    # switched off: plain malloc, as before
    monkeypatch.setattr(memory, "HEAP_ALIGN", 0)
    plain = _alloc_function(tl.compile(C, s).llvm_ir())
    assert not re.search(r'@"?aligned_alloc"?\(i64 64,', plain)
    assert re.search(r'@"?malloc"?\(', plain)
