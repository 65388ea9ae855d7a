"""The search strategy's proposals: a sampler stuck on a measured point gives way to random
draws (``strategy.DUPLICATE_STREAK``)."""

from __future__ import annotations

import numpy as np
import optuna

import tensorlang as tl
from tensorlang.autotuner.strategy import DUPLICATE_STREAK, SearchStrategy


class _Stuck(optuna.samplers.BaseSampler):
    """A sampler that always proposes each decision's first choice (TPE settled on one point)."""

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        return param_distribution.choices[0]


class _Space:
    """One decision: the split factor of ``f``'s Var ``x`` (1: none)."""

    def __init__(self, f: tl.Func) -> None:
        self.f = f

    def sample(self, trial) -> tl.Schedule:
        s = tl.Schedule(self.f)
        factor = trial.suggest_categorical("x.split", [1, 2, 4, 8, 16])
        if factor > 1:
            s[self.f].split("x", factor)
        return s


def test_duplicates_in_a_row_give_way_to_random_proposals():
    (N,) = tl.sizes("N")
    A = tl.Input("A", (N,), tl.float32)
    (x,) = tl.vars("x")
    f = tl.Func("f")
    f[x] = A[x] * 2.0
    study = optuna.create_study(sampler=_Stuck())
    strategy = SearchStrategy(study, _Space(f), None, f, {"N": 64}, np.random.default_rng(0),
                              [], on_pruned=lambda record: None)
    strategy.seen.add(tl.Schedule(f).to_json())  # the stuck point was measured
    got = [strategy.propose() for _ in range(DUPLICATE_STREAK + 20)]
    assert got[:DUPLICATE_STREAK] == [None] * DUPLICATE_STREAK
    new = [c for c in got[DUPLICATE_STREAK:] if c is not None]
    assert new and all(c[1].to_json() != tl.Schedule(f).to_json() for c in new)
    assert strategy.study.sampler.__class__ is _Stuck  # the sampler is back after each draw
