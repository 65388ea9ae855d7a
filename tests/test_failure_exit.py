"""A buffer that cannot be allocated ends the kernel through its function's one failure exit
(``MemoryGen.fail`` in ``backends/llvm/memory.py``), at root and inside an outlined parallel
loop, and the call raises ``MemoryError``; the kernel still runs correctly afterwards."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl

#: columns of the intermediate (float64): 2**61 bytes a row, more than any allocator serves
HUGE = 2**58


def _row_sums_of_a_product(place: str):
    """``out[i] = sum_j A[i] * j`` through an intermediate ``P[i, j]`` over ``M`` columns (a size
    no input fixes), computed at root or per row of ``out``'s parallel loop; ``out`` and the
    other stages keep small buffers of their own so that a failure has live ones to free."""
    N, M = tl.sizes("N M")
    A = tl.Input("A", (N,), tl.float32)
    i, j = tl.vars("i j")
    Q, P, out = tl.Func("Q"), tl.Func("P", shape=(N, M)), tl.Func("out", shape=(N,))
    Q[i] = A[i] + 1.0
    P[i, j] = Q[i] * j
    out[i] = P[i, j]  # j only on the right: summed
    s = tl.Schedule(out)
    s[Q].compute_root()
    if place == "root":
        s[P].compute_root()
    else:
        s[out].parallel(i)
        s[P].compute_at(s[out], i)
    return out, s


@pytest.mark.parametrize("place", ["root", "parallel"])
def test_an_allocation_that_fails_raises_memory_error(place, rng):
    out, s = _row_sums_of_a_product(place)
    kern = tl.compile(out, s)
    a = rng.random(3, dtype=np.float32)
    with pytest.raises(MemoryError, match="could not be allocated"):
        kern(A=a, M=HUGE)
    # the failure freed what it held and left nothing behind: the same kernel still works
    for m in (1, 5, 64):
        want = (a + 1.0) * (m * (m - 1) / 2)
        np.testing.assert_allclose(kern(A=a, M=m), want, rtol=1e-5, err_msg=f"M = {m}")
