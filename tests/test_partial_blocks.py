"""Row blocks with a shorter last block (``heuristic.PARTIAL_BLOCKS``): where no whole block
shares a packed tile's rows out over the threads (1000 rows in 125 tiles of 8 on 16 threads: 25
blocks of 5, two rounds, the second 9/16 busy), each thread takes its share and the last block
is shorter; the row count is still chosen by whole blocks, the search space's "model" row block
is the rule's, and the kernels compute what NumPy does on sizes no factor divides."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from algorithms import gemm
from test_cpu_model import _target

import tensorlang as tl
from tensorlang.autotuner import heuristic
from tensorlang.autotuner.heuristic import heuristic_schedule, row_block
from tensorlang.autotuner.row_blocks import busy, partial_block
from tensorlang.autotuner.space import SearchSpace


def _row_splits(text: str) -> list[str]:
    return [line for line in text.splitlines() if ".split('i" in line]


def test_busy_counts_the_rounds_of_a_shorter_last_block():
    assert busy(125, 5, 16) == 125 / (2 * 16 * 5)  # 25 blocks: two rounds
    assert busy(125, 8, 16) == 125 / (16 * 8)  # 16 blocks, the last of 5 tiles
    assert busy(64, 4, 16) == 1.0
    assert busy(166, 32, 1) == 1.0  # one thread: a shorter last block idles no one
    assert busy(166, 32, 2) == 166 / (2 * 3 * 32)  # 6 blocks: 3 rounds, 3 full blocks on one
    # blocks of at most 7 tiles: two rounds of 16 blocks of 4, the last of 1
    assert partial_block(125, 16, 1, 7) == 4 and busy(125, 4, 16) == 125 / 128
    assert partial_block(128, 16, 1, 24) is None  # a whole block: row_block's own answer
    assert partial_block(166, 2, 1, 32) == 28  # 6 blocks of at most 32 tiles, 3 rounds


def test_row_block_takes_the_shorter_last_block_only_when_asked_and_only_if_busier():
    assert row_block(125, 8, 1536, 16) == 5
    assert row_block(125, 8, 1536, 16, partial=True) == 8
    assert row_block(128, 8, 1536, 16, partial=True) == 8  # whole blocks that share out
    assert row_block(125, 8, 768, 1, partial=True) == 25  # one thread: nothing to share


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
def test_sixteen_threads_take_one_row_block_each(dtype, monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "16")
    C = gemm(dtype)
    sizes = {"M": 1000, "N": 1100, "K": 1200}
    s = heuristic_schedule(C, sizes, _target("sapphirerapids"))
    assert _row_splits(s.to_python()) == ["s[\"C\"].split('i', 8)", "s[\"C\"].split('i.o', 8)"]
    monkeypatch.setattr(heuristic, "PARTIAL_BLOCKS", 0)
    old = heuristic_schedule(C, sizes, _target("sapphirerapids"))
    assert _row_splits(old.to_python())[1] == "s[\"C\"].split('i.o', 5)"


def test_the_rules_shorter_last_block_is_a_point_of_the_search_space(monkeypatch):
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "16")
    C = gemm(tl.float64)
    sizes = {"M": 1000, "N": 1100, "K": 1200}
    s = heuristic_schedule(C, sizes, _target("sapphirerapids"))
    space = SearchSpace(C, sizes, _target("sapphirerapids"))
    point = space.point(s)
    assert point is not None, s.to_python()
    again = space.sample(optuna.trial.FixedTrial(point[0]))
    assert space.signature(again) == space.signature(s)


@pytest.mark.parametrize("dtype", [tl.float64, tl.float32])
@pytest.mark.parametrize("m,n,k", [(1000, 200, 300), (1003, 97, 211)])
def test_a_shorter_last_block_computes_what_numpy_does(dtype, m, n, k, monkeypatch):
    # the sapphirerapids model's schedule (8-row tiles, 8 tiles a block: 1003 rows leave a
    # block of 5 tiles and 3 rows past the last tile), compiled for this machine, on 16 threads
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "16")
    C = gemm(dtype)
    s = heuristic_schedule(C, {"M": m, "N": n, "K": k}, _target("sapphirerapids"))
    assert _row_splits(s.to_python())[1] == "s[\"C\"].split('i.o', 8)", s.to_python()
    rng = np.random.default_rng(m)
    npd = dtype.numpy
    a, b = rng.random((m, k)).astype(npd), rng.random((k, n)).astype(npd)
    tol = 1e-4 if npd == np.float32 else 1e-10
    np.testing.assert_allclose(tl.compile(C, s)(a, b), a @ b, rtol=tol, atol=tol)


@pytest.mark.parametrize("cpu, dtype", [("haswell", tl.float32), ("znver3", tl.float64),
                                        ("haswell", tl.float64)])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_models_rows_take_a_shorter_last_block_rather_than_a_smaller_tile(
        cpu, dtype, threads, monkeypatch):
    # AVX2's 6-row tile over 1000 rows: 166 tiles (2 x 83) and 4 rows; no block of at most
    # mc's tiles divides them, so the rule took 5-row tiles (10 accumulators); now the model's
    # 6 rows, in blocks that share out over the threads with the last one shorter
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    C = gemm(dtype)
    sizes = {"M": 1000, "N": 1100, "K": 1200}
    text = heuristic_schedule(C, sizes, _target(cpu)).to_python()
    rows, block = (int(line.split(", ")[1].rstrip(")")) for line in _row_splits(text))
    assert rows == 6 and 166 % block, text
    assert busy(166, block, int(threads)) >= heuristic.MIN_BALANCE, text
    monkeypatch.setattr(heuristic, "PARTIAL_ROWS", 0)
    old = heuristic_schedule(C, sizes, _target(cpu)).to_python()
    assert _row_splits(old)[0] == "s[\"C\"].split('i', 5)", old


def test_a_shorter_last_block_of_six_row_tiles_computes_what_numpy_does(monkeypatch):
    # 1000 rows as haswell code: 6-row tiles in blocks of 28 (the last of 26) and a 4-row tail
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    C = gemm(tl.float32)
    m, n, k = 1000, 61, 1200  # (61 columns: 3 tiles of 16 and a tail; kc 240)
    s = heuristic_schedule(C, {"M": m, "N": n, "K": k}, _target("haswell"))
    assert _row_splits(s.to_python())[0] == "s[\"C\"].split('i', 6)", s.to_python()
    rng = np.random.default_rng(3)
    a, b = rng.random((m, k)).astype(np.float32), rng.random((k, n)).astype(np.float32)
    got = tl.compile(C, s, target=_target("haswell"))(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
