"""Shared memory sized when launching (CUDA's dynamic shared memory): a ``cache_read(...,
scope="shared")`` copy whose size only the call's sizes fix, such as a whole row that a
softmax's max, sum and output all read (``rules.stage_rows``). Checked in the emulator against
NumPy on odd sizes, by ptxas, and through the host program on a stand-in for the driver."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner import workloads as W
from tensorlang.backends.cuda.codegen import EMULATED_DYNAMIC_BYTES
from tensorlang.backends.cuda.emulate import emulate
from tensorlang.backends.cuda.launches import launch_error, plan
from tensorlang.backends.cuda.private import private_buffers, shared_copies
from tensorlang.backends.cuda.ptx import ptxas
from tensorlang.backends.cuda.rules import gpu_schedule, stage_row_values, stage_rows
from tensorlang.errors import CompileError
from tensorlang.schedule.lower import lower
from test_cuda import HAS_PTXAS, _arrays


def _staged(name: str):
    f = W.BUILTIN[name].build()
    s = gpu_schedule(f)
    stage_rows(s, f.name)
    return f, s


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_a_row_read_three_times_is_copied_once_into_shared_memory_sized_at_launch(name):
    f, s = _staged(name)
    text = s.to_python()
    assert "cache_read('X', " in text and "scope='shared', readers=(" in text
    program = plan(lower(f, s), private_buffers(s), shared_copies(s))
    assert program.launches and all(lc.dynamic is not None and lc.dynamic[0] == "X_shared"
                                    for lc in program.launches)
    assert all("X_shared" not in lc.shared for lc in program.launches)  # not a static array
    kern = emulate(f, s)
    for sizes in (dict(R=3, S=1031), dict(R=1, S=1), dict(R=2, S=256)):
        a = _arrays(f, sizes, 2)
        np.testing.assert_allclose(kern(**a), W.BUILTIN[name].numpy(a)(), rtol=1e-4, atol=1e-5)
    ptx = tl.compile(f, s, target="cuda").ptx()
    assert f".extern .shared .align 16 .b8 {f.name}_k0_dynamic_shared[];" in ptx
    if HAS_PTXAS:
        ptxas(ptx, "sm_90")


def test_softmax_computes_each_exp_once_into_shared_memory_sized_at_launch():
    # rules.stage_row_values: e = exp(X - mx), inlined into the sum and the output by the
    # rule, computed once per row into a copy the sum's threads and the output read
    f = W.BUILTIN["softmax"].build()
    s = gpu_schedule(f)
    stage_row_values(s, f.name)
    assert "cache_read('e', " in s.to_python()
    program = plan(lower(f, s), private_buffers(s), shared_copies(s))
    assert all(lc.dynamic is not None and lc.dynamic[0] == "e_shared"
               for lc in program.launches)
    kern = emulate(f, s)
    for sizes in (dict(R=3, S=1031), dict(R=1, S=1), dict(R=2, S=256)):
        a = _arrays(f, sizes, 5)
        np.testing.assert_allclose(kern(**a), W.BUILTIN["softmax"].numpy(a)(), rtol=1e-4,
                                   atol=1e-5)
    nest = tl.compile(f, s, target="cuda").loop_nest()
    exps = [ln.strip() for ln in nest.splitlines() if "exp(" in ln]
    assert exps and all(ln.startswith("e_shared[") for ln in exps)  # only the copy computes it
    g = W.BUILTIN["layernorm"].build()  # nothing of it is inlined into a reduction
    with pytest.raises(tl.ScheduleError, match="0 inlined Funcs"):
        stage_row_values(gpu_schedule(g), g.name)


def test_the_host_program_passes_the_rows_bytes_to_each_launch(monkeypatch):
    import fake_cuda

    f, s = _staged("softmax")
    kern = tl.compile(f, s, target="cuda")
    dev = fake_cuda.install(monkeypatch, kern)
    a = _arrays(f, dict(R=5, S=333), 4)
    np.testing.assert_allclose(kern(**a), W.BUILTIN["softmax"].numpy(a)(), rtol=1e-4,
                               atol=1e-5)
    assert dev.launched and dev.dynamic == [333 * 4] * len(dev.launched)
    assert kern.launch_plan(dict(R=8192, S=8192)) == [("softmax_k0", (8192, 1, 1),
                                                       (256, 1, 1))]


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_the_rule_stages_a_row_where_its_bucket_fits(name):
    # rule 5 at known sizes stages the row (stage_rows) where the row, rounded up to a power
    # of two as the dispatcher's bucket is, takes at most ROW_SHARED_BYTES; not where the
    # sizes are unknown (a row may be longer than a block's shared memory) or too long
    from tensorlang.backends.cuda.rules import ROW_SHARED_BYTES

    f = W.BUILTIN[name].build()
    widest = ROW_SHARED_BYTES // 4  # float32 columns
    assert "cache_read('X'" in gpu_schedule(f, sizes=dict(R=3, S=widest)).to_python()
    assert "cache_read('X'" in gpu_schedule(f, sizes=dict(R=3, S=widest // 2 + 1)).to_python()
    assert "cache_read" not in gpu_schedule(f, sizes=dict(R=3, S=widest + 1)).to_python()
    assert "cache_read" not in gpu_schedule(f).to_python()
    s = gpu_schedule(f, sizes=dict(R=3, S=1031))
    kern = emulate(f, s)
    for sizes in (dict(R=3, S=1031), dict(R=1, S=1), dict(R=2, S=600)):
        a = _arrays(f, sizes, 5)
        np.testing.assert_allclose(kern(**a), W.BUILTIN[name].numpy(a)(), rtol=1e-4, atol=1e-5)


def test_a_rule_based_kernel_called_with_a_row_too_long_for_its_staging_says_what_to_do(
        monkeypatch):
    # rule 5 staged the row for the sizes it was compiled for; a call with a row longer than a
    # block's shared memory is refused before the launch, naming the way out
    import fake_cuda
    from tensorlang.backends.cuda.driver import DeviceInfo
    from tensorlang.errors import DeviceError

    f = W.BUILTIN["softmax"].build()
    kern = tl.compile(f, gpu_schedule(f, sizes=dict(R=3, S=600)), target="cuda")
    kern.schedule_source = "heuristic"  # (as tl.compile(f, "auto", shapes=...) makes it)
    dev = fake_cuda.install(monkeypatch, kern)
    dev.info = DeviceInfo("small fake GPU", (9, 0), 12040, 1 << 30, 4096, 1, shared_optin=4096)
    a = _arrays(f, dict(R=2, S=1000), 4)  # 4,000 bytes a row: fits
    np.testing.assert_allclose(kern(**a), W.BUILTIN["softmax"].numpy(a)(), rtol=1e-4, atol=1e-5)
    with pytest.raises(DeviceError, match=r"needs 8000 bytes .*staged it for other sizes.*"
                                          r"shapes="):
        kern(**_arrays(f, dict(R=2, S=2000), 4))


def test_a_launch_over_the_gpus_shared_memory_is_refused_before_it_runs():
    assert launch_error("k", (1, 1, 1), (256, 1, 1), 100_000, 232_448) is None
    why = launch_error("k", (1, 1, 1), (256, 1, 1), 300_000, 232_448)
    assert "300000 bytes of shared memory" in why and "at most 232448" in why
    # the emulator's array holds what an H100 block may opt in to; more is an error, not a
    # write past it
    f, s = _staged("softmax")
    kern = emulate(f, s)
    row = EMULATED_DYNAMIC_BYTES // 4 + 1
    with pytest.raises(MemoryError):
        kern(X=np.ones((1, row), np.float32))


def test_only_copies_and_one_buffer_a_kernel_are_sized_at_launch():
    # two matrices read along the row: two buffers sized at launch in one kernel
    R, S = tl.sizes("R S")
    X, Y = tl.Input("X", (R, S), tl.float32), tl.Input("Y", (R, S), tl.float32)
    i, j, k = tl.vars("i j k")
    dot = tl.Func("dot")
    dot[i] = X[i, k] * Y[i, k]
    out = tl.Func("out")
    out[i, j] = X[i, j] * Y[i, j] / dot[i]
    s = gpu_schedule(out)
    for t in ("X", "Y"):
        s.cache_read(t, s[out], "i", scope="shared", readers=("dot_rf",))
        c = s.states[f"{t}_shared"].loops[-1]
        s[f"{t}_shared"].gpu_threads(s[f"{t}_shared"].split(c, 256)[1])
    with pytest.raises(CompileError, match="two shared buffers sized when launching"):
        tl.compile(out, s, target="cuda")
    # a stage computed at a block loop (not a copy asked for in shared memory) still needs a
    # constant size (tests/test_cuda.py: the convolution's padded input per block)
    assert "X_shared" in shared_copies(s) and "dot" not in shared_copies(s)


def test_the_driver_allows_a_function_its_dynamic_shared_memory_and_explains_a_refusal(
        monkeypatch):
    # Device.launch against a stand-in for cuda.bindings.driver (CI has neither it nor a GPU)
    from enum import Enum
    from types import SimpleNamespace

    from tensorlang.backends.cuda import driver
    from tensorlang.backends.cuda.driver import Device
    from tensorlang.errors import DeviceError

    class CUresult(Enum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701

    class Attr(Enum):
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
        CU_FUNC_ATTRIBUTE_NUM_REGS = 4
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0

    calls = []
    refuse = [False]

    def set_attribute(f, attr, value):
        calls.append((attr.name, value))
        return (CUresult.CUDA_SUCCESS,)

    drv = SimpleNamespace(
        CUresult=CUresult, CUfunction_attribute=Attr, cuFuncSetAttribute=set_attribute,
        cuFuncGetAttribute=lambda a, f: (CUresult.CUDA_SUCCESS, {4: 168, 0: 384}[a.value]),
        cuLaunchKernel=lambda f, *a: (CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES if refuse[0]
                                      else CUresult.CUDA_SUCCESS,))
    monkeypatch.setattr(driver, "_driver", lambda: drv)
    dev = Device.__new__(Device)
    dev._drv, dev._dynamic = drv, {}
    fn = object()
    for dynamic in (0, 30_000, 60_000, 20_000):  # (static and dynamic share 48 KiB unless
        dev.launch(fn, (1, 1, 1), (256, 1, 1), 0, "k", dynamic)  # the function is allowed)
    assert calls == [("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 30_000),
                     ("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 60_000)]
    refuse[0] = True
    with pytest.raises(DeviceError, match="uses 168 registers a thread, which allows at most "
                                          "384 threads a block"):
        dev.launch(fn, (1, 1, 1), (512, 1, 1), 0, "k")
