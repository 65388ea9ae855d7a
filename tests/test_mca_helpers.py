"""benchmarks/mca.py's assembly helpers: the innermost FMA loop is found and its FLOPs counted
(the llvm-mca run itself needs the Debian package llvm and is not part of the tests)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import mca  # noqa: E402

ASM = """kernel:
\tmovq\t%rdi, %rax
.LBB0_1:
\tvbroadcastss\t(%rax), %zmm2
.LBB0_2:
\tvfmadd231ps\t(%rsi), %zmm2, %zmm0
\tvfmadd231ps\t64(%rsi), %zmm2, %zmm1
\taddq\t$4, %rsi
\tcmpq\t%rsi, %rdx
\tjne\t.LBB0_2
\tvfmadd231ps\t%ymm3, %ymm4, %ymm5
\taddq\t$4, %rax
\tjne\t.LBB0_1
.LBB0_3:
\tvfmadd231ss\t%xmm1, %xmm2, %xmm3
\tdecq\t%rcx
\tjne\t.LBB0_3
\tretq
"""


def test_the_single_block_loop_with_most_fmas_is_the_innermost():
    body = mca.innermost_fma_loop(ASM)
    assert body[0].startswith("vfmadd231ps\t(%rsi)") and body[-1] == "jne\t.LBB0_2"
    assert len(body) == 5
    assert mca.loop_flops(body) == 2 * 16 * 2  # two zmm FMAs, 16 lanes, 2 FLOPs each


def test_flops_per_fma_follow_the_element_type():
    assert mca.loop_flops(["vfmadd231ps\t%zmm1, %zmm2, %zmm3", "vfmadd231pd\t%ymm1, %ymm2, %ymm3",
                           "vfmadd231ss\t%xmm1, %xmm2, %xmm3", "addq\t$4, %rsi"]) == 32 + 8 + 2


def test_no_fma_loop():
    assert mca.innermost_fma_loop("f:\n\tretq\n") == []


def test_the_vector_loop_wins_over_a_scalar_remainder_with_as_many_fmas():
    # a dot product C -= A * B (vfnmadd): its vector loop and its shorter scalar remainder
    # hold two FMAs each; the loop with the most FMA work is the vector one
    asm = """k:
.LBB0_1:
\tvmovupd\t(%rdi,%rax,8), %ymm1
\tvfnmadd231pd\t(%rsi,%rax,8), %ymm1, %ymm0
\tvfnmadd231pd\t32(%rsi,%rax,8), %ymm1, %ymm2
\taddq\t$8, %rax
\tcmpq\t%rax, %rcx
\tjne\t.LBB0_1
.LBB0_2:
\tvfnmadd231sd\t(%rsi,%rax,8), %xmm1, %xmm0
\tvfnmadd231sd\t8(%rsi,%rax,8), %xmm1, %xmm2
\tincq\t%rax
\tjne\t.LBB0_2
\tretq
"""
    body = mca.innermost_fma_loop(asm)
    assert body[0].startswith("vmovupd") and body[-1] == "jne\t.LBB0_1"
    assert mca.loop_flops(body) == 2 * 4 * 2


def test_the_fma_probe_is_independent_fmas_of_one_width():
    # model_peak times it with llvm-mca: 16 FMAs whose accumulators are all different registers
    # (no chain between them) and whose sources are none of the accumulators
    body = mca.fma_probe("zmm", "pd")
    fmas = [x for x in body if x.startswith(mca.FMA_STEMS)]
    assert len(fmas) == 16 and body[-1].startswith("jne")
    accs = [x.split(", ")[-1] for x in fmas]
    sources = {r for x in fmas for r in x.split("\t")[1].split(", ")[:2]}
    assert len(set(accs)) == 16 and not sources & set(accs)
    assert mca.loop_flops(body) == 16 * 8 * 2  # float64 zmm: 8 lanes, 2 FLOPs each
    assert mca.loop_flops(mca.fma_probe("ymm", "ps")) == 16 * 8 * 2
