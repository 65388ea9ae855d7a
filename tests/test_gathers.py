"""Gathers on CPUs that run them slowly: code for ``target.SLOW_GATHER_CPUS`` (AMD Zen 1-4) gets
LLVM's ``prefer-no-gather``, so a vector load at scattered addresses becomes scalar loads, and
the result is the same as with gathers (checked against NumPy on the host, whatever it is)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm import target as target_mod
from algorithms import described_target


def _strided() -> tl.Func:
    """``out[i, j] = A[j, i] * 2 + x[3 * j]``: a transposed read and a strided one, both
    scattered across the vector lanes of ``j``."""
    N, M, L = tl.sizes("N M L")
    A, x = tl.Input("A", (M, N), tl.float32), tl.Input("x", (L,), tl.float32)
    i, j = tl.vars("i j")
    out = tl.Func("out")
    out[i, j] = A[j, i] * 2.0 + x[3 * j]
    return out


def _gathers(asm: str) -> int:
    return len(re.findall(r"^\s+vp?gather", asm, re.M))


def test_machine_features_add_prefer_no_gather_only_for_slow_gather_cpus(monkeypatch):
    assert "+prefer-no-gather" in described_target("znver4").machine_features.split(",")
    assert "+prefer-no-gather" in described_target("znver3").machine_features.split(",")
    for cpu in ("skylake-avx512", "sapphirerapids", "haswell"):
        t = described_target(cpu)
        assert t.machine_features == t.features
    monkeypatch.setattr(target_mod, "SLOW_GATHER_CPUS", "")
    t = described_target("znver4")
    assert t.machine_features == t.features


def test_zen_code_has_no_gathers_where_intel_code_has_them():
    out = _strided()
    s = tl.Schedule(out)
    s[out].vectorize("j", 16)
    intel = tl.compile(out, s, target=described_target("skylake-avx512")).assembly()
    zen = tl.compile(out, s, target=described_target("znver4")).assembly()
    assert _gathers(intel) > 0  # the test reads scattered lanes at all
    assert _gathers(zen) == 0


@pytest.mark.parametrize("gathers", [True, False])
@pytest.mark.parametrize("n, m", [(1, 1), (7, 13), (31, 67)])
def test_scattered_reads_match_numpy_with_and_without_gathers(gathers, n, m, monkeypatch):
    from tensorlang.backends.llvm.target import host_target

    # the host's CPU in the list, or the list empty: both forms of the code run on this host
    monkeypatch.setattr(target_mod, "SLOW_GATHER_CPUS", "" if gathers else host_target().cpu)
    out = _strided()
    s = tl.Schedule(out)
    s[out].vectorize("j", 8)
    rng = np.random.default_rng(n * m)
    a = rng.random((m, n), dtype=np.float32)
    x = rng.random(3 * m + 2, dtype=np.float32)
    got = tl.compile(out, s)(A=a, x=x)
    np.testing.assert_allclose(got, a.T * 2 + x[: 3 * m: 3][None, :], rtol=1e-6)
