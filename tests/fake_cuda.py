"""A stand-in for the CUDA driver (``backends/cuda/driver.Device``), for tests on machines
without a GPU: "device memory" is host memory, and launching a kernel runs its emulated twin
(``emulate.emulated_launches``: the same kernel compiled for this CPU, every block and thread)
with the argument values the real launch would pass. A ``CUDAKernel`` then runs its real host
program, callbacks, argument marshalling, device allocations and copies — everything but the
PTX — and its results can be checked against NumPy.

A test double, not a product: it knows nothing of PTX and times nothing on a GPU.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field

from tensorlang.backends.cuda.driver import DeviceInfo
from tensorlang.backends.cuda.emulate import emulated_launches
from tensorlang.backends.cuda.launches import plan
from tensorlang.backends.cuda.private import private_buffers, shared_copies


@dataclass
class FakeDevice:
    """Device memory in host buffers; launches run the emulated kernels of ``kernel``."""

    info: DeviceInfo = field(default_factory=lambda: DeviceInfo(
        "fake GPU (CPU emulation)", (9, 0), 12040, 1 << 30, 48 * 1024, 1))
    buffers: dict[int, ctypes.Array] = field(default_factory=dict)
    launched: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    programs: dict[str, tuple] = field(default_factory=dict)
    kernels: list = field(default_factory=list)
    dynamic: list[int] = field(default_factory=list)  # bytes of dynamic shared memory a launch
    freed: int = 0
    copies: int = 0  # device-to-device copies

    def register(self, kernel) -> None:
        """Make ``kernel``'s device kernels runnable here (before its first call)."""
        compiled, addresses = emulated_launches(plan(kernel.lowered,
                                                     private_buffers(kernel.schedule),
                                                     shared_copies(kernel.schedule)))
        self.programs[kernel.ptx()] = (compiled, addresses, dict(kernel.launches))

    # -- the Device interface ---------------------------------------------------------------------
    def activate(self) -> None:
        pass

    def load_module(self, ptx: str):
        if ptx not in self.programs:
            raise AssertionError("FakeDevice.register(kernel) was not called for this kernel")
        return ptx

    def function(self, module, name: str):
        compiled, addresses, nargs = self.programs[module]
        return (name, addresses[name], nargs[name], compiled)

    def launch(self, function, grid, block, params: int, name: str, dynamic: int = 0) -> None:
        fname, address, nargs, _ = function
        assert fname == name and all(d >= 1 for d in (*grid, *block))
        self.launched.append((name, tuple(grid), tuple(block)))
        self.dynamic.append(dynamic)
        slots = (ctypes.c_void_p * nargs).from_address(params)
        values = [ctypes.c_int64.from_address(slots[k]).value for k in range(nargs)]
        fn = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_int64] * nargs))(address)
        assert fn(*values) == 0

    def synchronize(self) -> None:
        pass

    def alloc(self, nbytes: int) -> int:
        buf = ctypes.create_string_buffer(max(int(nbytes), 1))
        ptr = ctypes.addressof(buf)
        self.buffers[ptr] = buf
        return ptr

    def free(self, ptr: int) -> None:
        del self.buffers[ptr]  # KeyError: freed twice, or never allocated here
        self.freed += 1

    def to_device(self, ptr: int, host) -> None:
        assert ptr in self.buffers and len(self.buffers[ptr]) >= host.nbytes
        ctypes.memmove(ptr, host.ctypes.data, host.nbytes)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        for p in (dst, src):  # inside one allocation (a view may start past its beginning)
            assert any(b <= p and p + nbytes <= b + len(buf) for b, buf in self.buffers.items())
        ctypes.memmove(dst, src, nbytes)
        self.copies += 1

    def to_host(self, host, ptr: int) -> None:
        assert ptr in self.buffers and len(self.buffers[ptr]) >= host.nbytes
        ctypes.memmove(host.ctypes.data, ptr, host.nbytes)

    def event(self):
        return [0.0]

    def record(self, event) -> None:
        event[0] = time.perf_counter()

    def elapsed(self, start, end) -> float:
        return end[0] - start[0]


def install(monkeypatch, *kernels) -> FakeDevice:
    """A FakeDevice that ``kernels`` (CUDAKernels) use, through the driver's ``device()``."""
    import tensorlang.backends.cuda.driver as driver

    dev = FakeDevice(kernels=list(kernels))
    for k in kernels:
        dev.register(k)
    monkeypatch.setattr(driver, "device", lambda: dev)
    return dev
