"""The search space and the measurer: replayable traces, crash and hang isolation, seeding."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest
from algorithms import ALL, matmul
from tuning_helpers import crash_on_parallel, hang_on_unroll

import tensorlang as tl
from tensorlang.autotuner.measure import Measurer
from tensorlang.autotuner.space import SearchSpace, factor_choices
from tensorlang.backends.base import get_backend

optuna.logging.set_verbosity(optuna.logging.WARNING)


def small_sizes(out):
    sizes = {s: 12 for s in tl.Pipeline(out).sizes}
    sizes.update({k: v for k, v in dict(Nb=1, CI=3, CO=4).items() if k in sizes})
    return sizes


def test_factor_choices():
    assert factor_choices(12) == [1, 2, 3, 4, 6, 8, 12]
    assert factor_choices(1) == [1]
    assert max(factor_choices(100000)) == 256


@pytest.mark.parametrize("alg", sorted(ALL))
def test_space_yields_replayable_traces(alg):
    out, _ = ALL[alg]()
    space = SearchSpace(out, small_sizes(out))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(8):
        trial = study.ask()
        s = space.sample(trial)
        text = s.to_json()
        again = tl.Schedule.from_json(out, text)
        assert again.to_json() == text
        assert json.loads(text)["output"] == out.name
        study.tell(trial, 1.0)


@pytest.mark.parametrize("width, rows, ysplit", [(20, 8, 1), (40, 4, 2)])
def test_space_draws_a_register_tile_as_wide_as_the_row_in_one_choice(width, rows, ysplit):
    # conv2d's best tile: the whole row as one vector loop (20 = 16 + 4 lanes: 2 registers,
    # 40 = 16 + 16 + 8: 3) x as many channels as the 16 accumulators leave (8; 16 // 3 = 5,
    # moved to 4, a divisor of CO), accumulated in registers; "regs" derives the rows from the
    # vector tile, a full-extent split is a split (constant inner extent)
    from tensorlang.autotuner.measure import random_inputs
    from tensorlang.autotuner.workloads import BUILTIN, input_shapes
    from tensorlang.schedule.lower import lower

    from algorithms import described_target

    out = BUILTIN["conv2d"].build()
    sizes = dict(Nb=1, CI=3, H=5, W=width, CO=8)
    # an AVX-512 target (16 float32 lanes, 16 accumulators) whatever the host
    space = SearchSpace(out, sizes, described_target("skylake-avx512"))
    params = {"O.n.split": 1, "O.co.rows": "regs", "O.y.split": ysplit, "O.x.split": width,
              "O.ci.split": 1, "O.ry.split": 1, "O.rx.split": 1, "O.order": "tile",
              "O.vectorize": 16, "O.parallel": True, "O.y.shift": False,
              "pad.where": "root", "pad.n.split": 1, "pad.ci.split": 1, "pad.y.split": 1,
              "pad.x.split": 1, "pad.vectorize": 0, "pad.unroll": False, "pad.parallel": False}
    s = space.sample(optuna.trial.FixedTrial(params))
    text = str(s)
    assert f"split('co', {rows}" in text and f"split('x', {width}" in text
    assert "vectorize('x.i')" in text and "unroll('co.i')" in text
    if ysplit > 1:  # the rows right outside the vector loop (y.i, a plain loop, outside them)
        assert "'y.i', 'co.i', 'x.i')" in text
    else:  # the whole tile inside the reduction is unrolled / vector: promoted to registers
        assert any(".acc" in b for b in lower(out, s).buffers)
    a = random_inputs(tl.Pipeline(out), input_shapes(out, sizes))
    np.testing.assert_allclose(tl.compile(out, s)(**a), BUILTIN["conv2d"].numpy(a)(), rtol=1e-4)


ODD_SHAPES = {"matmul": dict(M=7, N=13, K=5), "batch_matmul": dict(B=1, M=17, N=37, K=3),
              "conv2d": dict(Nb=1, CI=3, CO=5, H=7, W=23), "blur": dict(H=19, W=41),
              "softmax": dict(R=1, S=37), "layernorm": dict(R=11, S=53)}


@pytest.mark.parametrize("name", sorted(ODD_SHAPES))
@pytest.mark.parametrize("default_shape", [True, False])
def test_the_rule_based_schedule_is_a_point_of_the_space(name, default_shape):
    # the tuner starts its search from it: the decisions SearchSpace.point finds replay, through
    # Optuna's own FixedTrial, to the same loops, kinds, splits and placements per stage
    from tensorlang.autotuner.heuristic import heuristic_schedule
    from tensorlang.autotuner.measure import random_inputs
    from tensorlang.autotuner.workloads import BUILTIN, input_shapes

    work = BUILTIN[name]
    out = work.build()
    sizes = work.shape if default_shape else ODD_SHAPES[name]
    hs = heuristic_schedule(out, sizes)
    space = SearchSpace(out, sizes)
    point = space.point(hs)
    assert point is not None, hs.to_python()
    params, choices = point
    assert params.keys() == choices.keys() and all(params[k] in choices[k] for k in params)
    again = space.sample(optuna.trial.FixedTrial(params))
    assert space.signature(again) == space.signature(hs)
    if not default_shape:
        a = random_inputs(tl.Pipeline(out), input_shapes(out, sizes))
        np.testing.assert_allclose(tl.compile(out, again)(**a), work.numpy(a)(), rtol=1e-4,
                                   atol=1e-6)


def test_a_schedule_outside_the_space_is_not_a_point():
    out, _ = matmul()
    space = SearchSpace(out, {"M": 64, "N": 48, "K": 32})
    s = tl.Schedule(out)
    s[out].split("i", 8)
    s[out].split("i.i", 2)  # a second split of one Var: no decision makes it
    assert space.point(s) is None
    s = tl.Schedule(out)
    s[out].fuse("i", "j")
    assert space.point(s) is None
    s = tl.Schedule(out)
    s[out].split("j", 16)
    s[out].vectorize("j.i").parallel("i")
    assert space.point(s) is None  # the reduction outside the vector loop: no order family
    s[out].reorder("i", "j.o", "k", "j.i")
    assert space.point(s) is not None


def test_seeded_tuning_tells_optuna_the_rule_based_schedule(tmp_path):
    # heuristic="seed": the rule-based schedule is trial 0 of the study, complete, with its
    # measured time; heuristic="bound" leaves the study to the search's own proposals
    out, _ = matmul()
    sizes = {"M": 24, "N": 40, "K": 16}
    for mode in ("seed", "bound"):
        url = f"sqlite:///{tmp_path}/{mode}.db"
        res = tl.autotune(out, sizes, trials=2, sampler="random", seed=3, repeats=1,
                          min_seconds=0.0, cost_model="none", heuristic=mode, storage=url,
                          cache=False)
        (name,) = optuna.get_all_study_names(url)
        trials = optuna.load_study(study_name=name, storage=url).trials
        own = [r for r in res.history if r.number >= 0]
        # the study holds what was measured (complete, or failed) and what was illegal
        # (pruned), numbered as the records; duplicates and proposals the cost model ranked
        # out never reach it: optuna-dashboard counts what the tuner did
        numbers = {r.number for r in own} | ({0} if mode == "seed" else set())
        assert numbers == {t.number for t in trials}
        measured = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
        for t in trials:
            rec = next((r for r in own if r.number == t.number), None)
            assert t.state in measured or (rec is not None and rec.state == "pruned" and
                                           t.state == optuna.trial.TrialState.PRUNED)
            if rec is not None:  # each says what it was: its schedule, timed runs or error
                assert t.user_attrs["trace"] == rec.trace
                assert t.user_attrs.get("times") == rec.times or "error" in t.user_attrs
        first = trials[0]
        if mode == "seed":
            from tensorlang.autotuner.heuristic import heuristic_schedule

            params, _ = SearchSpace(out, sizes).point(heuristic_schedule(out, sizes))
            assert first.state == optuna.trial.TrialState.COMPLETE
            assert first.params == params and first.value == res.heuristic_seconds


@pytest.mark.parametrize("kind", ["tpe", "mtpe", "random"])
def test_seeded_spaces_propose_the_same_sequence(kind):
    from tensorlang.autotuner.tuner import make_sampler

    out, _ = matmul()
    space = SearchSpace(out, {"M": 64, "N": 48, "K": 32})

    def proposals(seed):  # past the 10 random startup trials: the model-based proposals too
        study = optuna.create_study(sampler=make_sampler(kind, seed))
        seq = []
        for k in range(13):
            trial = study.ask()
            seq.append(space.sample(trial).to_json())
            study.tell(trial, float(k % 3))
        return seq

    assert proposals(7) == proposals(7)
    assert proposals(7) != proposals(8)


def _shapes(out, sizes):
    return SearchSpace(out, sizes).shapes


def test_measurer_times_and_verifies():
    out, _ = matmul()
    sizes = {"M": 32, "N": 32, "K": 16}
    s = tl.Schedule(out)
    s[out].parallel("i")
    with Measurer(out, sizes, _shapes(out, sizes), repeats=3, min_seconds=0.0) as m:
        res = m.measure(s.to_json(), verify=True)
    assert res.error is None and res.verified is True
    assert len(res.times) >= 3 and np.isfinite(res.seconds) and res.compile_seconds > 0


def test_worker_processes_start_together_and_none_outlives_a_failed_start(tmp_path,
                                                                          monkeypatch):
    # the compile pool's processes and the run process start before the first is waited for
    # (their imports overlap); when one cannot start, the error names it and every process
    # started beside it is killed
    import subprocess

    from tensorlang.autotuner import measure

    started = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    out, _ = matmul()
    sizes = {"M": 8, "N": 8, "K": 8}
    trace = tl.Schedule(out).to_json()
    monkeypatch.setattr(measure.subprocess, "Popen", popen)
    with Measurer(out, sizes, _shapes(out, sizes), repeats=1, min_seconds=0.0, jobs=2) as m:
        m.compile_many([trace, trace])
        assert len(started) == 3 and all(p.poll() is None for p in started)
        assert m.run(trace, m.compile_many([trace])[0]).error is None
        assert len(started) == 3  # (the run process was the one started beside the pool)
    script = tmp_path / "exits.sh"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    started.clear()
    monkeypatch.setattr(measure.sys, "executable", str(script))
    with Measurer(out, sizes, _shapes(out, sizes), jobs=2) as m:
        with pytest.raises(OSError):
            m.compile_many([trace, trace])
    assert started and all(p.poll() is not None for p in started)


@pytest.mark.parametrize("dtype", [tl.float32, tl.int32])
def test_every_candidate_is_verified_on_its_own_output(dtype):
    # the worker keeps one output array for all candidates (no first-touch page faults in the
    # timed runs); it is refilled with NaN / the lowest integer before each verification
    (n,) = tl.sizes("N")
    a = tl.Input("A", (n, n), dtype)
    i, j = tl.vars("i j")
    out = tl.Func("twice")
    out[i, j] = a[i, j] * 2 + a[j, i]
    sizes = {"N": 13}
    first, second = tl.Schedule(out), tl.Schedule(out)
    second[out].split("j", 4)
    second[out].vectorize("j.i")
    with Measurer(out, sizes, {"A": (13, 13)}, repeats=1, min_seconds=0.0) as m:
        results = [m.measure(s.to_json(), verify=True) for s in (first, second)]
    assert all(r.error is None and r.verified is True for r in results)


def test_verification_allows_a_long_float32_sum_in_another_order_and_nothing_wrong():
    # a 4096-long float32 reduction of inputs in [-1, 1), summed one term at a time (a GPU
    # thread's k loop), against the float64 sum rounded: off by up to ~3e-4. A fixed atol of
    # 1e-4 refused every candidate of a GPU tuning at 4096^3 on an H200 for one element of
    # 16.7M (|ref| 0.018, off by 3.5e-4); a wrong element, a missing one or a NaN still fails
    from tensorlang.autotuner.measure import _allclose

    rng = np.random.default_rng(0)
    k = 4096
    a = (rng.random((96, k)) * 2 - 1).astype(np.float32)
    b = (rng.random((k, 96)) * 2 - 1).astype(np.float32)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    got = np.zeros((96, 96), np.float32)
    for kk in range(k):
        got += np.outer(a[:, kk], b[kk])
    assert np.abs(got.astype(np.float64) - ref).max() > 1e-4
    assert _allclose(got, ref) and _allclose((got, got), (ref, ref))
    for wrong in (got + np.eye(96, dtype=np.float32) * 0.05, np.where(np.eye(96) > 0, 0, got),
                  np.where(np.eye(96) > 0, np.nan, got)):
        assert not _allclose(wrong, ref) and not _allclose((got, wrong), (ref, ref))
    i = np.arange(8, dtype=np.int32)
    assert _allclose(i, i) and not _allclose(i + 1, i)


def test_the_shared_output_array_starts_poisoned():
    from tensorlang.autotuner.measure import _output_array

    out, _ = matmul()
    pipeline = tl.Pipeline(out)
    arrays = {"A": np.ones((5, 3), np.float32), "B": np.ones((3, 7), np.float32)}
    buf = _output_array(get_backend(), pipeline, arrays, {})
    assert buf.shape == (5, 7) and buf.dtype == np.float32 and np.isnan(buf).all()
    assert _output_array(get_backend(), pipeline, {"A": np.ones((5, 3), np.float32)}, {}) is None


@pytest.mark.parametrize("shape,dtype,align", [((1024, 1024), np.float32, 2 << 20),
                                                ((1025, 1023), np.float64, 2 << 20),
                                                ((7, 3), np.int32, 64), ((0, 5), np.float32, 64),
                                                ((), np.bool_, 64)])
def test_worker_arrays_start_on_a_huge_page_or_cache_line(shape, dtype, align):
    from tensorlang.autotuner.measure import aligned_copy
    backend = get_backend()
    a = backend.empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    if a.size:
        assert a.ctypes.data % align == 0
    src = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    b = aligned_copy(backend, src.T.copy().T if src.ndim == 2 else src)
    assert np.array_equal(b, src) and b.flags.c_contiguous


def test_crashing_candidate_is_a_failed_result_and_measuring_goes_on():
    out, _ = matmul()
    sizes = {"M": 16, "N": 16, "K": 8}
    bad, good = tl.Schedule(out), tl.Schedule(out)
    bad[out].parallel("i")
    with Measurer(out, sizes, _shapes(out, sizes), repeats=1, min_seconds=0.0,
                  hook=crash_on_parallel) as m:
        r1 = m.measure(bad.to_json())
        r2 = m.measure(good.to_json())
    assert r1.seconds == float("inf") and "died" in r1.error
    assert r2.error is None and np.isfinite(r2.seconds)
    assert m.restarts == 1


def test_hanging_candidate_times_out():
    out, _ = matmul()
    sizes = {"M": 16, "N": 16, "K": 8}
    s = tl.Schedule(out)
    s[out].unroll("j", 2)
    with Measurer(out, sizes, _shapes(out, sizes), repeats=1, min_seconds=0.0,
                  hook=hang_on_unroll, timeout=20) as m:
        m.measure(tl.Schedule(out).to_json())  # warm the worker up (imports)
        res = m.measure(s.to_json(), timeout=1.0)
    assert res.error.startswith("timeout")


def test_illegal_candidate_is_an_error_result():
    out, _ = matmul()
    sizes = {"M": 16, "N": 16, "K": 8}
    s = tl.Schedule(out)
    s[out].parallel("k")
    with Measurer(out, sizes, _shapes(out, sizes), repeats=1, min_seconds=0.0) as m:
        res = m.measure(s.to_json())
    assert res.error.startswith("IllegalScheduleError") and res.seconds == float("inf")


def test_autotune_small_matmul_finds_a_verified_schedule():
    out, _ = matmul()
    res = tl.autotune(out, {"M": 24, "N": 40, "K": 16}, trials=10, sampler="random", seed=3,
                      repeats=2, min_seconds=0.0, cost_model="none")
    seed = [r for r in res.history if r.number < 0]  # the heuristic schedule, measured first
    assert len(seed) == 1 and seed[0].state == "measured" and res.history[0] is seed[0]
    assert res.failed + sum(r.state == "measured" for r in res.history) == 10 + 1
    assert len(res.history) == 10 + 1 + res.pruned
    assert res.best_seconds <= seed[0].seconds
    assert np.isfinite(res.best_seconds) and res.best_trace is not None
    best = res.best_schedule
    kern = tl.compile(out, best)
    a = np.random.default_rng(0).random((24, 16), dtype=np.float32)
    b = np.random.default_rng(1).random((16, 40), dtype=np.float32)
    np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4)
    curve = res.best_so_far()
    assert curve == sorted(curve, reverse=True) and curve[-1] == res.best_seconds


def test_autotune_goes_on_after_crashes_and_reproduces_proposals():
    out, _ = matmul()
    kw = dict(trials=8, sampler="random", seed=11, repeats=1, min_seconds=0.0,
              measure_hook=crash_on_parallel, cost_model="none")
    r1 = tl.autotune(out, {"M": 16, "N": 16, "K": 8}, **kw)
    r2 = tl.autotune(out, {"M": 16, "N": 16, "K": 8}, **kw)
    assert [r.trace for r in r1.history] == [r.trace for r in r2.history]
    crashed = [r for r in r1.history if r.state == "failed"]
    assert crashed and all("died" in r.error for r in crashed)
    assert any(r.state == "measured" for r in r1.history)


class ScanSpace(SearchSpace):
    """The generated space, plus a coin flip that parallelizes the scan's own RDom loop."""

    def sample(self, trial):
        s = super().sample(trial)
        if trial.suggest_categorical("parallel_rdom", [False, True]):
            s["S"].update(0).parallel("r_x")
        return s


