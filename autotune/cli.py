"""The ``tensorlang`` command line (argparse).

::

    tensorlang tune WORKLOAD --shape M=1024,N=1024,K=1024 [--dtype float64] [--trials N]
                    [--timeout S] [--log PATH] [--seed S] [--resume] [--storage URL]
                    [--study NAME] [--cost-model gbt|none] [--no-cache]
    tensorlang show LOG [--top K] [--plot curve.png]
    tensorlang cache list | import LOG... | import --storage URL [--study NAME] | export [-o FILE]
                     | clear
    tensorlang bench WORKLOAD --shape ... [--dtype float64] [--schedule auto|heuristic|default]
    tensorlang target [--features]

WORKLOAD is a built-in name (``autotune/workloads.py``: matmul, batch_matmul, conv2d, blur,
softmax, layernorm) or ``path/to/file.py:function`` (a function of no arguments returning the
output Func; ``--shape`` binds its size symbols by name; ``--dtype`` picks a built-in's element
type, float32 unless given). Exit status: 0 on success, 1 on a tensorlang error (printed as one
line, no traceback), 2 on bad arguments, 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any


def _cmd_target(args: argparse.Namespace) -> int:
    from tensorlang.backends.base import get_backend

    backend = get_backend()
    t, info = backend.host_target(), backend.target_info()
    if args.json:
        _json_out({**info, "vector_bits": getattr(t, "vector_bits", None)})
        return 0
    print(f"backend:  {backend.name}\ntriple:   {info['triple']}\ncpu:      {info['cpu']}")
    if hasattr(t, "vector_bits"):
        print(f"vector:   {t.vector_bits}-bit SIMD")
    print(f"llvm:     {info['llvm']} (llvmlite {info['llvmlite']})\nthreads:  {info['threads']}")
    if args.features:
        print(f"features: {info['features']}")
    return 0


# -- helpers -------------------------------------------------------------------------------------
def _json_out(data: Any) -> None:
    """``data`` as one JSON document on stdout (``--json``: for scripts; times in seconds)."""
    import json

    print(json.dumps(data, indent=1, sort_keys=True, allow_nan=False,
                     default=lambda o: None if o != o or o in (float("inf"), -float("inf"))
                     else str(o)))


def _finite(x: Any) -> Any:
    """A float for JSON: None where it is not finite (JSON has no inf or NaN)."""
    return x if isinstance(x, (int, float)) and x == x and abs(x) != float("inf") else None


def _workload(args: argparse.Namespace) -> tuple[Any, Any, dict[str, int]]:
    """(Workload, output Func, sizes) from WORKLOAD, --dtype and --shape. A built-in workload
    over another element type than its first is named with it (``matmul-float64``: its own log
    and study)."""
    import dataclasses

    from tensorlang.errors import ShapeError
    from tensorlang.pipeline import Pipeline

    from .workloads import get_workload, parse_shape

    work = get_workload(args.workload)
    try:
        given = parse_shape(args.shape or "")
    except ValueError as exc:
        raise ShapeError(f"--shape: {exc}") from exc
    dtype = getattr(args, "dtype", None)
    out = work.build_as(dtype)
    if dtype is not None and work.dtypes and dtype != work.dtypes[0]:
        work = dataclasses.replace(work, name=f"{work.name}-{dtype}")
    needed = Pipeline(out).sizes
    sizes = {k: v for k, v in {**work.shape, **given}.items() if k in needed}
    unknown = sorted(set(given) - set(needed))
    if unknown:
        raise ShapeError(f"--shape names {', '.join(unknown)}, which {args.workload} does not "
                         f"have; its sizes are {', '.join(needed)}")
    missing = [k for k in needed if k not in sizes]
    if missing:
        raise ShapeError(f"--shape gives no value for {', '.join(missing)} (sizes of "
                         f"{args.workload}: {', '.join(needed)})")
    return work, out, sizes


def _fmt_s(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "-"
    return f"{seconds * 1e3:.3f} ms"


def _compare(work: Any, out: Any, sizes: dict[str, int], kernels: list[tuple[str, Any]],
             as_json: bool = False) -> list[dict[str, Any]]:
    """Time the kernels and NumPy in this process in interleaved blocks (``timing.interleaved``,
    NumPy's BLAS threads given time to settle after its blocks); print n, median, spread,
    GFLOP/s and the ratio to NumPy per row (``as_json``: print nothing). Returns the rows:
    label, n, median / q1 / q3 / min / max seconds, GFLOP/s and NumPy's median over the row's."""
    import time

    from tensorlang.pipeline import Pipeline

    from tensorlang.backends.base import get_backend

    from .measure import aligned_copy, random_inputs
    from .timing import MIN_RUN_SECONDS, Stats, block_runs, interleaved
    from .workloads import free_sizes, input_shapes

    # inputs and outputs placed as the tuner's run worker places them (2 MB or cache-line
    # aligned): where NumPy happened to put an array otherwise moves a kernel's time by tens of
    # percent (two compilations of one schedule measured 0.45 and 0.62 ms side by side)
    backend = get_backend()
    arrays = {k: aligned_copy(backend, v) for k, v in
              random_inputs(Pipeline(out), input_shapes(out, sizes)).items()}
    extra = free_sizes(out, sizes)
    calls = {}
    for label, k in kernels:
        o = aligned_copy(backend, k(**arrays, **extra))
        calls[label] = lambda k=k, o=o: k(**arrays, **extra, out=o)
    if work.numpy is not None:
        calls["numpy"] = work.numpy(arrays)
    slowest = 0.0
    for fn in calls.values():  # the second of two untimed calls each: the block size
        fn()
        t0 = time.perf_counter()
        fn()
        slowest = max(slowest, time.perf_counter() - t0)
    times = interleaved(calls, rounds=7, runs=block_runs(slowest, block_seconds=0.03),
                        settle=("numpy",), min_run_seconds=MIN_RUN_SECONDS)
    stats = {label: Stats.of(ts) for label, ts in times.items()}
    flops = work.flops(sizes) if work.flops else 0.0
    t_np = stats["numpy"].median if "numpy" in stats else float("nan")
    rows = [{"label": label, "n": st.n, "median": st.median, "q1": st.q1, "q3": st.q3,
             "min": st.min, "max": st.max,
             "gflops": _finite(flops / st.median / 1e9) if flops else None,
             "numpy_over_this": _finite(t_np / st.median)} for label, st in stats.items()]
    if as_json:
        return rows
    print(f"{'':<24}{'n':>5}{'median':>12}{'IQR (ms)':>19}{'min-max (ms)':>19}{'GFLOP/s':>9}"
          f"{'vs numpy':>10}")
    for label, st in stats.items():
        gf = f"{flops / st.median / 1e9:.1f}" if flops else "-"
        ratio = f"{t_np / st.median:.2f}x" if t_np == t_np else "-"
        print(f"{label:<24}{st.n:>5}{_fmt_s(st.median):>12}"
              f"{f'{st.q1 * 1e3:.3f}-{st.q3 * 1e3:.3f}':>19}"
              f"{f'{st.min * 1e3:.3f}-{st.max * 1e3:.3f}':>19}{gf:>9}{ratio:>10}")
    print("(interleaved blocks: 7 rounds, every row timed in each; vs numpy = NumPy's median / "
          "the row's)")
    return rows


# -- tune ----------------------------------------------------------------------------------------
def _default_log(name: str, sizes: dict[str, int]) -> str:
    from .workloads import sizes_tag

    return os.path.join("tuning_logs", f"{name}-{sizes_tag(sizes)}.jsonl")


def _study(storage: str, base: str, resume: bool, study: str | None) -> str:
    """The study name: ``study`` (created or joined), the latest ``base-<time>`` study in
    ``storage`` for --resume, else a new one."""
    import optuna
    import sqlalchemy

    from tensorlang.errors import TensorlangError

    from .storage import redacted, storage_url

    if study:
        return study
    if not resume:
        return f"{base}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    try:
        summaries = optuna.get_all_study_summaries(storage_url(storage))
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise TensorlangError(f"cannot open the tuning storage {redacted(storage)}: "
                              f"{str(getattr(exc, 'orig', None) or exc).strip()}") from None
    names = [s.study_name for s in summaries if s.study_name.startswith(base + "-")]
    if not names:
        raise TensorlangError(f"--resume: no study of this workload and shape in "
                              f"{redacted(storage)}; run without --resume to start one")
    return max(names)


def _cmd_tune(args: argparse.Namespace) -> int:
    from tensorlang.backends.compile import compile as compile_kernel

    from .records import read_records, target_info, workload_info
    from .storage import redacted
    from .tuner import autotune
    from .workloads import format_shape

    work, out, sizes = _workload(args)
    backend = "cuda" if args.target == "cuda" else None
    info = workload_info(out, sizes, work.name)
    log = args.log or _default_log(work.name, info.sizes)
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    storage = args.storage or "sqlite:///" + os.path.abspath(os.path.splitext(log)[0] +
                                                              ".optuna.db")
    name = _study(storage, info.study_base(), args.resume, args.study)
    logs_dir = os.path.dirname(os.path.abspath(log))
    transfer = []
    if args.transfer and os.path.isdir(logs_dir):
        me = target_info(backend=backend)
        for f in sorted(os.listdir(logs_dir)):
            path = os.path.join(logs_dir, f)
            if f.endswith(".jsonl") and os.path.abspath(path) != os.path.abspath(log):
                transfer += [r for r in read_records(path) if r.ok and r.target.same_machine(me)
                             and r.workload.key != info.key]
    print(f"tuning {work.name} {format_shape(info.sizes)}: "
          f"{args.trials} measured trials" + (f", at most {args.timeout:.0f} s" if args.timeout
                                              else "") +
          f"\n  log {log}\n  study {name} in {redacted(storage)}" +
          (f"\n  cost model warmed with {len(transfer)} records of other workloads"
           if transfer else ""), flush=True)
    bar = _progress(args.trials)

    def progress(rec: Any, best: float) -> None:
        if rec.state != "pruned" and rec.number >= 0 and bar is not None:  # not the seed
            bar.update(1)
            bar.set_postfix_str(f"best {_fmt_s(best)}", refresh=False)

    res = autotune(out, sizes, trials=args.trials, timeout=args.timeout, seed=args.seed,
                      cost_model=args.cost_model, log=log, workload_name=work.name,
                      storage=storage, study_name=name, transfer=transfer,
                      cache=not args.no_cache, progress=progress, backend=backend)
    if bar is not None:
        bar.close()
    measured = sum(r.state == "measured" for r in res.history)
    print(f"{measured} measured, {res.failed} failed, {res.pruned} pruned (illegal) this run" +
          (f"; {res.resumed} measured earlier in this study" if res.resumed else ""))
    if res.interrupted:
        print(f"interrupted: every record so far is in {log}; continue with the same command "
              f"and --resume", file=sys.stderr)
        return 130
    if res.best_trace is None:
        print("no candidate succeeded; see the errors in the log", file=sys.stderr)
        return 1
    if res.adopted is not None:
        a = res.adopted
        print(f"best: trial {a['trial']} of the study, by {a['worker'] or 'another worker'} "
              f"({_fmt_s(a['seconds'])} there); verified here")
    if res.cache_entry is not None:
        from .cache import KernelCache

        print(f"cache: {'wrote' if res.cache_updated else 'kept the faster existing'} entry "
              f"{res.cache_entry.key[:12]} in {KernelCache().path}")
    if backend is not None and not args.no_summary:
        print("(the summary's interleaved timing against NumPy runs on the CPU; on the GPU, "
              "time the result with benchmarks/gpu.py)")
    elif not args.no_summary:
        from .heuristic import heuristic_schedule

        best = compile_kernel(out, res.best_schedule)
        heur = compile_kernel(out, heuristic_schedule(out, sizes))
        print()
        _compare(work, out, sizes, [("tuned", best), ("heuristic schedule", heur)])
    print("\nbest schedule:")
    print(res.best_schedule.to_python())
    return 0


def _progress(total: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm comes with optuna; without it, no bar
        return None
    return tqdm(total=total, unit="trial", dynamic_ncols=True, file=sys.stderr)


# -- show ----------------------------------------------------------------------------------------
def _cmd_show(args: argparse.Namespace) -> int:
    import json

    from tensorlang.schedule.schedule import steps_to_python

    from .records import read_records

    plt = _pyplot() if args.plot else None
    if args.plot and plt is None:
        print("tensorlang show --plot needs matplotlib: pip install 'tensorlang[plot]'",
              file=sys.stderr)
        return 2
    records = read_records(*args.logs)
    groups: dict[tuple, list] = {}
    for r in records:
        groups.setdefault((r.workload.name, r.workload.key, json.dumps(r.workload.sizes)),
                          []).append(r)
    if not groups:
        if args.json:
            _json_out([])
        else:
            print("no records")
        return 1
    curves: list[tuple[str, list[float]]] = []
    summaries: list[dict[str, Any]] = []
    for (wname, key, sizes), recs in groups.items():
        ok = sorted((r for r in recs if r.ok), key=lambda r: r.seconds)
        accepted = [r for r in recs if r.accepted]
        states = {s: sum(r.state == s for r in recs) for s in ("measured", "failed", "pruned")}
        curve = _curve(recs)
        summary: dict[str, Any] = {
            "workload": wname, "workload_key": key, "sizes": json.loads(sizes),
            "cpu": recs[0].target.cpu, **states, "best": None,
            "top": [{"trial": r.trial, "seconds": r.seconds} for r in ok[: args.top]],
            "curve": [_finite(c) for c in curve]}
        summaries.append(summary)
        if ok:
            # the tuner's verdict: the fastest schedule it accepted (a faster screening time
            # that lost its interleaved confirmation is listed in the top, not taken as the best)
            best = min(accepted, key=lambda r: r.seconds) if accepted else ok[0]
            summary["best"] = {"trial": best.trial, "seconds": best.seconds,
                               "confirmed": "confirm" in best.extra, "schedule": best.schedule,
                               "python": steps_to_python(best.schedule["steps"])}
            curves.append((f"{wname} {sizes}", curve))
        if not args.json:
            _print_summary(summary, sizes, str(key), len(ok), args.top)
    if args.json:
        _json_out(summaries)
    if plt is not None:
        _plot(plt, curves, args.plot)
    return 0


def _print_summary(summary: dict[str, Any], sizes: str, key: str, n_ok: int, top: int) -> None:
    """``tensorlang show``'s text for one workload and shape."""
    import json

    print(f"== {summary['workload']} {sizes} (workload {key[:12]}, cpu {summary['cpu']}): "
          f"{summary['measured']} measured, {summary['failed']} failed, "
          f"{summary['pruned']} pruned")
    best = summary["best"]
    if best is None:
        return
    print(f"best: {_fmt_s(best['seconds'] or 0)} (trial {best['trial']}"
          f"{', confirmed in A/B rounds' if best['confirmed'] else ''})\n")
    print(best["python"])
    print(f"\njson: {json.dumps(best['schedule'])}\n")
    print(f"top {min(top, n_ok)}:")
    for r in summary["top"]:
        print(f"  trial {r['trial']:>5}  {_fmt_s(r['seconds'] or 0):>12}")
    curve = [float("inf") if c is None else c for c in summary["curve"]]
    print("\ntuning curve (best so far after n measured trials):")
    for n in (1, 5, 10, 25, 50, 100, 150, 200, 300, 500, 1000):
        if n <= len(curve):
            print(f"  {n:>5}  {_fmt_s(curve[n - 1]):>12}")
    if len(curve) not in (1, 5, 10, 25, 50, 100, 150, 200, 300, 500, 1000):
        print(f"  {len(curve):>5}  {_fmt_s(curve[-1]):>12}")
    print()


def _curve(recs: list) -> list[float]:
    out, best = [], float("inf")
    for r in recs:
        if r.state == "pruned":
            continue
        if r.accepted and r.seconds is not None:
            best = min(best, r.seconds)
        out.append(best)
    return out


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or None when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _plot(plt: Any, curves: list[tuple[str, list[float]]], path: str) -> None:
    """One figure: the tuning curve of each (workload, shape), labelled."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, curve in curves:
        finite = [c * 1e3 for c in curve]
        ax.plot(range(1, len(curve) + 1), finite, label=label)
    ax.set_xlabel("measured trials")
    ax.set_ylabel("best time so far (ms)")
    ax.set_yscale("log")
    ax.set_title("tuning curves")
    if len(curves) > 1:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"wrote {path}")


# -- cache ---------------------------------------------------------------------------------------
def _cmd_cache(args: argparse.Namespace) -> int:
    from .cache import KernelCache
    from .workloads import format_shape

    act = args.action
    refusals = [  # (what would be ignored, why): exit 2 rather than ignore it
        ((args.storage or args.study) and act != "import",
         f"tensorlang cache {act} takes no --storage or --study; only 'cache import' reads a "
         f"study"),
        (args.study and not args.storage,
         "tensorlang cache import --study needs --storage URL (the study's database)"),
        (args.logs and act != "import",
         f"tensorlang cache {act} takes no LOG arguments (got {' '.join(args.logs)}); only "
         f"'cache import' reads logs"),
        (args.json and act != "list",
         f"tensorlang cache {act} has no --json output; only 'cache list' does"),
        (args.output and act != "export",
         f"tensorlang cache {act} takes no --output; only 'cache export' writes one"),
    ]
    for bad, why in refusals:
        if bad:
            print(why, file=sys.stderr)
            return 2
    with KernelCache() as cache:
        if args.action == "list" and args.json:
            _json_out({"cache": cache.path, "entries": [
                {"key": e.key, "workload": e.workload.name, "workload_key": e.workload.key,
                 "sizes": e.sizes, "shapes": {k: list(v) for k, v in e.workload.shapes.items()},
                 "dtypes": e.workload.dtypes, "seconds": _finite(e.seconds),
                 "cpu": e.target.cpu, "object_bytes": None if e.object_code is None
                 else len(e.object_code), "source": e.source, "created": e.created}
                for e in cache.entries()]})
        elif args.action == "list":
            n = 0
            for e in cache.entries():
                n += 1
                sizes = format_shape(e.sizes)
                obj = f"{len(e.object_code)} B" if e.object_code else "not compiled"
                print(f"{e.key[:12]}  {e.workload.name:<14} {sizes:<28} "
                      f"{_fmt_s(e.seconds):>12}  {e.target.cpu}  {obj}  ({e.source})")
            print(f"{n} entries in {cache.path}")
        elif args.action == "import" and args.storage:
            return _cache_import_study(cache, args.storage, args.study, args.logs)
        elif args.action == "import":
            return _cache_import(cache, args.logs)
        elif args.action == "export":
            return _cache_export(cache, args.output)
        elif args.action == "clear":
            print(f"removed {cache.clear()} entries from {cache.path}")
    return 0


def _cache_import_study(cache: Any, storage: str, study: str | None, logs: list[str]) -> int:
    """The best confirmed trial of a study (``--study``; default every tensorlang study in
    ``storage``) measured on a machine like this one -> a cache entry (compiled on first use),
    as ``_cache_import`` does for logs."""
    import optuna
    import sqlalchemy

    from tensorlang.errors import TensorlangError

    from .cache import CacheEntry
    from .identity import WorkloadId
    from .records import target_info
    from .storage import confirmed_trials, redacted, storage_url

    if logs:
        print("tensorlang cache import reads logs or --storage, not both", file=sys.stderr)
        return 2
    url = storage_url(storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        names = [study] if study else [s.study_name for s in
                                       optuna.get_all_study_summaries(url)]
        studies = [optuna.load_study(study_name=n, storage=url) for n in names]
    except (sqlalchemy.exc.SQLAlchemyError, KeyError) as exc:
        raise TensorlangError(f"cannot read the studies of {redacted(storage)}: "
                              f"{str(getattr(exc, 'orig', None) or exc).strip()}") from None
    me = target_info()
    added = found = foreign = 0
    for st in studies:
        try:
            workload = WorkloadId.from_dict(st.user_attrs["workload"])
        except (KeyError, TypeError, ValueError):
            continue  # not a study tensorlang wrote
        best, other = confirmed_trials(st, me)
        foreign += other
        if best:
            found += 1
            added += cache.put(CacheEntry(workload, me, best[0].user_attrs["trace"],
                                          float(best[0].value), source="import"))
    print(f"imported {added} of {found} tuned kernels from {len(studies)} studies in "
          f"{redacted(storage)} into {cache.path}"
          + (f"; skipped {foreign} trials of another CPU" if foreign else ""))
    return 0


def _cache_import(cache: Any, logs: list[str]) -> int:
    """Best accepted record per (workload, shapes) of this machine that is no slower than the
    rule-based schedule (``TuningRecord.beats_rule``) -> cache entries (compiled on first use).
    Records of another CPU are skipped with a count."""
    from .cache import CacheEntry
    from .records import read_records, target_info

    if not logs:
        print("give one or more logs: tensorlang cache import tuning_logs/*.jsonl",
              file=sys.stderr)
        return 2
    me = target_info()
    best: dict[tuple, Any] = {}
    foreign = 0
    for path in logs:
        for r in read_records(path):
            if not r.beats_rule:
                continue
            if not r.target.same_machine(me):
                foreign += 1
                continue
            w = r.workload
            k = (w.key, repr(sorted(w.sizes.items())), repr(sorted(w.shapes.items())),
                 repr(sorted(w.dtypes.items())))
            if k not in best or r.seconds < best[k].seconds:
                best[k] = r
    added = 0
    for r in best.values():
        added += cache.put(CacheEntry(r.workload, me, r.trace, float(r.seconds),
                                      source="import"))
    print(f"imported {added} of {len(best)} tuned kernels into {cache.path}"
          + (f"; skipped {foreign} records of another CPU" if foreign else ""))
    return 0


def _cache_export(cache: Any, output: str | None) -> int:
    """Every entry as a tuning record (JSON Lines) — importable with ``cache import``."""
    import json

    from .records import TuningRecord

    lines = []
    for e in cache.entries():
        lines.append(TuningRecord(e.workload, e.target, json.loads(e.trace), "measured",
                                  e.seconds,
                                  [e.seconds], timestamp=e.created).to_json())
    text = "".join(line + "\n" for line in lines)
    if output:
        with open(output, "w") as f:
            f.write(text)
        print(f"exported {len(lines)} entries to {output}")
    else:
        sys.stdout.write(text)
    return 0


# -- bench ---------------------------------------------------------------------------------------
def _cmd_bench(args: argparse.Namespace) -> int:
    import warnings

    from tensorlang.backends.compile import compile as compile_kernel

    from .auto import compile_auto
    from .heuristic import heuristic_schedule

    work, out, sizes = _workload(args)
    source = args.schedule
    if args.schedule == "auto":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            k = compile_auto(out, sizes, None)
        label, source = f"tensorlang ({k.schedule_source})", k.schedule_source
    elif args.schedule == "heuristic":
        k, label = compile_kernel(out, heuristic_schedule(out, sizes)), "tensorlang (heuristic)"
    else:
        k, label = compile_kernel(out), "tensorlang (default)"
    if not args.json:
        from .workloads import format_shape
        print(f"{work.name} {format_shape(sizes)}")  # matmul-float64 M=...: what is timed
    rows = _compare(work, out, sizes, [(label, k)], as_json=args.json)
    if args.json:
        _json_out({"workload": work.name, "sizes": sizes, "schedule_source": source,
                   "rounds": 7, "rows": rows})
    return 0


# -- parser --------------------------------------------------------------------------------------
def _positive(kind: type) -> Any:
    """An argparse type: a number of ``kind`` above 0 (``--trials -3`` is an error)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def build_parser() -> argparse.ArgumentParser:
    from tensorlang.version import __version__

    p = argparse.ArgumentParser(
        prog="tensorlang",
        description="tensorlang: a Halide-style scheduling language and autotuner for Python.")
    p.add_argument("--version", action="version", version=f"tensorlang {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    t = sub.add_parser("target", help="show the host CPU target kernels are compiled for")
    t.add_argument("--features", action="store_true", help="also print the LLVM feature string")
    t.add_argument("--json", action="store_true", help="one JSON object (every field)")
    t.set_defaults(run=_cmd_target)

    wl_help = ("a built-in workload (matmul, batch_matmul, conv2d, blur, softmax, layernorm) or "
               "path/to/file.py:function returning the output Func")
    dtypes = ("float32", "float64")
    dtype_help = "element type of a built-in workload (default float32)"
    tu = sub.add_parser("tune", help="tune a workload; writes tuning records and the cache")
    tu.add_argument("workload", help=wl_help)
    tu.add_argument("--shape", help="sizes, e.g. M=1024,N=1024,K=1024 (built-ins have defaults)")
    tu.add_argument("--dtype", choices=dtypes, help=dtype_help)
    tu.add_argument("--trials", type=_positive(int), default=100,
                    help="measured trials (default 100)")
    tu.add_argument("--timeout", type=_positive(float), help="stop after this many seconds")
    tu.add_argument("--log", help="tuning log (default tuning_logs/<workload>-<sizes>.jsonl)")
    tu.add_argument("--seed", type=int, default=0)
    tu.add_argument("--resume", action="store_true",
                    help="continue the latest study of this workload and shape")
    tu.add_argument("--storage",
                    help="Optuna storage URL (default: SQLite next to the log); "
                         "postgresql://user:password@host/db needs tensorlang[postgres]")
    tu.add_argument("--study", metavar="NAME",
                    help="create or join this study: workers (processes or machines) given "
                         "one --storage and --study share the search")
    tu.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                    help="where the kernels run: this CPU (default) or the visible CUDA GPU "
                         "(needs tensorlang[cuda] and a GPU)")
    tu.add_argument("--cost-model", choices=("gbt", "none"), default="gbt")
    tu.add_argument("--no-transfer", dest="transfer", action="store_false",
                    help="do not warm the cost model with the other logs in the log's folder")
    tu.add_argument("--no-cache", action="store_true", help="do not write the tuned kernel cache")
    tu.add_argument("--no-summary", action="store_true",
                    help="skip timing the result against the heuristic schedule and NumPy")
    tu.set_defaults(run=_cmd_tune)

    sh = sub.add_parser("show", help="best schedule, top-k and tuning curve of a log")
    sh.add_argument("logs", nargs="+", metavar="LOG")
    sh.add_argument("--top", type=_positive(int), default=5)
    sh.add_argument("--json", action="store_true",
                    help="one JSON object per workload and shape, in a list (seconds)")
    sh.add_argument("--plot", metavar="PNG",
                    help="draw the tuning curves of every log, one per workload and shape "
                         "(needs matplotlib: pip install 'tensorlang[plot]')")
    sh.set_defaults(run=_cmd_show)

    ca = sub.add_parser("cache", help="the tuned-kernel cache (TENSORLANG_CACHE)")
    ca.add_argument("action", choices=("list", "import", "export", "clear"))
    ca.add_argument("logs", nargs="*", metavar="LOG", help="for import: tuning logs")
    ca.add_argument("-o", "--output", help="for export: a file (default stdout)")
    ca.add_argument("--json", action="store_true", help="for list: one JSON object")
    ca.add_argument("--storage", metavar="URL",
                    help="for import: the best of the studies in this Optuna storage "
                         "(tensorlang tune --storage)")
    ca.add_argument("--study", metavar="NAME", help="for import --storage: only this study")
    ca.set_defaults(run=_cmd_cache)

    be = sub.add_parser("bench", help="tensorlang vs NumPy on a workload, same run")
    be.add_argument("workload", help=wl_help)
    be.add_argument("--shape", help="sizes, e.g. M=1024,N=1024,K=1024")
    be.add_argument("--dtype", choices=dtypes, help=dtype_help)
    be.add_argument("--schedule", choices=("auto", "heuristic", "default"), default="auto")
    be.add_argument("--json", action="store_true",
                    help="one JSON object: n, median, quartiles, min, max (seconds) per row")
    be.set_defaults(run=_cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tensorlang`` console script."""
    from tensorlang.errors import TensorlangError

    from .records import RecordError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return 2  # a command is required
    try:
        return int(args.run(args))
    except (TensorlangError, RecordError, OSError) as exc:
        print(f"tensorlang {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
