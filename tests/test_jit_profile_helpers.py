"""benchmarks/jit_profile.py's disassembly helpers: loops found from backward branches, samples
charged to the innermost loop holding them (perf itself is not part of the tests)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import jit_profile  # noqa: E402

# objdump -D -b binary's layout: address, bytes, instruction
DIS = """
    1000:\t48 89 f8             \tmov    %rdi,%rax
    1003:\tc4 e2 7d 19 00       \tvbroadcastsd (%rax),%ymm0
    1008:\tc4 e2 fd b8 0e       \tvfmadd231pd (%rsi),%ymm0,%ymm1
    100d:\t48 ff c1             \tinc    %rcx
    1010:\t75 f6                \tjne    0x1008
    1012:\t48 ff c2             \tinc    %rdx
    1015:\t75 ec                \tjne    0x1003
    1017:\tc3                   \tret
"""


def test_loops_are_backward_branches_and_samples_go_to_the_innermost():
    text, loops = jit_profile.loops_of(DIS)
    assert sorted(loops) == [(0x1003, 0x1015), (0x1008, 0x1010)]
    assert text[0x1008].startswith("vfmadd231pd")
    assert jit_profile.innermost(0x100d, loops) == (0x1008, 0x1010)
    assert jit_profile.innermost(0x1012, loops) == (0x1003, 0x1015)
    assert jit_profile.innermost(0x1000, loops) is None
    rows = jit_profile.charge([0x1008, 0x100d, 0x1010, 0x1012, 0x1000], text, loops)
    assert rows[0][:2] == (0.6, (0x1008, 0x1010)) and rows[0][2:] == (3, 1)
    assert {(r[1], r[0]) for r in rows[1:]} == {((0x1003, 0x1015), 0.2), (None, 0.2)}


def test_the_fma_share_counts_innermost_fma_loops_against_kernel_and_copy_samples():
    text, loops = jit_profile.loops_of(DIS)
    # 0x1008-0x1010 is the innermost FMA loop; 0x1003-0x1015 holds it and is not innermost
    ips = [0x1008, 0x100d, 0x1012, 0x1000]
    assert jit_profile.fma_share(ips, text, loops) == 0.5
    assert jit_profile.fma_share(ips, text, loops, copies=4) == 0.25
    assert jit_profile.fma_share([], text, loops) == 0.0