def test_autotune_prunes_and_counts_illegal_candidates_without_measuring_them():
    out, _ = ALL["scan"]()
    sizes = {"H": 8, "W": 12}
    res = tl.autotune(out, sizes, trials=12, sampler="random", seed=0, repeats=1,
                      min_seconds=0.0, space=ScanSpace(out, sizes), cost_model="none")
    pruned = [r for r in res.history if r.state == "pruned"]
    assert pruned and res.pruned == len(pruned)
    assert all("cannot parallel r_x" in r.error and r.seconds == float("inf") for r in pruned)
    assert all('"parallel"' in r.trace for r in pruned)
    assert np.isfinite(res.best_seconds)
    assert '"loop": "r_x"' not in res.best_trace


def test_model_guided_rounds_measure_the_budget_and_learn():
    out, _ = matmul()
    seen = []
    res = tl.autotune(out, {"M": 32, "N": 32, "K": 32}, trials=12, seed=5, repeats=2,
                      min_seconds=0.0, pool=10, measure_per_round=4,
                      progress=lambda rec, best: seen.append(rec.state))
    measured = [r for r in res.history if r.state in ("measured", "failed") and r.number >= 0]
    assert len(measured) == 12
    assert np.isfinite(res.best_seconds)
    assert res.best_seconds <= res.history[0].seconds  # never slower than the heuristic seed
    assert seen == [r.state for r in res.history]
    # no schedule is measured twice (the heuristic seed, trial -1, included)
    traces = [r.trace for r in res.history if r.state in ("measured", "failed")]
    assert len(traces) == len(set(traces))


