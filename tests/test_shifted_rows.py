"""The rows' remainder of a packed tile whose reduction is not split, shifted inwards
(``heuristic.SHIFT_ROWS``), and a GuardWithIf tail that bounds a serial loop kept in the fast
version of a nest (``nest.SERIAL_TAILS``): no remainder piece (which copied B's panels again
and ran a guarded tile), and what NumPy computes on sizes the tiles do not divide."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from algorithms import gemm
from test_cpu_model import _target

import tensorlang as tl
import tensorlang.schedule.nest as nest
from tensorlang.autotuner import heuristic
from tensorlang.autotuner.heuristic import heuristic_schedule, shifted_row_block
from tensorlang.autotuner.space import SearchSpace
from tensorlang.autotuner.workloads import BUILTIN
from tensorlang.schedule.lower import lower

SIZES = {"B": 8, "M": 256, "N": 256, "K": 256}


def _batched_rule(dtype, monkeypatch, threads: str = "1"):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = BUILTIN["batch_matmul"].build_as(dtype)
    return C, heuristic_schedule(C, SIZES, _target("haswell"))


def test_an_unsplit_reductions_last_row_tile_is_shifted(monkeypatch):
    # haswell's float32 tile: 6 rows x 16 columns; 256 rows are 42 whole tiles and 4 rows
    C, s = _batched_rule("float32", monkeypatch)
    text = s.to_python()
    assert "split('i', 6, tail='ShiftInwards')" in text, text
    # the two row blocks of 21 whole tiles take the shifted 43rd: 22 and 21
    assert "split('i.o', 22)" in text, text
    low = str(lower(C, s))
    # no remainder piece of rows: each produce of C (the columns' versions, whole panels and
    # tail) allocates B's panels once, and the row blocks' tail is a bound of the serial tile
    # loop in the fast version, not a version of its own
    assert low.count("produce C:") == low.count("allocate B_local") == 3, low
    assert low.splitlines()[1].strip() == "if M >= 6:", low.splitlines()[:2]
    assert "if i.i" not in low.split("else:")[0]
    # the space's "model" row block is the rule's: the rule stays a point of it
    space = SearchSpace(C, SIZES, _target("haswell"))
    point = space.point(s)
    assert point is not None
    again = space.sample(optuna.trial.FixedTrial(point[0]))
    assert space.signature(again) == space.signature(s)
    monkeypatch.setattr(heuristic, "SHIFT_ROWS", 0)
    old = heuristic_schedule(C, SIZES, _target("haswell"))
    assert "ShiftInwards')\ns[\"C\"].split('i.o'" not in old.to_python()
    assert str(lower(C, old)).count("produce C:") > 2  # the remainder piece


def test_a_split_reduction_keeps_its_rows_guarded(monkeypatch):
    # a shifted tile would add its rows' partial sums twice where k is split outside the tiles
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "1")
    C = BUILTIN["matmul"].build_as("float64")
    text = heuristic_schedule(C, {"M": 1024, "N": 1024, "K": 1024},
                              _target("haswell")).to_python()
    assert "split('k', " in text and "split('i', 6)" in text, text


@pytest.mark.parametrize("threads,shifted", [("1", True), ("2", False)])
def test_parallel_row_blocks_keep_their_rows_guarded(threads, shifted, monkeypatch):
    # 97 rows: 16 tiles of 6 and 1 row; on two threads the row blocks run in parallel, where a
    # shifted tile and the one before it in another block would share cells (refuted)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = BUILTIN["matmul"].build_as("float64")
    s = heuristic_schedule(C, {"M": 97, "N": 61, "K": 301}, _target("haswell"))
    text = s.to_python()
    assert "cache_read('B'" in text and ("split('i', 6, tail='ShiftInwards')" in text) == shifted
    rng = np.random.default_rng(2)
    a, b = rng.random((97, 301)), rng.random((301, 61))
    np.testing.assert_allclose(tl.compile(C, s, target=_target("haswell"))(a, b), a @ b,
                               rtol=1e-10)


@pytest.mark.parametrize("dtype,threads", [("float32", "1"), ("float32", "2"),
                                           ("float64", "1")])
def test_the_shifted_rows_match_numpy(dtype, threads, monkeypatch):
    C, s = _batched_rule(dtype, monkeypatch, threads)
    kern = tl.compile(C, s, target=_target("haswell"))
    rng = np.random.default_rng(5)
    for b, m, n, k in [(8, 256, 256, 256), (3, 257, 37, 251), (2, 131, 16, 7), (1, 5, 17, 3),
                       (1, 6, 16, 1), (2, 7, 1, 2), (1, 1, 1, 1)]:
        a = rng.random((b, m, k)).astype(dtype)
        bb = rng.random((b, k, n)).astype(dtype)
        np.testing.assert_allclose(kern(a, bb), a @ bb,
                                   rtol=2e-5 if dtype == "float32" else 1e-10)


def test_shifted_row_block_keeps_the_blocks_number():
    # (the rule's blocks divide the whole tiles: heuristic._packed_rows)
    for extent in range(1, 400):
        for rows in (4, 6, 7):
            whole = extent // rows
            for block in [d for d in range(1, whole + 1) if whole % d == 0] or [1]:
                mb = shifted_row_block(extent, rows, block)
                tiles, blocks = -(-extent // rows), max(1, whole // block)
                # the same number of blocks, or else the extra tile a block of its own
                assert -(-tiles // mb) == blocks or mb == block and -(-tiles // mb) == blocks + 1
                assert mb <= block + 1, (extent, rows, block)


@pytest.mark.parametrize("switch", [1, 0])
def test_a_serial_loops_tail_stays_in_the_fast_version(switch, monkeypatch):
    # a row block of 5 tiles of 4 rows (GuardWithIf): its tail bounds the serial tile loop; the
    # columns' ShiftInwards split keeps the fast version's whole vectors whatever the rows
    monkeypatch.setattr(nest, "SERIAL_TAILS", switch)
    C = gemm(tl.float32)
    s = tl.Schedule(C)
    s[C].split("i", 4, tail="ShiftInwards")
    s[C].split("i.o", 5)
    s[C].split("j", 8, tail="ShiftInwards")
    s[C].reorder("i.o.o", "j.o", "i.o.i", "k", "i.i", "j.i")
    s[C].unroll("i.i").vectorize("j.i")
    low = str(lower(C, s))
    first = low.splitlines()[0]
    assert ("% 5 == 0" in first) == (not switch), first
    kern = tl.compile(C, s)
    rng = np.random.default_rng(3)
    for m, n, kk in [(4, 8, 1), (23, 9, 5), (20, 8, 3), (97, 31, 2), (3, 5, 2)]:
        a = rng.random((m, kk)).astype(np.float32)
        b = rng.random((kk, n)).astype(np.float32)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=2e-5)
