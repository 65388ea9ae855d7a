"""The CUDA driver API, through NVIDIA's ``cuda-bindings`` (``cuda.bindings.driver``; the
optional extra ``tensorlang[cuda]``): the device and its primary context, PTX modules, device
memory, kernel launches and event timing.

Everything is lazy: importing this module, generating PTX or building a CUDA kernel needs
neither the package nor a GPU; the first call that must run something on a GPU initialises the
driver, and without a usable one raises ``DeviceError`` saying what is missing.

See also: the CUDA Driver API reference (``cuInit``, ``cuModuleLoadData``, ``cuLaunchKernel``,
``cuEventElapsedTime``); ``cuda-python``'s examples.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any

from tensorlang.errors import DeviceError

_INSTALL = "pip install 'tensorlang[cuda]' (NVIDIA's cuda-bindings)"


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise DeviceError(f"running a CUDA kernel needs the CUDA driver bindings: {_INSTALL}"
                          ) from exc
    return driver


def _check(result: Any, what: str) -> Any:
    """The values of a driver call's result tuple after its ``CUresult``.

    Raises:
        DeviceError: the call failed (the driver's error name and text in the message).
    """
    drv = _driver()
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        _, text = drv.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        raise DeviceError(f"CUDA {what} failed: {name} ({text})")
    return rest[0] if len(rest) == 1 else rest


@dataclass(frozen=True)
class DeviceInfo:
    """The GPU kernels run on: ``name``, compute ``capability``, ``driver`` version (an int,
    1000 * major + 10 * minor), global ``memory`` in bytes, ``shared_per_block`` in bytes,
    ``multiprocessors``, ``shared_optin``: the most shared memory a block may opt in to, in
    bytes (0: unknown)."""

    name: str
    capability: tuple[int, int]
    driver: int
    memory: int
    shared_per_block: int
    multiprocessors: int
    shared_optin: int = 0


class Device:
    """The first visible GPU and its primary context. Use :func:`device`."""

    def __init__(self) -> None:
        drv = _driver()
        try:
            _check(drv.cuInit(0), "initialisation (cuInit)")
        except DeviceError:
            raise
        except Exception as exc:  # the bindings could not load libcuda: no NVIDIA driver
            raise DeviceError(f"no usable GPU: the NVIDIA driver library could not be loaded "
                              f"({exc}); CUDA kernels run only on a machine with an NVIDIA GPU "
                              f"and its driver") from exc
        if _check(drv.cuDeviceGetCount(), "cuDeviceGetCount") < 1:
            raise DeviceError("no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES)")
        self._drv = drv
        self.handle = _check(drv.cuDeviceGet(0), "cuDeviceGet")
        self.context = _check(drv.cuDevicePrimaryCtxRetain(self.handle),
                              "cuDevicePrimaryCtxRetain")
        attr = drv.CUdevice_attribute
        get = functools.partial(self._attribute)
        raw_name = _check(drv.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        self.info = DeviceInfo(
            name=raw_name.split(b"\0")[0].decode() if isinstance(raw_name, bytes) else
            str(raw_name),
            capability=(get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                        get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
            driver=int(_check(drv.cuDriverGetVersion(), "cuDriverGetVersion")),
            memory=int(_check(drv.cuDeviceTotalMem(self.handle), "cuDeviceTotalMem")),
            shared_per_block=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
            multiprocessors=get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            shared_optin=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))
        self._local = threading.local()
        self._dynamic: dict[int, int] = {}  # id of a function -> dynamic shared bytes allowed

    def _attribute(self, attr: Any) -> int:
        return int(_check(self._drv.cuDeviceGetAttribute(attr, self.handle),
                          "cuDeviceGetAttribute"))

    def activate(self) -> None:
        """Make the primary context current on this thread (once per thread)."""
        if not getattr(self._local, "active", False):
            _check(self._drv.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            self._local.active = True

    # -- modules and launches --------------------------------------------------------------------
    def load_module(self, ptx: str) -> Any:
        """Load PTX text (the driver compiles it for this GPU)."""
        self.activate()
        return _check(self._drv.cuModuleLoadData(ptx.encode() + b"\0"), "cuModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        return _check(self._drv.cuModuleGetFunction(module, name.encode()),
                      f"cuModuleGetFunction({name})")

    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               params: int, name: str, dynamic: int = 0) -> None:
        """Launch ``function`` on the default stream with ``dynamic`` bytes of dynamic shared
        memory; ``params`` is the address of its ``void*[]`` of argument addresses. The
        function is first allowed that much (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``:
        without it, static and dynamic shared memory together get 48 KiB)."""
        if dynamic > self._dynamic.get(id(function), 0):
            attr = self._drv.CUfunction_attribute
            _check(self._drv.cuFuncSetAttribute(
                function, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic),
                f"cuFuncSetAttribute of {name} (dynamic shared memory)")
            self._dynamic[id(function)] = dynamic
        result = self._drv.cuLaunchKernel(function, *grid, *block, dynamic, 0, params, 0)
        err = result[0] if isinstance(result, tuple) else result
        if err == self._drv.CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
            attr = self._drv.CUfunction_attribute
            regs = _check(self._drv.cuFuncGetAttribute(
                attr.CU_FUNC_ATTRIBUTE_NUM_REGS, function), "cuFuncGetAttribute")
            most = _check(self._drv.cuFuncGetAttribute(
                attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function), "cuFuncGetAttribute")
            raise DeviceError(f"kernel {name} cannot run blocks of {block[0]} x {block[1]} x "
                              f"{block[2]} threads on this GPU: it uses {regs} registers a "
                              f"thread, which allows at most {most} threads a block; use a "
                              f"smaller gpu_tile or register tile")
        _check(result, f"launch of {name}")

    def synchronize(self) -> None:
        self.activate()
        _check(self._drv.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")

    # -- memory ------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self.activate()
        return int(_check(self._drv.cuMemAlloc(max(int(nbytes), 1)), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        _check(self._drv.cuMemFree(ptr), "cuMemFree")

    def to_device(self, ptr: int, host: Any) -> None:
        """Copy the C-contiguous NumPy array ``host`` to device address ``ptr``."""
        _check(self._drv.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Copy ``nbytes`` bytes of device memory from ``src`` to ``dst`` (on the GPU)."""
        _check(self._drv.cuMemcpyDtoD(dst, src, nbytes), "cuMemcpyDtoD")

    def to_host(self, host: Any, ptr: int) -> None:
        """Copy device memory at ``ptr`` into the C-contiguous NumPy array ``host``."""
        _check(self._drv.cuMemcpyDtoH(host.ctypes.data, ptr, host.nbytes), "cuMemcpyDtoH")

    # -- timing ------------------------------------------------------------------------------
    def event(self) -> Any:
        self.activate()
        return _check(self._drv.cuEventCreate(0), "cuEventCreate")

    def record(self, event: Any) -> None:
        _check(self._drv.cuEventRecord(event, 0), "cuEventRecord")

    def elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two recorded events (after the second has completed)."""
        _check(self._drv.cuEventSynchronize(end), "cuEventSynchronize")
        return float(_check(self._drv.cuEventElapsedTime(start, end),
                            "cuEventElapsedTime")) / 1e3


_DEVICE: Device | None = None
_FAILURE: DeviceError | None = None  # why no device could be had (not retried in this process)
_LOCK = threading.Lock()


def device() -> Device:
    """The process's GPU (initialised on first use).

    Raises:
        DeviceError: no ``cuda-bindings``, no NVIDIA driver, or no visible GPU.
    """
    global _DEVICE, _FAILURE
    with _LOCK:
        if _FAILURE is not None:
            raise DeviceError(str(_FAILURE))
        if _DEVICE is None:
            try:
                _DEVICE = Device()
            except DeviceError as exc:
                _FAILURE = exc
                raise
        return _DEVICE


def visible_capability() -> tuple[int, int] | None:
    """The visible GPU's compute capability, or None when no GPU is usable here (never
    raises)."""
    try:
        return device().info.capability
    except DeviceError:
        return None
