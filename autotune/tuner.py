"""The tuning loop, as TVM MetaSchedule lays out its parts: the search *space* (``space.py``),
the search *strategy* (``strategy.py``: Optuna proposes, the legality check prunes, the *cost
model* ranks), the *builder* and *runner* (``measure.py``: compile workers, one run worker, both
through the ``Backend`` interface) and the *database* (``database.py``: tuning log and
tuned-kernel cache). This module holds what joins them: each round the strategy's candidates
are compiled, timed, told to Optuna and the model, and a candidate that screened faster than
the best is verified against the NumPy reference and confirmed in interleaved A/B rounds
(``docs/measurement.md``) before it becomes the best.

Time limits follow the best time: compiling may take ``max(timeout_floor, 50 x best + 20 s)``;
running is cut off after ``100 x best + 2 s`` (the candidate is recorded as failed and told to
Optuna and the cost model as that censored time, a lower bound); a candidate whose warm-up run
takes over 10x the best time is not repeated. The rule-based schedule (``heuristic.py``) is
measured first (``heuristic=``): its time bounds the first candidates, and by default it is a
candidate for the result (trial -1), so tuning never ends slower than the untuned
``schedule="auto"``; it is also a point of the search space, told to Optuna as a completed trial
and a parent of mutants, so the search refines it. ``trials`` counts measured candidates.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import optuna

from tensorlang.backends.base import DEFAULT_BACKEND, get_backend
from tensorlang.errors import TensorlangError, TuningError
from tensorlang.func import Func
from tensorlang.schedule.lower import lower
from tensorlang.schedule.schedule import Schedule

from .cost_model import CostModel
from .database import TuningDatabase
from .features import features
from .heuristic import heuristic_schedule
from .measure import MeasureResult, Measurer
from .records import target_info, workload_info
from .results import TrialRecord, TuningResult
from .space import SearchSpace
from .storage import ScheduleClaims, confirmed_trials, redacted, storage_url
from .strategy import Candidate, SearchStrategy, make_sampler
from .timing import block_runs
from .workloads import bind_sizes, format_shape, memory_available, memory_needed

__all__ = ["autotune", "make_sampler", "TrialRecord", "TuningResult"]

#: interleaved rounds that confirm a new best (``confirm_best``; 3 for kernels of >= 50 ms)
CONFIRM_ROUNDS = 5


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
        storage: an Optuna storage URL (``sqlite:///study.db``, ``postgresql://user@host/db``
            with the ``tensorlang[postgres]`` extra, any RDB URL): the study is kept there and
            an existing one of ``study_name`` is joined — its measured trials of this worker
            (read back from ``log``) count against ``trials`` and warm the cost model. Workers
            (processes, machines) sharing a study never measure one schedule twice
            (``storage.ScheduleClaims``), and each ends with the study's best confirmed
            schedule measured on a machine like its own, when that is faster than its own:
            verified here and put in the cache (``TuningResult.adopted``).
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
        ShapeError: the sizes or arrays do not fit the algorithm (a wrong dtype, a missing or
            unknown array) — before any candidate runs.
        TuningError: the backend cannot run kernels here (``Backend.unavailable``: no GPU for
            ``backend="cuda"``); the inputs and outputs at these sizes alone need more memory
            than the machine has available; or no candidate (the rule-based schedule included) could be
            measured (the message gives the most common failure).
    """
    sizes = bind_sizes(output, shapes, arrays)
    need, have = memory_needed(output, sizes), memory_available()
    if have is not None and need > have:
        raise TuningError(
            f"tuning {format_shape(sizes)} needs at least {need / 2**30:.1f} GiB for the input "
            f"and output arrays alone, but {have / 2**30:.1f} GiB of memory is available; tune a "
            f"smaller shape (the kernel runs every shape; compile(..., 'auto') takes the nearest "
            f"tuned one)")
    backend = backend or DEFAULT_BACKEND
    builder = get_backend(backend)
    why = builder.unavailable()
    if why is not None:
        raise TuningError(f"backend {backend!r} cannot run kernels here, so nothing can be "
                          f"measured: {why}")
    space = space if space is not None else (builder.search_space(output, sizes)
                                             or SearchSpace(output, sizes))
    if cost_model not in ("gbt", "none"):
        raise ValueError(f"cost_model must be 'gbt' or 'none', got {cost_model!r}")
    if sampler not in ("tpe", "mtpe", "random"):
        raise ValueError(f"sampler must be one of ['mtpe', 'random', 'tpe'], got {sampler!r}")
    if heuristic not in ("seed", "bound", "off"):
        raise ValueError(f"heuristic must be 'seed', 'bound' or 'off', got {heuristic!r}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage_url(storage) if storage else None
    db = TuningDatabase(workload_info(output, sizes, workload_name),
                        target_info(backend=backend), log, storage, study_name)
    claims = None
    try:  # the log is open from here on
        study = _open_study(url, db.study_name, storage)
        if url is not None:
            claims = ScheduleClaims(url, db.study_name)
            # what the study tunes, for 'tensorlang cache import --storage' on any machine
            study.set_user_attr("workload", db.workload.to_dict())
        offset = len(study.trials)  # a resumed study: fresh random streams, not a replay
        study.sampler = make_sampler(sampler, seed + offset)
        model = CostModel(seed=seed) if cost_model == "gbt" else None
        if model is not None:
            for r in [*db.earlier, *(transfer or [])]:
                feats = r.extra.get("features")
                if r.ok and feats and r.target.same_machine(db.target):
                    model.add(np.asarray(feats, dtype=np.float64), float(r.seconds))
            model.fit()
        run = _TuningRun(output, sizes, db, model, progress, heuristic, timeout_floor, trials,
                         timeout)
        run.rule_based = builder.rule_based_schedule(output, sizes)
        run.strategy = SearchStrategy(study, space, model, output, sizes,
                                      np.random.default_rng(seed + offset), run.history,
                                      run.emit, pool=pool, measure_per_round=measure_per_round,
                                      claims=claims, own_trials={r.trial for r in db.earlier})
        # a resumed run never measures again what the log already holds
        run.strategy.seen.update(r.trace for r in db.earlier)
        with Measurer(output, sizes, space.shapes, repeats=repeats, min_seconds=min_seconds,
                      timeout=timeout_floor, hook=measure_hook, jobs=jobs, arrays=arrays,
                      backend=backend) as m:
            run.measurer = m
            run.search()
            if claims is not None and not run.interrupted:
                run.adopt_study_best()
    finally:
        db.close()
        if claims is not None:
            claims.close()
    best = run.best
    if best.trace is None and not run.interrupted and run.history:
        raise TuningError(f"no candidate schedule of {format_shape(sizes)} could be measured "
                          f"({len(run.history)} tried); the most common failure: "
                          f"{_common_error(run.history)}")
    result = TuningResult(output, best.trace, best.seconds, run.history, run.interrupted,
                          run.resumed, heuristic_seconds=best.baseline,
                          confirmed=best.beats_rule, adopted=best.adopted)
    if cache and best.trace is not None and best.beats_rule:
        result.cache_entry, result.cache_updated = db.save_best(cache, best.trace,
                                                                best.seconds, best.result)
    return result


def _open_study(url: str | None, name: str, given: str | None) -> optuna.Study:
    """Create or join the study ``name`` in ``url`` (None: in memory); ``given`` is the URL as
    the user wrote it (for messages). Workers that start together race to create Optuna's
    tables in an empty database; the losers' attempts fail and are retried.

    Raises:
        TuningError: the storage cannot be opened (server down, bad URL, missing driver)."""
    if url is None:
        return optuna.create_study(direction="minimize")
    import sqlalchemy

    for attempt in range(6):
        try:
            return optuna.create_study(direction="minimize", storage=url, study_name=name,
                                       load_if_exists=True)
        except (sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.IntegrityError) as exc:
            error: Exception = exc  # e.g. 'relation "studies" already exists'
            time.sleep(0.2 * 2 ** attempt)
        except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError) as exc:
            error = exc
            break
    text = str(getattr(error, "orig", None) or error).strip().splitlines()
    raise TuningError(f"cannot open the tuning storage {redacted(given or url)}: "
                      f"{text[0] if text else type(error).__name__}")


