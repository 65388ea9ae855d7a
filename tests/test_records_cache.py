"""Tuning records, the tuned-kernel cache, schedule="auto" and the heuristic schedule (in process;
the CLI and cross-process tests are in test_cli.py)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import warnings

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner.auto import TuningWarning, compile_auto
from tensorlang.autotuner.cache import CacheEntry, CacheWarning, KernelCache
from tensorlang.autotuner.heuristic import heuristic_schedule, register_tile
from tensorlang.autotuner.measure import random_inputs
from tensorlang.autotuner.records import (
    RecordError,
    RecordWarning,
    RecordWriter,
    TuningRecord,
    read_records,
    target_info,
    workload_info,
)
from tensorlang.autotuner.workloads import BUILTIN, input_shapes, parse_shape
from tensorlang.backends.llvm.jit import STATS
from tensorlang.schedule.lower import lower
from tensorlang.pipeline import Pipeline


def _record(trial: int, seconds: float = 1e-3, **extra) -> TuningRecord:
    out = BUILTIN["matmul"].build()
    sizes = {"M": 8, "N": 8, "K": 8}
    return TuningRecord(workload_info(out, sizes, "matmul"), target_info(),
                        json.loads(tl.Schedule(out).to_json()), "measured", seconds, [seconds],
                        trial=trial, extra=extra)


def test_records_round_trip_and_keep_unknown_fields(tmp_path):
    log = tmp_path / "a.jsonl"
    with RecordWriter(log) as w:
        w.write(_record(0, future_field={"x": 1}))
        w.write(_record(1))
    recs = read_records(log)
    assert [r.trial for r in recs] == [0, 1]
    assert recs[0].extra == {"future_field": {"x": 1}}
    assert json.loads(recs[0].to_json())["future_field"] == {"x": 1}
    assert recs[0].workload.sizes == {"M": 8, "K": 8, "N": 8}


def test_torn_last_line_is_skipped_with_a_warning_and_the_next_write_starts_fresh(tmp_path):
    log = tmp_path / "torn.jsonl"
    with RecordWriter(log) as w:
        w.write(_record(0))
        w.write(_record(1))
    whole = _record(2).to_json()
    with open(log, "a") as f:
        f.write(whole[: len(whole) // 2])  # a crash in the middle of a write
    with pytest.warns(RecordWarning, match="torn last line"):
        assert [r.trial for r in read_records(log)] == [0, 1]
    with RecordWriter(log) as w:
        w.write(_record(3))
    with pytest.warns(RecordWarning, match=r"torn.jsonl:3: skipped a corrupt line"):
        assert [r.trial for r in read_records(log)] == [0, 1, 3]


def test_records_of_a_future_major_version_are_skipped_with_one_warning(tmp_path):
    # one such log in the log folder must not stop show, cache import or tuning (they read
    # every log): its newer records are skipped, with one warning naming what wrote them
    log = tmp_path / "future.jsonl"
    d = json.loads(_record(0).to_json())
    d["version"] = "2.3"
    d["target"]["tensorlang"] = "7.1.0"
    ok = _record(1).to_json()
    log.write_text(json.dumps(d) + "\n" + ok + "\n" + json.dumps(d) + "\n")
    with pytest.warns(RecordWarning) as got:
        recs = read_records(log)
    assert [r.trial for r in recs] == [1]
    msgs = [str(w.message) for w in got]
    assert len(msgs) == 1 and "skipped 2 record(s) of a newer format (line 1, 3)" in msgs[0]
    assert "version 2.3 was written by tensorlang 7.1.0" in msgs[0]
    d["version"] = "1.9"  # a newer minor only adds fields: accepted
    log.write_text(json.dumps(d) + "\n")
    assert len(read_records(log)) == 1


@pytest.mark.parametrize("seconds", [-1.0, 0.0])
def test_a_record_with_impossible_seconds_is_skipped_and_never_cached(tmp_path, seconds):
    log = tmp_path / "bad.jsonl"
    d = json.loads(_record(0, confirm={"won": True, "beats_rule": True}).to_json())
    d["seconds"] = seconds
    log.write_text(json.dumps(d) + "\n")
    with pytest.warns(RecordWarning, match="seconds must be a positive number"):
        assert read_records(log) == []
    out = BUILTIN["matmul"].build()
    with pytest.raises(ValueError, match="seconds must be positive"):
        KernelCache(tmp_path / "k.sqlite").put(_entry(out, {"M": 8, "N": 8, "K": 8}, seconds))


def _entry(out, sizes, seconds=1e-3, obj=None, sig=None, trace=None):
    w = workload_info(out, sizes, "matmul")
    return CacheEntry(w, target_info(), trace or tl.Schedule(out).to_json(), seconds, sig, obj)


def test_cache_keeps_the_faster_entry_and_is_keyed_by_target(tmp_path):
    out = BUILTIN["matmul"].build()
    sizes = {"M": 16, "N": 16, "K": 16}
    with KernelCache(tmp_path / "k.sqlite") as c:
        assert c.put(_entry(out, sizes, 2e-3))
        assert not c.put(_entry(out, sizes, 3e-3))
        assert c.put(_entry(out, sizes, 1e-3))
        w = workload_info(out, sizes)
        got = c.get(w, target_info())
        assert got is not None and got.seconds == 1e-3
        other = dataclasses.replace(target_info(), cpu="skylake")
        assert c.get(w, other) is None
        assert len(list(c.entries())) == 1


def test_corrupt_cache_row_is_reported_once_and_rebuilt(tmp_path):
    out = BUILTIN["matmul"].build()
    sizes = {"M": 16, "N": 16, "K": 16}
    k = tl.compile(out, heuristic_schedule(out, sizes), emit_object=True)
    cache = KernelCache(tmp_path / "k.sqlite")
    cache.put(_entry(out, sizes, 1e-3, k.object_code, k.signature.to_dict(),
                     k.schedule.to_json()))
    db = sqlite3.connect(cache.path)
    db.execute("UPDATE kernels SET object_code = X'00112233'")
    db.commit()
    db.close()
    with pytest.warns(CacheWarning, match="corrupt"):
        kern = compile_auto(out, sizes, cache=cache)
    assert kern.schedule_source == "heuristic"  # the bad row is gone: rebuilt from scratch
    a = random_inputs(Pipeline(out), input_shapes(out, sizes))
    # float32 sums of 16 products in another order: absolute error ~1e-7 on entries near 0
    np.testing.assert_allclose(kern(**a), a["A"] @ a["B"], rtol=1e-5, atol=1e-5)
    assert list(cache.entries()) == []


def test_a_file_that_is_not_a_database_is_moved_aside(tmp_path):
    path = tmp_path / "kernels.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.warns(CacheWarning, match="moved it to"):
        assert list(KernelCache(path).entries()) == []
    assert any(p.name.startswith("kernels.sqlite.corrupt-") for p in tmp_path.iterdir())


def test_auto_exact_hit_loads_object_code_without_llvm(tmp_path):
    out = BUILTIN["matmul"].build()
    sizes = {"M": 24, "N": 40, "K": 8}
    s = heuristic_schedule(out, sizes)
    k = tl.compile(out, s, emit_object=True)
    cache = KernelCache()
    cache.put(_entry(out, sizes, 1e-3, k.object_code, k.signature.to_dict(), s.to_json()))
    before = dict(STATS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exact hit is silent
        kern = tl.compile(out, "auto", shapes=sizes)
    assert kern.schedule_source == "cache"
    assert STATS["llvm_compiles"] == before["llvm_compiles"]
    assert STATS["object_loads"] == before["object_loads"] + 1
    a = random_inputs(Pipeline(out), input_shapes(out, sizes))
    np.testing.assert_allclose(kern(**a), a["A"] @ a["B"], rtol=1e-5)
    assert "for" in kern.loop_nest()  # lowered on demand from the cached trace


def test_auto_uses_the_nearest_tuned_shape_with_a_warning(tmp_path):
    out = BUILTIN["matmul"].build()
    tuned = {"M": 64, "N": 64, "K": 64}
    s = tl.Schedule(out)
    s[out].split("i", 8)
    s[out].vectorize("j", 16).parallel("i.o")
    KernelCache().put(_entry(out, tuned, 1e-4, trace=s.to_json()))
    sizes = {"M": 61, "N": 67, "K": 1}
    with pytest.warns(TuningWarning, match=r"schedule tuned for M=64,K=64,N=64"):
        kern = tl.compile(out, "auto", shapes=sizes)
    assert kern.schedule_source == "nearest"
    a = random_inputs(Pipeline(out), input_shapes(out, sizes))
    np.testing.assert_allclose(kern(**a), a["A"] @ a["B"], rtol=1e-5)
    with pytest.warns(TuningWarning, match="nearest tuned shape"):  # cached, still reported
        again = tl.compile(out, "auto", shapes=sizes)
    assert again.schedule_source == "nearest"


def test_auto_without_records_warns_and_uses_the_heuristic():
    out = BUILTIN["softmax"].build()
    with pytest.warns(TuningWarning, match="heuristic schedule. Tune it: tensorlang tune"):
        kern = tl.compile(out, "auto", shapes={"R": 5, "S": 33})
    assert kern.schedule_source == "heuristic"
    assert kern.schedule is not None and kern.schedule.steps  # never the naive nest


@pytest.mark.parametrize("name", sorted(BUILTIN))
@pytest.mark.parametrize("scale", ["one", "odd"])
def test_heuristic_schedules_are_legal_and_match_numpy(name, scale):
    w = BUILTIN[name]
    out = w.build()
    odd = {"M": 37, "N": 41, "K": 13, "B": 3, "Nb": 2, "CI": 3, "CO": 11, "H": 19, "W": 23,
           "R": 7, "S": 67}
    sizes = {k: (1 if scale == "one" and k not in ("H", "W") else odd[k]) for k in w.shape}
    if name == "blur" and scale == "one":
        sizes = {"H": 3, "W": 3}
    s = heuristic_schedule(out, sizes)
    assert s.check().ok
    kern = tl.compile(out, s)
    a = random_inputs(Pipeline(out), input_shapes(out, sizes))
    np.testing.assert_allclose(kern(**a), w.numpy(a)(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, row, width", [("matmul", "i", "split('j', 32"),
                                               ("batch_matmul", "i", "split('j', 32"),
                                               ("conv2d", "co", "split('x', 56")])
def test_heuristic_register_rows_are_the_var_the_vector_loads_do_not_use(name, row, width):
    # conv2d's rows are output channels: each vector of pad[n, ci, y + ry, x + rx] then serves
    # every row (tiling the image rows y, each row needs its own loads: 0.7x NumPy, then 1.3x);
    # its 56-wide image rows are one tile of 16 + 16 + 16 + 8 lanes, so 4 channels (1.6x)
    from algorithms import described_target

    out = BUILTIN[name].build()
    # on an AVX-512 target (16 float32 lanes, 16 accumulators) whatever the host, with the
    # model's 2-vector packed tile (Zen 4's is 4 vectors wide)
    s = heuristic_schedule(out, BUILTIN[name].shape, described_target("skylake-avx512"))
    rows = 4 if name == "conv2d" else 8
    assert f"split('{row}', {rows})" in str(s) and width in str(s)
    assert any(".acc" in b for b in lower(out, s).buffers)  # the tile is kept in registers


@pytest.mark.parametrize("width_extent, row_extent, tile", [
    (1024, 1024, (32, 8)), (56, 64, (56, 4)), (20, 9, (20, 8)), (48, 10, (48, 5)),
    (40, 7, (40, 5)), (64, 64, (32, 8)), (1000, 6, (32, 6)), (1000, 12, (32, 6))])
def test_register_tile_wastes_no_lanes_and_prefers_rows_dividing_the_extent(
        width_extent, row_extent, tile):
    assert register_tile(width_extent, row_extent, 16) == tile


def test_parse_shape_errors_name_the_item():
    assert parse_shape("M=3, N=4") == {"M": 3, "N": 4}
    with pytest.raises(ValueError, match="'M=0'"):
        parse_shape("M=0")
    with pytest.raises(ValueError, match="'N'"):
        parse_shape("M=3,N")


def test_identities_round_trip_and_read_older_and_newer_records():
    from tensorlang.autotuner.identity import TargetId, WorkloadId

    out = BUILTIN["matmul"].build()
    w = workload_info(out, {"M": 5, "N": 3, "K": 7}, "matmul")
    assert w.shapes == {"A": (5, 7), "B": (7, 3)} and w.dtypes == {"A": "float32", "B": "float32"}
    assert WorkloadId.from_dict(json.loads(json.dumps(w.to_dict()))) == w
    assert w.study_base().startswith(f"matmul-{w.key[:12]}-")
    t = target_info()
    assert t.backend == "llvm-cpu" and TargetId.from_dict(t.to_dict()) == t
    older = {k: v for k, v in t.to_dict().items() if k != "backend"}  # before the Backend API
    assert TargetId.from_dict(older).backend == "llvm-cpu"
    newer = TargetId.from_dict({**t.to_dict(), "gpu_memory": 80})  # a field this version lacks
    assert newer == t and newer.to_dict()["gpu_memory"] == 80
    assert dataclasses.replace(t, threads=t.threads + 1).same_machine(t)
    assert not dataclasses.replace(t, cpu="skylake").same_machine(t)
    with pytest.raises((KeyError, TypeError, ValueError)):
        WorkloadId.from_dict({"name": "x"})


def test_the_cache_key_is_the_one_earlier_versions_wrote():
    # caches written before the typed identities must still hit: the key hashes the same data
    import hashlib

    from tensorlang.autotuner.cache import CACHE_VERSION, entry_key

    out = BUILTIN["matmul"].build()
    w, t = workload_info(out, {"M": 5, "N": 3, "K": 7}), target_info()
    old = {"cache": CACHE_VERSION, "workload": w.key, "sizes": {"K": 7, "M": 5, "N": 3},
           "shapes": {"A": [5, 7], "B": [7, 3]}, "dtypes": {"A": "float32", "B": "float32"},
           "target": {k: t.to_dict()[k] for k in ("triple", "cpu", "features", "llvm",
                                                   "threads", "tensorlang")}}
    assert entry_key(w, t) == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()


def _cached_matmul(tmp_path, sizes, sig_change=None):
    out = BUILTIN["matmul"].build()
    s = tl.Schedule(out)
    s[out].parallel("i")  # a parallel kernel: its signature says so
    k = tl.compile(out, s, emit_object=True)
    sig = k.signature.to_dict()
    assert sig["parallel"]
    if sig_change is not None:
        sig_change(sig)
    cache = KernelCache(tmp_path / "k.sqlite")
    cache.put(_entry(out, sizes, 1e-3, k.object_code, sig, s.to_json()))
    return out, cache


def _check_matmul(kern, out, sizes):
    a = random_inputs(Pipeline(out), input_shapes(out, sizes))
    np.testing.assert_allclose(kern(**a), a["A"] @ a["B"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("column,new", [
    ("signature", lambda s: s.replace('"N"]', '"M"]')),           # sizes M, K, N -> M, K, M
    ("signature", lambda s: s.replace('"parallel": true', '"parallel": false')),
    ("signature", lambda s: s.replace(', "N"]', "]")),             # a size dropped
    ("signature", lambda s: s.replace('"n_inputs": 2', '"n_inputs": 3')),
    ("trace", lambda s: s.replace('"i"', '"j"')),
    ("seconds", lambda s: -1.0),
])
def test_any_changed_byte_of_a_cache_row_makes_it_corrupt_never_run(tmp_path, column, new):
    sizes = {"M": 16, "N": 16, "K": 16}
    out, cache = _cached_matmul(tmp_path, sizes)
    db = sqlite3.connect(cache.path)
    (old,) = db.execute(f"SELECT {column} FROM kernels").fetchone()
    changed = new(old)
    assert changed != old
    db.execute(f"UPDATE kernels SET {column} = ?", (changed,))
    db.commit()
    db.close()
    with pytest.warns(CacheWarning, match="checksum mismatch"):
        kern = compile_auto(out, sizes, cache=cache)
    assert kern.schedule_source == "heuristic"
    _check_matmul(kern, out, sizes)


@pytest.mark.parametrize("change,why", [
    (lambda s: s.update(n_inputs=3), "call signature does not fit"),
    (lambda s: s.update(sizes=["M", "K"]), "call signature does not fit"),
    (lambda s: s.update(parallel=False), "parallel=False but the object code calls libgomp"),
])
def test_a_signature_that_does_not_fit_the_algorithm_or_the_code_is_never_called(
        tmp_path, change, why):
    # a well-formed row (its checksum matches) whose signature is wrong: written by a buggy
    # tensorlang, or by hand; the code is recompiled instead of being called with it
    sizes = {"M": 16, "N": 16, "K": 16}
    out, cache = _cached_matmul(tmp_path, sizes, change)
    with pytest.warns(TuningWarning, match=why):
        kern = compile_auto(out, sizes, cache=cache)
    assert kern.schedule_source == "cache"
    _check_matmul(kern, out, sizes)
    again = compile_auto(out, sizes, cache=cache)  # the row now holds the recompiled code
    _check_matmul(again, out, sizes)


def test_a_cached_illegal_trace_without_object_code_is_refused_not_raised(tmp_path):
    out = BUILTIN["matmul"].build()
    sizes = {"M": 16, "N": 16, "K": 16}
    s = tl.Schedule(out)
    s[out].parallel("k")  # recorded, but refused by the legality check: a parallel reduction
    bad = s.to_json()
    cache = KernelCache(tmp_path / "k.sqlite")
    cache.put(_entry(out, sizes, 1e-3, trace=bad))
    with pytest.warns(TuningWarning, match="is refused"):
        kern = compile_auto(out, sizes, cache=cache)
    assert kern.schedule_source == "heuristic"
    _check_matmul(kern, out, sizes)


def test_a_cache_location_that_is_a_file_warns_once_and_the_program_runs(tmp_path, monkeypatch):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("TENSORLANG_CACHE", str(blocker / "sub"))
    out = BUILTIN["matmul"].build()
    sizes = {"M": 8, "N": 8, "K": 8}
    with pytest.warns(TuningWarning) as got:
        kern = tl.compile(out, "auto", shapes=sizes)
        kern2 = tl.compile(out, "auto", shapes=sizes)
    unusable = [w for w in got if "cache unusable" in str(w.message)]
    assert len(unusable) == 1 and "set TENSORLANG_CACHE to a directory" in str(
        unusable[0].message)
    _check_matmul(kern, out, sizes)
    _check_matmul(kern2, out, sizes)


def test_a_valid_cache_that_cannot_be_written_is_read_not_moved(tmp_path, monkeypatch):
    # a read-only directory (SQLite cannot create its journal there): simulated by the error
    # SQLite gives, as the tests run as root, who may write anywhere
    import tensorlang.autotuner.cache as cache_mod

    sizes = {"M": 16, "N": 16, "K": 16}
    out, cache = _cached_matmul(tmp_path, sizes)
    cache.close()
    real = sqlite3.connect

    def connect(path, *a, **kw):
        if not kw.get("uri"):
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return real(path, *a, **kw)

    monkeypatch.setattr(cache_mod.sqlite3, "connect", connect)
    ro = KernelCache(tmp_path / "k.sqlite")
    with pytest.warns(CacheWarning, match="not writable"):
        kern = compile_auto(out, sizes, cache=ro)
    assert kern.schedule_source == "cache" and ro.read_only
    _check_matmul(kern, out, sizes)
    assert sorted(p.name for p in tmp_path.iterdir() if "corrupt" in p.name) == []
    with pytest.warns(CacheWarning, match="read-only; a tuned kernel was not stored"):
        assert not ro.put(_entry(out, {"M": 8, "N": 8, "K": 8}, 1e-3))


def test_auto_without_shapes_dispatches_per_call_over_ten_shapes(tmp_path, rng):
    out = BUILTIN["matmul"].build()
    cache = KernelCache(tmp_path / "k.sqlite")
    tuned = {"M": 24, "N": 40, "K": 8}  # one shape with a tuned kernel in the cache
    s = heuristic_schedule(out, tuned)
    k = tl.compile(out, s, emit_object=True)
    cache.put(_entry(out, tuned, 1e-3, k.object_code, k.signature.to_dict(), s.to_json()))
    kern = compile_auto(out, cache=cache)
    shapes = [(5, 3, 7), (6, 3, 7), (24, 8, 40), (7, 2, 8), (33, 17, 65), (40, 20, 100),
              (1, 1, 1), (64, 64, 64), (3, 5, 2), (8, 8, 8), (24, 8, 40), (60, 30, 90)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        for m, kk, n in shapes:
            a = rng.random((m, kk), dtype=np.float32)
            b = rng.random((kk, n), dtype=np.float32)
            np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4, atol=1e-5)
    variants = kern.variants()
    served = [sh for v in variants for sh in v["shapes"]]
    assert len(served) == len(set(shapes)) == 11  # each distinct shape chosen once
    (hit,) = [v for v in variants if v["source"] == "cache"]
    assert hit["compiled_for"] == tuned and hit["shapes"] == [{"K": 8, "M": 24, "N": 40}]
    # nearby shapes share their bucket's kernel: (5, 3, 7) and (6, 3, 7) round to (8, 4, 8)
    first = next(v for v in variants if {"M": 5, "K": 3, "N": 7} in v["shapes"])
    assert {"M": 6, "K": 3, "N": 7} in first["shapes"]
    assert len(variants) < len(served)
    a, b = rng.random((5, 3), dtype=np.float32), rng.random((3, 7), dtype=np.float32)
    o = np.empty((5, 7), np.float32)
    assert kern(A=a, B=b, out=o) is o
    np.testing.assert_allclose(o, a @ b, rtol=1e-4)


def test_dispatch_checks_the_reads_of_a_shape_once(tmp_path, rng, monkeypatch):
    # a call with shapes seen before goes straight to their kernel: bind() (every read checked
    # against the sizes) runs on the first call of each shape only; a bad shape raises each time
    out = BUILTIN["matmul"].build()
    kern = compile_auto(out, cache=KernelCache(tmp_path / "k.sqlite"))
    binds = []
    real = Pipeline.bind

    def bind(self, *a, **kw):
        binds.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(Pipeline, "bind", bind)
    a, b = rng.random((5, 3), dtype=np.float32), rng.random((3, 7), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4)
        first = len(binds)
        assert first >= 1
        for _ in range(3):  # positionally and by name: one shape
            np.testing.assert_allclose(kern(B=b, A=a), a @ b, rtol=1e-4)
            np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4)
    assert len(binds) == first
    for _ in range(2):
        with pytest.raises(tl.ShapeError):
            kern(a, rng.random((4, 7), dtype=np.float32))
    assert len(binds) == first + 2


def test_dispatch_fast_path_keeps_the_checks_of_the_general_one(tmp_path, rng):
    # a call with the inputs positionally and a shape seen before skips argument matching;
    # what it skipped still holds: a wrong dtype is refused naming the Input, a transposed
    # view is copied into a contiguous array, out= of a wrong shape is refused, a good out= is
    # filled
    out = BUILTIN["matmul"].build()
    kern = compile_auto(out, cache=KernelCache(tmp_path / "k.sqlite"))
    a, b = rng.random((5, 3), dtype=np.float32), rng.random((3, 7), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4)
        with pytest.raises(tl.ShapeError, match="A"):
            kern(a.astype(np.float64), b)
        bt = np.ascontiguousarray(b.T).T  # (3, 7), not C-contiguous
        np.testing.assert_allclose(kern(a, bt), a @ b, rtol=1e-4)
        o = np.empty((5, 7), np.float32)
        assert kern(a, b, out=o) is o
        np.testing.assert_allclose(o, a @ b, rtol=1e-4)
        assert kern(a, b, out=o) is o  # (the fast path: this shape and out= seen)
        with pytest.raises(tl.ShapeError, match="out="):
            kern(a, b, out=np.empty((7, 5), np.float32))
