"""The column reduction streamed from memory (``autotune/stream_rules.py``): when the rule-based
schedule takes that form, that it is correct on odd sizes, and that the search space holds it."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import numpy as np
import optuna
import pytest

import tensorlang as tl
from tensorlang.autotuner import (heuristic, rfactor_rules, serial_share, space as space_mod,
                                  stream_rules)
from tensorlang.autotuner.cpu_model import DESCRIBED, KiB, Cache, cpu_model
from tensorlang.autotuner.workloads import BoundExtents
from tensorlang.schedule.lower import lower

sys.path.insert(0, os.path.dirname(__file__))
from algorithms import assert_a_point_of_the_space, described_target, gemm  # noqa: E402


def _column_sum() -> tl.Func:
    M, N = tl.sizes("M N")
    A, x = tl.Input("A", (M, N), tl.float64), tl.Input("x", (M,), tl.float64)
    i, j = tl.vars("i j")
    y = tl.Func("y")
    y[j] = A[i, j] * x[i]  # A^T x: j contiguous in A, i the reduction
    return y


@pytest.fixture
def small_l3(monkeypatch):
    """An L3 of 64 KiB: a few hundred rows and columns already stream from memory."""
    small = replace(cpu_model(), l3=Cache(64 * KiB, 16))
    monkeypatch.setattr(heuristic, "cpu_model", lambda target=None: small)
    monkeypatch.setattr(space_mod, "cpu_model", lambda target=None: small)
    return small


@pytest.mark.parametrize("threads", [1, 2])
def test_a_column_reduction_streamed_from_memory_walks_rows_in_steps(rng, monkeypatch, small_l3,
                                                                    threads):
    for mod in (heuristic, rfactor_rules, stream_rules, space_mod):
        monkeypatch.setattr(mod, "num_threads", lambda: threads)
    y = _column_sum()
    lanes = heuristic.lanes(y)
    sizes = {"M": 190, "N": 8 * lanes * threads + 3}  # a band per thread, 3 columns left over
    s = heuristic.heuristic_schedule(y, sizes)
    text = s.to_python()
    assert "split('i', 10)" in text and "unroll('i.i')" in text, text  # 190 = 19 steps of 10
    assert ("parallel('j.o')" in text) == (threads == 2), text
    kern = tl.compile(y, s)
    for m, n in [sizes.values(), (190, 7), (1, 1), (13, 101), (380, 2 * sizes["N"] + 1)]:
        a, v = rng.random((m, n)), rng.random(m)
        np.testing.assert_allclose(kern(a, v), a.T @ v, rtol=1e-12)
    sp = space_mod.SearchSpace(y, sizes)
    point = sp.point(s)
    assert point is not None and point[0]["y.column_rows"] is True
    again = sp.sample(optuna.trial.FixedTrial(point[0]))
    assert sp.signature(again) == sp.signature(s)
    assert list(point[1]["y.column_rows"]) == [False, True]


def test_the_column_form_needs_memory_and_whole_steps(small_l3):
    y = _column_sum()
    lanes = heuristic.lanes(y)
    n = 8 * lanes * max(2, stream_rules.num_threads())
    ext = heuristic.BoundExtents(y, {"M": 190, "N": n})
    assert stream_rules.column_rows_possible(y, ext, lanes, small_l3)
    assert not stream_rules.column_rows_possible(
        y, heuristic.BoundExtents(y, {"M": 7, "N": n}), lanes, small_l3)  # fewer rows than a step
    # a matrix that stays in cache keeps the register segment of the rule-based schedule
    assert not stream_rules.column_rows_possible(y, ext, lanes, cpu_model())
    assert "unroll('i.i')" not in heuristic.heuristic_schedule(y, {"M": 11, "N": n}).to_python()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_matrix_past_the_l2s_streams_where_the_l3_is_no_victim_cache(monkeypatch, threads):
    # Intel's L3 (no victim cache) serves each core at about memory's pace: a matrix larger
    # than the threads' L2s counts as streamed; on Zen (victim L3) only past half the L3
    monkeypatch.setattr(stream_rules, "num_threads", lambda: threads)
    intel, zen = DESCRIBED["sapphirerapids"], DESCRIBED["znver4"]
    past = intel.l2.size * threads + 1
    assert stream_rules.streams_from_memory(past, intel)
    assert not stream_rules.streams_from_memory(past - 1, intel)
    assert not stream_rules.streams_from_memory(past, zen)
    assert stream_rules.streams_from_memory(zen.l3.size // 2 + 1, zen)
    monkeypatch.setattr(stream_rules, "MESH_L3_STREAMS", 0)
    assert not stream_rules.streams_from_memory(past, intel)
    assert stream_rules.streams_from_memory(intel.l3.size // 2 + 1, intel)


def test_a_column_reduction_past_the_l2s_takes_bands_on_intel_and_segments_on_zen(rng,
                                                                                  monkeypatch):
    # A^T x of 1000 x 1100 float64 (8.4 MiB): past Sapphire Rapids' two L2s, inside half of
    # Zen 4's L3; the banded schedule is correct on odd sizes
    for mod in (heuristic, rfactor_rules, stream_rules, space_mod):
        monkeypatch.setattr(mod, "num_threads", lambda: 2)
    y = _column_sum()
    sizes = {"M": 1000, "N": 1100}
    forms = {}
    for cpu in ("sapphirerapids", "znver4"):
        text = heuristic.heuristic_schedule(y, sizes, described_target(cpu)).to_python()
        forms[cpu] = "unroll('i.i')" in text.replace('"', "'")
    assert forms == {"sapphirerapids": True, "znver4": False}, forms
    s = heuristic.heuristic_schedule(y, sizes, described_target("sapphirerapids"))
    kern = tl.compile(y, s)
    for m, n in [(1000, 1100), (13, 549), (1, 1), (11, 3)]:
        a, v = rng.random((m, n)), rng.random(m)
        np.testing.assert_allclose(kern(a, v), a.T @ v, rtol=1e-12)


def test_rows_per_step_divides_the_rows_where_it_can():
    assert stream_rules.rows_per_step(1900) == 10 and stream_rules.rows_per_step(2100) == 7
    assert stream_rules.rows_per_step(64) == 8 and stream_rules.rows_per_step(5) is None
    assert stream_rules.rows_per_step(2003) == 8  # prime: the last step is partial


def test_a_partial_step_of_rows_leaves_the_whole_steps_unguarded(rng, small_l3):
    # a prime number of rows: the step loop runs its whole steps first, without the tail's
    # guard (their accumulators promoted to registers), then the partial step, guarded
    y = _column_sum()
    lanes = heuristic.lanes(y)
    sizes = {"M": 191, "N": 8 * lanes * max(2, stream_rules.num_threads())}
    s = heuristic.heuristic_schedule(y, sizes)
    assert "split('i', 8)" in s.to_python()
    text = str(lower(y, s))
    assert "for i.o in [0, " in text and "for i.o in [t" in text, text
    kern = tl.compile(y, s)
    for m, n in [(191, sizes["N"]), (193, 37), (8, 9), (9, 8)]:
        a, v = rng.random((m, n)), rng.random(m)
        np.testing.assert_allclose(kern(a, v), a.T @ v, rtol=1e-12)


def test_a_row_of_one_to_two_segments_takes_the_row_segment_form(rng, monkeypatch):
    # A^T x over rows of ROW_VECTORS vectors or more (PolyBench SMALL's 124 columns of float64 on
    # AVX-512): segments of ROW_VECTORS vectors, the last one guarded; under one segment, not
    monkeypatch.setattr(heuristic, "num_threads", lambda: 2)
    y = _column_sum()
    seg = rfactor_rules.ROW_VECTORS * heuristic.lanes(y)
    n = seg + seg // 2 + 3
    s = heuristic.heuristic_schedule(y, {"M": 37, "N": n})
    assert f"split('j', {seg}" in s.to_python().replace('"', "'"), s.to_python()
    assert space_mod.SearchSpace(y, {"M": 37, "N": n}).point(s) is not None
    short = heuristic.heuristic_schedule(y, {"M": 37, "N": seg - 1})
    assert f"split('j', {seg}" not in short.to_python().replace('"', "'")
    with monkeypatch.context() as m:
        m.setattr(rfactor_rules, "MIN_ROW_SEGMENTS", 2)
        before = heuristic.heuristic_schedule(y, {"M": 37, "N": n})
        assert f"split('j', {seg}" not in before.to_python().replace('"', "'")
    kern = tl.compile(y, s)
    for m_, n_ in [(37, n), (1, n), (5, seg), (3, 2 * seg + 1), (2, 1)]:
        a, x = rng.random((m_, n_)), rng.random(m_)
        np.testing.assert_allclose(kern(a, x), x @ a, rtol=1e-12)


def test_even_segments_share_the_columns_among_the_threads():
    assert stream_rules.segment_width(100, 8, 2) == 56  # 56 + 44, not 64 + 36
    assert stream_rules.segment_width(150, 8, 2) == 40  # two of 40 a thread, not 64, 64 + 22
    assert stream_rules.segment_width(1000, 8, 2) == 64  # 16 segments: even already
    assert stream_rules.segment_width(100, 8, 1) == 64 == stream_rules.segment_width(100, 8, 0)
    assert stream_rules.segment_width(1000, 16, 16) == 64  # one of 64 a thread, not 128
    from tensorlang.autotuner.split_choices import segment_choice
    assert segment_choice(100, 8, 2) == 56 and segment_choice(100, 8, 1) == 0
    assert segment_choice(1000, 8, 2) == 0  # (64: a power of two, among the factors already)


def test_one_row_over_a_large_matrix_runs_even_segments_in_parallel(rng, monkeypatch):
    # x^T B whose B takes MIN_PARALLEL_STREAM_BYTES or more: its row segments in parallel,
    # however few its multiply-adds (serial_share.few_vectors), evenly shared; the space holds
    # that schedule (``C.j.even``); a B under the threshold stays serial where few_vectors says
    for mod in (heuristic, space_mod):
        monkeypatch.setattr(mod, "num_threads", lambda: 2)
    C = gemm(tl.float64)
    lanes = heuristic.lanes(C)
    sizes = {"M": 1, "N": 100, "K": 1000}  # B: 800,000 bytes
    assert 100 * 1000 * 8 >= stream_rules.MIN_PARALLEL_STREAM_BYTES
    s = heuristic.heuristic_schedule(C, sizes)
    text = s.to_python().replace('"', "'")
    width = stream_rules.segment_width(100, lanes, 2)
    assert f"split('j', {width})" in text and "parallel('j.o')" in text, text
    kern = tl.compile(C, s)
    for m, n, k in [(1, 100, 1000), (1, 1, 1), (1, 57, 3), (3, 113, 7), (1, width + 1, 19)]:
        a, b = rng.random((m, k)), rng.random((k, n))
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-12)
    params = assert_a_point_of_the_space(C, sizes, None, s)
    assert params["C.j.even"] is True
    again = space_mod.SearchSpace(C, sizes).sample(optuna.trial.FixedTrial(params))
    a, b = rng.random((1, 61)), rng.random((61, 131))
    np.testing.assert_allclose(tl.compile(C, again)(a, b), a @ b, rtol=1e-12)
    few = serial_share.few_vectors(C, BoundExtents(C, sizes), lanes)
    with monkeypatch.context() as mp:
        mp.setattr(stream_rules, "MIN_PARALLEL_STREAM_BYTES", 10 ** 9)
        off = heuristic.heuristic_schedule(C, sizes).to_python()
    assert ("parallel" in off) == (not few), off
