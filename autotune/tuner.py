"""The search loop: Optuna proposes, the legality check prunes, the measurer times.

Each round: ``study.ask()`` -> a schedule from the search space -> ``Schedule.check()`` (an illegal
candidate is told to Optuna as *pruned* and counted, never compiled) -> measured in the worker
process -> ``study.tell(seconds)``; a failed candidate (crash, timeout, compile error) is told as
*failed* and its error kept. A candidate that beats the best so far is run again with the NumPy
reference check and accepted only if it matches. The per-candidate timeout follows the best time:
``max(timeout_floor, 50 x best + 20 s)`` for compiling and again for running, and a candidate
whose warm-up run takes over 10x the best time is not repeated, so hopeless candidates cost little.

With ``cost_model="gbt"`` (the default) the loop runs in rounds: Optuna proposes ``pool``
candidates, the illegal ones are pruned, the learned cost model (``cost_model.py``) ranks the rest
by predicted time from their features (``features.py``), and the best ``measure_per_round - 1`` plus
one random exploratory candidate are measured; the model is refit after each round. Unmeasured
proposals are told to Optuna as failed, so they do not bias TPE. ``trials`` counts measured
candidates. ``cost_model="none"`` measures every legal proposal (for ablations).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import optuna

from schedule.lower import lower
from schedule.schedule import Schedule
from tensorlang.errors import ScheduleError, ShapeError
from tensorlang.func import Func

from .cost_model import CostModel
from .features import features
from .measure import Measurer
from .space import SearchSpace


@dataclass
class TrialRecord:
    """One proposal: its trace, state (``measured``, ``pruned``, ``failed``), median seconds
    (``inf`` unless measured), all timed runs, compile seconds, error text, wall-clock time."""

    number: int
    trace: str
    state: str
    seconds: float = float("inf")
    times: list[float] = field(default_factory=list)
    compile_seconds: float = 0.0
    error: str | None = None
    timestamp: float = field(default_factory=time.time)


@dataclass
class TuningResult:
    """The best schedule found, its median seconds, and every proposal in order."""

    output: Func
    best_trace: str | None
    best_seconds: float
    history: list[TrialRecord]

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
        """Best median seconds after each proposal (``inf`` until one succeeds)."""
        out, best = [], float("inf")
        for r in self.history:
            best = min(best, r.seconds)
            out.append(best)
        return out


def _sizes(output: Func, shapes: dict[str, int] | None, arrays: dict[str, np.ndarray] | None
           ) -> dict[str, int]:
    from tensorlang.pipeline import Pipeline

    p = Pipeline(output)
    if shapes is not None:
        missing = [s for s in p.sizes if s not in shapes]
        if missing:
            raise ShapeError(f"shapes= gives no value for size {missing[0]}")
        return {k: int(v) for k, v in shapes.items()}
    if arrays is None:
        raise ShapeError("tl.autotune needs shapes={size: value} or example arrays")
    b = p.bind({k: np.asarray(v).shape for k, v in arrays.items()})
    return dict(b.sizes)


def autotune(output: Func, shapes: dict[str, int] | None = None, *,
             arrays: dict[str, np.ndarray] | None = None, trials: int = 50,
             timeout: float | None = None, seed: int = 0, sampler: str = "tpe",
             repeats: int = 5, min_seconds: float = 0.05, timeout_floor: float = 60.0,
             measure_hook: Callable | None = None,
             progress: Callable[[TrialRecord, float], Any] | None = None,
             space: Any = None, cost_model: str = "gbt", pool: int = 24,
             measure_per_round: int = 4, jobs: int | None = None) -> TuningResult:
    """Search schedules of ``output`` for the given sizes and return the fastest verified one.

    Args:
        output: the output Func. shapes: concrete sizes by name (``{"M": 1024, ...}``), or
        arrays: example input arrays by Input name (their shapes give the sizes).
        trials: proposals to make; timeout: stop after this many seconds of tuning (wall clock).
        seed: seeds the sampler (with ``sampler="random"`` the proposals are reproducible).
        sampler: ``"tpe"`` (Optuna's TPE) or ``"random"``.
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

    Returns:
        A ``TuningResult``; ``best_trace`` is None when no candidate succeeded.

    Raises:
        ShapeError: the sizes or arrays do not fit the algorithm.
    """
    sizes = _sizes(output, shapes, arrays)
    space = space if space is not None else SearchSpace(output, sizes)
    samplers = {"tpe": lambda: optuna.samplers.TPESampler(seed=seed, n_startup_trials=10),
                "random": lambda: optuna.samplers.RandomSampler(seed=seed)}
    if sampler not in samplers:
        raise ValueError(f"sampler must be one of {sorted(samplers)}, got {sampler!r}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=samplers[sampler]())
    history: list[TrialRecord] = []
    start = time.perf_counter()
    model = CostModel(seed=seed) if cost_model == "gbt" else None
    if cost_model not in ("gbt", "none"):
        raise ValueError(f"cost_model must be 'gbt' or 'none', got {cost_model!r}")
    rng = np.random.default_rng(seed)
    state = {"best": float("inf"), "trace": None}

    def out_of_time() -> bool:
        return timeout is not None and time.perf_counter() - start > timeout

    with Measurer(output, sizes, space.shapes, repeats=repeats, min_seconds=min_seconds,
                  timeout=timeout_floor, hook=measure_hook, jobs=jobs) as m:

        def run_batch(batch: list[tuple[Any, Schedule, np.ndarray | None]]) -> int:
            """Compile the batch in the pool, then time its candidates one by one; returns how
            many were measured (the rest, past the budget, are told to Optuna as failed)."""
            traces = [c[1].to_json() for c in batch]
            best = state["best"]
            limit = max(timeout_floor, 50 * best + 20) if np.isfinite(best) else timeout_floor
            compiled = m.compile_many(traces, timeout=limit)
            done = 0
            for (trial, _, fv), trace, comp in zip(batch, traces, compiled):
                if measured + done >= trials or out_of_time():
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    continue
                done += 1
                best = state["best"]
                budget = 10 * best if np.isfinite(best) else None
                res = m.run(trace, comp, timeout=limit, budget=budget)
                if res.error is None and res.seconds < best:
                    check = m.run(trace, comp, verify=True, timeout=max(limit, 600.0))
                    if check.verified is not True:
                        res.error = check.error or "result differs from the NumPy reference"
                if res.error is not None:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    rec = TrialRecord(len(history), trace, "failed", error=res.error,
                                      compile_seconds=res.compile_seconds)
                else:
                    study.tell(trial, res.seconds)
                    rec = TrialRecord(len(history), trace, "measured", res.seconds, res.times,
                                      res.compile_seconds)
                    if model is not None and fv is not None:
                        model.add(fv, res.seconds)
                    if res.seconds < best:
                        state["best"], state["trace"] = res.seconds, trace
                history.append(rec)
                if progress is not None:
                    progress(rec, state["best"])
            return done

        def prune(trial: Any, s: Schedule, why: str) -> None:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            history.append(TrialRecord(len(history), s.to_json(), "pruned", error=why))
            if progress is not None:
                progress(history[-1], state["best"])

        def propose() -> tuple[Any, Schedule, np.ndarray] | None:
            """Ask Optuna for a schedule; prove it legal and lower it (its features come from
            the loop nest). An illegal or unrealizable one is pruned: None."""
            trial = study.ask()
            s = space.sample(trial)
            report = s.check()
            if not report.ok:
                prune(trial, s, report.problems[0].message())
                return None
            try:
                return trial, s, features(lower(output, s), sizes)
            except ScheduleError as exc:  # a placement lowering cannot realize
                prune(trial, s, str(exc))
                return None

        measured = 0
        while measured < trials and not out_of_time():
            if sum(r.state == "pruned" for r in history) > 20 * max(trials, 1):
                break  # the space is (almost) all illegal
            if model is None:
                cand = propose()
                if cand is not None:
                    measured += run_batch([cand])
                continue
            cands = [c for c in (propose() for _ in range(pool)) if c is not None]
            if not cands:
                continue
            pred = model.predict(np.stack([c[2] for c in cands]))
            order = list(rng.permutation(len(cands))) if pred is None else list(np.argsort(pred))
            take = order[: max(1, measure_per_round - 1)]
            rest = order[len(take):]
            if rest:
                take.append(rest[int(rng.integers(len(rest)))])  # one exploratory pick
            measured += run_batch([cands[idx] for idx in take])
            for idx in set(range(len(cands))) - set(take):
                study.tell(cands[idx][0], state=optuna.trial.TrialState.FAIL)
            model.fit()
    best, best_trace = state["best"], state["trace"]
    return TuningResult(output, best_trace, best, history)