def test_features_are_fixed_length_and_finite():
    from tensorlang.autotuner.features import FEATURE_NAMES, features
    from tensorlang.schedule.lower import lower

    out, _ = ALL["softmax"]()
    sizes = {"R": 16, "S": 24}
    space = SearchSpace(out, sizes)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    done = 0
    for _ in range(12):
        s = space.sample(study.ask())
        try:
            lowered = lower(out, s)
        except tl.ScheduleError:
            continue  # a placement lowering refuses (the tuner prunes it)
        fv = features(lowered, sizes)
        assert fv.shape == (len(FEATURE_NAMES),) and np.all(np.isfinite(fv))
        done += 1
    assert done >= 3


@pytest.mark.parametrize("rows, width, expected", [(8, 32, 16), (4, 56, 16), (8, 56, 32),
                                                   (1, 1, 1)])
def test_tile_vectors_counts_the_register_tile(rows, width, expected):
    from tensorlang.autotuner.features import FEATURE_NAMES, features
    from tensorlang.backends.llvm.target import host_target
    from tensorlang.schedule.lower import lower

    lanes = host_target().vector_bits // 32
    out, _ = matmul()
    s = tl.Schedule(out)
    if width > 1:
        i, j, k = out.definition.args + out.definition.rvars
        io, ii = s[out].split(i, rows)
        jo, ji = s[out].split(j, width, tail="ShiftInwards")
        s[out].reorder(io, jo, k, ii, ji).unroll(ii).vectorize(ji)
    fv = features(lower(out, s), {"M": 16, "N": 64, "K": 8})
    got = fv[FEATURE_NAMES.index("tile_vectors")]
    assert got == (expected if lanes == 16 else rows * -(-width // lanes))  # literal: AVX-512


def test_cost_model_takes_records_of_an_older_feature_set():
    from tensorlang.autotuner.cost_model import CostModel
    from tensorlang.autotuner.features import FEATURE_NAMES

    m = CostModel(min_samples=4)
    rng = np.random.default_rng(0)
    for k in range(8):  # half written before the last feature existed
        n = len(FEATURE_NAMES) - (1 if k % 2 else 0)
        m.add(rng.random(n), 1e-3 * (k + 1))
    m.add(rng.random(len(FEATURE_NAMES) + 3), 1e-3)  # a newer version's: cut
    m.fit()
    pred = m.predict(rng.random((3, len(FEATURE_NAMES))))
    assert pred is not None and pred.shape == (3,) and np.all(np.isfinite(pred))


def test_cost_model_warm_started_only_from_records_without_the_newest_feature():
    # `tensorlang tune` warmed from shipped logs that all predate the last feature: the column
    # is all missing, which scikit-learn's binning cannot take (it crashed the CLI)
    from tensorlang.autotuner.cost_model import CostModel
    from tensorlang.autotuner.features import FEATURE_NAMES

    m = CostModel(min_samples=4)
    rng = np.random.default_rng(1)
    for k in range(8):
        m.add(rng.random(len(FEATURE_NAMES) - 1), 1e-3 * (k + 1))
    m.fit()
    pred = m.predict(rng.random((3, len(FEATURE_NAMES))))
    assert pred is not None and pred.shape == (3,) and np.all(np.isfinite(pred))


def test_autotune_on_the_users_arrays_needs_no_sizes():
    out, _ = matmul()
    rng = np.random.default_rng(4)
    a = rng.random((13, 7), dtype=np.float32)
    b = rng.random((7, 29), dtype=np.float32)
    res = tl.autotune(out, arrays={"A": a, "B": b}, trials=3, sampler="random", seed=1,
                      repeats=1, min_seconds=0.0, cost_model="none", heuristic="off")
    assert np.isfinite(res.best_seconds)
    np.testing.assert_allclose(tl.compile(out, res.best_schedule)(a, b), a @ b, rtol=1e-5)


def test_autotune_refuses_bad_arrays_and_impossible_shapes_before_any_trial():
    import time

    out, _ = matmul()
    a, b = np.ones((13, 7)), np.ones((7, 29))  # float64 for a float32 algorithm
    t0 = time.perf_counter()
    with pytest.raises(tl.ShapeError, match="Input A expects dtype float32 but the array has "
                                            "float64"):
        tl.autotune(out, arrays={"A": a, "B": b}, trials=3)
    with pytest.raises(tl.TuningError, match=r"needs at least .* GiB for the input and output "
                                             r"arrays alone.*tune a smaller shape"):
        tl.autotune(out, {"M": 10**6, "N": 10**6, "K": 10**6}, trials=3)
    assert time.perf_counter() - t0 < 30  # refused up front: no worker started


def test_autotune_raises_when_no_candidate_could_be_measured():
    from tuning_helpers import crash_always

    out, _ = matmul()
    with pytest.raises(tl.TuningError, match=r"no candidate schedule of M=16,N=16,K=8 could be "
                                             r"measured .*most common failure"):
        tl.autotune(out, {"M": 16, "N": 16, "K": 8}, trials=2, sampler="random", seed=1,
                    repeats=1, min_seconds=0.0, measure_hook=crash_always, cost_model="none")


def test_ctrl_c_swallowed_by_other_code_still_stops_the_search():
    # Python drops an exception raised inside a finalizer or a library's cleanup: a Ctrl-C that
    # lands there must still end the search, at the next candidate, with every record kept
    import os
    import signal
    import time

    out, _ = matmul()
    interrupted_at = []
    handler_then = []  # (reported when the assertion fails: whose handler the signal met)

    def progress(rec, best):
        if rec.number >= 1 and not interrupted_at:
            interrupted_at.append(rec.number)
            handler_then.append(getattr(signal.getsignal(signal.SIGINT), "__qualname__", None))
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1.0)  # the handler runs here...
            except KeyboardInterrupt:
                pass  # ...and its exception is lost, as in a finalizer

    # the premise: Python's own SIGINT handler is installed, as in a program started from a
    # terminal. A process a non-interactive shell starts in the background (`cmd &` in a
    # script) inherits SIGINT ignored, and Python then installs no handler: the signal met
    # SIG_IGN in such a test run. So install it here
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        res = tl.autotune(out, {"M": 16, "N": 16, "K": 16}, trials=40, seed=3, repeats=1,
                          min_seconds=0.0, cost_model="none", pool=4, measure_per_round=4,
                          progress=progress)
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)
    assert res.interrupted and interrupted_at, (
        f"not stopped: interrupt at record {interrupted_at}, SIGINT handler then "
        f"{handler_then}, states {[(r.number, r.state) for r in res.history[:12]]}")
    measured = [r for r in res.history if r.state in ("measured", "failed") and r.number >= 0]
    assert len(measured) <= interrupted_at[0] + 1 < 40
    assert after is signal.default_int_handler  # the tuner restored it


