"""The Backend interface: the LLVM CPU backend behind it, and a second backend
(``reference_backend.py``) registered from outside the package and used by ``tl.compile``, the
autotuner's worker processes and the tuned-kernel cache without any of them naming it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from algorithms import matmul, skewed
from reference_backend import ReferenceBackend, ReferenceKernel

import tensorlang as tl
from tensorlang.autotuner.auto import TuningWarning, compile_auto
from tensorlang.autotuner.cache import CacheEntry, KernelCache
from tensorlang.autotuner.records import read_records, target_info, workload_info
from tensorlang.backends import Backend, get_backend, register_backend
from tensorlang.backends.base import BACKENDS
from tensorlang.backends.llvm.backend import LLVMCPUBackend


@pytest.fixture
def reference_backend():
    backend = register_backend(ReferenceBackend())
    yield backend
    BACKENDS.pop(backend.name, None)


def _arrays(rng, m, n, k):
    return {"A": rng.random((m, k), dtype=np.float32), "B": rng.random((k, n), dtype=np.float32)}


def test_the_default_backend_is_llvm_cpu_and_unknown_names_are_refused():
    backend = get_backend()
    assert isinstance(backend, LLVMCPUBackend) and get_backend("llvm-cpu") is backend
    assert backend.object_format == "elf"
    info = backend.target_info(3)
    assert info["backend"] == "llvm-cpu" and info["threads"] == 3
    assert info["triple"] == backend.host_target().triple
    out, _ = matmul()
    with pytest.raises(tl.CompileError, match=r"no backend named 'tpu'.*llvm-cpu"):
        tl.compile(out, backend="tpu")


def test_llvm_cpu_backend_round_trips_object_code():
    out, arrays = matmul()
    s = tl.Schedule(out)
    s[out].vectorize("j", 4)
    backend = get_backend()
    built = backend.compile(out, s, emit_object=True)
    loaded = backend.load(out, s, built.object_code, built.signature)
    a = arrays(np.random.default_rng(0), 7, 13, 5)
    np.testing.assert_allclose(loaded(**a), a["A"] @ a["B"], rtol=1e-5)
    assert loaded.schedule_source == "cache"


def test_a_registered_backend_compiles_through_tl_compile(reference_backend):
    out, _ = matmul()
    s = tl.Schedule(out)
    s[out].split("i", 4)
    k = tl.compile(out, s, backend="numpy-reference")
    assert isinstance(k, ReferenceKernel) and k.schedule is s
    a = _arrays(np.random.default_rng(1), 5, 3, 11)
    dst = np.empty((5, 3), np.float32)
    assert k(**a, out=dst) is dst
    np.testing.assert_allclose(dst, a["A"] @ a["B"], rtol=1e-5)


def test_every_backend_gets_the_same_legality_verdict(reference_backend):
    # the check runs in Backend.compile, before the backend's build: a backend cannot skip it
    F, _ = skewed()
    s = tl.Schedule(F)
    stage = s[F].update(0)
    stage.split("r_x", 4)
    stage.reorder("r_x.o", "r_x.i", "r_y")
    for name in ("llvm-cpu", "numpy-reference"):
        with pytest.raises(tl.IllegalScheduleError, match="would run backwards"):
            tl.compile(F, s, backend=name)


def test_the_tuner_measures_with_a_registered_backend(reference_backend, tmp_path):
    # candidates compile and run in fresh worker processes: they receive the backend object
    out, _ = matmul()
    log = tmp_path / "tune.jsonl"
    res = tl.autotune(out, {"M": 9, "N": 7, "K": 5}, trials=3, cost_model="none", jobs=1,
                      log=str(log), cache=False, backend="numpy-reference", min_seconds=0.0,
                      repeats=2)
    assert res.best_trace is not None
    records = read_records(log)
    assert records and all(r.target.backend == "numpy-reference" for r in records)
    assert all(r.target.triple == "numpy-reference" for r in records)
    assert any(r.state == "measured" for r in records)
    assert all(r.error is None or "numpy-reference" not in r.error for r in records)


def test_the_cache_loads_a_registered_backends_object_code(reference_backend, tmp_path):
    out, _ = matmul()
    sizes = {"M": 6, "N": 4, "K": 3}
    s = tl.Schedule(out)
    s[out].split("j", 2)
    built = reference_backend.compile(out, s, emit_object=True)
    assert json.loads(built.object_code.decode()) == json.loads(s.to_json())
    work = workload_info(out, sizes)
    cache = KernelCache(tmp_path / "c")
    cache.put(CacheEntry(work, target_info(backend="numpy-reference"), s.to_json(),
                         1e-3, built.signature.to_dict(), built.object_code))
    k = compile_auto(out, sizes, cache=cache, backend="numpy-reference")
    assert isinstance(k, ReferenceKernel) and k.schedule_source == "cache"
    a = _arrays(np.random.default_rng(2), 6, 4, 3)
    np.testing.assert_allclose(k(**a), a["A"] @ a["B"], rtol=1e-5)
    # the LLVM CPU backend's key differs (its target's triple): no cross-backend hit
    with pytest.warns(TuningWarning, match="no tuning record"):
        assert compile_auto(out, sizes, cache=cache).schedule_source == "heuristic"
    cache.close()


def test_backend_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        Backend()  # type: ignore[abstract]
