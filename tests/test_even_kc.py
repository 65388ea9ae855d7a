"""A GEMM whose reduction has no divisor near the model's ``kc`` (a prime K): the rule-based
schedule packs it in equal reduction blocks, the last one shorter (``heuristic.EVEN_KC``,
``cpu_model.even_block``), where it used to fall back to the unpacked tile; the nest matches
NumPy on prime sizes, and the rule stays a point of the search space."""

from __future__ import annotations

import pytest
from algorithms import (assert_a_point_of_the_space, assert_gemm_matches_numpy, described_target,
                        gemm)

import tensorlang as tl
from tensorlang.autotuner import cpu_model as cm
from tensorlang.autotuner import heuristic
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.space import even_kc_choices, factor_choices


def test_even_block_splits_into_the_fewest_equal_blocks():
    assert cm.even_block(1019, 400) == 340  # 340 + 340 + 339
    assert cm.even_block(1019, 512) == 510  # 510 + 509, not 512 + 507
    assert cm.even_block(2003, 512) == 501
    assert cm.even_block(90, 192) == 90 and cm.even_block(1200, 400) == 400
    for n in (257, 521, 1019, 4099):
        for t in (64, 128, 255, 256, 400, 512):
            b = cm.even_block(n, t)
            blocks = -(-n // b)
            assert b <= t and blocks == -(-n // t)  # as few blocks as t allows
            assert n - (blocks - 1) * b > b - blocks  # the last one shorter by < blocks


@pytest.mark.parametrize("cpu", ["icelake-server", "skylake-avx512", "znver4", "haswell"])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_prime_reduction_is_packed_in_equal_blocks(cpu, threads, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    sizes = {"M": 1009, "N": 1013, "K": 1019}
    text = heuristic_schedule(gemm(tl.float64), sizes, described_target(cpu)).to_python()
    assert "cache_read('B'" in text and "cache_read('A'" in text, text
    kc = int(text.split("split('k', ")[1].split(")")[0])
    assert 1019 % kc and kc == cm.even_block(1019, kc)  # equal blocks, the last shorter
    # ... in the search space: the rule stays a point of it
    assert kc in factor_choices(1019, heuristic.MAX_KC, even=True)
    monkeypatch.setattr(heuristic, "EVEN_KC", 0)  # as before: no packing at a prime K
    old = heuristic_schedule(gemm(tl.float64), sizes, described_target(cpu)).to_python()
    assert "cache_read" not in old and "split('k'" not in old, old


def test_even_kc_choices_only_where_no_divisor_is_near():
    assert even_kc_choices(1024, 512) == () and even_kc_choices(1200, 512) == ()
    assert {340, 510} <= set(even_kc_choices(1019, 512))
    assert 340 not in factor_choices(1019, 512) and 340 in factor_choices(1019, 512, even=True)


def test_the_rule_at_a_prime_reduction_is_a_point_of_the_space(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float64)
    sizes = {"M": 211, "N": 223, "K": 1019}
    target = described_target("icelake-server")
    s = heuristic_schedule(C, sizes, target)
    assert "split('k', 510)" in s.to_python(), s.to_python()
    assert_a_point_of_the_space(C, sizes, target, s)


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
@pytest.mark.parametrize("cpu,threads", [("icelake-server", "1"), ("icelake-server", "2"),
                                         ("haswell", "2")])
def test_equal_reduction_blocks_match_numpy_on_prime_sizes(dtype, cpu, threads, monkeypatch):
    # a described CPU's rule (its kc, tile and loop order: the same on every host), compiled
    # for this one; every piece: whole and remainder row tiles, whole and ragged column panels,
    # whole and shorter last reduction blocks
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(dtype)
    for m, n, k in [(97, 101, 1019), (131, 67, 521), (127, 67, 2003)]:
        s = heuristic_schedule(C, {"M": m, "N": n, "K": k}, described_target(cpu))
        text = s.to_python()
        assert "cache_read" in text and "split('k'" in text, text
        kc = int(text.split("split('k', ")[1].split(")")[0])
        assert k % kc, text  # a shorter last reduction block
        # ... and the same kernel at other sizes (its guarded versions)
        assert_gemm_matches_numpy(tl.compile(C, s), dtype, [(m, n, k), (5, 3, 7), (13, 40, 1024)],
                                  seed=k)
