"""The search loop: Optuna proposes, the legality check prunes, the measurer times.

Each round: ``study.ask()`` -> a schedule from the search space -> ``Schedule.check()`` (an illegal
candidate is told to Optuna as *pruned* and counted, never compiled) -> measured in the worker
process -> ``study.tell(seconds)``; a failed candidate (crash, timeout, compile error) is told as
*failed* and its error kept. A candidate that beats the best so far is run again with the NumPy
reference check and accepted only if it matches. The per-candidate timeout follows the best time:
``max(timeout_floor, 50 x best + 20 s)`` for compiling; running is cut off after
``100 x best + 2 s`` (the candidate is recorded as failed and told to Optuna and the cost model
as that censored time, a lower bound); a candidate whose warm-up run takes over 10x the best time
is not repeated. The heuristic schedule is measured first (``heuristic=``): its time bounds the
first candidates too, and by default it is itself a candidate for the result (trial -1), so
tuning never ends slower than the untuned ``schedule="auto"``; it is also a point of the search
space (``SearchSpace.point``), told to Optuna as a completed trial (TPE models it) and a parent
of the mutants below, so the search refines it. Hopeless candidates cost little.

With ``cost_model="gbt"`` (the default) the loop runs in rounds: Optuna proposes ``pool``
candidates — once the model is trained, a quarter of them are *mutants*: one of the five fastest
measured schedules with one or two decisions redrawn (Ansor's evolutionary search, Zheng et al.
OSDI 2020 §5.1), enqueued into the study so TPE sees them as its own trials — the illegal ones are
pruned, schedules already measured or pruned (or twice in one pool) are dropped, the learned cost
model (``cost_model.py``) ranks the rest by predicted time from their features (``features.py``),
and the best ``measure_per_round - 2``, the best-ranked of the sampler's own proposals (mutants
alone would only refine the incumbent) and one random exploratory candidate are measured; the
model is refit after each round. Unmeasured proposals are told to Optuna as failed, so they do not bias TPE.
``trials`` counts measured candidates. ``cost_model="none"`` measures every legal proposal
(plain Optuna, for ablations).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import optuna

from tensorlang.backends.base import DEFAULT_BACKEND
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule
from tensorlang.errors import ScheduleError
from tensorlang.func import Func

from .cost_model import CostModel
from .features import features
from .measure import Measurer
from .space import SearchSpace
from .timing import block_runs
from .workloads import bind_sizes as _sizes


@dataclass
class TrialRecord:
    """One proposal: its Optuna trial number, trace, state (``measured``, ``pruned``,
    ``failed``), median seconds (``inf`` unless measured), all timed runs, compile seconds, error
    text, wall-clock time, the cost model's predicted seconds (None: no prediction) and the
    feature vector (``features.FEATURE_NAMES``; None for pruned proposals)."""

    number: int
    trace: str
    state: str
    seconds: float = float("inf")
    times: list[float] = field(default_factory=list)
    compile_seconds: float = 0.0
    error: str | None = None
    timestamp: float = field(default_factory=time.time)
    predicted: float | None = None
    features: list[float] | None = None
    #: the interleaved comparison that decided whether it became the best (``confirm``):
    #: every timed run per label (``candidate``, ``best``, ``rule-based``) and ``won``
    confirm: dict[str, Any] | None = None


@dataclass
class TuningResult:
    """The best schedule found, its median seconds, and every proposal in order."""

    output: Func
    best_trace: str | None
    best_seconds: float
    history: list[TrialRecord]
    #: the search stopped on Ctrl-C (every record up to then is kept)
    interrupted: bool = False
    #: measured trials of earlier runs of a resumed study (counted against ``trials``)
    resumed: int = 0
    #: the tuned-kernel cache entry of the best kernel, and whether it changed the cache
    cache_entry: Any = None
    cache_updated: bool = False
    #: median seconds of the heuristic schedule measured before the search (``inf``: not
    #: measured, ``heuristic="off"`` or a resumed study, or it failed)
    heuristic_seconds: float = float("inf")
    #: the best schedule beat the rule-based schedule in an interleaved comparison (or is it,
    #: or there was none to compare with); the cache is written only when True
    confirmed: bool = False

    @property
    def best_schedule(self) -> Schedule | None:
        return None if self.best_trace is None else Schedule.from_json(self.output,
                                                                        self.best_trace)

    @property
    def pruned(self) -> int:
        return sum(1 for r in self.history if r.state == "pruned")

    @property
    def failed(self) -> int:
        return sum(1 for r in self.history if r.state == "failed")

    def best_so_far(self) -> list[float]:
        """Median seconds of the accepted best after each proposal (``inf`` until one is): the
        rule-based seed, or a candidate that won its interleaved confirmation."""
        out, best = [], float("inf")
        for r in self.history:
            if r.state == "measured" and (r.number < 0 or (r.confirm or {}).get("won")):
                best = r.seconds
            out.append(best)
        return out


#: interleaved rounds that confirm a new best (``confirm_best``; 3 for kernels of >= 50 ms)
CONFIRM_ROUNDS = 5


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


def autotune(output: Func, shapes: dict[str, int] | None = None, *,
             arrays: dict[str, np.ndarray] | None = None, trials: int = 50,
             timeout: float | None = None, seed: int = 0, sampler: str = "tpe",
             repeats: int = 5, min_seconds: float = 0.05, timeout_floor: float = 60.0,
             measure_hook: Callable | None = None,
             progress: Callable[[TrialRecord, float], Any] | None = None,
             space: Any = None, cost_model: str = "gbt", pool: int = 24,
             measure_per_round: int = 4, jobs: int | None = None,
             log: str | os.PathLike | None = None, workload_name: str | None = None,
             storage: str | None = None, study_name: str | None = None,
             transfer: list[Any] | None = None, cache: Any = True,
             heuristic: str = "seed", backend: str | None = None) -> TuningResult:
    """Search schedules of ``output`` for the given sizes and return the fastest verified one.

    Args:
        output: the output Func. shapes: concrete sizes by name (``{"M": 1024, ...}``), or
        arrays: the input arrays by Input name: their shapes give the sizes (no estimates
            needed) and candidates are timed and verified on them.
        trials: measured candidates in total (a resumed study counts its earlier ones);
            timeout: stop after this many seconds of tuning (wall clock).
        seed: seeds the sampler (with ``sampler="random"`` the proposals are reproducible).
        sampler: ``"tpe"`` (Optuna's TPE), ``"mtpe"`` (multivariate TPE) or ``"random"``
            (``make_sampler``).
        repeats, min_seconds: measurement effort per candidate (median of >= ``repeats`` runs
            and >= ``min_seconds`` of timed work). timeout_floor: per-candidate timeout floor (s).
        measure_hook: a picklable callable the worker runs on each trace (instrumentation).
        progress: called after each proposal with the record and the best seconds so far.
        space: a custom search space (anything with ``sample(trial) -> Schedule`` and
            ``shapes``); default ``SearchSpace(output, sizes)``.
        cost_model: ``"gbt"`` (rank ``pool`` proposals per round with the learned model and
            measure ``measure_per_round`` of them) or ``"none"`` (measure every proposal).
        jobs: compile processes (default: CPU count, at most 4); a round's candidates compile in
            parallel, then are timed one at a time.
        log: append a tuning record (``records.py``) per proposal to this JSON Lines file.
        workload_name: the workload's name in the records (default: the output Func's name).
        storage: an Optuna storage URL (``sqlite:///study.db``, any RDB URL): the study is kept
            there and an existing one of ``study_name`` is resumed — its measured trials (read
            back from ``log``) count against ``trials`` and warm the cost model.
        transfer: tuning records of *other* workloads (``records.read_records``): measured ones
            from this machine warm-start the cost model (transfer learning, as TVM's).
        heuristic: what the heuristic schedule (``heuristic.py``) does, measured before the
            search: ``"seed"`` (default) — it bounds every candidate's run time from the start
            and is a candidate for the result (recorded as trial -1; not counted in
            ``trials``), so tuning never ends slower than ``schedule="auto"`` without records,
            and, as a point of the space, a completed Optuna trial and a parent of mutants;
            ``"bound"`` — it only bounds run times (the benchmark's setting: searches compared
            on their own proposals); ``"off"``.
        cache: where the best kernel (trace, seconds, object code) is stored for
            ``tl.compile(F, schedule="auto")``: True = the default ``KernelCache``
            (``TENSORLANG_CACHE``), a ``KernelCache``, or False/None for none.
        backend: the name of the backend that compiles, loads and times candidates
            (``tensorlang.backends.get_backend``; default: the LLVM CPU backend). Its
            ``target_info`` is the target in the records and the cache key.

    Returns:
        A ``TuningResult``; ``best_trace`` is None when no candidate succeeded. Ctrl-C stops the
        search cleanly (``interrupted=True``); every record written so far is complete.

    Raises:
        ShapeError: the sizes or arrays do not fit the algorithm.
    """
    from .records import (
        RecordWriter,
        TuningRecord,
        read_records,
        same_machine,
        study_base,
        target_info,
        workload_info,
    )

    sizes = _sizes(output, shapes, arrays)
    space = space if space is not None else SearchSpace(output, sizes)
    if cost_model not in ("gbt", "none"):
        raise ValueError(f"cost_model must be 'gbt' or 'none', got {cost_model!r}")
    if sampler not in ("tpe", "mtpe", "random"):
        raise ValueError(f"sampler must be one of ['mtpe', 'random', 'tpe'], got {sampler!r}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    workload = workload_info(output, sizes, workload_name)
    backend = backend or DEFAULT_BACKEND
    target = target_info(backend=backend)
    name = study_name or study_base(workload)
    earlier: list[TuningRecord] = []
    if storage is not None and log is not None and os.path.exists(log):
        earlier = [r for r in read_records(log) if r.study == name
                   and r.workload.get("key") == workload["key"]
                   and r.workload.get("sizes") == workload["sizes"]]
    study = optuna.create_study(direction="minimize", storage=storage,
                                study_name=name if storage else None, load_if_exists=True)
    offset = len(study.trials)  # a resumed study: fresh random streams, not a replay
    study.sampler = make_sampler(sampler, seed + offset)
    history: list[TrialRecord] = []
    start = time.perf_counter()
    model = CostModel(seed=seed) if cost_model == "gbt" else None
    rng = np.random.default_rng(seed + offset)
    state: dict[str, Any] = {"best": float("inf"), "trace": None, "baseline": float("inf"),
                             "duplicates": 0, "rule": None, "beats_rule": False,
                             "best_result": None}
    resumed = sum(r.state in ("measured", "failed") and r.trial >= 0 for r in earlier)
    for r in earlier:
        if r.accepted and r.seconds is not None and r.seconds < state["best"]:
            state["best"], state["trace"] = r.seconds, r.trace
            state["beats_rule"] = r.beats_rule
    if model is not None:
        for r in [*earlier, *(transfer or [])]:
            feats = r.extra.get("features")
            if r.ok and feats and same_machine(r.target, target):
                model.add(np.asarray(feats, dtype=np.float64), float(r.seconds))
        model.fit()
    writer = RecordWriter(log) if log is not None else None

    def emit(rec: TrialRecord) -> None:
        history.append(rec)
        if writer is not None:
            writer.write(TuningRecord(
                workload=workload, target=target, schedule=json.loads(rec.trace),
                state=rec.state, seconds=rec.seconds if np.isfinite(rec.seconds) else None,
                times=[float(t) for t in rec.times], predicted=rec.predicted,
                trial=rec.number,
                compile_seconds=rec.compile_seconds, timestamp=rec.timestamp, error=rec.error,
                study=name if storage is not None else None,
                extra={k: v for k, v in (("features", rec.features), ("confirm", rec.confirm))
                       if v is not None}))
        if progress is not None:
            progress(rec, state["best"])

    def out_of_time() -> bool:
        return timeout is not None and time.perf_counter() - start > timeout

    Cand = tuple  # (trial, schedule, features, predicted seconds or None)
    interrupted = False
    measured = resumed
    with Measurer(output, sizes, space.shapes, repeats=repeats, min_seconds=min_seconds,
                  timeout=timeout_floor, hook=measure_hook, jobs=jobs, arrays=arrays,
                  backend=backend) as m:

        def run_batch(batch: list[Cand]) -> int:
            """Compile the batch in the pool, then time its candidates one by one; returns how
            many were measured (the rest, past the budget, are told to Optuna as failed)."""
            traces = [c[1].to_json() for c in batch]
            best = state["best"]
            limit = max(timeout_floor, 50 * best + 20) if np.isfinite(best) else timeout_floor
            compiled = m.compile_many(traces, timeout=limit)
            done = 0
            for (trial, _, fv, pred), trace, comp in zip(batch, traces, compiled):
                if measured + done >= trials or out_of_time():
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    continue
                done += 1
                seen.add(trace)
                best = state["best"]
                ref = min(best, state["baseline"])
                budget = 10 * ref if np.isfinite(ref) else None
                # a run phase takes ~6 runs; one far past the best is cut off and told to the
                # search as a censored time (a lower bound), so TPE and the model learn from it
                deadline = min(limit, 100 * ref + 2.0) if np.isfinite(ref) else limit
                res = m.run(trace, comp, timeout=deadline, budget=budget)
                censored = None
                if res.error is not None and res.error.startswith("timeout") \
                        and deadline < limit:
                    censored = deadline
                    res.error = (f"timeout: cut off after {deadline:.2f} s (over 100x the best "
                                 f"time); told to the search as a lower bound")
                confirm = None
                if res.error is None and res.seconds < best:
                    check = m.run(trace, comp, verify=True, timeout=max(limit, 600.0))
                    if check.verified is not True:
                        res.error = check.error or "result differs from the NumPy reference"
                    else:
                        confirm = confirm_best(res)
                fl = [float(x) for x in fv]
                if censored is not None:
                    study.tell(trial, censored)
                    if model is not None:
                        model.add(fv, censored)
                    rec = TrialRecord(trial.number, trace, "failed", error=res.error,
                                      compile_seconds=res.compile_seconds, predicted=pred,
                                      features=fl)
                elif res.error is not None:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    rec = TrialRecord(trial.number, trace, "failed", error=res.error,
                                      compile_seconds=res.compile_seconds, predicted=pred,
                                      features=fl)
                else:
                    study.tell(trial, res.seconds)
                    rec = TrialRecord(trial.number, trace, "measured", res.seconds, res.times,
                                      res.compile_seconds, predicted=pred, features=fl,
                                      confirm=confirm)
                    if model is not None:
                        model.add(fv, res.seconds)
                    if confirm is not None and confirm["won"]:
                        state["best"], state["trace"] = res.seconds, trace
                        state["best_result"] = res
                        state["beats_rule"] = confirm["beats_rule"]
                emit(rec)
            return done

        def confirm_best(res: Any) -> dict[str, Any]:
            """Re-measure a verified candidate that screened faster than the best, interleaved
            with the best and the rule-based schedule in the run worker (A/B rounds: the same
            conditions for all). It wins when its median is below the best's, and below the
            rule-based schedule's too unless ``heuristic="bound"``; its screening median (the
            protocol every candidate is measured with) then becomes the best time. A failed
            comparison is a loss."""
            kernels = {"candidate": res}
            if state["best_result"] is not None:
                kernels["best"] = state["best_result"]
            if state["rule"] is not None and state["rule"] is not state["best_result"]:
                kernels["rule-based"] = state["rule"]
            if len(kernels) == 1:  # nothing to compare with: the first success wins
                return {"won": True, "beats_rule": True}
            slowest = max(res.seconds, *(k.seconds for k in kernels.values()))
            runs = block_runs(slowest)
            rounds = CONFIRM_ROUNDS if slowest < 0.05 else 3
            work = rounds * (runs + 1) * len(kernels) * slowest
            comp = m.compare(kernels, rounds=rounds, runs=runs,
                             timeout=max(timeout_floor, 20 * work + 10))
            med = {label: comp.median(label) for label in kernels}
            # the rule-based schedule's time: its own label, or the best's when it is the best
            rule = med.get("rule-based", med.get("best", float("inf")))
            beats_rule = state["rule"] is None or med["candidate"] < rule
            others = [v for k, v in med.items() if k != "candidate"
                      and (k != "rule-based" or heuristic != "bound")]
            won = comp.error is None and med["candidate"] < min(others, default=float("inf"))
            out = {"won": bool(won), "beats_rule": bool(beats_rule), "rounds": rounds,
                   "runs": runs, "times": {k: [float(t) for t in v] for k, v in comp.times.items()},
                   "medians": {k: v if np.isfinite(v) else None for k, v in med.items()}}
            if comp.error is not None:
                out["error"] = comp.error
            return out

        def prune(trial: Any, s: Schedule, why: str) -> None:
            seen.add(s.to_json())
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            emit(TrialRecord(trial.number, s.to_json(), "pruned", error=why))

        params_of: dict[int, tuple[dict, dict]] = {}  # trial number -> params, distributions
        # model-guided only: traces measured or pruned so far, and those in this round's pool
        seen: set[str] = set()
        pool_traces: set[str] = set()

        def propose(trial: Any = None) -> tuple[Any, Schedule, np.ndarray] | None:
            """Ask Optuna for a schedule (or take ``trial``, an enqueued mutant); prove it legal
            and lower it (its features come from the loop nest). An illegal or unrealizable one is
            pruned: None. With the cost model, a schedule already measured or pruned, or already
            in this round's pool, is told to Optuna as failed and dropped (None): measuring it
            again would teach nothing."""
            trial = trial if trial is not None else study.ask()
            s = space.sample(trial)
            params_of[trial.number] = (dict(trial.params), dict(trial.distributions))
            if model is not None:
                trace = s.to_json()
                if trace in seen or trace in pool_traces:
                    state["duplicates"] += 1
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    return None
                pool_traces.add(trace)
            report = s.check()
            if not report.ok:
                prune(trial, s, report.problems[0].message())
                return None
            try:
                return trial, s, features(lower(output, s), sizes)
            except ScheduleError as exc:  # a placement lowering cannot realize
                prune(trial, s, str(exc))
                return None

        def mutants(n: int) -> list[Any]:
            """``n`` Optuna trials, each one of the five fastest measured schedules with one or
            two decisions redrawn (Ansor's evolutionary search: the cost model then ranks them
            with the sampler's proposals, so good schedules are refined locally)."""
            top = sorted((r for r in history if r.state == "measured" and r.number in params_of),
                         key=lambda r: r.seconds)[:5]
            out = []
            for _ in range(n if top else 0):
                params, dists = params_of[top[int(rng.integers(len(top)))].number]
                child = dict(params)
                names = sorted(child)
                for k in rng.permutation(len(names))[: 1 + int(rng.integers(2))]:
                    choices = dists[names[k]].choices
                    child[names[k]] = choices[int(rng.integers(len(choices)))]
                study.enqueue_trial(child)
                out.append(study.ask())
            return out

        try:
            if heuristic not in ("seed", "bound", "off"):
                raise ValueError(f"heuristic must be 'seed', 'bound' or 'off', got {heuristic!r}")
            if heuristic != "off" and not earlier:
                from .heuristic import heuristic_schedule

                hs = heuristic_schedule(output, sizes)
                (comp,) = m.compile_many([hs.to_json()])
                res = m.run("heuristic", comp, timeout=timeout_floor, verify=True)
                state["baseline"] = res.seconds
                if res.error is None and res.verified:
                    state["rule"] = res
                if heuristic == "seed" and res.error is None and res.verified:
                    fv = features(lower(output, hs), sizes)
                    if model is not None:
                        model.add(fv, res.seconds)
                    state["best"], state["trace"] = res.seconds, hs.to_json()
                    seen.add(hs.to_json())
                    state["best_result"], state["beats_rule"] = res, True
                    point = space.point(hs) if hasattr(space, "point") else None
                    if point is not None:
                        # the rule-based schedule as a point of the space: a completed trial
                        # TPE models, and a parent of the model-guided search's mutants
                        dists = {k: optuna.distributions.CategoricalDistribution(c)
                                 for k, c in point[1].items()}
                        study.add_trial(optuna.trial.create_trial(
                            params=point[0], distributions=dists, value=res.seconds))
                        params_of[-1] = (point[0], dists)
                        # the same schedule as the space writes it (tails of splits that leave
                        # none may differ): measured already
                        seen.add(space.sample(optuna.trial.FixedTrial(point[0])).to_json())
                    emit(TrialRecord(-1, hs.to_json(), "measured", res.seconds, res.times,
                                     res.compile_seconds, features=[float(x) for x in fv]))
            while measured < trials and not out_of_time():
                if sum(r.state == "pruned" for r in history) > 20 * max(trials, 1):
                    break  # the space is (almost) all illegal
                if model is None:
                    cand = propose()
                    if cand is not None:
                        measured += run_batch([(*cand, None)])
                    continue
                if state["duplicates"] > 20 * max(trials, 1):
                    break  # the space is exhausted
                pool_traces.clear()
                n_mut = pool // 4 if model.trained else 0
                proposals = [propose() for _ in range(pool - n_mut)]
                mutated: set[int] = set()
                for t in mutants(n_mut):
                    mutated.add(t.number)
                    proposals.append(propose(t))
                cands = [c for c in proposals if c is not None]
                if not cands:
                    continue
                pred = model.predict(np.stack([c[2] for c in cands]))
                order = list(rng.permutation(len(cands))) if pred is None \
                    else list(np.argsort(pred))
                # the model's favourites, the sampler's best-ranked own proposal (mutants alone
                # would only refine the incumbent), one random pick (exploration)
                take = order[: max(1, measure_per_round - 2)]
                own = [i for i in order if i not in take and cands[i][0].number not in mutated]
                if own and measure_per_round >= 3:
                    take.append(own[0])
                rest = [i for i in order if i not in take]
                if rest and measure_per_round >= 2:
                    take.append(rest[int(rng.integers(len(rest)))])  # one exploratory pick
                measured += run_batch([(*cands[i], None if pred is None
                                        else float(2.0 ** pred[i])) for i in take])
                for idx in set(range(len(cands))) - set(take):
                    study.tell(cands[idx][0], state=optuna.trial.TrialState.FAIL)
                model.fit()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if writer is not None:
                writer.close()
    result = TuningResult(output, state["trace"], state["best"], history, interrupted, resumed,
                          heuristic_seconds=state["baseline"], confirmed=state["beats_rule"])
    if cache and state["trace"] is not None and state["beats_rule"]:
        from .cache import CacheEntry, KernelCache

        best_res = state["best_result"]

        kc = KernelCache() if cache is True else cache
        entry = CacheEntry(workload["key"], workload["name"], workload["sizes"],
                           workload["shapes"], workload["dtypes"], target, state["trace"],
                           float(state["best"]),
                           None if best_res is None else best_res.signature,
                           None if best_res is None else best_res.object_code)
        result.cache_entry = entry
        result.cache_updated = kc.put(entry)
        if kc is not cache:
            kc.close()
    return result