class _SlowSpace:
    """The search space of ``out``, each proposal taking ``seconds`` (as proving a deep
    compute_at nest legal can)."""

    def __init__(self, out, sizes, seconds):
        self.inner, self.seconds, self.samples = SearchSpace(out, sizes), seconds, 0
        self.shapes = self.inner.shapes

    def sample(self, trial):
        import time

        self.samples += 1
        time.sleep(self.seconds)
        return self.inner.sample(trial)


def test_a_round_stops_proposing_when_the_time_is_up():
    # the model-guided search proposes a pool of 24 schedules per round; with proposals of
    # 0.5 s and a 5 s budget it stops after about 10 of them instead of the 24 (12 s)
    out, _ = matmul()
    sizes = {"M": 16, "N": 16, "K": 8}
    space = _SlowSpace(out, sizes, 0.5)
    try:
        tl.autotune(out, sizes, trials=100, timeout=5.0, space=space, heuristic="off",
                    repeats=1, min_seconds=0.0, cache=False)
    except tl.TuningError:
        pass  # the time was up before the round's candidates ran: nothing measured
    assert 1 <= space.samples <= 14


class _DeepPlacement:
    """A trial that computes every Func it may at its consumer's second loop (inside the row
    loop, so that each Func is hosted by its reader), and answers every other decision with
    its first choice."""

    def __init__(self) -> None:
        self.asked: dict[str, list] = {}

    def suggest_categorical(self, name, choices):
        self.asked[name] = list(choices)
        return "at1" if "at1" in choices else choices[0]


