"""Backends: loop-nest IR -> native kernels, each behind the ``Backend`` interface (``base.py``);
``backends/llvm`` is the LLVM (llvmlite) JIT backend for the host CPU, registered as
``"llvm-cpu"``.

Imports: schedule, tensorlang, llvmlite, numpy.
"""

from .base import Backend, get_backend, register_backend
from .compile import compile  # noqa: A004
from .kernel import Kernel

__all__ = ["Backend", "compile", "get_backend", "Kernel", "register_backend"]
