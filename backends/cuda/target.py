"""The CUDA target: which GPU architecture the PTX is generated for.

A ``CUDATarget`` names a compute capability (``sm_90`` for an H100); ``tl.compile(...,
target="cuda")`` uses the first visible GPU's when one is usable, else ``sm_90`` (or
``TENSORLANG_CUDA_ARCH``), and ``target="cuda:sm_80"`` names one. Code for ``sm_XY`` runs on GPUs
of that compute capability and, through the driver's JIT compiler of PTX, on later ones.

See also: LLVM's NVPTX back end (``llvm/lib/Target/NVPTX``, ``NVPTXUsage.rst``); Halide's
``Target::CUDACapability``; numba's ``cuda/codegen.py``.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

from tensorlang.errors import CompileError

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_90"
_ARCH = re.compile(r"^sm_[0-9]{2,3}[a-z]?$")


@functools.cache
def init_nvptx() -> None:
    """Register LLVM's NVPTX target and its PTX printer (llvmlite's LLVM is built with it)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@dataclass(frozen=True)
class CUDATarget:
    """A GPU architecture to generate PTX for: ``arch`` (``sm_90``) and the LLVM version."""

    arch: str = DEFAULT_ARCH
    llvm_version: str = ".".join(map(str, llvm.llvm_version_info))
    llvmlite_version: str = llvmlite.__version__

    triple = TRIPLE
    #: the widest load or store of one thread (``ld.global.v4.f32``), for vector loops
    vector_bits = 128
    #: bytes every buffer argument of a kernel is aligned to (``align`` on its parameter), so
    #: that a vector loop's loads and stores at multiples of their width are single
    #: ``ld.global.v4`` / ``st.global.v4`` instructions (PTX requires a vector access aligned
    #: to its size). ``cuMemAlloc`` returns 256-byte-aligned memory; a zero-copy array that is
    #: not aligned is copied (``kernel.py``)
    buffer_align = 16
    #: NVPTX's 64-bit data layout (what its target machine reports)
    data_layout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

    @property
    def capability(self) -> tuple[int, int]:
        """The compute capability, ``(9, 0)`` for ``sm_90``."""
        digits = re.sub(r"[^0-9]", "", self.arch)
        return int(digits[:-1]), int(digits[-1])

    def create_target_machine(self, opt: int = 3) -> llvm.TargetMachine:
        init_nvptx()
        t = llvm.Target.from_triple(TRIPLE)
        return t.create_target_machine(cpu=self.arch, features="", opt=opt)


def parse_target(spec: object) -> CUDATarget:
    """The CUDA target of ``spec``: a ``CUDATarget``, ``"cuda"`` (the visible GPU's
    architecture, else ``TENSORLANG_CUDA_ARCH``, else ``sm_90``) or ``"cuda:sm_80"``.

    Raises:
        CompileError: a string that names no architecture of the form ``sm_XY``.
    """
    if isinstance(spec, CUDATarget):
        return spec
    if spec is None or spec == "cuda":
        return default_target()
    if isinstance(spec, str) and spec.startswith("cuda:") and _ARCH.match(spec[5:]):
        return CUDATarget(spec[5:])
    raise CompileError(f"unknown CUDA target {spec!r}; use \"cuda\" (the visible GPU) or "
                       f"\"cuda:sm_XY\" (e.g. \"cuda:sm_80\" for an A100, \"cuda:sm_90\" for an "
                       f"H100)")


def default_target() -> CUDATarget:
    """The visible GPU's architecture when the CUDA driver reports one, else
    ``TENSORLANG_CUDA_ARCH`` or ``sm_90``."""
    env = os.environ.get("TENSORLANG_CUDA_ARCH")
    if env:
        if not _ARCH.match(env):
            raise CompileError(f"TENSORLANG_CUDA_ARCH={env!r} is not an architecture like sm_90")
        return CUDATarget(env)
    from .driver import visible_capability

    cap = visible_capability()
    return CUDATarget(f"sm_{cap[0]}{cap[1]}" if cap else DEFAULT_ARCH)
