"""Arrays in GPU memory: ``DeviceArray``, and reading any array that exposes the CUDA Array
Interface (CuPy, PyTorch CUDA tensors, Numba device arrays) or DLPack on a CUDA device (JAX,
and any array library implementing the Python array API's ``__dlpack__``) without copying it.

A ``CUDAKernel`` called on such arrays passes their device pointers straight to the kernels;
called on NumPy arrays it copies them to the GPU and back (``kernel.py``).

See also: the CUDA Array Interface, version 3 (numba.readthedocs.io, "CUDA Array Interface");
DLPack's C header ``dlpack.h`` (``DLManagedTensor``) and the Python array API standard's
``__dlpack__`` / ``__dlpack_device__`` protocol (data-apis.org).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensorlang.errors import ShapeError

#: DLPack's device types of memory a CUDA kernel can read (``kDLCUDA``, ``kDLCUDAManaged``)
DLPACK_CUDA = (2, 13)
#: the stream the kernels run on, as DLPack names it: CUDA's legacy default stream (the
#: producer makes its pending work on the array visible to that stream before handing it over)
DLPACK_STREAM = 1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


#: ``PyCapsule_GetPointer`` with its own prototype (``ctypes.pythonapi``'s function object is
#: shared: setting its argtypes would change them for every other user)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

#: DLPack type codes -> NumPy kinds (``kDLInt``, ``kDLUInt``, ``kDLFloat``, ``kDLBfloat``,
#: ``kDLBool``)
_DL_KINDS = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}


def _dl_dtype(t: _DLDataType) -> np.dtype | None:
    kind = _DL_KINDS.get(t.code)
    if kind is None or t.lanes != 1:
        return None
    if kind == "bool":
        return np.dtype(np.bool_) if t.bits == 8 else None
    if kind == "bfloat":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16) if t.bits == 16 else None
    try:
        return np.dtype(f"{kind}{t.bits}")
    except TypeError:
        return None


def _dlpack_array(obj: Any) -> tuple[int, tuple[int, ...], np.dtype, tuple[int, ...] | None] | None:
    """``(device pointer, shape, dtype, strides in bytes or None)`` of a DLPack array on a CUDA
    device, None for one elsewhere (or no DLPack at all).

    The capsule is read, not consumed: its producer keeps the memory (the object passed to the
    kernel stays alive through the call) and frees the capsule's record when it is dropped.

    Raises:
        ShapeError: a dtype NumPy has no equivalent of (complex, vectors of lanes), or the
            capsule is not an unconsumed ``dltensor``.
    """
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or not hasattr(obj, "__dlpack__"):
        return None
    if int(device()[0]) not in DLPACK_CUDA:
        return None
    try:
        capsule = obj.__dlpack__(stream=DLPACK_STREAM)
    except TypeError:  # a producer from before the array API's stream argument
        capsule = obj.__dlpack__()
    try:
        t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))  # DLManagedTensor
        # starts with its DLTensor
    except ValueError as exc:  # a consumed capsule ("used_dltensor"), or a versioned one
        raise ShapeError(f"the DLPack capsule of a {type(obj).__name__} is not a fresh "
                         f"'dltensor' ({exc}); pass the array itself, not its capsule") from exc
    dtype = _dl_dtype(t.dtype)
    if dtype is None:
        raise ShapeError(f"a {type(obj).__name__} of DLPack type (code {t.dtype.code}, "
                         f"{t.dtype.bits} bits, {t.dtype.lanes} lanes) has no NumPy dtype; "
                         f"tensorlang kernels take bool, integer and float arrays")
    shape = tuple(int(t.shape[d]) for d in range(t.ndim))
    strides = None if not t.strides else \
        tuple(int(t.strides[d]) * dtype.itemsize for d in range(t.ndim))
    return int(t.data or 0) + int(t.byte_offset), shape, dtype, strides


def cuda_array(obj: Any) -> tuple[int, tuple[int, ...], np.dtype] | None:
    """``(device pointer, shape, dtype)`` of an object exposing ``__cuda_array_interface__``,
    or DLPack (``__dlpack__``) on a CUDA device; None for any other object (a NumPy array).

    Raises:
        ShapeError: the array is not C-contiguous (a kernel indexes its buffers row-major), or
            its DLPack dtype has no NumPy equivalent.
    """
    if isinstance(obj, np.ndarray):
        return None
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        ptr, shape = int(cai["data"][0]), tuple(int(d) for d in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        strides = cai.get("strides")
    else:
        dl = _dlpack_array(obj)
        if dl is None:
            return None
        ptr, shape, dtype, strides = dl
    if strides is not None:
        want, step = [], dtype.itemsize
        for d in reversed(shape):
            want.append(step)
            step *= max(d, 1)
        # (a dimension of extent 1 may have any stride: PyTorch's x[:, None])
        if any(st != w for st, w, d in zip(strides, reversed(want), shape) if d > 1):
            raise ShapeError(f"a {type(obj).__name__} of shape {shape} with strides "
                             f"{tuple(strides)} is not C-contiguous; pass a contiguous copy "
                             f"(.contiguous() in PyTorch, cupy.ascontiguousarray)")
    return ptr, shape, dtype


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
