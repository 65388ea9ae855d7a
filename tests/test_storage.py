"""Shared tuning storage: storage URLs, schedule claims, and several workers on one study in a
real PostgreSQL server (``postgres_server.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import optuna
import pytest
from postgres_server import postgres_url

from tensorlang.autotuner.cache import KernelCache
from tensorlang.autotuner.records import read_records
from tensorlang.autotuner.storage import ScheduleClaims, redacted, storage_url
from tensorlang.errors import TuningError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_plain_postgresql_url_uses_psycopg_3_and_others_are_kept():
    pytest.importorskip("psycopg")
    assert storage_url("postgresql://u:p@db:5432/tl") == "postgresql+psycopg://u:p@db:5432/tl"
    assert storage_url("postgres://db/tl") == "postgresql+psycopg://db/tl"
    for url in ("sqlite:////tmp/x.db", "postgresql+psycopg2://db/tl", "mysql+pymysql://db/t"):
        assert storage_url(url) == url


def test_without_psycopg_a_postgresql_url_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    with pytest.raises(TuningError, match=r"pip install 'tensorlang\[postgres\]'") as e:
        storage_url("postgresql://me:secret@db/tl")
    assert "secret" not in str(e.value)


def test_passwords_never_printed():
    assert redacted("postgresql://me:s3cr@t@db:5432/tl") == "postgresql://me:***@db:5432/tl"
    assert redacted("postgresql://me@db/tl") == "postgresql://me@db/tl"
    assert redacted("sqlite:////tmp/a.db") == "sqlite:////tmp/a.db"


def test_an_unreachable_server_is_a_tuning_error_not_a_traceback():
    pytest.importorskip("psycopg")
    import tensorlang as tl
    from algorithms import matmul

    out, _ = matmul()
    with pytest.raises(TuningError, match="cannot open the tuning storage .*:\\*\\*\\*@"):
        tl.autotune(out, {"M": 4, "N": 4, "K": 4}, trials=1, cache=False,
                    storage="postgresql://me:secret@127.0.0.1:1/none")


def _claims_race(url: str, study: str, n_workers: int = 4, n_traces: int = 40) -> None:
    """Workers claim the same traces at once: every trace is held by exactly one of them."""
    workers = [ScheduleClaims(url, study, worker=f"w{i}") for i in range(n_workers)]
    won: list[list[str]] = [[] for _ in workers]
    start = threading.Barrier(n_workers)

    def go(i: int) -> None:
        start.wait()
        for k in range(n_traces):
            if workers[i].claim(f'{{"trace": {k}}}', proposal=k) is None:
                won[i].append(str(k))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    allwon = [k for w in won for k in w]
    assert sorted(allwon, key=int) == [str(k) for k in range(n_traces)]  # each exactly once
    owner = next(i for i, w in enumerate(won) if "0" in w)
    other = workers[(owner + 1) % n_workers]
    assert other.claim('{"trace": 0}', proposal=99) == f"proposal 0 of w{owner}"
    other.release('{"trace": 0}')  # not its claim: nothing happens
    assert other.owner('{"trace": 0}') == f"proposal 0 of w{owner}"
    workers[owner].release('{"trace": 0}')  # not measured after all: free again
    assert other.claim('{"trace": 0}', proposal=99) is None
    assert other.count() == n_traces
    for w in workers:
        w.close()


def test_claims_in_sqlite_go_to_one_worker_each(tmp_path):
    _claims_race(f"sqlite:///{tmp_path / 's.db'}", "study-a")


@pytest.fixture(scope="module")
def postgres():
    pytest.importorskip("psycopg", reason="the tensorlang[postgres] extra (psycopg 3)")
    with postgres_url() as url:
        yield url


def test_claims_in_postgresql_go_to_one_worker_each(postgres):
    _claims_race(storage_url(postgres), "study-b")


def _worker(tmp_path, name: str, storage: str, study: str, trials: int) -> subprocess.Popen:
    cwd = tmp_path / name
    cwd.mkdir()
    env = dict(os.environ, TENSORLANG_CACHE=str(cwd / "cache"), PYTHONPATH=ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "tensorlang.autotuner.cli", "tune", "matmul", "--shape",
         "M=24,N=24,K=24", "--trials", str(trials), "--storage", storage, "--study", study,
         "--cost-model", "none", "--no-summary", "--no-transfer", "--seed", name[-1]],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_workers_sharing_a_postgresql_study_never_measure_a_schedule_twice(postgres, tmp_path):
    # three tuners at once on one study, as on three machines (each its own log and cache)
    names, trials, study = ["w1", "w2", "w3"], 6, "matmul-farm"
    procs = [_worker(tmp_path, n, postgres, study, trials) for n in names]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    logs = [read_records(tmp_path / n / "tuning_logs" / "matmul-M24-K24-N24.jsonl")
            for n in names]
    measured = [r for recs in logs for r in recs if r.state in ("measured", "failed")
                and r.trial >= 0]
    assert len(measured) == trials * len(names)  # each worker measured its budget
    traces = [r.trace for r in measured]
    assert len(set(traces)) == len(traces)  # never the same schedule twice, across workers
    assert len({r.trial for r in measured}) == len(measured)  # one study's trial numbers

    st = optuna.load_study(study_name=study, storage=storage_url(postgres))
    done = [t for t in st.trials if t.state in (optuna.trial.TrialState.COMPLETE,
                                                 optuna.trial.TrialState.FAIL)
            and "skipped" not in t.user_attrs and not t.user_attrs.get("rule_based")]
    assert sorted(t.number for t in done) == sorted(r.trial for r in measured)
    assert sum(bool(t.user_attrs.get("rule_based")) for t in st.trials) == 1  # once
    assert all("trace" in t.user_attrs and "target" in t.user_attrs for t in done)
    confirmed = [t for t in done if t.user_attrs.get("confirmed")]
    best = min(confirmed, key=lambda t: t.value) if confirmed else None

    # every worker's cache gets the study's best: pull it once all have finished
    for n in names:
        env = dict(os.environ, TENSORLANG_CACHE=str(tmp_path / n / "cache"), PYTHONPATH=ROOT)
        r = subprocess.run([sys.executable, "-m", "tensorlang.autotuner.cli", "cache",
                            "import", "--storage", postgres, "--study", study],
                           cwd=tmp_path / n, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        with KernelCache(tmp_path / n / "cache" / "kernels.sqlite") as kc:
            (entry,) = [e for e in kc.entries() if e.workload.name == "matmul"]
        rule = [x.trace for x in logs[names.index(n)] if x.trial == -1]
        if best is None:  # no candidate beat the rule-based schedule: each keeps its own
            assert "imported 0 of 0" in r.stdout and entry.trace in rule
            continue
        # the study's best, or this worker's own rule-based schedule where that measured faster
        assert (entry.trace, entry.seconds) == (best.user_attrs["trace"], best.value) or (
            entry.trace in rule and entry.seconds <= best.value)
        assert json.loads(best.user_attrs["trace"])  # a schedule trace, not a placeholder


def _study_trial(study, trace: str, seconds: float, target: dict, confirmed: bool = True):
    study.add_trial(optuna.trial.create_trial(
        params={}, distributions={}, value=seconds,
        user_attrs={"trace": trace, "target": target, "confirmed": confirmed,
                    "worker": "elsewhere:1"}))


def test_a_worker_adopts_the_study_best_found_elsewhere_verified_never_blindly(tmp_path):
    import tensorlang as tl
    from tensorlang.autotuner.records import target_info
    from tensorlang.autotuner.workloads import BUILTIN

    out = BUILTIN["matmul"].build()
    sizes = {"M": 13, "N": 7, "K": 5}
    url, name = f"sqlite:///{tmp_path / 'study.db'}", "shared"
    study = optuna.create_study(storage=url, study_name=name, direction="minimize")
    me = target_info().to_dict()
    good = tl.Schedule(out)
    good[out].vectorize("j", 4)
    illegal = tl.Schedule(out)
    illegal[out].parallel("k")  # recorded, refused by the legality check
    # faster than anything can be, but each unusable: an illegal schedule, another CPU's, and
    # one that did not win its confirmation; then a usable one
    _study_trial(study, illegal.to_json(), 1e-12, me)
    _study_trial(study, tl.Schedule(out).to_json(), 1e-12, {**me, "cpu": "another-cpu"})
    _study_trial(study, tl.Schedule(out).to_json(), 1e-12, me, confirmed=False)
    _study_trial(study, good.to_json(), 1e-11, me)
    cache = KernelCache(tmp_path / "k.sqlite")
    res = tl.autotune(out, sizes, trials=2, seed=1, repeats=1, min_seconds=0.0, storage=url,
                      study_name=name, cost_model="none", cache=cache)
    assert res.adopted == {"trial": 3, "seconds": 1e-11, "worker": "elsewhere:1"}
    assert res.best_trace == good.to_json() and res.best_seconds == 1e-11
    (entry,) = list(cache.entries())
    assert entry.trace == good.to_json() and entry.object_code  # verified here, compiled
    from tensorlang.autotuner.auto import compile_auto

    kern = compile_auto(out, sizes, cache=cache)
    assert kern.schedule_source == "cache"
    a = np.random.default_rng(0).standard_normal((13, 5)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    assert np.allclose(kern(A=a, B=b), a @ b, rtol=1e-5, atol=1e-5)
    cache.close()


def test_the_illegal_study_best_alone_is_not_adopted(tmp_path):
    import tensorlang as tl
    from tensorlang.autotuner.records import target_info
    from tensorlang.autotuner.workloads import BUILTIN

    out = BUILTIN["matmul"].build()
    url, name = f"sqlite:///{tmp_path / 'study.db'}", "shared"
    study = optuna.create_study(storage=url, study_name=name, direction="minimize")
    illegal = tl.Schedule(out)
    illegal[out].parallel("k")
    _study_trial(study, illegal.to_json(), 1e-12, target_info().to_dict())
    res = tl.autotune(out, {"M": 8, "N": 8, "K": 8}, trials=1, seed=1, repeats=1,
                      min_seconds=0.0, storage=url, study_name=name, cost_model="none",
                      cache=False)
    assert res.adopted is None and res.best_trace != illegal.to_json()
