"""Arrays in GPU memory: ``DeviceArray``, and reading any array that exposes the CUDA Array
Interface (CuPy, PyTorch CUDA tensors, Numba device arrays) without copying it.

A ``CUDAKernel`` called on such arrays passes their device pointers straight to the kernels;
called on NumPy arrays it copies them to the GPU and back (``kernel.py``).

See also: the CUDA Array Interface, version 3 (numba.readthedocs.io, "CUDA Array Interface").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorlang.errors import ShapeError


def cuda_array(obj: Any) -> tuple[int, tuple[int, ...], np.dtype] | None:
    """``(device pointer, shape, dtype)`` of an object exposing ``__cuda_array_interface__``,
    or None for any other object (a NumPy array).

    Raises:
        ShapeError: the array is not C-contiguous (a kernel indexes its buffers row-major).
    """
    if isinstance(obj, np.ndarray):
        return None
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        return None
    shape = tuple(int(d) for d in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None:
        want, step = [], dtype.itemsize
        for d in reversed(shape):
            want.append(step)
            step *= max(d, 1)
        if tuple(strides) != tuple(reversed(want)) and int(np.prod(shape)) > 1:
            raise ShapeError(f"a {type(obj).__name__} of shape {shape} with strides "
                             f"{tuple(strides)} is not C-contiguous; pass a contiguous copy "
                             f"(.contiguous() in PyTorch, cupy.ascontiguousarray)")
    return int(cai["data"][0]), shape, dtype


class DeviceArray:
    """A C-contiguous array in the GPU's memory, freed when garbage collected.

    ``DeviceArray.from_host(a)`` copies a NumPy array to the GPU; ``np.asarray(d)`` and
    ``d.copy_to_host()`` copy it back; ``d[...] = a`` copies ``a`` in; it exposes
    ``__cuda_array_interface__``, so CuPy and PyTorch can wrap it without copying.

    Raises:
        DeviceError: no usable GPU (on creation).
    """

    def __init__(self, shape: tuple[int, ...], dtype: Any, device: Any = None) -> None:
        from .driver import device as get_device

        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.device = device if device is not None else get_device()
        self.ptr = self.device.alloc(self.nbytes)

    @classmethod
    def from_host(cls, a: np.ndarray, device: Any = None) -> DeviceArray:
        d = cls(a.shape, a.dtype, device)
        d[...] = a
        return d

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def copy_to_host(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        self.device.synchronize()
        self.device.to_host(out, self.ptr)
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.copy_to_host()
        return a if dtype is None else a.astype(dtype)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key is not Ellipsis and key != slice(None):
            raise ShapeError("a DeviceArray is written whole: d[...] = array")
        host = np.ascontiguousarray(np.broadcast_to(np.asarray(value, self.dtype), self.shape))
        self.device.to_device(self.ptr, host)

    def fill(self, value: Any) -> None:
        self[...] = value

    def __del__(self) -> None:
        try:
            self.device.synchronize()  # kernels launched on it may still run
            self.device.free(self.ptr)
        except Exception:  # noqa: BLE001 - the driver may be gone at interpreter exit
            pass

    def __repr__(self) -> str:
        return f"<DeviceArray {self.dtype} {self.shape} at 0x{self.ptr:x}>"
