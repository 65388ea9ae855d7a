"""The search strategy: which candidates a round measures.

Optuna's sampler proposes points of the search space (``space.py``); each becomes a schedule,
is proven legal (an illegal one is *pruned*: told to Optuna, recorded, never compiled) and
lowered for its features (``features.py``). With the cost model (``cost_model.py``) a round
proposes ``pool`` candidates — once the model is trained a quarter of them *mutants*: one of the
five fastest measured schedules with one or two decisions redrawn (Ansor's evolutionary search,
Zheng et al. OSDI 2020 §5.1), enqueued into the study so TPE sees them as its own trials — drops
schedules already measured or pruned (or twice in one pool), ranks the rest by predicted time
and picks the best ``measure_per_round - 2``, the best-ranked of the sampler's own proposals
(mutants alone would only refine the incumbent) and one random exploratory candidate; the others
are told to Optuna as failed, so they do not bias TPE. While the model is untrained (it ranks
nothing) a round proposes only until it has ``measure_per_round`` legal new candidates: the
rest of a pool would be dropped at random after each was proven legal and lowered (up to
seconds each on a deep nest; a short run never trains the model). Without the model every
legal proposal is measured (plain Optuna, for ablations). After ``DUPLICATE_STREAK`` duplicate
proposals in a row the sampler is set aside for random draws until one is new (TPE can settle
on one measured point).

Proposals are asked of an in-memory study that mirrors the tuning's own (``main``, in its
storage, shared by workers): proposals not measured — ranked out, duplicates, past the budget —
end there, and the main study holds only measured candidates (COMPLETE, or FAIL when they
failed) and illegal ones (PRUNED), each with its schedule and times as user attributes, which is
what optuna-dashboard then shows. Every round first copies the main study's new trials (other
workers') into the mirror, so the sampler models every measurement.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import optuna

from tensorlang.errors import ScheduleError
from tensorlang.func import Func
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule

from .cost_model import CostModel
from .features import features
from .results import TrialRecord

#: a candidate: (Optuna trial, schedule, feature vector, predicted seconds or None)
Candidate = tuple
#: duplicate proposals in a row after which the next proposals are drawn at random until one is
#: new: TPE, once the best trial sits on a branch with no further decisions (matmul 48³'s
#: ``C.rfactor=True``, resumed), proposed it again and again, and the run ended as if the
#: space were exhausted (the tuner stops after 20 duplicates a trial) after measuring nothing
DUPLICATE_STREAK = 8


def make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    """Optuna's sampler for ``kind``: ``"tpe"`` (independent TPE, Bergstra et al. 2011; 10
    random startup trials), ``"mtpe"`` (multivariate TPE over groups of parameters that occur
    together: it models interactions such as a vector tile's width with its rows, Falkner et al.
    2018; experimental in Optuna) or ``"random"``."""
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "mtpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10,
                                              multivariate=True, group=True)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10)


class SearchStrategy:
    """Proposes the candidates of each round (see the module docstring).

    Args:
        study: the Optuna study (its sampler set). space: the search space (``sample(trial)
            -> Schedule``; optionally ``point(schedule)``). model: the cost model, or None.
        output, sizes: what is tuned. rng: the strategy's random stream (mutants, picks).
        history: the run's trial records so far (mutants are drawn from its measured ones).
        on_pruned: called with the record of each pruned proposal.
        pool, measure_per_round: proposals ranked and candidates measured per round.
        claims: the study's ``storage.ScheduleClaims`` when workers may share it (None: this
            process alone). own_trials: trial numbers of this worker's earlier runs (its log),
            not another worker's.
    """

    def __init__(self, study: optuna.Study, space: Any, model: CostModel | None, output: Func,
                 sizes: dict[str, int], rng: np.random.Generator, history: list[TrialRecord],
                 on_pruned: Callable[[TrialRecord], None], pool: int = 24,
                 measure_per_round: int = 4, claims: Any = None,
                 own_trials: set[int] | None = None) -> None:
        #: the study the results go to (its storage, shared by workers); proposals are asked of
        #: ``study``, an in-memory study with the same sampler that mirrors it
        self.main = study
        self.study = optuna.create_study(direction="minimize", sampler=study.sampler)
        self._mirrored: set[int] = set()  # main trial numbers already in ``study``
        self.space, self.model, self.claims = space, model, claims
        self.output, self.sizes, self.rng, self.history = output, sizes, rng, history
        self.on_pruned = on_pruned
        self.pool, self.measure_per_round = pool, measure_per_round
        #: traces measured or pruned so far (model-guided search only re-proposes new ones)
        self.seen: set[str] = set()
        self._pool_traces: set[str] = set()
        #: (main) trial number -> (params, distributions), for mutation
        self.params_of: dict[int, tuple[dict, dict]] = {}
        #: proposals dropped as already seen (the space is exhausted when they pile up)
        self.duplicates = 0
        #: duplicates in a row; from DUPLICATE_STREAK on, proposals are random draws
        self._streak = 0
        self._random = optuna.samplers.RandomSampler(seed=int(rng.integers(2 ** 31)))
        #: another worker's measurement is in the study (``skip``)
        self.shared = False
        self._own = set(own_trials or ())
        self.sync()

    # -- the main study and its mirror ------------------------------------------------------------
    def sync(self) -> None:
        """Copy the main study's finished trials this worker has not seen (an earlier run's,
        other workers') into the proposal study, so the sampler models every measurement."""
        done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        me = None if self.claims is None else self.claims.worker
        for t in self.main.get_trials(deepcopy=False, states=done):
            if t.number in self._mirrored:
                continue
            self._mirrored.add(t.number)
            if t.number not in self._own and t.user_attrs.get("worker") not in (None, me):
                self.shared = True
            self.study.add_trial(optuna.trial.create_trial(
                state=t.state, value=t.value if t.state == done[0] else None,
                params=t.params, distributions=t.distributions))

    def finish(self, trial: Any, state: Any, value: float | None,
               attrs: dict[str, Any]) -> int:
        """Tell a proposal's end (a measured candidate: COMPLETE with its seconds, or FAIL; an
        illegal one: PRUNED) to the proposal study, and add it to the main study with the user
        attributes ``attrs``. Returns its trial number in the main study (the records')."""
        if state == optuna.trial.TrialState.COMPLETE:
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=state)
        number = self._add_main(optuna.trial.create_trial(
            state=state, value=value if state == optuna.trial.TrialState.COMPLETE else None,
            params=trial.params, distributions=trial.distributions, user_attrs=attrs))
        self.params_of[number] = (dict(trial.params), dict(trial.distributions))
        return number

    def _add_main(self, frozen: Any) -> int:
        """Add a finished trial to the main study; returns its number there (``Study.add_trial``
        does not; its storage call does)."""
        storage, study_id = self.main._storage, self.main._study_id
        number = storage.get_trial_number_from_id(
            storage.create_new_trial(study_id, template_trial=frozen))
        self._mirrored.add(number)
        return number

    # -- the rule-based schedule as a point of the space -----------------------------------------
    def add_seed(self, s: Schedule, seconds: float) -> None:
        """Tell the study a measured schedule (the rule-based one) as a completed trial TPE
        models and a parent of mutants (trial -1), when the space can express it."""
        self.seen.add(s.to_json())
        point = self.space.point(s) if hasattr(self.space, "point") else None
        if point is None:
            return
        dists = {k: optuna.distributions.CategoricalDistribution(c)
                 for k, c in point[1].items()}
        self.params_of[-1] = (point[0], dists)
        self.study.add_trial(optuna.trial.create_trial(params=point[0], distributions=dists,
                                                       value=seconds))
        # workers sharing the study each measure it (their baseline); the study holds it once
        if self.claims is None or self.claims.claim(s.to_json(), -1) is None:
            self._add_main(optuna.trial.create_trial(
                params=point[0], distributions=dists, value=seconds,
                user_attrs={"trace": s.to_json(), "rule_based": True}))
        # the same schedule as the space writes it (tails of splits that leave none may
        # differ): measured already
        self.seen.add(self.space.sample(optuna.trial.FixedTrial(point[0])).to_json())

    # -- proposals --------------------------------------------------------------------------------
    def propose(self, trial: Any = None) -> Candidate | None:
        """Ask Optuna for a schedule (or take ``trial``, an enqueued mutant); prove it legal and
        lower it (its features come from the loop nest). An illegal or unrealizable one is
        pruned: None. A schedule already measured or pruned (in this run or, resumed, in the
        log: ``seen``; or claimed by another worker), or already in this round's pool, ends in
        the proposal study (``skip``) and is dropped (None): measuring it again would teach
        nothing."""
        stuck = trial is None and self._streak >= DUPLICATE_STREAK
        if stuck:  # the sampler keeps proposing what was measured: a random draw instead
            keep, self.study.sampler = self.study.sampler, self._random
        try:
            trial = trial if trial is not None else self.study.ask()
            s = self.space.sample(trial)
        finally:
            if stuck:
                self.study.sampler = keep
        trace = s.to_json()
        owner = None
        if trace not in self.seen and trace not in self._pool_traces and self.claims:
            owner = self.claims.owner(trace)
        if trace in self.seen or trace in self._pool_traces or owner is not None:
            self.duplicates += 1
            self._streak += 1
            self.skip(trial, duplicate=True)
            return None
        self._streak = 0
        if self.model is not None:
            self._pool_traces.add(trace)
        report = s.check()
        if not report.ok:
            self._prune(trial, s, report.problems[0].message())
            return None
        try:
            return trial, s, features(lower(self.output, s), self.sizes)
        except ScheduleError as exc:  # a placement lowering cannot realize
            self._prune(trial, s, str(exc))
            return None

    def skip(self, trial: Any, duplicate: bool = False) -> None:
        """End a proposal that is not measured; it never reaches the main study, whose trials
        are only measured candidates (COMPLETE or FAIL) and illegal ones (PRUNED). In the
        proposal study it fails (TPE ignores it: a proposal ranked out by the cost model or
        past the budget, a duplicate), except a duplicate once other workers share the study
        (``shared``): that is pruned, TPE counts it among its worse trials and stops proposing
        it. Told as failed there, TPE — modelling every worker's trials — proposed the same
        schedules again and again, and workers stopped early, their proposals nearly all
        duplicates; for a study of one worker the failed form is kept (the search as
        measured before)."""
        self.study.tell(trial, state=optuna.trial.TrialState.PRUNED if duplicate and self.shared
                        else optuna.trial.TrialState.FAIL)

    def claim(self, batch: list[Candidate]) -> list[Candidate]:
        """The candidates of ``batch`` this worker may measure: each is claimed in the study
        (``storage.ScheduleClaims``); one another worker claimed first is skipped."""
        if self.claims is None:
            return batch
        out = []
        for cand in batch:
            owner = self.claims.claim(cand[1].to_json(), cand[0].number)
            if owner is None:
                out.append(cand)
            else:
                self.duplicates += 1
                self.skip(cand[0], duplicate=True)
        return out

    def release(self, trace: str) -> None:
        """Give back the claim of a candidate that was not measured."""
        if self.claims is not None:
            self.claims.release(trace)

    def _prune(self, trial: Any, s: Schedule, why: str) -> None:
        self.seen.add(s.to_json())
        number = self.finish(trial, optuna.trial.TrialState.PRUNED, None,
                             {"trace": s.to_json(), "error": why})
        self.on_pruned(TrialRecord(number, s.to_json(), "pruned", error=why))

    def mutants(self, n: int) -> list[Any]:
        """``n`` Optuna trials, each one of the five fastest measured schedules with one or two
        decisions redrawn (the cost model then ranks them with the sampler's proposals, so good
        schedules are refined locally)."""
        rng = self.rng
        top = sorted((r for r in self.history
                      if r.state == "measured" and r.number in self.params_of),
                     key=lambda r: r.seconds)[:5]
        out = []
        for _ in range(n if top else 0):
            params, dists = self.params_of[top[int(rng.integers(len(top)))].number]
            child = dict(params)
            names = sorted(child)
            for k in rng.permutation(len(names))[: 1 + int(rng.integers(2))]:
                choices = dists[names[k]].choices
                child[names[k]] = choices[int(rng.integers(len(choices)))]
            self.study.enqueue_trial(child)
            out.append(self.study.ask())
        return out

    def next_round(self, out_of_time: Callable[[], bool] = lambda: False) -> list[Candidate]:
        """The candidates to measure next, each with its predicted seconds (None without a
        prediction); may be empty (every proposal pruned or a duplicate). Proposing stops
        early once ``out_of_time()`` (proving a proposal legal and lowering it can take
        seconds each on a deep nest): the round ranks what it has; an enqueued mutant not
        proposed is ended in the proposal study (``skip``)."""
        self.sync()
        if self.model is None:
            cand = self.propose()
            return [] if cand is None else [(*cand, None)]
        model, rng, pool = self.model, self.rng, self.pool
        self._pool_traces.clear()
        n_mut = pool // 4 if model.trained else 0
        proposals: list[Candidate | None] = []
        for _ in range(pool - n_mut):
            if proposals and out_of_time():
                break
            if not model.trained and sum(c is not None for c in proposals) >= \
                    self.measure_per_round:
                break  # an untrained model ranks at random: more would only be dropped
            proposals.append(self.propose())
        mutated: set[int] = set()
        for t in self.mutants(n_mut if not out_of_time() else 0):
            if out_of_time():
                self.skip(t)
                continue
            mutated.add(t.number)
            proposals.append(self.propose(t))
        cands = [c for c in proposals if c is not None]
        if not cands:
            return []
        pred = model.predict(np.stack([c[2] for c in cands]))
        order = list(rng.permutation(len(cands))) if pred is None else list(np.argsort(pred))
        # the model's favourites, the sampler's best-ranked own proposal (mutants alone would
        # only refine the incumbent), one random pick (exploration)
        per_round = self.measure_per_round
        take = order[: max(1, per_round - 2)]
        own = [i for i in order if i not in take and cands[i][0].number not in mutated]
        if own and per_round >= 3:
            take.append(own[0])
        rest = [i for i in order if i not in take]
        if rest and per_round >= 2:
            take.append(rest[int(rng.integers(len(rest)))])
        for idx in set(range(len(cands))) - set(take):
            self.skip(cands[idx][0])  # ranked out by the cost model
        return [(*cands[i], None if pred is None else float(2.0 ** pred[i])) for i in take]
