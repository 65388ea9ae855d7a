"""The ``tensorlang`` CLI in real subprocesses: tune -> a new process hits the cache without
compiling; concurrent tuners on one cache; Ctrl-C then --resume; show / cache / bench."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tensorlang.autotuner.records import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(cache: str) -> dict[str, str]:
    env = dict(os.environ, TENSORLANG_CACHE=cache, PYTHONPATH=ROOT)
    env.pop("TENSORLANG_DUMP", None)
    return env


def _tl(args: list[str], cwd, cache: str, **kw) -> subprocess.Popen:
    kw.setdefault("env", _env(str(cache)))
    return subprocess.Popen([sys.executable, "-m", "tensorlang.autotuner.cli", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _run(args, cwd, cache, timeout=300) -> subprocess.CompletedProcess:
    p = _tl(args, cwd, cache)
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(args, p.returncode, out, err)


SECOND_PROCESS = """
import json, numpy as np, tensorlang as tl
from tensorlang.autotuner.workloads import BUILTIN
from tensorlang.backends.llvm.jit import STATS
C = BUILTIN["matmul"].build()
k = tl.compile(C, "auto", shapes={"M": 64, "N": 64, "K": 64})
a = np.random.default_rng(0).random((64, 64), dtype=np.float32)
b = np.random.default_rng(1).random((64, 64), dtype=np.float32)
ok = bool(np.allclose(k(a, b), a @ b, rtol=1e-4))
print(json.dumps({"source": k.schedule_source, "ok": ok, **STATS}))
"""


def test_tune_then_a_new_process_gets_the_tuned_kernel_without_compiling(tmp_path):
    cache = tmp_path / "cache"
    r = _run(["tune", "matmul", "--shape", "M=64,N=64,K=64", "--trials", "10", "--no-summary"],
             tmp_path, cache)
    assert r.returncode == 0, r.stderr
    assert "cache: wrote entry" in r.stdout
    log = tmp_path / "tuning_logs" / "matmul-M64-K64-N64.jsonl"
    recs = read_records(log)
    assert sum(x.state in ("measured", "failed") and x.trial >= 0 for x in recs) == 10
    p = subprocess.run([sys.executable, "-c", SECOND_PROCESS], cwd=tmp_path, env=_env(str(cache)),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"source": "cache", "ok": True, "llvm_compiles": 0, "object_loads": 1,
                   "memo_hits": 0}
    assert "TuningWarning" not in p.stderr


def test_two_concurrent_tuners_share_one_cache(tmp_path):
    cache = tmp_path / "cache"
    procs = [_tl(["tune", "matmul", "--shape", f"M={m},N=32,K=16", "--trials", "6",
                  "--no-summary", "--cost-model", "none"], tmp_path, cache) for m in (32, 48)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    r = _run(["cache", "list"], tmp_path, cache)
    assert "2 entries" in r.stdout and "M=32" in r.stdout and "M=48" in r.stdout
    for m in (32, 48):
        recs = read_records(tmp_path / "tuning_logs" / f"matmul-M{m}-K16-N32.jsonl")
        assert sum(x.state in ("measured", "failed") and x.trial >= 0 for x in recs) == 6


def test_sigint_during_tune_then_resume_loses_and_duplicates_nothing(tmp_path):
    cache = tmp_path / "cache"
    # a budget the first run cannot finish before the signal on any machine; the resumed run
    # then asks for only a few more trials in total
    args = ["tune", "matmul", "--shape", "M=48,N=48,K=48", "--no-summary", "--cost-model",
            "none", "--seed", "5"]
    log = tmp_path / "tuning_logs" / "matmul-M48-K48-N48.jsonl"
    # Ctrl-C as in a terminal, even if this test process inherited SIGINT ignored or blocked
    # (a child inherits both across exec, and would then never see the signal)
    def terminal_sigint():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    p = _tl([*args, "--trials", "1000"], tmp_path, cache, preexec_fn=terminal_sigint,
            env={**_env(str(cache)), "PYTHONFAULTHANDLER": "1"})
    deadline = time.time() + 240
    while time.time() < deadline:
        if log.exists() and sum(1 for line in open(log) if '"measured"' in line) >= 4:
            break
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # say where it hangs: faulthandler dumps every thread
        p.send_signal(signal.SIGABRT)
        _, err = p.communicate(timeout=60)
        pytest.fail(f"tensorlang tune still ran 120 s after Ctrl-C:\n{err[-6000:]}")
    assert p.returncode == 130, err
    assert "--resume" in err
    first = log.read_text().splitlines()
    done = sum(r.state in ("measured", "failed") and r.trial >= 0 for r in read_records(log))
    assert 3 <= done < 1000
    total = done + 4
    r = _run([*args, "--trials", str(total), "--resume"], tmp_path, cache)
    assert r.returncode == 0, r.stderr
    assert f"{done} measured earlier" in r.stdout
    lines = log.read_text().splitlines()
    assert lines[: len(first)] == first  # nothing lost or rewritten
    recs = read_records(log)
    assert sum(x.state in ("measured", "failed") and x.trial >= 0 for x in recs) == total
    assert len({x.trial for x in recs}) == len(recs)  # no trial recorded twice
    tried = [x.trace for x in recs if x.state in ("measured", "failed") and x.trial >= 0]
    assert len(set(tried)) == len(tried)  # no schedule measured twice, across the resume
    assert len({x.study for x in recs}) == 1


def _tune_blur(tmp_path, cache, h: int, w: int, trials: int):
    """``tensorlang tune blur`` on an H x W image without the kernel cache; returns its log."""
    r = _run(["tune", "blur", "--shape", f"H={h},W={w}", "--trials", str(trials), "--no-summary",
              "--no-cache"], tmp_path, cache)
    assert r.returncode == 0, r.stderr
    return tmp_path / "tuning_logs" / f"blur-H{h}-W{w}.jsonl"


def test_show_cache_import_export_and_bench(tmp_path):
    cache = tmp_path / "cache"
    log = _tune_blur(tmp_path, cache, 40, 37, trials=2)
    foreign = json.loads(log.read_text().splitlines()[0])
    foreign["target"]["cpu"] = "some-other-cpu"
    foreign["state"], foreign["seconds"] = "measured", 1e-9
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(foreign) + "\n")
    r = _run(["show", str(log), "--top", "3"], tmp_path, cache)
    assert r.returncode == 0 and 's["out"]' in r.stdout and "tuning curve" in r.stdout
    r = _run(["cache", "import", str(log), str(other)], tmp_path, cache)
    assert "imported 1 of 1" in r.stdout and "skipped 1 records of another CPU" in r.stdout
    r = _run(["cache", "export", "-o", str(tmp_path / "exp.jsonl")], tmp_path, cache)
    assert r.returncode == 0 and len(read_records(tmp_path / "exp.jsonl")) == 1
    r = _run(["bench", "blur", "--shape", "H=40,W=37"], tmp_path, cache)
    assert r.returncode == 0 and "tensorlang (cache)" in r.stdout and "numpy" in r.stdout
    r = _run(["cache", "clear"], tmp_path, cache)
    assert "removed 1 entries" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["tune", "nosuch"], "unknown workload 'nosuch'"),
    (["tune", "matmul", "--shape", "Q=3"], "--shape names Q"),
    (["tune", "missing.py:f", "--shape", "M=3"], "does not exist"),
    (["bench", "matmul", "--shape", "M=0"], "bad shape item 'M=0'"),
    (["bench", "missing.py:f", "--dtype", "float64"], "does not exist"),
])
def test_bad_arguments_are_one_clear_line(tmp_path, args, message):
    r = _run(args, tmp_path, tmp_path / "cache")
    assert r.returncode == 1
    assert message in r.stderr and "Traceback" not in r.stderr


def test_a_user_file_workload(tmp_path):
    (tmp_path / "alg.py").write_text(
        "import tensorlang as tl\n"
        "def scaled():\n"
        "    (N,) = tl.sizes('N')\n"
        "    X = tl.Input('X', (N,), tl.float32)\n"
        "    (i,) = tl.vars('i')\n"
        "    Y = tl.Func('Y')\n"
        "    Y[i] = X[i] * 2.0 + 1.0\n"
        "    return Y\n")
    r = _run(["bench", "alg.py:scaled", "--shape", "N=1000"], tmp_path, tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    assert "tensorlang (heuristic)" in r.stdout


def test_a_float64_builtin_is_tuned_into_its_own_log_and_refused_for_a_user_file(tmp_path):
    cache = tmp_path / "cache"
    r = _run(["tune", "matmul", "--dtype", "float64", "--shape", "M=9,N=20,K=7", "--trials", "3",
              "--no-summary", "--no-cache", "--no-transfer"], tmp_path, cache)
    assert r.returncode == 0, r.stderr
    log = tmp_path / "tuning_logs" / "matmul-float64-M9-K7-N20.jsonl"
    records = read_records(log)
    assert records and all(rec.workload.dtypes == {"A": "float64", "B": "float64"}
                           for rec in records)
    (tmp_path / "alg.py").write_text(
        "import tensorlang as tl\n"
        "def f():\n"
        "    (N,) = tl.sizes('N')\n"
        "    X = tl.Input('X', (N,), tl.float32)\n"
        "    (i,) = tl.vars('i')\n"
        "    Y = tl.Func('Y')\n"
        "    Y[i] = X[i] + 1.0\n"
        "    return Y\n")
    r = _run(["bench", "matmul", "--dtype", "float64", "--shape", "M=9,N=20,K=7"], tmp_path,
             cache)
    assert r.returncode == 0 and r.stdout.startswith("matmul-float64 M=9,N=20,K=7"), r.stdout
    r = _run(["bench", "alg.py:f", "--shape", "N=10", "--dtype", "float64"], tmp_path, cache)
    assert r.returncode == 1 and "has no float64 version" in r.stderr, r.stderr


def _older_feature_log(path, n: int) -> None:
    """A log of ``n`` measured blur schedules (34 x 34) as written before the last feature:
    real feature vectors of real loop nests, each one entry short."""
    import tensorlang as tl
    from tensorlang.autotuner.features import features
    from tensorlang.autotuner.records import RecordWriter, TuningRecord, target_info, \
        workload_info
    from tensorlang.autotuner.workloads import BUILTIN
    from tensorlang.schedule.lower import lower

    out = BUILTIN["blur"].build()
    sizes = {"H": 34, "W": 34}
    with RecordWriter(path) as w:
        for trial in range(n):
            s = tl.Schedule(out)
            if trial:
                s[out.name].split("y", trial + 1)
            seconds = 1e-5 * (trial + 1)
            w.write(TuningRecord(workload_info(out, sizes, "blur"), target_info(),
                                 json.loads(s.to_json()), "measured", seconds, [seconds],
                                 trial=trial,
                                 extra={"features": features(lower(out, s), sizes)[:-1].tolist()}))


def test_tune_warm_started_from_logs_of_an_older_feature_set(tmp_path):
    # the shipped logs predated the last feature, and warming the cost model only from them
    # crashed every `tensorlang tune` in scikit-learn (an all-missing feature column)
    cache = tmp_path / "cache"
    (tmp_path / "tuning_logs").mkdir()
    _older_feature_log(tmp_path / "tuning_logs" / "blur-H34-W34.jsonl", 8)  # >= min_samples
    r = _run(["tune", "matmul", "--shape", "M=24,N=40,K=16", "--trials", "1", "--no-summary",
              "--no-cache"], tmp_path, cache)
    assert r.returncode == 0, r.stderr
    assert "cost model warmed with 8 records" in r.stdout


def _log_of(path, name: str, sizes: dict, seconds: list[float]) -> None:
    """A small tuning log: the rule-based seed (trial -1, accepted) and measured trials."""
    import tensorlang as tl
    from tensorlang.autotuner.records import RecordWriter, TuningRecord, target_info, \
        workload_info
    from tensorlang.autotuner.workloads import BUILTIN

    out = BUILTIN["matmul"].build()
    with RecordWriter(path) as w:
        for n, s in enumerate(seconds):
            w.write(TuningRecord(workload_info(out, sizes, name), target_info(),
                                 json.loads(tl.Schedule(out).to_json()), "measured", s, [s],
                                 trial=n - 1, extra={"confirm": {"won": True, "beats_rule": True}}))


@pytest.mark.parametrize("argv,code,message", [
    ([], 2, "usage: tensorlang"),
    (["tune", "matmul", "--trials", "-3"], 2, "must be above 0, got -3"),
    (["tune", "matmul", "--timeout", "0"], 2, "must be above 0, got 0"),
    (["show", "x.jsonl", "--top", "0"], 2, "must be above 0"),
    (["cache", "clear", "extra"], 2, "cache clear takes no LOG arguments"),
    (["cache", "list", "-o", "f"], 2, "cache list takes no --output"),
    (["cache", "list", "--storage", "sqlite:///x.db"], 2, "cache list takes no --storage"),
    (["cache", "import", "--study", "s"], 2, "--study needs --storage URL"),
    (["cache", "import", "a.jsonl", "--storage", "sqlite:///x.db"], 2, "logs or --storage"),
    (["cache", "import", "--storage", "postgresql://me:pw@127.0.0.1:1/x"], 1,
     "cannot read the studies of postgresql://me:***@127.0.0.1:1/x"),
    (["tune", "matmul", "--resume", "--storage", "postgresql://me:pw@127.0.0.1:1/x"], 1,
     "cannot open the tuning storage postgresql://me:***@127.0.0.1:1/x"),
])
def test_cli_refuses_what_it_would_ignore(argv, code, message, tmp_path, monkeypatch, capsys):
    from tensorlang.autotuner import cli

    monkeypatch.setenv("TENSORLANG_CACHE", str(tmp_path / "cache"))
    try:
        got = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusals
        got = exc.code
    assert got == code
    assert message in capsys.readouterr().err


def test_show_plot_draws_every_log_and_needs_matplotlib(tmp_path, monkeypatch, capsys):
    from tensorlang.autotuner import cli

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _log_of(a, "mm", {"M": 8, "N": 8, "K": 8}, [3e-3, 2e-3, 1e-3])
    _log_of(b, "mm", {"M": 16, "N": 16, "K": 16}, [9e-3, 4e-3])
    monkeypatch.setattr(cli, "_pyplot", lambda: None)
    png = tmp_path / "curve.png"
    assert cli.main(["show", str(a), str(b), "--plot", str(png)]) == 2
    assert "pip install 'tensorlang[plot]'" in capsys.readouterr().err and not png.exists()
    monkeypatch.undo()
    pytest.importorskip("matplotlib")
    drawn = []
    real = cli._plot
    monkeypatch.setattr(cli, "_plot", lambda plt, curves, path: (drawn.append(curves),
                                                                  real(plt, curves, path)))
    assert cli.main(["show", str(a), str(b), "--plot", str(png)]) == 0
    assert png.exists() and png.stat().st_size > 0
    assert [label for label, _ in drawn[0]] == ['mm {"M": 8, "K": 8, "N": 8}',
                                                 'mm {"M": 16, "K": 16, "N": 16}']


def test_a_file_that_is_not_a_log_is_one_warning(tmp_path):
    import warnings

    from tensorlang.autotuner.records import RecordWarning

    text = tmp_path / "notes.txt"
    text.write_text("".join(f"line {n} of some notes\n" for n in range(260)))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert read_records(text) == []
    msgs = [str(w.message) for w in got if issubclass(w.category, RecordWarning)]
    assert len(msgs) == 1 and "is not a tuning log: none of its 260 lines is a record" in msgs[0]
    log = tmp_path / "mostly_bad.jsonl"
    _log_of(log, "mm", {"M": 8, "N": 8, "K": 8}, [1e-3])
    with open(log, "a") as f:
        f.write("".join(f"garbage {n}\n" for n in range(20)))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert len(read_records(log)) == 1
    msgs = [str(w.message) for w in got if issubclass(w.category, RecordWarning)]
    assert len(msgs) == 6 and "skipped 15 more corrupt lines" in msgs[-1]


def test_json_outputs_for_scripts(tmp_path, monkeypatch, capsys):
    from tensorlang.autotuner import cli

    monkeypatch.setenv("TENSORLANG_CACHE", str(tmp_path / "cache"))
    assert cli.main(["target", "--json"]) == 0
    target = json.loads(capsys.readouterr().out)
    assert target["backend"] == "llvm-cpu" and target["threads"] >= 1 and "features" in target
    log = tmp_path / "a.jsonl"
    _log_of(log, "mm", {"M": 8, "N": 8, "K": 8}, [3e-3, 2e-3, 1e-3])
    assert cli.main(["show", str(log), "--json", "--top", "2"]) == 0
    (show,) = json.loads(capsys.readouterr().out)
    assert show["workload"] == "mm" and show["sizes"] == {"M": 8, "N": 8, "K": 8}
    assert show["measured"] == 3 and show["best"]["seconds"] == 1e-3
    assert [t["seconds"] for t in show["top"]] == [1e-3, 2e-3]
    assert show["curve"] == [3e-3, 2e-3, 1e-3] and "schedule" in show["best"]
    assert cli.main(["cache", "import", str(log)]) == 0
    capsys.readouterr()
    assert cli.main(["cache", "list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [e["seconds"] for e in listing["entries"]] == [1e-3]
    assert listing["entries"][0]["object_bytes"] is None  # compiled on first use
    assert cli.main(["bench", "blur", "--shape", "H=40,W=37", "--json",
                     "--schedule", "heuristic"]) == 0
    bench = json.loads(capsys.readouterr().out)
    labels = {row["label"]: row for row in bench["rows"]}
    assert set(labels) == {"tensorlang (heuristic)", "numpy"}
    row = labels["tensorlang (heuristic)"]
    assert row["n"] >= 7 and row["q1"] <= row["median"] <= row["q3"] and row["min"] > 0
    assert cli.main(["cache", "clear", "--json"]) == 2
