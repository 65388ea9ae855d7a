"""The compilation target: the host CPU as LLVM sees it, and LLVM's one-time initialisation.

A ``Target`` identifies where machine code may run (it is part of every cache key later): the
process triple, the CPU name (``znver4`` here), the feature string (``+avx512f,...``) and the LLVM
version. Target machines are created fresh per compiled module: ``create_mcjit_compiler`` takes
ownership of its target machine, and sharing one between engines crashes LLVM.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm


@functools.cache
def init_llvm() -> None:
    """Register the native target and asm printer (``llvm.initialize()`` itself is deprecated)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


@dataclass(frozen=True)
class Target:
    """A CPU to generate code for: triple, CPU name, LLVM feature string, LLVM/llvmlite versions."""

    triple: str
    cpu: str
    features: str
    llvm_version: str
    llvmlite_version: str

    @property
    def has_avx512(self) -> bool:
        """Whether the target has AVX-512F."""
        return "+avx512f" in self.features.split(",")

    @property
    def vector_bits(self) -> int:
        """Widest native SIMD register in bits (512 with AVX-512F, 256 with AVX, else 128)."""
        feats = self.features.split(",")
        if "+avx512f" in feats:
            return 512
        if "+avx" in feats:
            return 256
        return 128

    def create_target_machine(self, opt: int = 3) -> llvm.TargetMachine:
        """A new LLVM target machine for this target (one per execution engine)."""
        init_llvm()
        t = llvm.Target.from_triple(self.triple)
        return t.create_target_machine(cpu=self.cpu, features=self.features, opt=opt,
                                       reloc="default", codemodel="jitdefault", jit=True)


@functools.cache
def host_target() -> Target:
    """The Target of the machine this process runs on."""
    init_llvm()
    return Target(
        triple=llvm.get_process_triple(),
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        llvm_version=".".join(map(str, llvm.llvm_version_info)),
        llvmlite_version=llvmlite.__version__,
    )
