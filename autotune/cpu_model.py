"""The analytical model of a CPU for dense kernels: register tile and cache blocking of GEMM.

A ``CpuModel`` describes what the model needs of a core: vector registers and their width,
FMA units and FMA latency, and the data caches (size, associativity, line size). ``cpu_model``
gives it for a ``Target``: the host's caches are read from Linux's sysfs
(``/sys/devices/system/cpu/cpu0/cache/index*``), FMA units and latency come from ``DESCRIBED``
(vendors' optimisation manuals) by LLVM CPU name; a CPU named there but not this machine
(``Target`` made for ``llvm-mca``) is taken whole from ``DESCRIBED``.

``gemm_blocking`` applies the model of Low, Igual, Smith and Quintana-Orti, "Analytical
Modeling Is Enough for High-Performance BLIS" (ACM TOMS 43(2), 2016), to the loop nest
tensorlang's rule-based schedule gives a reduction (``C[i, j] += A[i, k] * B[k, j]``, vectors
along ``j``):

- **register tile** ``mr`` rows x ``nr`` columns, ``nr`` = ``TILE_VECTORS`` native vectors; its
  ``mr * TILE_VECTORS`` accumulators fill the vector registers left after the ``nr`` loaded
  vectors of B and two broadcasts of A, at most ``MAX_ACCUMULATORS``; the paper's latency bound
  ``mr * nr >= lanes * fma_latency * fma_units`` (enough independent FMAs in flight) is checked
  by ``RegisterTile.hides_latency``;
- **k-blocking for L1** (the paper's eq. for ``kc``): the ``kc x nr`` panel of B stays in L1 while
  ``mr x kc`` slivers of A stream through it. Of the ``W1`` ways of an L1 set, ``C_Ar =
  floor((W1 - 1) / (1 + nr / mr))`` hold A's sliver, ``ceil(C_Ar * nr / mr)`` B's panel, one is
  left for C; ``kc = C_Ar * sets1 * line1 / (mr * S)`` for elements of ``S`` bytes;
- **row blocking for L2**: the ``mc x kc`` block of A is reused from L2 by every panel of B:
  ``C_Ac = W2 - 1 - ceil(nr * kc * S / (sets2 * line2))`` ways, ``mc = C_Ac * sets2 * line2 /
  (kc * S)`` rounded down to whole register tiles;
- **column blocking for L3**: likewise ``nc`` for the ``kc x nc`` panel of B in L3 (reported;
  the rule-based schedule packs B one ``kc x nr`` panel at a time and has no ``nc`` loop).

Cross-check: Haswell (32 KiB 8-way L1), float64, ``mr x nr`` = 6 x 8 gives ``kc`` = 256, the
value BLIS ships for its Haswell double-precision kernel.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, replace
from tensorlang.backends.llvm.target import Target, host_target

#: native vectors per register-tile row (BLIS's x86 kernels and the search space use two)
TILE_VECTORS = 2
#: the most accumulators a register tile uses. A 14 x 2-vector tile (28 of AVX-512's 32
#: registers, BLIS's Skylake-X shape) measured slower than 8 x 2 on this project's Zen 4
#: development machine (docs/performance.md), so the register file is not filled past 16.
MAX_ACCUMULATORS = 16
#: vector registers kept for the operands of one k step: one broadcast of A in flight while the
#: next is loaded
BROADCAST_REGISTERS = 2


@dataclass(frozen=True)
class Cache:
    """One data cache level: ``size`` bytes, ``ways`` of associativity, ``line`` bytes."""

    size: int
    ways: int
    line: int = 64

    @property
    def sets(self) -> int:
        return max(1, self.size // (self.ways * self.line))


@dataclass(frozen=True)
class CpuModel:
    """What the analytical model knows of one core.

    Attributes:
        name: LLVM CPU name (``znver4``).
        vector_bits: widest SIMD register (512 with AVX-512, 256 with AVX2).
        vector_registers: architectural vector registers (32 with AVX-512, else 16).
        fma_units: vector FMAs of ``vector_bits`` issued per cycle (Zen 4: 1, its two 256-bit
            pipes take one 512-bit FMA together).
        fma_latency: cycles from an FMA's inputs to its result.
        l1, l2, l3: data caches per core (L3: the slice shared by a core complex, as sysfs
            reports it).
        victim_l3: the L3 is filled by L2's evictions and serves them back quickly (AMD Zen;
            AMD's Software Optimization Guide for Family 19h Processors): the packed GEMM's
            row block of A is then sized for the L1 bound's ``kc`` even where ``kc`` is raised
            past it, and may pass L2 (``heuristic.packed_blocking``, docs/performance.md).
            Where False (Intel's mesh), a matrix read once past the threads' L2s counts as
            streamed from memory (``stream_rules.streams_from_memory``).
        packed_vectors: native vectors per row of the packed GEMM's register tile
            (``heuristic._packed_tile``): ``TILE_VECTORS``, or 4 on Zen 4 and Ice Lake-SP (with
            ``packed_accumulators``); on Zen 4 a tile of 4 rows x 4 vectors measured faster
            than 8 x 2 (one broadcast of A per four FMAs, not two; docs/performance.md, "A
            wider register tile on Zen 4").
        packed_kc: the least ``kc`` of the packed GEMM's reduction block where the model's L1
            bound gives less (shared among its packed panels; ``heuristic.packed_blocking``):
            0 for ``heuristic.MIN_KC``, or 512 on Zen 4 and Ice Lake-SP; on Zen 4 400-512
            measured faster than 256 (fewer loads and stores of the C tile per flop;
            docs/performance.md, "A longer reduction block on Zen 4").
        packed_accumulators: accumulators of the packed GEMM's register tile where it takes
            ``packed_vectors`` vectors per row: 0 for the model's (``MAX_ACCUMULATORS``), or 24
            on Ice Lake-SP, where 6 rows x 4 vectors measured faster than 4 x 4 and 8 x 2
            (BLIS's and OpenBLAS's Skylake-X float64 kernels also hold 24; docs/performance.md,
            "A wider register tile and 24 accumulators on Ice Lake-SP").
        stencil_vector_bits: the vector width of a stage that reads a stencil along its
            contiguous dimension (``vector_width.stage_lanes``): 0 for ``vector_bits``, or 256
            on Ice Lake-SP, whose 512-bit loads straddling two cache lines cost more than two
            256-bit ones (docs/performance.md, "Stencils at 256 bits on Ice Lake-SP"), and of
            the stages around such a stencil that accumulate nothing
            (``vector_width.narrow_kernel``).
        sibling_lanes: whether a row reduction that shares only a vector read with another
            (PolyBench gesummv's ``A[i, j] * x[j]`` and ``B[i, j] * x[j]``) takes vector lanes
            (``rfactor_rules.rfactor_lanes``: ``LANE_ROWS`` rows read together) as a lone one
            does: True, or False on Zen 4, where the two as plain row loops measured faster (and
            on the Zen cores not described, Zen 1 and 2, not measured); the lanes measured
            faster on Ice Lake-SP, Zen 3 and Zen 5 (docs/performance.md, "Two row sums that
            share only a vector").
        a_panels: whether the packed GEMM copies its row block of A in micro-panels of the
            register tile's rows (BLIS's ``mr x kc`` panels, one stream of adjacent
            addresses per tile instead of ``mr`` rows a row apart; ``heuristic.row_operands``,
            ``heuristic.A_PANELS``): False, or True on Zen 3, where GEMM and PolyBench's
            GEMM-class kernels measured faster with them (on Zen 4 several measured slower;
            on the other CPUs not measured; docs/performance.md, "A's micro-panels on Zen 3").
    """

    name: str
    vector_bits: int
    vector_registers: int
    fma_units: int
    fma_latency: int
    l1: Cache
    l2: Cache
    l3: Cache
    victim_l3: bool = False
    packed_vectors: int = TILE_VECTORS
    packed_kc: int = 0
    packed_accumulators: int = 0
    stencil_vector_bits: int = 0
    sibling_lanes: bool = True
    a_panels: bool = False

    def lanes(self, itemsize: int) -> int:
        """Elements of ``itemsize`` bytes per native vector."""
        return max(1, self.vector_bits // (8 * itemsize))


def _avx512(name: str, units: int, l1: Cache, l2: Cache, l3: Cache,
            victim_l3: bool = False, packed_vectors: int = TILE_VECTORS,
            packed_kc: int = 0, packed_accumulators: int = 0,
            stencil_vector_bits: int = 0, sibling_lanes: bool = True) -> CpuModel:
    return CpuModel(name, 512, 32, units, 4, l1, l2, l3, victim_l3, packed_vectors, packed_kc,
                    packed_accumulators, stencil_vector_bits, sibling_lanes)


KiB, MiB = 1024, 1024 * 1024
#: CPUs described from their vendors' optimisation manuals (FMA units and latency, L1/L2 per
#: core); L3 is the whole shared cache of one part, as sysfs reports it (Haswell: Core i7-4770;
#: Skylake-SP: Xeon Platinum 8180; Ice Lake-SP: Xeon Platinum 8380, 12-way as Linux reports it
#: on an Ice Lake-SP guest; Sapphire Rapids: Xeon Platinum 8480+; Zen 3 and Zen 4: one 8-core
#: CCD). Zen 3 (AVX2, two 256-bit FMA pipes) has Haswell's tile and L1, a 512 KiB L2
#: (BLIS's Zen 3 configuration: the same 6 x 16 / 6 x 8 tiles, ``kc`` 256). Zen 5 (EPYC 9005):
#: two 512-bit FMA pipes of latency 4, where Zen 4 split a 512-bit FMA over its two 256-bit
#: ones (a chain of dependent zmm FMAs against 16 independent chains timed on a Zen 5 guest:
#: latency x units = 8), caches as Linux reports them on that guest.
DESCRIBED: dict[str, CpuModel] = {
    "haswell": CpuModel("haswell", 256, 16, 2, 5, Cache(32 * KiB, 8), Cache(256 * KiB, 8),
                        Cache(8 * MiB, 16)),
    "skylake-avx512": _avx512("skylake-avx512", 2, Cache(32 * KiB, 8), Cache(1 * MiB, 16),
                              Cache(int(38.5 * MiB), 11)),
    "icelake-server": _avx512("icelake-server", 2, Cache(48 * KiB, 12), Cache(1280 * KiB, 20),
                              Cache(60 * MiB, 12), packed_vectors=4, packed_kc=512,
                              packed_accumulators=24, stencil_vector_bits=256),
    "sapphirerapids": _avx512("sapphirerapids", 2, Cache(48 * KiB, 12), Cache(2 * MiB, 16),
                              Cache(105 * MiB, 15)),
    "znver3": CpuModel("znver3", 256, 16, 2, 4, Cache(32 * KiB, 8), Cache(512 * KiB, 8),
                       Cache(32 * MiB, 16), victim_l3=True, a_panels=True),
    "znver4": _avx512("znver4", 1, Cache(32 * KiB, 8), Cache(1 * MiB, 8), Cache(32 * MiB, 16),
                      victim_l3=True, packed_vectors=4, packed_kc=512, sibling_lanes=False),
    "znver5": _avx512("znver5", 2, Cache(48 * KiB, 12), Cache(1 * MiB, 16), Cache(32 * MiB, 16),
                      victim_l3=True),
}
#: LLVM CPU names of the same core as a described one (Emerald Rapids: Sapphire Rapids' core)
SAME_CORE = {"emeraldrapids": "sapphirerapids", "skx": "skylake-avx512",
             "cascadelake": "skylake-avx512", "broadwell": "haswell"}


@functools.cache
def cpu_model(target: Target | None = None) -> CpuModel:
    """The model of ``target`` (default: this machine).

    The host: caches from sysfs where Linux provides them, else from ``DESCRIBED`` or a generic
    core; vector width and registers from the target's features. Another CPU: ``DESCRIBED[cpu]``,
    else a generic core of the target's vector width. Cached per target (the rule-based schedule
    asks once per stage).
    """
    host = host_target()
    target = target or host
    bits = target.vector_bits
    regs = 32 if bits >= 512 else 16
    known = DESCRIBED.get(SAME_CORE.get(target.cpu, target.cpu))
    base = known or CpuModel(target.cpu, bits, regs, 2, 4, Cache(32 * KiB, 8),
                             Cache(1 * MiB, 16), Cache(8 * MiB, 16),
                             victim_l3=target.cpu.startswith("znver"),
                             sibling_lanes=not target.cpu.startswith("znver"))
    base = replace(base, vector_bits=bits, vector_registers=regs)
    if target != host:
        return base
    caches = host_caches()
    return replace(base, **caches)


def host_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, Cache]:
    """``{"l1": .., "l2": .., "l3": ..}`` data caches of CPU 0 as Linux's sysfs reports them
    (levels it does not report are left out; empty off Linux)."""
    found: dict[str, Cache] = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return found
    for entry in entries:
        if not entry.startswith("index"):
            continue

        def read(name: str, entry: str = entry) -> str:
            with open(os.path.join(root, entry, name)) as fh:
                return fh.read().strip()

        try:
            if read("type") == "Instruction":
                continue
            level = int(read("level"))
            size = _bytes(read("size"))
            ways = int(read("ways_of_associativity"))
            line = int(read("coherency_line_size"))
        except (OSError, ValueError):
            continue
        if 1 <= level <= 3 and size > 0 and ways > 0 and line > 0:
            found[f"l{level}"] = Cache(size, ways, line)
    return found


def _bytes(text: str) -> int:
    """``"32K"`` -> 32768 (sysfs cache sizes)."""
    units = {"K": KiB, "M": MiB, "G": 1024 * MiB}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


@dataclass(frozen=True)
class RegisterTile:
    """A register tile of ``rows`` x ``vectors`` native vectors of ``lanes`` elements."""

    rows: int
    vectors: int
    lanes: int

    @property
    def columns(self) -> int:
        return self.vectors * self.lanes

    @property
    def accumulators(self) -> int:
        return self.rows * self.vectors

    def hides_latency(self, cpu: CpuModel) -> bool:
        """Low et al.'s bound: at least ``fma_latency * fma_units`` independent vector FMAs."""
        return self.accumulators >= cpu.fma_latency * cpu.fma_units


@dataclass(frozen=True)
class GemmBlocking:
    """The model's blocking of a GEMM-like reduction: ``tile`` (``mr`` x ``nr``), ``kc``
    (reduction block, L1), ``mc`` (rows, L2), ``nc`` (columns, L3), in elements."""

    tile: RegisterTile
    kc: int
    mc: int
    nc: int


def accumulator_budget(cpu: CpuModel, vectors: int = TILE_VECTORS) -> int:
    """Vector registers a register tile of ``vectors`` vectors per row may accumulate in."""
    free = cpu.vector_registers - vectors - BROADCAST_REGISTERS
    return max(vectors, min(free, MAX_ACCUMULATORS))


def register_tile(cpu: CpuModel, itemsize: int) -> RegisterTile:
    """The model's register tile for elements of ``itemsize`` bytes (see the module docstring)."""
    rows = accumulator_budget(cpu) // TILE_VECTORS
    return RegisterTile(rows, TILE_VECTORS, cpu.lanes(itemsize))


def tile_accumulators(cpu: CpuModel, itemsize: int, vectors: int) -> int:
    """Accumulators of a packed GEMM's register tile ``vectors`` native vectors wide on ``cpu``
    (elements of ``itemsize`` bytes): ``cpu.packed_accumulators`` for the CPU's own wide tile
    (``packed_vectors``) where it sets them, else the model's (``register_tile``).

    >>> ice, zen4 = DESCRIBED["icelake-server"], DESCRIBED["znver4"]
    >>> tile_accumulators(ice, 8, 4), tile_accumulators(ice, 8, 2), tile_accumulators(zen4, 8, 4)
    (24, 16, 16)
    """
    if vectors == cpu.packed_vectors != TILE_VECTORS and cpu.packed_accumulators:
        return cpu.packed_accumulators
    return register_tile(cpu, itemsize).accumulators


def gemm_blocking(cpu: CpuModel, itemsize: int, tile: RegisterTile | None = None,
                  kc: int | None = None) -> GemmBlocking:
    """Low et al.'s ``kc``, ``mc``, ``nc`` for ``tile`` (default: ``register_tile``) on ``cpu``,
    elements of ``itemsize`` bytes (4: float32, 8: float64); with ``kc`` given, the ``mc`` and
    ``nc`` that keep blocks of that ``kc`` in L2 and L3 (a ``kc`` above the L1 bound, as
    ``heuristic.MIN_KC`` sets, needs fewer rows of A in L2).

    >>> b = gemm_blocking(DESCRIBED["haswell"], 8, RegisterTile(6, 2, 4))
    >>> (b.tile.rows, b.tile.columns, b.kc)
    (6, 8, 256)
    >>> gemm_blocking(DESCRIBED["znver4"], 8).mc, gemm_blocking(DESCRIBED["znver4"], 8, kc=256).mc
    (768, 384)
    """
    t = tile or register_tile(cpu, itemsize)
    mr, nr = t.rows, t.columns
    if kc is None:
        c_ar = max(1, math.floor((cpu.l1.ways - 1) / (1 + nr / mr)))
        kc = max(1, c_ar * cpu.l1.sets * cpu.l1.line // (mr * itemsize))
    c_br2 = math.ceil(nr * kc * itemsize / (cpu.l2.sets * cpu.l2.line))
    c_ac = max(1, cpu.l2.ways - 1 - c_br2)
    mc = max(mr, c_ac * cpu.l2.sets * cpu.l2.line // (kc * itemsize) // mr * mr)
    c_ac3 = math.ceil(mc * kc * itemsize / (cpu.l3.sets * cpu.l3.line))
    c_bc = max(1, cpu.l3.ways - 1 - c_ac3)
    nc = max(nr, c_bc * cpu.l3.sets * cpu.l3.line // (kc * itemsize) // nr * nr)
    return GemmBlocking(t, kc, mc, nc)


def closest_divisor(n: int, target: int, most: int | None = None) -> int | None:
    """The divisor of ``n`` in ``[target // 2, min(2 * target, most)]`` closest to ``target``
    (the larger on a tie; ``n`` itself when ``n <= target``), or None: a block size the model
    asks for that leaves no partial block.

    >>> closest_divisor(1024, 192), closest_divisor(1100, 192), closest_divisor(1152, 192)
    (256, 220, 192)
    >>> closest_divisor(1009, 192), closest_divisor(90, 192)
    (None, 90)
    """
    if n <= target:
        return n
    top = min(n, 2 * target, most if most is not None else n)
    found = [d for d in range(max(1, target // 2), top + 1) if n % d == 0]
    return min(found, key=lambda d: (abs(d - target), -d)) if found else None


def even_block(n: int, target: int) -> int:
    """The size of the fewest equal blocks of at most ``target`` that cover ``n``, the last one
    shorter by less than the number of blocks (``ceil(n / ceil(n / target))``; ``n`` itself when
    ``n <= target``): a block size for an extent with no divisor near ``target`` (a prime),
    whose last block is not a short tail.

    >>> even_block(1019, 400), even_block(1019, 512), even_block(1200, 400), even_block(90, 192)
    (340, 510, 400, 90)
    """
    if n <= target:
        return n
    return -(-n // -(-n // max(1, target)))


def near_divisor(n: int, target: int, shrink: int = 2) -> int | None:
    """The largest divisor of ``n`` in ``[target // shrink, target]`` (``n`` itself when ``n <=
    target``), or None.

    >>> near_divisor(1200, 128), near_divisor(1024, 128), near_divisor(1009, 128), near_divisor(90, 128)
    (120, 128, None, 90)
    >>> near_divisor(125, 62), near_divisor(125, 62, shrink=4)
    (None, 25)
    """
    if n <= target:
        return n
    low = max(1, target // shrink)
    return next((d for d in range(target, low - 1, -1) if n % d == 0), None)
