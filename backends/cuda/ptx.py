"""LLVM IR of the device kernels -> PTX text (LLVM's NVPTX back end through llvmlite), and the
check of PTX by NVIDIA's assembler ``ptxas`` where it is installed.

PTX is generated on any machine: no GPU and no CUDA toolkit is needed. ``ptxas`` (from the
``nvidia-cuda-nvcc`` wheel, the ``test`` extra, or a CUDA toolkit on ``PATH``) assembles PTX to
machine code for one architecture: what the driver does when it loads the module, so a kernel
``ptxas`` accepts is one the driver loads. The test suite runs it on every kernel it generates.

See also: numba's ``cuda/codegen.py`` (``CUDACodeLibrary.get_asm_str``); the PTX ISA manual.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import llvmlite.binding as llvm

from tensorlang.errors import CompileError

from ..llvm.jit import _LOCK, _optimize
from .target import CUDATarget, init_nvptx


def compile_ptx(ir_text: str, target: CUDATarget, opt: int = 3, what: str = "kernel") -> str:
    """PTX for the NVPTX module ``ir_text``, optimised at LLVM speed level ``opt``.

    Raises:
        CompileError: LLVM rejected the module (a tensorlang bug: the message has LLVM's).
    """
    init_nvptx()
    with _LOCK:
        try:
            mod = llvm.parse_assembly(ir_text)
            mod.verify()
            tm = target.create_target_machine(opt=3)
            _optimize(mod, tm, opt)
            mod.verify()
            return tm.emit_assembly(mod)
        except RuntimeError as exc:
            raise CompileError(f"LLVM could not generate PTX for {what}: {str(exc).strip()}\n"
                               f"(this is a tensorlang bug; please report it with the loop "
                               f"nest)") from exc


def find_ptxas() -> str | None:
    """The path of ``ptxas``: ``TENSORLANG_PTXAS``, else the ``nvidia-cuda-nvcc`` wheel's, else
    the one on ``PATH``; None when there is none."""
    env = os.environ.get("TENSORLANG_PTXAS")
    if env:
        return env
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError:
        nvidia = None
    for base in getattr(nvidia, "__path__", []):
        for sub in sorted(os.listdir(base), reverse=True):
            path = os.path.join(base, sub, "bin", "ptxas")
            if os.access(path, os.X_OK):
                return path
    return shutil.which("ptxas")


def ptxas(ptx: str, arch: str, ptxas_path: str | None = None) -> str:
    """Assemble ``ptx`` for ``arch`` with ``ptxas -v``; returns its report (registers, spills,
    shared memory per kernel).

    Raises:
        CompileError: no ``ptxas`` is installed (``pip install nvidia-cuda-nvcc``), or it
            rejected the PTX (its messages included).
    """
    exe = ptxas_path or find_ptxas()
    if exe is None:
        raise CompileError("ptxas was not found; pip install nvidia-cuda-nvcc (or put a CUDA "
                           "toolkit's bin on PATH, or set TENSORLANG_PTXAS)")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as fh:
            fh.write(ptx)
        r = subprocess.run([exe, f"-arch={arch}", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
                           capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise CompileError(f"ptxas rejected the PTX for {arch}:\n{r.stderr.strip()}")
    return (r.stdout + r.stderr).strip()
