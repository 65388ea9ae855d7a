"""The search space and the measurer: replayable traces, crash and hang isolation, seeding."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest

import tensorlang as tl
from algorithms import ALL, matmul
from autotune.measure import Measurer
from autotune.space import SearchSpace, factor_choices
from tuning_helpers import crash_on_parallel, hang_on_unroll

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


def test_seeded_spaces_propose_the_same_sequence():
    out, _ = matmul()
    space = SearchSpace(out, {"M": 64, "N": 48, "K": 32})

    def proposals(seed):
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed,
                                                                       n_startup_trials=3))
        seq = []
        for k in range(6):
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
