"""Backends: loop-nest IR -> native kernels. ``backends/llvm`` is the LLVM (llvmlite) JIT backend.

Imports: schedule, tensorlang, llvmlite, numpy.
"""

from .compile import compile  # noqa: A004
from .kernel import Kernel

__all__ = ["compile", "Kernel"]
