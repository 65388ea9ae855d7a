"""The CUDA backend on a real GPU: what the CPU emulator and the stand-in driver cannot show.

Every test here needs a usable GPU and ``cuda-bindings`` and is skipped elsewhere (with the
reason); CI has no GPU. On a GPU machine: random points of the GPU search space, the rule-based
schedules at sizes whose tiles are whole and at sizes whose tiles are not, float64, arrays from
PyTorch and CuPy used in place, and tuning for the GPU into a cache that a later compile
reloads without LLVM.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import workloads as W
from tensorlang.backends.cuda.driver import visible_capability
from tensorlang.backends.cuda.rules import gpu_schedule
from tensorlang.errors import DeviceError

pytestmark = pytest.mark.skipif(visible_capability() is None, reason="no usable CUDA GPU here "
                                "(no NVIDIA driver or GPU, or no cuda-bindings)")

#: sizes at which the rule-based schedule's tiles are whole (the one-kernel version runs) and
#: sizes at which none are (primes, 1)
WHOLE = {"matmul": dict(M=128, N=128, K=64), "softmax": dict(R=64, S=512),
         "blur": dict(H=66, W=258), "conv2d": dict(Nb=2, CI=8, H=16, W=16, CO=64),
         "layernorm": dict(R=32, S=256), "batch_matmul": dict(B=2, M=64, N=64, K=32)}
ODD = {"matmul": dict(M=67, N=131, K=29), "softmax": dict(R=3, S=1031),
       "blur": dict(H=3, W=97), "conv2d": dict(Nb=1, CI=5, H=13, W=11, CO=7),
       "layernorm": dict(R=1, S=263), "batch_matmul": dict(B=1, M=1, N=17, K=5)}


def _arrays(f, sizes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v).astype(dtype)
            for k, v in W.input_shapes(f, sizes).items()}


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_rule_based_schedules_on_the_gpu_at_whole_and_partial_tiles(name):
    w = W.BUILTIN[name]
    f = w.build()
    for sizes in (WHOLE[name], ODD[name]):
        kern = tl.compile(f, gpu_schedule(f, sizes=sizes), target="cuda")
        for seed in range(2):  # fresh inputs: the same function on any valid input
            a = _arrays(f, sizes, seed)
            np.testing.assert_allclose(kern(**a), w.numpy(a)(), rtol=1e-4, atol=1e-4)


def test_float32_exp_of_the_special_function_unit_is_within_a_few_ulp():
    # DeviceGen.exp_f32: one ex2.approx.ftz.f32 of x log2 e, its rounding error compensated; the
    # emulator checks the formula with an exact exp2 (test_cuda_codegen), this the instruction
    from test_cuda_codegen import EXP_ARGUMENTS, check_exp, exp_kernel
    e, s = exp_kernel()
    check_exp(tl.compile(e, s, target="cuda")(EXP_ARGUMENTS), EXP_ARGUMENTS, 8)


@pytest.mark.parametrize("name", ["matmul", "softmax", "blur", "conv2d", "layernorm"])
def test_random_points_of_the_gpu_search_space_run_correctly_on_the_gpu(name):
    import optuna

    from tensorlang.backends.cuda.space import GPUSearchSpace

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    w = W.BUILTIN[name]
    f = w.build()
    sizes = ODD[name]
    space = GPUSearchSpace(f, sizes)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=11))
    for seed in range(6):
        trial = study.ask()
        kern = tl.compile(f, space.sample(trial), target="cuda")
        a = _arrays(f, sizes, seed)
        np.testing.assert_allclose(kern(**a), w.numpy(a)(), rtol=1e-4, atol=1e-4)
        study.tell(trial, 1.0)


def test_float64_kernels_on_the_gpu():
    w = W.BUILTIN["softmax"]
    f = w.build_as("float64")
    sizes = ODD["softmax"]
    kern = tl.compile(f, gpu_schedule(f, sizes=sizes), target="cuda")
    a = _arrays(f, sizes, dtype=np.float64)
    np.testing.assert_allclose(kern(**a), w.numpy(a)(), rtol=1e-9, atol=1e-12)


def test_torch_tensors_on_the_gpu_are_read_and_written_in_place():
    torch = pytest.importorskip("torch")
    w = W.BUILTIN["matmul"]
    f = w.build()
    sizes = dict(M=67, N=131, K=29)
    kern = tl.compile(f, gpu_schedule(f, sizes=sizes), target="cuda")
    a = _arrays(f, sizes)
    ta, tb = (torch.from_numpy(a[k]).cuda() for k in ("A", "B"))
    c = kern(A=ta, B=tb)  # the output stays on the GPU
    np.testing.assert_allclose(np.asarray(c), a["A"] @ a["B"], rtol=1e-4, atol=1e-4)
    out = torch.full((67, 131), float("nan"), device="cuda")
    kern(A=ta, B=tb, out=out)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), a["A"] @ a["B"], rtol=1e-4, atol=1e-4)
    view = torch.full((67 * 131 + 1,), float("nan"), device="cuda")[1:].view(67, 131)
    kern(A=ta, B=tb, out=view)  # not 16-byte aligned: computed aligned, copied in
    torch.cuda.synchronize()
    np.testing.assert_allclose(view.cpu().numpy(), a["A"] @ a["B"], rtol=1e-4, atol=1e-4)


def test_cupy_arrays_on_the_gpu_are_read_in_place():
    cp = pytest.importorskip("cupy")
    w = W.BUILTIN["blur"]
    f = w.build()
    sizes = ODD["blur"]
    kern = tl.compile(f, gpu_schedule(f, sizes=sizes), target="cuda")
    a = _arrays(f, sizes)
    got = kern(In=cp.asarray(a["In"]))
    np.testing.assert_allclose(np.asarray(got), w.numpy(a)(), rtol=1e-5, atol=1e-5)


def test_benchmark_times_the_kernels_with_cuda_events():
    f = W.BUILTIN["matmul"].build()
    sizes = dict(M=256, N=256, K=256)
    kern = tl.compile(f, gpu_schedule(f, sizes=sizes), target="cuda")
    times = kern.benchmark(**_arrays(f, sizes), repeat=5, warmup=1)
    assert len(times) == 5 and all(0 < t < 1.0 for t in times)


def test_a_launch_the_gpu_refuses_is_reported_as_a_device_error():
    f = W.BUILTIN["matmul"].build()
    s = tl.Schedule(f)
    s[f].gpu_tile("i", "j", 64, 32)  # 2048 threads a block: refused before it launches
    kern = tl.compile(f, s, target="cuda")
    with pytest.raises(DeviceError, match="at most 1024"):
        kern(**_arrays(f, dict(M=64, N=32, K=2)))
    ok = tl.compile(f, gpu_schedule(f), target="cuda")  # the context is still usable
    a = _arrays(f, dict(M=5, N=3, K=2))
    np.testing.assert_allclose(ok(**a), a["A"] @ a["B"], rtol=1e-5, atol=1e-6)


def test_tuning_for_the_gpu_fills_a_cache_a_later_compile_reloads(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE", str(tmp_path / "cache"))
    w = W.BUILTIN["matmul"]
    f = w.build()
    sizes = dict(M=96, N=80, K=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tl.autotune(f, sizes, trials=6, backend="cuda",
                             log=str(tmp_path / "m.jsonl"))
    assert 0 < result.best_seconds < 1.0 and len(result.history) >= 1
    kern = tl.compile(f, "auto", shapes=sizes, target="cuda")
    assert kern.schedule_source == ("cache" if result.cache_updated else "heuristic")
    a = _arrays(f, sizes)
    np.testing.assert_allclose(kern(**a), a["A"] @ a["B"], rtol=1e-4, atol=1e-4)