def _common_error(history: list) -> str:
    """The most frequent first line of the proposals' errors (what made tuning fail)."""
    lines = [str(r.error).strip().splitlines()[0] for r in history if r.error]
    if not lines:
        return "none reported"
    top = max(set(lines), key=lines.count)
    return f"{top} ({lines.count(top)} of {len(history)})"


@dataclass
class _Best:
    """The incumbent: median seconds and trace of the accepted best, its measurement (object
    code), whether it beat the rule-based schedule, and the rule-based schedule's own time and
    measurement (the baseline every confirmation compares with)."""

    seconds: float = float("inf")
    trace: str | None = None
    result: MeasureResult | None = None
    beats_rule: bool = False
    baseline: float = float("inf")
    rule: MeasureResult | None = None
    adopted: dict[str, Any] | None = None


class _TuningRun:
    """One tuning run's state and rounds; ``autotune`` builds it with its parts."""

    strategy: SearchStrategy
    measurer: Measurer
    #: the backend's own rule-based schedule (None: the CPU one, ``heuristic_schedule``)
    rule_based: Any = None

    def __init__(self, output: Func, sizes: dict[str, int], db: TuningDatabase,
                 model: CostModel | None, progress: Callable | None, heuristic: str,
                 timeout_floor: float, trials: int, timeout: float | None) -> None:
        self.output, self.sizes, self.db, self.model = output, sizes, db, model
        self.progress, self.heuristic, self.timeout_floor = progress, heuristic, timeout_floor
        self.trials, self.timeout = trials, timeout
        self.history: list[TrialRecord] = []
        self.best = _Best()
        self.interrupted = False
        self.start = time.perf_counter()
        self.resumed = sum(r.state in ("measured", "failed") and r.trial >= 0
                           for r in db.earlier)
        self.measured = self.resumed
        for r in db.earlier:
            if r.accepted and r.seconds is not None and r.seconds < self.best.seconds:
                self.best.seconds, self.best.trace = r.seconds, r.trace
                self.best.beats_rule = r.beats_rule

    def emit(self, rec: TrialRecord) -> None:
        """Keep ``rec``, write it to the log, report progress."""
        self.history.append(rec)
        self.db.commit(rec)
        if self.progress is not None:
            self.progress(rec, self.best.seconds)

    def out_of_time(self) -> bool:
        return self.timeout is not None and time.perf_counter() - self.start > self.timeout

    # -- the loop ---------------------------------------------------------------------------------
    def search(self) -> None:
        """Measure the rule-based schedule, then run rounds until ``trials`` candidates are
        measured, the time is up, the space looks exhausted or all illegal, or Ctrl-C."""
        trials, strategy = self.trials, self.strategy
        previous = self._catch_sigint()
        try:
            if self.heuristic != "off" and not self.db.earlier:
                self.measure_rule()
            while self.measured < trials and not self.out_of_time():
                self.stop_if_interrupted()
                if sum(r.state == "pruned" for r in self.history) > 20 * max(trials, 1):
                    break  # the space is (almost) all illegal
                if strategy.duplicates > 20 * max(trials, 1):
                    break  # the space is exhausted
                batch = strategy.next_round(self.out_of_time)
                if batch:
                    self.measured += self.run_batch(batch)
                    if self.model is not None:
                        self.model.fit()
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _catch_sigint(self) -> Any:
        """Ctrl-C raises KeyboardInterrupt as usual and also sets ``interrupted``: an interrupt
        raised where Python swallows it (a finalizer, a library's cleanup) still ends the search
        at the next candidate. Returns the handler to restore, or None where Python's default
        handler is not the one installed (a user's own handler, SIGINT ignored, not the main
        thread)."""
        if (threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            return None

        def handler(signum: int, frame: Any) -> None:
            self.interrupted = True
            raise KeyboardInterrupt

        return signal.signal(signal.SIGINT, handler)

    def stop_if_interrupted(self) -> None:
        if self.interrupted:
            raise KeyboardInterrupt

    def measure_rule(self) -> None:
        """Measure (and verify) the rule-based schedule: its time bounds the candidates' run
        times; with ``heuristic="seed"`` it becomes the first best and a point of the space."""
        m, best = self.measurer, self.best
        hs = self.rule_based if self.rule_based is not None else \
            heuristic_schedule(self.output, self.sizes)
        (comp,) = m.compile_many([hs.to_json()])
        res = m.run("heuristic", comp, timeout=self.timeout_floor, verify=True)
        best.baseline = res.seconds
        ok = res.error is None and res.verified
        if ok:
            best.rule = res
        if self.heuristic != "seed" or not ok:
            return
        fv = features(lower(self.output, hs), self.sizes)
        if self.model is not None:
            self.model.add(fv, res.seconds)
        best.seconds, best.trace, best.result, best.beats_rule = res.seconds, hs.to_json(), \
            res, True
        self.strategy.add_seed(hs, res.seconds)
        self.emit(TrialRecord(-1, hs.to_json(), "measured", res.seconds, res.times,
                              res.compile_seconds, features=[float(x) for x in fv]))

    def run_batch(self, batch: list[Candidate]) -> int:
        """Claim the batch's schedules, compile them in the pool, then time them one by one;
        returns how many were measured (the rest, past the budget, end in the proposal study
        and their claims are released)."""
        batch = self.strategy.claim(batch)  # workers sharing the study: one measures each
        unrecorded = {c[1].to_json() for c in batch}
        try:
            return self._measure_claimed(batch, unrecorded)
        except KeyboardInterrupt:
            for trace in unrecorded:  # Ctrl-C: what has no record may be measured on --resume
                self.strategy.release(trace)
            raise

    def _measure_claimed(self, batch: list[Candidate], unrecorded: set[str]) -> int:
        m, best = self.measurer, self.best
        traces = [c[1].to_json() for c in batch]
        floor = self.timeout_floor
        limit = max(floor, 50 * best.seconds + 20) if np.isfinite(best.seconds) else floor
        compiled = m.compile_many(traces, timeout=limit)
        done = 0
        for (trial, _, fv, pred), trace, comp in zip(batch, traces, compiled):
            self.stop_if_interrupted()
            if self.measured + done >= self.trials or self.out_of_time():
                self.strategy.skip(trial, "the trial budget or time ran out (not measured)")
                self.strategy.release(trace)
                unrecorded.discard(trace)
                continue
            done += 1
            self.strategy.seen.add(trace)
            ref = min(best.seconds, best.baseline)
            budget = 10 * ref if np.isfinite(ref) else None
            # a run phase takes ~6 runs; one far past the best is cut off and told to the
            # search as a censored time (a lower bound), so TPE and the model learn from it
            deadline = min(limit, 100 * ref + 2.0) if np.isfinite(ref) else limit
            res = m.run(trace, comp, timeout=deadline, budget=budget)
            censored = None
            if res.error is not None and res.error.startswith("timeout") and deadline < limit:
                censored = deadline
                res.error = (f"timeout: cut off after {deadline:.2f} s (over 100x the best "
                             f"time); told to the search as a lower bound")
            confirm = None
            if res.error is None and res.seconds < best.seconds:
                check = m.run(trace, comp, verify=True, timeout=max(limit, 600.0))
                if check.verified is not True:
                    res.error = check.error or "result differs from the NumPy reference"
                else:
                    confirm = self.confirm_best(res)
            fl = [float(x) for x in fv]
            # what optuna-dashboard shows per trial: the schedule, its error, every timed run
            attrs: dict[str, Any] = {"trace": trace, "times": [float(t) for t in res.times],
                                     "target": self.db.target.to_dict()}
            if self.strategy.claims is not None:
                attrs["worker"] = self.strategy.claims.worker
            if res.error is not None:
                attrs["error"] = res.error
            if confirm is not None and confirm["won"] and confirm["beats_rule"]:
                # verified, confirmed, faster than the rule: other workers may adopt it
                attrs["confirmed"] = True
            done_state = optuna.trial.TrialState
            if censored is not None:  # told as a lower bound of its time
                number = self.strategy.finish(trial, done_state.COMPLETE, censored, attrs)
                if self.model is not None:
                    self.model.add(fv, censored)
                rec = TrialRecord(number, trace, "failed", error=res.error,
                                  compile_seconds=res.compile_seconds, predicted=pred,
                                  features=fl)
            elif res.error is not None:
                number = self.strategy.finish(trial, done_state.FAIL, None, attrs)
                rec = TrialRecord(number, trace, "failed", error=res.error,
                                  compile_seconds=res.compile_seconds, predicted=pred,
                                  features=fl)
            else:
                number = self.strategy.finish(trial, done_state.COMPLETE, res.seconds, attrs)
                rec = TrialRecord(number, trace, "measured", res.seconds, res.times,
                                  res.compile_seconds, predicted=pred, features=fl,
                                  confirm=confirm)
                if self.model is not None:
                    self.model.add(fv, res.seconds)
                if confirm is not None and confirm["won"]:
                    best.seconds, best.trace, best.result = res.seconds, trace, res
                    best.beats_rule = confirm["beats_rule"]
            self.emit(rec)
            unrecorded.discard(trace)
        return done

    def adopt_study_best(self, tries: int = 3) -> None:
        """Take the study's best confirmed schedule when another worker found it on a machine
        like this one (``TargetId.same_machine``) and it is faster than this worker's best: it
        is proven legal, compiled and verified against the NumPy reference here (not timed
        again: its screening time stands, as ``tensorlang cache import`` takes a log's) and
        becomes the best, so it reaches this worker's cache. A candidate that fails any check
        is passed over for the next fastest (at most ``tries``)."""
        best = self.best
        mine = {r.number for r in self.history}
        found = [t for t in confirmed_trials(self.strategy.main, self.db.target)[0]
                 if t.number not in mine and t.value < best.seconds
                 and t.user_attrs["trace"] != best.trace]
        for t in found[:tries]:
            trace = t.user_attrs["trace"]
            try:
                if not Schedule.from_json(self.output, trace).check().ok:
                    continue
            except (TensorlangError, ValueError, KeyError, TypeError):
                continue  # not a schedule of this algorithm: never run it
            (comp,) = self.measurer.compile_many([trace])
            check = self.measurer.run(trace, comp, verify=True, timeout=self.timeout_floor)
            if check.error is not None or check.verified is not True:
                continue
            best.seconds, best.trace, best.result, best.beats_rule = t.value, trace, check, True
            best.adopted = {"trial": t.number, "seconds": t.value,
                            "worker": t.user_attrs.get("worker")}
            return

    def confirm_best(self, res: MeasureResult) -> dict[str, Any]:
        """Re-measure a verified candidate that screened faster than the best, interleaved with
        the best and the rule-based schedule in the run worker (A/B rounds: the same conditions
        for all). It wins when its median is below the best's, and below the rule-based
        schedule's too unless ``heuristic="bound"``; its screening median (the protocol every
        candidate is measured with) then becomes the best time. A failed comparison is a
        loss."""
        best = self.best
        kernels = {"candidate": res}
        if best.result is not None:
            kernels["best"] = best.result
        if best.rule is not None and best.rule is not best.result:
            kernels["rule-based"] = best.rule
        if len(kernels) == 1:  # nothing to compare with: the first success wins
            return {"won": True, "beats_rule": True}
        slowest = max(res.seconds, *(k.seconds for k in kernels.values()))
        runs = block_runs(slowest)
        rounds = CONFIRM_ROUNDS if slowest < 0.05 else 3
        work = rounds * (runs + 1) * len(kernels) * slowest
        comp = self.measurer.compare(kernels, rounds=rounds, runs=runs,
                                     timeout=max(self.timeout_floor, 20 * work + 10))
        med = {label: comp.median(label) for label in kernels}
        # the rule-based schedule's time: its own label, or the best's when it is the best
        rule = med.get("rule-based", med.get("best", float("inf")))
        beats_rule = best.rule is None or med["candidate"] < rule
        others = [v for k, v in med.items() if k != "candidate"
                  and (k != "rule-based" or self.heuristic != "bound")]
        won = comp.error is None and med["candidate"] < min(others, default=float("inf"))
        out = {"won": bool(won), "beats_rule": bool(beats_rule), "rounds": rounds,
               "runs": runs, "times": {k: [float(t) for t in v] for k, v in comp.times.items()},
               "medians": {k: v if np.isfinite(v) else None for k, v in med.items()}}
        if comp.error is not None:
            out["error"] = comp.error
        return out
