"""What an outlined parallel loop receives (``ParallelGen.closure`` in
``backends/llvm/parallel.py``): the buffers and integers its body names, no others, and every
one it needs — checked in the LLVM IR and against NumPy, with the closure and without it."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm import parallel


def _chain(stages: int):
    """``s_k[y, x] = s_{k-1}[y, x] + 2 * s_{k-1}[y, x + 1]`` from ``In``, every stage at root
    with its rows in parallel and its columns in vectors of 8 (a version for rows narrower
    than 8 too): ``2 * stages`` outlined loops, each reading one buffer and writing one."""
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float64)
    y, x = tl.vars("y x")
    prev, funcs = In, []
    for k in range(stages):
        f = tl.Func(f"s{k}")
        f[y, x] = prev[y, x] + 2.0 * prev[y, x + 1]
        funcs.append(f)
        prev = f
    s = tl.Schedule(prev)
    for f in funcs:
        if f is not prev:
            s[f].compute_root()
        s[f].vectorize(x, 8).parallel(y)
    return prev, s


def _chain_numpy(a: np.ndarray, stages: int) -> np.ndarray:
    for _ in range(stages):
        a = a[:, :-1] + 2.0 * a[:, 1:]
    return a


def _outlined_params(ir_text: str) -> dict[str, list[str]]:
    """The parameter names of each outlined loop (``@"name.parN"``) in ``ir_text``."""
    found = {}
    for m in re.finditer(r'define internal i32 @"([\w.]+\.par\d+)"\((.*?)\)', ir_text):
        found[m.group(1)] = re.findall(r'%"?([\w.]+)"?(?:,|$)', m.group(2))
    return found


def test_each_outlined_loop_receives_only_the_buffers_it_names():
    out, s = _chain(6)
    params = _outlined_params(tl.compile(out, s).llvm_ir())
    assert len(params) == 12, params  # the vector and the narrow version of each stage
    for name, names in params.items():
        buffers = [n for n in names if n == "In" or n.startswith("s")]
        assert len(buffers) == 2, (name, names)  # the stage's input and its output
        # and its integers: H, W, the stage's lets (up to three) and the chunk's lo and hi,
        # not the lets of the other stages (each stage names its own)
        assert len(names) - 2 <= 7, (name, names)


@pytest.mark.parametrize("named", [1, 0])
def test_a_chain_of_parallel_stages_matches_numpy(named, monkeypatch, rng):
    monkeypatch.setattr(parallel, "NAMED_CLOSURE", named)
    stages = 5
    out, s = _chain(stages)
    kern = tl.compile(out, s)
    for h, w in ((1, stages + 1), (7, stages + 3), (13, stages + 8), (5, 41), (3, 97)):
        a = rng.random((h, w))
        np.testing.assert_allclose(kern(a), _chain_numpy(a, stages), rtol=1e-12,
                                   err_msg=f"{h} x {w}")


def test_a_producer_inside_the_parallel_loop_and_its_lets(rng):
    # P is computed per row tile of out inside out's parallel loop: the outlined loop allocates
    # it and reads the split's lets and the sizes of In's strides
    H, W = tl.sizes("H W")
    In = tl.Input("In", (H, W), tl.float32)
    y, x = tl.vars("y x")
    P, out = tl.Func("P"), tl.Func("out")
    P[y, x] = In[y, x] * 3.0 + 1.0
    out[y, x] = P[y, x] + P[y + 1, x] + P[y + 2, x]
    s = tl.Schedule(out)
    s[out].split(y, 4)
    s[out].parallel("y.o").vectorize(x, 8)
    s[P].compute_at(s[out], "y.o").vectorize(x, 8)
    kern = tl.compile(out, s)
    for h, w in ((3, 1), (4, 7), (13, 17), (29, 64)):
        a = rng.random((h, w), dtype=np.float32)
        p = a * 3.0 + 1.0
        np.testing.assert_allclose(kern(a), p[:-2] + p[1:-1] + p[2:], rtol=1e-6,
                                   err_msg=f"{h} x {w}")
