"""Internal buffers too large for the stack (``MAX_STACK_BYTES``) are allocated on a cache line
(``HEAP_ALIGN`` bytes), as the stack slots are and as BLIS and OpenBLAS align their packed
buffers: glibc's ``malloc`` gives 16 bytes, on which a packed panel's 64-byte vectors straddled
two lines. ``tl.alloc`` over-allocates through ``malloc`` and keeps the block's address before
the aligned pointer (``tl.free`` frees it), rather than calling ``aligned_alloc``. The kernel
stays correct on sizes that are not a multiple of the alignment."""

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
    ir_text = kern.llvm_ir()
    alloc = _alloc_function(ir_text)
    # the alignment: 2 MB from HUGE_ALLOC_MIN bytes (Linux), else a cache line; the malloc
    # block is one alignment larger than the rounded-up size, its address kept before the result
    assert re.search(rf"select\s+i1 %\S+, i64 {memory.HUGE_PAGE_BYTES}, i64 {memory.HEAP_ALIGN}\b",
                     alloc)
    assert re.search(r'@"?malloc"?\(', alloc) and "aligned_alloc" not in ir_text
    assert re.search(r"store i8\* %\S+, i8\*\* %\S+", alloc)
    assert re.search(r'call void @"?tl\.free"?\(', ir_text)
    for m, n, k in [(3, 13, 2500), (1, 8, 2049), (5, 1, 4099)]:  # 8 x K float32 >= 64 KiB
        arrs = arrays(rng, m, n, k)
        np.testing.assert_allclose(kern(**arrs), arrs["A"] @ arrs["B"], rtol=1e-4)
    # switched off: malloc's own 16 bytes, as before
    monkeypatch.setattr(memory, "HEAP_ALIGN", 0)
    plain = tl.compile(C, s)
    assert re.search(rf"i64 {memory.HUGE_PAGE_BYTES}, i64 16\b", _alloc_function(plain.llvm_ir()))
    arrs = arrays(rng, 3, 13, 2500)
    np.testing.assert_allclose(plain(**arrs), arrs["A"] @ arrs["B"], rtol=1e-4)
