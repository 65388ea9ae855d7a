"""``CUDAKernel``: a compiled CUDA pipeline called on NumPy arrays.

A call binds sizes from the arrays' shapes (as ``tl.Kernel`` does, with the same checks),
copies the inputs to the GPU, runs the host program (``codegen.HostGen``, machine code for this
CPU), which launches the device kernels in order through :meth:`CUDAKernel._launch` and
allocates root buffers through ``_alloc`` / ``_free`` (ctypes callbacks), then copies the
outputs back. The PTX module is loaded into the driver on the first call.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensorlang.arguments import collect_arrays
from tensorlang.errors import DeviceError, ShapeError
from tensorlang.pipeline import Pipeline
from tensorlang.schedule.ir import LoweredFunc, print_stmt

from ..base import Signature
from ..llvm.jit import CompiledModule
from .arrays import DeviceArray, cuda_array
from .launches import launch_error

LAUNCH_CB = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                             ctypes.POINTER(ctypes.c_int64))
ALLOC_CB = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
FREE_CB = ctypes.CFUNCTYPE(None, ctypes.c_int64)


def _refuse_overlap(arrays: dict[str, np.ndarray], on_gpu: dict[str, int],
                    results_gpu: list[tuple[int, tuple[int, ...], np.dtype] | None],
                    out_names: tuple[str, ...]) -> None:
    """The kernels state that their buffers do not alias (``noalias``): an output on the GPU
    (``results_gpu``: each output's ``cuda_array``, None on the host) that shares memory with
    an input or another output would be computed wrongly.

    Raises:
        ShapeError: naming the two arrays.
    """
    spans = [(name, p, p + max(arrays[name].dtype.itemsize * int(np.prod(arrays[name].shape)),
                               1)) for name, p in on_gpu.items()]
    outs = []
    for name, gpu in zip(out_names, results_gpu):
        if gpu is not None:
            n = max(gpu[2].itemsize * int(np.prod(gpu[1])), 1)
            outs.append((f"out ({name})", gpu[0], gpu[0] + n))
    for k, (a, a_start, a_end) in enumerate(outs):  # inputs may share memory: only read
        for b, b_start, b_end in spans + outs[k + 1:]:
            if a_start < b_end and b_start < a_end:
                raise ShapeError(f"{a} and {b} share GPU memory; a kernel's output must not "
                                 f"overlap its other arrays: give out= a separate array")


class CUDAKernel:
    """A CUDA kernel for one pipeline; one kernel runs every shape.

    Called like ``tl.Kernel``: input arrays (exactly the declared dtypes) positionally or by
    name, sizes no input fixes by name, ``out=`` for preallocated outputs. NumPy arrays are
    copied to the GPU and back on each call; arrays already on the GPU (anything exposing
    ``__cuda_array_interface__``: ``DeviceArray``, CuPy, PyTorch CUDA tensors; or DLPack on a
    CUDA device: JAX arrays, ``arrays.py``) are read and written in place, and when the inputs
    are on the GPU the outputs stay there (``DeviceArray``). The kernels assume buffers aligned
    to ``target.buffer_align`` bytes (16: vector loads); a GPU array that is not (a view
    starting inside an allocation) goes through an aligned copy on the GPU.

    Attributes:
        launches: per device kernel, ``(name, number of arguments)`` in launch order.

    Raises (from ``__call__``):
        ShapeError: wrong arrays (as ``tl.Kernel``), or a GPU array that is not C-contiguous.
        DeviceError: no usable GPU, or a launch or driver call failed.
    """

    def __init__(self, pipeline: Pipeline, ptx: str, host: CompiledModule, signature: Signature,
                 launches: tuple[tuple[str, int], ...], target: Any, *,
                 lowered: LoweredFunc | None = None, schedule: Any = None,
                 schedule_source: str = "user", object_code: bytes | None = None) -> None:
        self.pipeline = pipeline
        self.signature = signature
        self.schedule = schedule
        self.schedule_source = schedule_source
        self.target = target
        self.launches = launches
        self.object_code = object_code
        self._ptx = ptx
        self._host = host
        self._lowered = lowered
        n = signature.n_inputs + signature.n_outputs
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * n),
                                    *([ctypes.c_int64] * len(signature.sizes)),
                                    LAUNCH_CB, ALLOC_CB, FREE_CB)(host.address)
        self._functions: list[Any] | None = None
        self._device: Any = None
        self._error: BaseException | None = None
        self._live: set[int] = set()
        self._callbacks = (LAUNCH_CB(self._launch), ALLOC_CB(self._alloc), FREE_CB(self._free))
        self._out_dtypes = tuple(o.dtype.numpy for o in pipeline.outputs)
        self._out_names = tuple(o.name for o in pipeline.outputs)

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.pipeline.inputs)

    def ptx(self) -> str:
        """The PTX of the device kernels (one ``.entry`` per launch)."""
        return self._ptx

    def host_ir(self) -> str:
        """The LLVM IR of the host program (launch dimensions, allocations, launches)."""
        return self._host.ir

    def launch_plan(self, sizes: dict[str, int]) -> list[tuple[str, tuple[int, int, int],
                                                              tuple[int, int, int]]]:
        """The kernels a call at ``sizes`` (by size name) launches, in order, each as ``(name,
        grid, block)`` (x, y, z): which version of the tiles runs, and over how many blocks.
        Needs no GPU: the host program runs on this CPU with stand-ins for the driver that
        record each launch and hand out addresses it never dereferences.

        Raises:
            ShapeError: ``sizes`` do not fit the algorithm.
        """
        bound = self.pipeline.bind(self.pipeline.input_shapes(sizes), sizes)
        size_args = [bound.sizes[n] for n in self.signature.sizes]
        step = self.target.buffer_align << 20  # (addresses only: nothing is read or written)
        buffers = [step * (k + 1) for k in range(self.signature.n_inputs
                                                 + self.signature.n_outputs)]
        plan: list[tuple[str, tuple[int, int, int], tuple[int, int, int]]] = []
        heap = [step * (len(buffers) + 1)]

        def launch(index: int, dims: Any, args: Any) -> int:
            plan.append((self.launches[index][0], (int(dims[0]), int(dims[1]), int(dims[2])),
                         (int(dims[3]), int(dims[4]), int(dims[5]))))
            return 0

        def alloc(nbytes: int) -> int:
            heap[0] += -(-nbytes // step) * step + step
            return heap[0]

        callbacks = (LAUNCH_CB(launch), ALLOC_CB(alloc), FREE_CB(lambda ptr: None))
        self._fn(*buffers, *size_args, *callbacks)
        return plan

    @property
    def lowered(self) -> LoweredFunc:
        if self._lowered is None:
            from tensorlang.schedule.lower import lower

            s = self.schedule
            self._lowered = lower(self.pipeline if s is None else s.output, s)
        return self._lowered

    def loop_nest(self) -> str:
        return print_stmt(self.lowered.body)

    # -- running ---------------------------------------------------------------------------------
    def load(self) -> Any:
        """Load the PTX into the driver (done by the first call); returns the device.

        Raises:
            DeviceError: no usable GPU, or the driver rejected the module.
        """
        from .driver import device

        if self._functions is None:
            dev = device()
            module = dev.load_module(self._ptx)
            self._functions = [dev.function(module, name) for name, _ in self.launches]
            self._device = dev
        return self._device

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        results, _ = self._run(args, kwargs, out, repeat=0)
        return results[0] if len(results) == 1 else tuple(results)

    def benchmark(self, *args: Any, repeat: int = 20, warmup: int = 3,
                  **kwargs: Any) -> list[float]:
        """Seconds of each of ``repeat`` runs of the kernels on these arrays, after ``warmup``
        runs: CUDA events recorded around the host program's launches, the arrays copied to
        the GPU once beforehand (copies are not timed).

        Raises:
            ShapeError, DeviceError: as a call.
        """
        _, times = self._run(args, kwargs, None, repeat=repeat, warmup=warmup)
        return times

    def _run(self, args: tuple, kwargs: dict, out: Any, repeat: int, warmup: int = 0
             ) -> tuple[list[Any], list[float]]:
        names = [i.name for i in self.pipeline.inputs]
        on_gpu: dict[str, int] = {}  # Input name -> device pointer of a CUDA array (no copy)

        def stand_in(name: str, a: Any) -> Any:
            info = cuda_array(a)
            if info is None:
                return a
            on_gpu[name] = info[0]
            # a zero-stride NumPy array of its shape and dtype: binds the sizes, holds nothing
            return np.lib.stride_tricks.as_strided(np.zeros(1, info[2]), info[1],
                                                   (0,) * len(info[1]))

        args = tuple(stand_in(n, a) for n, a in zip(names, args)) + args[len(names):]
        kwargs = {k: stand_in(k, v) for k, v in kwargs.items()}
        arrays, sizes = collect_arrays(self.pipeline, args, kwargs, copy_noncontiguous=False)
        outs = None if out is None else (out if isinstance(out, (tuple, list)) else (out,))
        if outs is not None and len(outs) != len(self._out_names):
            raise ShapeError(f"out= must give {len(self._out_names)} arrays, one per output "
                             f"({', '.join(self._out_names)})")
        # each out= array read once (a DLPack object makes a new capsule per read)
        outs_gpu = [None] * len(self._out_names) if outs is None else \
            [cuda_array(o) for o in outs]
        given = None if outs is None else {
            n: (o.shape if isinstance(o, np.ndarray) else gpu[1])
            for n, o, gpu in zip(self._out_names, outs, outs_gpu)
            if isinstance(o, np.ndarray) or gpu is not None}
        bound = self.pipeline.bind({k: v.shape for k, v in arrays.items()}, sizes, given)
        shapes = [tuple(ext for _, ext in bound.bounds[n]) for n in self._out_names]
        dev = self.load()
        results: list[Any] = []
        results_gpu: list[tuple[int, tuple[int, ...], np.dtype] | None] = []
        for k, (shape, dt) in enumerate(zip(shapes, self._out_dtypes)):
            o = None if outs is None else outs[k]
            gpu = outs_gpu[k]
            if o is not None and gpu is None and (
                    not isinstance(o, np.ndarray) or o.shape != shape or o.dtype != dt or
                    not o.flags.c_contiguous or not o.flags.writeable):
                raise ShapeError(f"out for {self._out_names[k]} must be a writeable "
                                 f"C-contiguous array of shape {shape} and dtype "
                                 f"{np.dtype(dt)} (NumPy, or on the GPU)")
            if gpu is not None and (gpu[1] != shape or gpu[2] != dt):
                raise ShapeError(f"out for {self._out_names[k]} has shape {gpu[1]} and dtype "
                                 f"{gpu[2]}; the output has shape {shape} and dtype "
                                 f"{np.dtype(dt)}")
            if o is None:  # on the GPU when the inputs were: no copy back
                o = DeviceArray(shape, dt, dev) if on_gpu else np.empty(shape, dt)
                gpu = cuda_array(o) if on_gpu else None
            results.append(o)
            results_gpu.append(gpu)
        _refuse_overlap(arrays, on_gpu, results_gpu, self._out_names)
        ptrs: list[int] = []
        owned: list[int] = []  # device memory this call allocated (copies of its arrays)
        times: list[float] = []
        size_args = [bound.sizes[n] for n in self.signature.sizes]
        align = self.target.buffer_align
        unaligned: list[tuple[int, int, int]] = []  # (user's pointer, aligned copy, bytes)
        try:
            for name, a in arrays.items():
                if name in on_gpu:
                    p = on_gpu[name]
                    if p % align:  # the kernels assume aligned buffers: an aligned copy
                        q = dev.alloc(a.size * a.dtype.itemsize)
                        owned.append(q)
                        dev.copy(q, p, a.size * a.dtype.itemsize)
                        p = q
                    ptrs.append(p)
                    continue
                a = np.ascontiguousarray(a)
                p = dev.alloc(a.nbytes)
                owned.append(p)
                ptrs.append(p)
                dev.to_device(p, a)
            for r, gpu in zip(results, results_gpu):
                if gpu is not None and gpu[0] % align:  # computed aligned, copied out after
                    nbytes = int(np.prod(gpu[1], dtype=np.int64)) * gpu[2].itemsize
                    q = dev.alloc(nbytes)
                    owned.append(q)
                    unaligned.append((gpu[0], q, nbytes))
                    ptrs.append(q)
                elif gpu is not None:
                    ptrs.append(gpu[0])
                else:
                    p = dev.alloc(r.nbytes)
                    owned.append(p)
                    ptrs.append(p)
            start, end = (dev.event(), dev.event()) if repeat else (None, None)
            for k in range(warmup + repeat if repeat else 1):
                timed = repeat and k >= warmup
                if timed:
                    dev.record(start)
                self._error = None
                rc = self._fn(*ptrs, *size_args, *self._callbacks)
                if self._error is not None:
                    raise self._error
                if rc != 0:
                    raise DeviceError(f"kernel {self.name}: a buffer could not be allocated "
                                      f"on the GPU")
                if timed:
                    dev.record(end)
                    times.append(dev.elapsed(start, end))
            for user, q, nbytes in unaligned:
                dev.copy(user, q, nbytes)
            dev.synchronize()
            for r, p in zip(results, ptrs[len(arrays):]):
                if isinstance(r, np.ndarray):
                    dev.to_host(r, p)
        finally:
            for p in owned:
                dev.free(p)
            for p in list(self._live):  # root buffers of a host program that stopped early
                dev.free(p)
            self._live.clear()
        return results, times

    # -- callbacks of the host program (never raise: the error is kept for __call__) ------------
    def _launch(self, index: int, dims: Any, args: Any) -> int:
        try:
            name, nargs = self.launches[index]
            grid = (int(dims[0]), int(dims[1]), int(dims[2]))
            block = (int(dims[3]), int(dims[4]), int(dims[5]))
            dynamic = int(dims[6])  # bytes of dynamic shared memory
            why = launch_error(name, grid, block, dynamic, self._device.info.shared_optin)
            if why is not None:
                if dynamic and self.schedule_source != "user":  # (not the user's own copy)
                    why += (f"; this kernel's {self.schedule_source} schedule staged it for "
                            f"other sizes: compile it for these (tl.compile(F, 'auto', "
                            f"shapes=...)), or with tl.compile(F, 'auto') and no shapes, which "
                            f"compiles one kernel per shape bucket")
                raise DeviceError(why)
            values = (ctypes.c_int64 * max(nargs, 1))(*[args[k] for k in range(nargs)])
            params = (ctypes.c_void_p * max(nargs, 1))(
                *[ctypes.addressof(values) + 8 * k for k in range(nargs)])
            self._device.launch(self._functions[index], grid, block,  # type: ignore[index]
                                ctypes.addressof(params), name, dynamic)
            return 0
        except BaseException as exc:  # noqa: BLE001  (reported by __call__)
            self._error = exc
            return 1

    def _alloc(self, nbytes: int) -> int:
        try:
            p = self._device.alloc(nbytes)
            self._live.add(p)
            return p
        except BaseException as exc:  # noqa: BLE001
            self._error = exc
            return 0

    def _free(self, ptr: int) -> None:
        try:
            self._live.discard(ptr)
            self._device.synchronize()  # the kernels launched before may still read it
            self._device.free(ptr)
        except BaseException as exc:  # noqa: BLE001
            self._error = exc

    def __repr__(self) -> str:
        return f"<CUDAKernel {self.name}({', '.join(self.input_names)}) for {self.target.arch}>"