def test_the_space_nests_compute_at_at_most_max_at_chain_deep():
    # a -> b -> c -> out, each a 3-tap blur along x read only by the next: c at out, b at c,
    # and a no deeper (each level composes the bounds of those above it: a 4-deep chain of
    # covariance took 10 s to prove)
    from tensorlang.autotuner.space import MAX_AT_CHAIN

    H, W = tl.sizes("H W")
    X = tl.Input("X", (H, W), tl.float32)
    y, x = tl.vars("y x")
    prev = X
    funcs = []
    for name in ("a", "b", "c", "out"):
        f = tl.Func(name, shape=(H, W))
        f[y, x] = prev[y, tl.clamp(x - 1, 0, W - 1)] + prev[y, x] + \
            prev[y, tl.clamp(x + 1, 0, W - 1)]
        funcs.append(f)
        prev = f
    out = funcs[-1]
    space = SearchSpace(out, {"H": 7, "W": 300})
    trial = _DeepPlacement()
    s = space.sample(trial)
    assert MAX_AT_CHAIN == 2
    assert str(s.states["c"].compute) == "at out.x" and str(s.states["b"].compute) == "at c.x"
    assert "a.where" not in trial.asked and trial.asked["a.where_root_or_inline"] == \
        ["root", "inline"]
    assert s.states["a"].compute.kind == "root"
    img = np.random.default_rng(0).random((7, 300), dtype=np.float32)
    want = img
    for _ in range(4):
        p = np.concatenate([want[:, :1], want, want[:, -1:]], axis=1)
        want = p[:, :-2] + p[:, 1:-1] + p[:, 2:]
    np.testing.assert_allclose(tl.compile(out, s)(X=img), want, rtol=1e-5)
