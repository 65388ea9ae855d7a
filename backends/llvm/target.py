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


#: CPUs (LLVM names) whose code gets LLVM's tuning flag ``prefer-no-gather``: no gather
#: instruction is emitted (a vector load at scattered addresses becomes scalar loads and
#: inserts), and the vectorizers cost such loads that way. AMD's cores before Zen 5 run gathers
#: slowly (microcoded on Zen 1-3); GCC's tuning table (``gcc/config/i386/x86-tune.def``,
#: ``use_gather_2parts``, ``use_gather_4parts``, ``use_gather``) turns them off for them too
#: (Zen 3 keeps GCC's gathers of 8 or more elements). Measured on Zen 4: LLVM's SLP vectorizer
#: packed Halide's bilateral_grid's clamped reads into gathers (docs/performance.md, "Gathers
#: on AMD Zen"). A comma-separated string, for ``--against``-style switches ("" turns it off).
SLOW_GATHER_CPUS = "znver1,znver2,znver3,znver4"


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

    @property
    def machine_features(self) -> str:
        """The feature string LLVM's target machine gets: ``features`` and, for a CPU of
        ``SLOW_GATHER_CPUS``, the tuning flag ``+prefer-no-gather`` (a code-generation choice,
        not a feature of the CPU: the cache key keeps ``features``)."""
        if self.cpu in SLOW_GATHER_CPUS.split(","):
            return f"{self.features},+prefer-no-gather" if self.features else "+prefer-no-gather"
        return self.features

    def missing_features(self, host: "Target") -> tuple[str, ...]:
        """The features this target's code may use that ``host`` lacks (``("avx512f", ...)``,
        sorted; empty: code for this target runs on ``host``). A different triple counts as
        missing too (``"triple x86_64-..."``)."""
        if self.triple != host.triple:
            return (f"triple {self.triple}",)
        have = {f[1:] for f in host.features.split(",") if f.startswith("+")}
        return tuple(sorted({f[1:] for f in self.features.split(",")
                             if f.startswith("+") and f[1:] not in have}))

    def create_target_machine(self, opt: int = 3) -> llvm.TargetMachine:
        """A new LLVM target machine for this target (one per execution engine)."""
        init_llvm()
        t = llvm.Target.from_triple(self.triple)
        return t.create_target_machine(cpu=self.cpu, features=self.machine_features, opt=opt,
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
