"""A packed tile whose reduction is not split, with several row blocks run serially inside a
batch loop, copies B's panels once per batch (``heuristic.PANELS_PER_BATCH``): BLIS's order
with a single reduction block. The copy sits at the batch loop, not inside the row blocks; the
search space reaches the schedule; the kernel computes what NumPy does on sizes the tiles do
not divide."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from test_cpu_model import _target

from tensorlang.autotuner import heuristic
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.space import SearchSpace
from tensorlang.autotuner.workloads import BUILTIN
from tensorlang.schedule.lower import lower

import tensorlang as tl

SIZES = {"B": 8, "M": 256, "N": 256, "K": 256}


def _copy_depth(low: str) -> tuple[int, int]:
    """(indent of ``produce B_local``, indent of the row blocks' loop ``for i.o.o``)."""
    lines = low.splitlines()
    copy = next(ln for ln in lines if ln.strip() == "produce B_local:")
    blocks = next(ln for ln in lines if ln.strip().startswith("for i.o.o"))
    return len(copy) - len(copy.lstrip()), len(blocks) - len(blocks.lstrip())


@pytest.mark.parametrize("cpu, dtype", [("znver3", "float64"), ("haswell", "float32")])
def test_b_is_copied_once_per_batch(cpu, dtype, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "1")
    C = BUILTIN["batch_matmul"].build_as(dtype)
    s = heuristic_schedule(C, SIZES, _target(cpu))
    text = s.to_python()
    assert "cache_read('B', s[\"C\"], 'b'" in text, text
    copy, blocks = _copy_depth(str(lower(C, s)))
    assert copy == blocks, "B's copy beside the row blocks' loop, inside the batch loop"
    space = SearchSpace(C, SIZES, _target(cpu))
    point = space.point(s)
    assert point is not None
    assert point[0][f"{C.name}.blis"] is True
    again = space.sample(optuna.trial.FixedTrial(point[0]))
    assert space.signature(again) == space.signature(s)
    monkeypatch.setattr(heuristic, "PANELS_PER_BATCH", 0)
    old = heuristic_schedule(C, SIZES, _target(cpu))
    assert "cache_read('B', s[\"C\"], 'j.o'" in old.to_python()
    copy, blocks = _copy_depth(str(lower(C, old)))
    assert copy > blocks  # inside the row blocks: once per row block


def test_copied_once_per_batch_matches_numpy(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "1")
    C = BUILTIN["batch_matmul"].build_as("float64")
    s = heuristic_schedule(C, SIZES, _target("znver3"))
    assert "cache_read('B', s[\"C\"], 'b'" in s.to_python()
    kern = tl.compile(C, s, target=_target("znver3"))
    rng = np.random.default_rng(3)
    for b, m, n, k in [(8, 256, 256, 256), (2, 277, 43, 101), (3, 5, 7, 1), (1, 1, 1, 1),
                       (2, 300, 8, 3)]:
        a, bb = rng.random((b, m, k)), rng.random((b, k, n))
        np.testing.assert_allclose(kern(A=a, B=bb), a @ bb, rtol=1e-12)
