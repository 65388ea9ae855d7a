"""Workload keys: structural, stable across processes, sensitive to any change."""

from __future__ import annotations

import subprocess
import sys

import tensorlang as tl

PROGRAM = """
import tensorlang as tl
M, N, K = tl.sizes("M N K")
A = tl.Input("A", (M, K), tl.float32); B = tl.Input("B", (K, N), tl.float32)
{vars} = tl.vars("{names}")
C = tl.Func("C")
C[{v0}, {v1}] = A[{v0}, {v2}] * B[{v2}, {v1}]{extra}
print(tl.workload_key(C))
"""


def key_in_subprocess(names="i j k", extra="", seed="0") -> str:
    v = names.split()
    code = PROGRAM.format(vars=", ".join(v), names=names, v0=v[0], v1=v[1], v2=v[2], extra=extra)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": seed, "PATH": ""})
    return r.stdout.strip()


def test_same_text_same_key_across_processes():
    k1 = key_in_subprocess(seed="1")
    k2 = key_in_subprocess(seed="2")
    assert k1 == k2 and len(k1) == 64
    assert key_in_subprocess(names="a b c") == k1  # Vars are renamed by position


def test_any_change_changes_the_key():
    base = key_in_subprocess()
    assert key_in_subprocess(extra=" * 2") != base
    assert key_in_subprocess(extra=" + 0") != base


def test_in_process_keys():
    (N,) = tl.sizes("N")
    X = tl.Input("X", (N,), tl.float32)
    (i,) = tl.vars("i")
    F, G, H = tl.Func("F"), tl.Func("F"), tl.Func("F")
    F[i] = X[i] + 1
    G[i] = X[i] + 1
    H[i] = X[i] + 2
    assert tl.workload_key(F) == tl.workload_key(G) != tl.workload_key(H)
    X64 = tl.Input("X", (N,), tl.float64)
    J = tl.Func("F")
    J[i] = X64[i] + 1
    assert tl.workload_key(J) != tl.workload_key(F)
    assert (X[i] + 1).same_as(X[i] + 1) and hash(X[i] + 1) == hash(X[i] + 1)
    assert {X[i] + 1: "a"}[X[i] + 1] == "a"
