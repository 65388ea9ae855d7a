"""The analytical CPU model (Low et al., TOMS 2016) and the packed GEMM schedule built from it:
the model's choices on described CPUs, sysfs parsing, and the packed nest against NumPy on odd
sizes."""

from __future__ import annotations

import doctest
import re

import numpy as np
import pytest
from algorithms import AVX512, described_target, gemm, runnable

import tensorlang as tl
from tensorlang.autotuner import cpu_model as cm
from tensorlang.autotuner import few_rows, heuristic, narrow_tile, packed_reads, row_blocks
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.backends.llvm.target import Target
from tensorlang.errors import IllegalScheduleError


# (cpu, bytes per element) -> (mr, nr, kc, mc), worked by hand from the formulas in
# autotune/cpu_model.py's docstring and the caches in DESCRIBED
EXPECTED = {
    # Haswell: 16 ymm -> 12 accumulators, 6 rows x 2 vectors; L1 32 KiB 8-way (64 sets):
    # fp64 C_Ar = floor(7 / (1 + 8/6)) = 3, kc = 3*64*64 / (6*8) = 256 (BLIS's Haswell dgemm
    # ships kc = 256); L2 256 KiB 8-way (512 sets): C_Ac = 8 - 1 - 1 = 6, mc = 6*512*64/(256*8)
    ("haswell", 8): (6, 8, 256, 96),
    ("haswell", 4): (6, 16, 170, 288),
    # Skylake-SP: 32 zmm -> 16 accumulators, 8 x 2; fp32 C_Ar = floor(7 / (1 + 32/8)) = 1,
    # kc = 64*64/(8*4) = 128; L2 1 MiB 16-way: C_Ac = 14, mc = 14*1024*64/(128*4) = 1792
    ("skylake-avx512", 4): (8, 32, 128, 1792),
    # Sapphire Rapids: L1 48 KiB 12-way (64 sets): C_Ar = floor(11/5) = 2, kc = 2*4096/32 = 256
    ("sapphirerapids", 4): (8, 32, 256, 1792),
    # Ice Lake-SP: Sapphire Rapids' L1; L2 1.25 MiB 20-way (1024 sets): C_Br = ceil(32*256*4 /
    # 65536) = 1, C_Ac = 20 - 1 - 1 = 18, mc = 18*1024*64/(256*4) = 1152
    ("icelake-server", 4): (8, 32, 256, 1152),
    # Zen 4: L2 1 MiB 8-way (2048 sets): C_Ac = 6, mc = 6*2048*64/(128*4) = 1536
    ("znver4", 4): (8, 32, 128, 1536),
    ("znver4", 8): (8, 16, 128, 768),
    # Zen 5: two 512-bit FMA pipes, as Skylake-SP; L1 48 KiB 12-way (64 sets): fp32 C_Ar = 2,
    # kc = 256 as Sapphire Rapids; fp64 C_Ar = floor(11 / (1 + 16/8)) = 3, kc = 3*4096/64 = 192;
    # L2 1 MiB 16-way (1024 sets): C_Br = 1, C_Ac = 14, fp32 mc = 14*65536/(256*4) = 896,
    # fp64 mc = 14*65536/(192*8) = 597 -> 592 (whole 8-row tiles)
    ("znver5", 4): (8, 32, 256, 896),
    ("znver5", 8): (8, 16, 192, 592),
    # Zen 3 (AVX2): Haswell's tile and L1; L2 512 KiB 8-way (1024 sets): fp64 C_Ac = 8 - 1 - 1
    # = 6, mc = 6*1024*64/(256*8) = 192; fp32 kc = 170, mc = 6*65536/(170*4) = 578 -> 576
    ("znver3", 8): (6, 8, 256, 192),
    ("znver3", 4): (6, 16, 170, 576),
}


def test_doctests():
    for mod in (cm, few_rows, heuristic, narrow_tile, packed_reads, row_blocks):
        assert doctest.testmod(mod).failed == 0


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_the_models_blocking_on_described_cpus(key):
    name, size = key
    cpu = cm.DESCRIBED[name]
    b = cm.gemm_blocking(cpu, size)
    t = b.tile
    assert (t.rows, t.columns, b.kc, b.mc) == EXPECTED[key]
    # the invariants the numbers come from
    assert t.hides_latency(cpu)
    assert t.accumulators + t.vectors + cm.BROADCAST_REGISTERS <= cpu.vector_registers
    assert t.columns % cpu.lanes(size) == 0
    sliver_a, panel_b = t.rows * b.kc * size, b.kc * t.columns * size
    way = cpu.l1.size // cpu.l1.ways
    assert sliver_a + panel_b <= cpu.l1.size - way  # one way left for C
    assert b.mc * b.kc * size <= cpu.l2.size
    assert b.mc % t.rows == 0 and b.nc % t.columns == 0


_target = described_target


def test_a_target_that_is_not_the_host_is_taken_from_the_description():
    m = cm.cpu_model(_target("haswell"))
    assert (m.vector_bits, m.vector_registers, m.fma_latency) == (256, 16, 5)
    assert m.l2 == cm.DESCRIBED["haswell"].l2
    assert cm.cpu_model(_target("skylake-avx512")).l1.size == 32 * 1024
    # a CPU of the same core as a described one, and an unknown one
    assert cm.cpu_model(Target("x", "emeraldrapids", AVX512, "", "")).l1.ways == 12
    unknown = cm.cpu_model(Target("x", "mystery", "+avx,+avx2,+fma", "", ""))
    assert (unknown.vector_bits, unknown.vector_registers) == (256, 16)
    assert unknown.sibling_lanes and not unknown.victim_l3
    zen2 = cm.cpu_model(Target("x", "znver2", "+avx,+avx2,+fma", "", ""))  # not described
    assert zen2.victim_l3 and not zen2.sibling_lanes


def test_host_caches_read_from_sysfs(tmp_path):
    def level(i: int, typ: str, lvl: int, size: str, ways: int) -> None:
        d = tmp_path / f"index{i}"
        d.mkdir()
        for k, v in {"type": typ, "level": lvl, "size": size, "ways_of_associativity": ways,
                         "coherency_line_size": 64}.items():
            (d / k).write_text(f"{v}\n")

    level(0, "Data", 1, "48K", 12)
    level(1, "Instruction", 1, "32K", 8)
    level(2, "Unified", 2, "2048K", 16)
    level(3, "Unified", 3, "105M", 15)
    (tmp_path / "uevent").write_text("")
    got = cm.host_caches(str(tmp_path))
    assert got == {"l1": cm.Cache(48 * 1024, 12), "l2": cm.Cache(2 * 1024 * 1024, 16),
                   "l3": cm.Cache(105 * 1024 * 1024, 15)}
    assert got["l1"].sets == 64
    assert cm.host_caches(str(tmp_path / "missing")) == {}
    (tmp_path / "index2" / "ways_of_associativity").write_text("garbage")
    assert "l2" not in cm.host_caches(str(tmp_path))


@pytest.mark.parametrize("cpu", ["haswell", "skylake-avx512", "icelake-server",
                                 "sapphirerapids", "znver4", "znver3", "znver5"])
def test_the_rule_based_schedule_takes_its_blocking_from_the_targets_model(cpu, monkeypatch):
    # GEMM 480 x 512 x 1024 (480 rows: whole 6- and 8-row tiles) made for each described CPU:
    # the register tile and kc the model gives. Two threads: the row blocks are shared out over
    # the threads, and the row count may move to share them evenly (not on 2 threads here)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    out = gemm()
    s = heuristic_schedule(out, {"M": 480, "N": 512, "K": 1024}, _target(cpu))
    rows, cols, kc, _ = (EXPECTED.get((cpu, 4)) or EXPECTED[("skylake-avx512", 4)])
    model = cm.DESCRIBED[cpu]
    vectors = model.packed_vectors
    if vectors != cm.TILE_VECTORS:  # a wider packed tile (Zen 4, Ice Lake-SP): as many
        # accumulators, or the CPU's own count of them (Ice Lake-SP: 24, 6 rows of 4 vectors)
        accs = model.packed_accumulators or rows * cm.TILE_VECTORS
        rows, cols = accs // vectors, cols * vectors // cm.TILE_VECTORS
    text = s.to_python()
    assert f"split('i', {rows})" in text and f"split('j', {cols}" in text
    # kc raised to the CPU's least kc (MIN_KC, Zen 4's packed_kc) where the model's is
    # smaller (every float32 tile here), then moved to the closest divisor of K = 1024: no
    # partial k block
    least = heuristic.least_kc(cm.DESCRIBED[cpu])
    assert least == (512 if cpu in ("znver4", "icelake-server") else heuristic.MIN_KC)
    want = cm.closest_divisor(1024, max(kc, least), most=heuristic.MAX_KC)
    assert f"split('k', {want})" in text and "cache_read('B'" in text
    assert "cache_read('A'" in text  # the row block of A too, at the reduction block loop


@pytest.mark.parametrize("threads,rows", [(1, 8), (2, 10)])
def test_the_row_tile_moves_so_the_row_blocks_share_out_over_the_threads(threads, rows,
                                                                         monkeypatch):
    # 1000 rows in 8-row tiles: 125 tiles, 5 blocks of 25, one thread idle a fifth of the time
    # on 2 threads; 10-row tiles (20 of AVX-512's 32 registers) make 4 blocks. One thread: the
    # model's 8 rows. The schedule stays right on the odd sizes around it
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", str(threads))
    out = gemm(tl.float64)
    s = heuristic_schedule(out, {"M": 1000, "N": 1100, "K": 1200}, _target("skylake-avx512"))
    assert f"split('i', {rows})" in s.to_python()
    monkeypatch.delenv("TENSORLANG_NUM_THREADS")
    s = heuristic_schedule(out, {"M": 1000, "N": 1100, "K": 1200})
    rng = np.random.default_rng(5)
    kern = tl.compile(out, s)
    for m, n, k in [(1000, 1100, 1200), (1003, 1109, 1201), (9, 17, 5)]:
        a, b = rng.random((m, k)), rng.random((k, n))
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-10)


def _row_split(text: str) -> tuple[int, int]:
    """(rows per register tile, tiles per row block) of a packed nest's schedule text."""
    import re

    rows = int(re.search(r"split\('i', (\d+)\)", text).group(1))
    return rows, int(re.search(r"split\('i\.o', (\d+)\)", text).group(1))


@pytest.mark.parametrize("cpu, one, two", [("skylake-avx512", 250, 125), ("znver4", 500, 250)])
def test_kc_is_at_least_min_kc_shared_among_the_packed_panels(cpu, one, two, monkeypatch):
    # float64, K = 1000: the model's L1 bound gives kc = 128 (8 x 16 tile) on both; one packed
    # panel (gemm) takes MIN_KC = 256 (Zen 4's packed_kc, 512) -> the divisor 250 (500);
    # syr2k's A B^T + B A^T packs two panels per column panel, half each -> 125 (as the
    # model's) and 250
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    assert cm.gemm_blocking(cm.DESCRIBED[cpu], 8).kc == 128
    assert heuristic.MIN_KC == 256 and cm.DESCRIBED["znver4"].packed_kc == 512
    sizes = {"M": 1200, "N": 1200, "K": 1000}
    text = heuristic_schedule(gemm(tl.float64), sizes, _target(cpu)).to_python()
    assert f"split('k', {one})" in text
    # the search space's split of a GEMM-like reduction reaches it: the rule stays a point of it
    from tensorlang.autotuner.space import factor_choices

    assert one in factor_choices(1000, heuristic.MAX_KC) and 500 not in factor_choices(1000)
    from tensorlang.autotuner.space import SearchSpace

    class First:  # a sampler taking every decision's first choice, keeping the choices
        seen: dict[str, list] = {}

        def suggest_categorical(self, name, choices):
            self.seen[name] = list(choices)
            return choices[0]

    SearchSpace(gemm(tl.float64), sizes, _target(cpu)).sample(First())
    assert one in First.seen["C.k.split"] and max(First.seen["C.j.split"]) == 256
    M, K = tl.sizes("M K")
    A, B = tl.Input("A", (M, K), tl.float64), tl.Input("B", (M, K), tl.float64)
    i, j = tl.vars("i j")
    k = tl.RDom((0, K), name="k")
    C = tl.Func("C")
    C[i, j] = A[i, k] * B[j, k] + B[i, k] * A[j, k]
    assert len(heuristic.packed_operands(C)) == 2
    text = heuristic_schedule(C, {"M": 1200, "K": 1000}, _target(cpu)).to_python()
    assert f"split('k_x', {two})" in text and text.count("layout=(1, 0)") >= 2


@pytest.mark.parametrize("cpu, blocks", [("skylake-avx512", 4), ("znver4", 2)])
def test_a_row_tile_that_leaves_no_remainder_piece_comes_first(cpu, blocks, monkeypatch):
    # 900 rows: the model's 8-row tile leaves 4 rows, a piece that runs after the row blocks on
    # one thread and copies B again; 9 rows (18 of 32 registers) divide 900 (Zen 4's 4-vector
    # tile: 5 rows, 20 registers, for whole blocks). One row block per
    # thread, or two where the mc x kc block of A would not fit L2's ways (at kc = 256, the 1 MiB
    # of Skylake-X holds 448 rows: fewer than half of 900); Zen 4's victim L3 keeps the L1
    # bound's mc (768 rows at its kc of 128): one block per thread
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    text = heuristic_schedule(gemm(tl.float64), {"M": 900, "N": 1100, "K": 1200},
                              _target(cpu)).to_python()
    rows, per_block = _row_split(text)
    vectors = cm.DESCRIBED[cpu].packed_vectors  # 16 accumulators: 8 rows of 2, 4 of 4
    assert 900 % rows == 0 and rows * vectors >= 16
    assert 900 // rows // per_block == blocks


@pytest.mark.parametrize("cpu", ["skylake-avx512", "sapphirerapids"])
def test_a_row_tile_without_remainder_shares_out_in_one_round_on_16_threads(cpu, monkeypatch):
    # 900 rows (PolyBench 3mm's F) on 16 threads: 8-row tiles in 16 blocks of 7 leave a 4-row
    # piece that runs alone after the blocks and copies B again; 10-row tiles (90) moved down
    # to blocks of 5 made 18 blocks, two rounds, so they lost to it. Blocks of 6 (the divisor
    # up from the threads' share) make 15 in one round: 10 rows, no remainder piece
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "16")
    text = heuristic_schedule(gemm(tl.float64), {"M": 900, "N": 1100, "K": 1200},
                              _target(cpu)).to_python()
    rows, per_block = _row_split(text)
    blocks = 900 // rows // per_block
    assert 900 % rows == 0 and rows >= 8, text
    assert heuristic.shared(blocks, 16) >= heuristic.MIN_BALANCE, text


@pytest.mark.parametrize("cpu, dtype, shape, rows", [
    ("znver3", tl.float64, (1000, 1100, 1200), 5), ("haswell", tl.float32, (800, 900, 1000), 5)])
def test_the_model_rows_take_smaller_blocks_that_share_out(cpu, dtype, shape, rows, monkeypatch):
    # 2 threads: the model's rows gave blocks that did not share out (5 of 40 tiles), so the
    # rule took 4-row tiles (znver3, 8 accumulators) or 2-row ones (haswell, 4 accumulators:
    # under Low et al.'s latency bound, 10 there); smaller blocks of the model's rows share out
    # (heuristic.BALANCE_DOWN), and no tile under the bound is taken where one above it is
    # found (heuristic.LATENCY_ROWS). Whole blocks only: with PARTIAL_ROWS the model's 6-row
    # tile takes blocks with a shorter last one at 1000 rows (tests/test_partial_blocks.py)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    monkeypatch.setattr(heuristic, "PARTIAL_ROWS", 0)
    m, n, k = shape
    text = heuristic_schedule(gemm(dtype), {"M": m, "N": n, "K": k}, _target(cpu)).to_python()
    got, per_block = _row_split(text)
    assert got == rows, text
    assert heuristic.shared(m // got // per_block, 2) == 1.0, text
    model = cm.DESCRIBED[cpu]
    with monkeypatch.context() as patch:
        patch.setattr(heuristic, "BALANCE_DOWN", 0)
        text = heuristic_schedule(gemm(dtype), {"M": m, "N": n, "K": k},
                                  _target(cpu)).to_python()
        got = _row_split(text)[0]
        assert got * 2 >= model.fma_latency * model.fma_units, text  # 2 vectors per row


def test_a_victim_l3_keeps_the_l1_bounds_row_block():
    # kc raised to MIN_KC (Zen 4: its packed_kc): the mc of that kc (the L2 bound) on a CPU
    # without a victim L3, the L1 bound's mc on one with it (docs/performance.md, "A's block
    # past L2 on Zen 4")
    zen4, spr = cm.DESCRIBED["znver4"], cm.DESCRIBED["sapphirerapids"]
    assert zen4.victim_l3 and not spr.victim_l3
    blocking = heuristic.packed_blocking(gemm(tl.float64), 8, 16, _target("znver4"))
    assert blocking.kc == 512 and blocking.mc == cm.gemm_blocking(zen4, 8).mc == 768
    blocking = heuristic.packed_blocking(gemm(tl.float64), 8, 16, _target("sapphirerapids"))
    assert blocking.kc == 256 and blocking.mc == cm.gemm_blocking(spr, 8, kc=256).mc == 896
    # a Zen core the table does not describe gets the flag from its LLVM name
    host = _target("haswell")
    for cpu, victim in [("znver3", True), ("znver5", True), ("icelake-client", False)]:
        assert cm.cpu_model(Target(host.triple, cpu, AVX512, host.llvm_version,
                                   host.llvmlite_version)).victim_l3 == victim


def _trmm_product() -> tl.Func:
    """trmm's ``T[i, j] = sum(A[k, i] * B[k, j])`` over ``k > i`` (``RDom.where``): NumPy's
    ``np.tril(A, -1).T @ B``."""
    M, N = tl.sizes("M N")
    A, B = tl.Input("A", (M, M), tl.float64), tl.Input("B", (M, N), tl.float64)
    i, j = tl.vars("i j")
    k = tl.RDom((0, M), name="k")
    k.where(k.x > i)
    T = tl.Func("T")
    T[i, j] = A[k, i] * B[k, j]
    return T


def test_rows_of_unequal_work_get_two_row_blocks_per_thread(monkeypatch):
    # trmm's A^T B over k > i: later rows have less work; four blocks on two threads let the
    # parallel loop hand the short ones to whichever thread frees up first
    from tensorlang.autotuner.heuristic import blocks_per_thread

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    T = _trmm_product()
    assert blocks_per_thread(T, "i") == 2 and blocks_per_thread(gemm(), "i") == 1
    s = heuristic_schedule(T, {"M": 1000, "N": 1200}, _target("skylake-avx512"))
    rows, per_block = _row_split(s.to_python())
    assert 1000 // rows // per_block == 4
    rng = np.random.default_rng(2)
    kern = tl.compile(T, s)
    for m, n in [(1000, 1200), (37, 41)]:
        a, b = rng.random((m, m)), rng.random((m, n))
        np.testing.assert_allclose(kern(a, b), np.tril(a, -1).T @ b, rtol=1e-10)


def test_packing_is_left_out_where_the_operand_fits_in_l1():
    text = heuristic_schedule(gemm(), {"M": 64, "N": 48, "K": 32}).to_python()
    assert "cache_read" not in text


@pytest.mark.parametrize("shape,dtype", [
    ((200, 110, 600), tl.float64),   # kc moved to a divisor of K (120), 25 tiles in 5 blocks
    ((96, 131, 1009), tl.float32),   # K prime: no near divisor of kc -> not packed, still right
    ((64, 37, 300), tl.float32),     # N not a multiple of the tile: the last panel shifts in
    ((16, 100, 100), tl.float64),    # K below kc: the whole K x nr panel per column panel
])
def test_the_packed_gemm_matches_numpy_on_odd_sizes(shape, dtype):
    m, n, k = shape
    out = gemm(dtype)
    s = heuristic_schedule(out, {"M": m, "N": n, "K": k})
    np_t = np.float32 if dtype is tl.float32 else np.float64
    rng = np.random.default_rng(7)
    a, b = rng.random((m, k)).astype(np_t), rng.random((k, n)).astype(np_t)
    got = tl.compile(out, s)(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4 if np_t is np.float32 else 1e-10)


def test_each_operand_read_is_packed_alone_and_transposed_reads_get_a_layout():
    # covariance's X^T X reads one array as both operands: only the column panel X[k, j] is
    # packed (index 1), not the union of both tiles; A A^T's A[j, k] is packed transposed
    from tensorlang.autotuner.heuristic import Packed, packed_operand, packed_operands

    N, M = tl.sizes("N M")
    X = tl.Input("X", (N, M), tl.float64)
    i, j, k = tl.vars("i j k")
    S = tl.Func("S")
    S[i, j] = X[k, i] * X[k, j]
    assert packed_operands(S) == [Packed("X", "k", 1, None)]
    T = tl.Func("T")
    T[i, j] = X[i, k] * X[j, k]
    assert packed_operands(T) == [Packed("X", "k", 1, (1, 0))]
    assert packed_operand(gemm())[:2] == ("B", "k")


@pytest.mark.parametrize("panels", [0, 1])
@pytest.mark.parametrize("size", [(240, 600), (61, 97)])
@pytest.mark.parametrize("form", ["XtX", "XXt", "syr2k"])
def test_packed_reads_of_one_array_match_numpy(form, size, panels, monkeypatch):
    # 240 rows (whole register tiles, kc a divisor of 600, below it on every CPU): the packed
    # nest, with its index= and layout= copies (and panel= with heuristic.A_PANELS); 61 x 97
    # (no whole tiles): whatever the rules pick; both against NumPy. Two threads: on many, 240
    # rows' blocks would be too small to pack
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    monkeypatch.setattr(heuristic, "A_PANELS", panels)
    rows, depth = size
    N, M = tl.sizes("N M")
    X, Y = tl.Input("X", (N, M), tl.float64), tl.Input("Y", (N, M), tl.float64)
    i, j, k = tl.vars("i j k")
    out = tl.Func("out")
    if form == "XtX":
        out[i, j] = tl.sum(X[k, i] * X[k, j])
        sizes, shape = {"N": depth, "M": rows}, (depth, rows)
    elif form == "XXt":
        out[i, j] = tl.sum(X[i, k] * X[j, k])
        sizes, shape = {"N": rows, "M": depth}, (rows, depth)
    else:
        out[i, j] = tl.sum(X[j, k] * Y[i, k] + Y[j, k] * X[i, k])
        sizes, shape = {"N": rows, "M": depth}, (rows, depth)
    s = heuristic_schedule(out, sizes)
    text = s.to_python()
    if rows == 240:  # the column panel (at j.o) and the row block (at k.o), each read alone;
        # with A_PANELS the row block in panels of the tile's rows along the row Var's dimension
        r = _row_split(text)[0]
        p = f", panel=({{}}, {r}))" if panels else ")"
        for copy in {"XtX": ["'X', s[\"out\"], 'k.o', index=0, layout=(1, 0)" + p.format(1),
                             "'X', s[\"out\"], 'j.o', index=0)"],
                     "XXt": ["'X', s[\"out\"], 'k.o', index=0" + p.format(0),
                             "'X', s[\"out\"], 'j.o', index=0, layout=(1, 0)"],
                     "syr2k": ["'X', s[\"out\"], 'j.o', index=0, layout=(1, 0)",
                               "'X', s[\"out\"], 'k.o', index=0" + p.format(0),
                               "'Y', s[\"out\"], 'k.o', index=0" + p.format(0),
                               "'Y', s[\"out\"], 'j.o', index=0, layout=(1, 0)"]}[form]:
            assert f"cache_read({copy}" in text, text
    rng = np.random.default_rng(3)
    x, y = rng.random(shape), rng.random(shape)
    args = {"X": x} if form != "syr2k" else {"X": x, "Y": y}
    want = {"XtX": x.T @ x, "XXt": x @ x.T, "syr2k": x @ y.T + y @ x.T}[form]
    np.testing.assert_allclose(tl.compile(out, s)(**args), want, rtol=1e-10)


@pytest.mark.parametrize("dtype", [tl.float32, tl.float64])
def test_zen3_copies_a_in_micro_panels_of_its_tile_rows_and_zen4_does_not(dtype, monkeypatch):
    # CpuModel.a_panels (heuristic.A_PANELS = -1: the CPU's): Zen 3's 6-row tiles read A's row
    # block from panels of 6 rows; Zen 4's from the block as it is. Its kernel against NumPy on
    # sizes no tile divides (the copy's last panel padded)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    sizes = {"M": 1024, "N": 1024, "K": 1024}
    zen3 = heuristic_schedule(gemm(dtype), sizes, _target("znver3")).to_python()
    rows = _row_split(zen3)[0]
    assert re.search(rf"cache_read\('A', s\[\"C\"\], '[\w.]+', index=0, panel=\(0, {rows}\)\)",
                     zen3), zen3
    zen4 = heuristic_schedule(gemm(dtype), sizes, _target("znver4")).to_python()
    assert "cache_read('A'" in zen4 and "panel=(0," not in zen4, zen4
    C, rng = gemm(dtype), np.random.default_rng(7)
    s = heuristic_schedule(C, {"M": 211, "N": 97, "K": 601}, _target("znver3"))
    assert "panel=(0, " in s.to_python(), s.to_python()
    a, b = rng.random((211, 601)).astype(dtype.numpy), rng.random((601, 97)).astype(dtype.numpy)
    got = tl.compile(C, s, target=runnable(_target("znver3")))(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4 if dtype == tl.float32 else 1e-10)


def test_one_thread_packs_a_single_row_block(monkeypatch):
    # on one thread a row block of all the rows (the model's mc at least M) is still BLIS's
    # nest: packing, not parallelism, is what it gains (an AVX-512 Xeon's 2 MiB of L2 gave one
    # block of 1024 rows, and the rules fell back to the unpacked nest at a third of the speed)
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "1")
    text = heuristic_schedule(gemm(tl.float64), {"M": 400, "N": 300, "K": 500},
                              _target("skylake-avx512")).to_python()
    assert "cache_read('B'" in text and "parallel" not in text, text
    rng = np.random.default_rng(5)
    C = gemm(tl.float64)
    for m, n, k in [(64, 200, 300), (61, 97, 301), (1, 130, 257)]:
        s = heuristic_schedule(C, {"M": m, "N": n, "K": k})
        a, b = rng.random((m, k)), rng.random((k, n))
        np.testing.assert_allclose(tl.compile(C, s)(a, b), a @ b, rtol=1e-10)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("form", ["gemm", "XtX", "syr2k"])
def test_blis_order_matches_numpy_on_odd_sizes(form, threads, monkeypatch):
    # heuristic.BLIS_ORDER: for each kc block, B's kc x N block copied once in nr-wide panels
    # (by the threads together), then the row blocks, each copying its block of A; the columns
    # past the last whole panel and the rows past the last whole tile run as pieces of their
    # own, each copying its own blocks
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    monkeypatch.setattr(heuristic, "BLIS_ORDER", 1)
    # (rows one thread fits in one block take the few-rows nest on two threads otherwise)
    monkeypatch.setattr(few_rows, "FEW_ROWS_BLIS", 0)
    N, M, K = tl.sizes("N M K")
    X, Y = tl.Input("X", (N, K), tl.float64), tl.Input("Y", (N, K), tl.float64)
    B = tl.Input("B", (K, M), tl.float64)
    i, j, k = tl.vars("i j k")
    out = tl.Func("out")
    if form == "gemm":
        out[i, j] = tl.sum(X[i, k] * B[k, j])
    elif form == "XtX":
        out[i, j] = tl.sum(B[k, i] * B[k, j])
    else:
        out[i, j] = tl.sum(X[j, k] * Y[i, k] + Y[j, k] * X[i, k])
    rng = np.random.default_rng(6)
    for n, m, kk in [(512, 300, 600), (263, 131, 600)]:
        sizes = {"gemm": {"N": n, "M": m, "K": kk}, "XtX": {"M": n, "K": kk},
                 "syr2k": {"N": n, "K": kk}}[form]
        s = heuristic_schedule(out, sizes)
        text = s.to_python()
        assert "'k.o', 'i.o.o', 'j.o'" in text and "'i.o.o', index=0" in text, text
        # (the copy of B in parallel where the row blocks are the parallel loop)
        copy_parallel = re.search(r'_local\d*"\]\.parallel\(', text) is not None
        assert copy_parallel == ("parallel('i.o.o')" in text), text
        x, y, b = rng.random((n, kk)), rng.random((n, kk)), rng.random((kk, m))
        if form == "gemm":
            got, want = tl.compile(out, s)(X=x, B=b), x @ b
        elif form == "XtX":
            b = rng.random((kk, n))
            got, want = tl.compile(out, s)(B=b), b.T @ b
        else:
            got, want = tl.compile(out, s)(X=x, Y=y), x @ y.T + y @ x.T
        np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_many_row_blocks_a_thread_take_blis_order_and_stay_a_point(threads, monkeypatch):
    # haswell's 256 KiB L2 gives 85-row blocks: twelve over 1024 rows, each copying all of
    # B's panels again in the rule's own order; from BLIS_ORDER_BLOCKS times the blocks a
    # thread asked for, the rule runs BLIS's order (B copied once per kc block). An AVX-512
    # Xeon's 2 MiB L2 gives two blocks on one thread: its order stays. Either is a point of the
    # search space (its ``blis`` decision), and random points in BLIS's order compute what NumPy
    # computes
    import optuna

    from tensorlang.autotuner.space import SearchSpace

    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    sizes = {"M": 1024, "N": 1024, "K": 1024}
    for cpu, want in [("haswell", True), ("sapphirerapids", False)]:
        target = _target(cpu)
        rule = heuristic_schedule(gemm(tl.float64), sizes, target)
        text = rule.to_python()
        assert ("'k.o', 'i.o.o', 'j.o'" in text) == want, (cpu, text)
        space = SearchSpace(gemm(tl.float64), sizes, target)
        point = space.point(rule)
        assert point is not None and point[0]["C.blis"] is want, (cpu, text)
        again = space.sample(optuna.trial.FixedTrial(point[0]))
        assert space.signature(again) == space.signature(rule)
    monkeypatch.setattr(heuristic, "BLIS_ORDER_BLOCKS", 0)
    monkeypatch.setattr(heuristic, "BLIS_ORDER_REMAINDER", 0)  # (6-row tiles leave 4 rows)
    rule = heuristic_schedule(gemm(tl.float64), sizes, _target("haswell")).to_python()
    assert "'i.o.o', 'k.o', 'j.o'" in rule, rule
    rng = np.random.default_rng(8)
    C = gemm(tl.float64)
    for m, n, k in [(263, 131, 600), (97, 61, 301)]:
        space = SearchSpace(C, {"M": m, "N": n, "K": k})
        sampler = optuna.samplers.RandomSampler(seed=m)
        study = optuna.create_study(sampler=sampler)
        found = 0
        for _ in range(200):
            trial = study.ask()
            try:
                s = space.sample(trial)
            except Exception:
                continue
            if not trial.params.get("C.blis"):
                continue
            try:  # (a ShiftInwards tail inside the k blocks: the legality check refuses it)
                kern = tl.compile(C, s)
            except IllegalScheduleError:
                continue
            found += 1
            a, b = rng.random((m, k)), rng.random((k, n))
            np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-10, err_msg=s.to_python())
            if found == 3:
                break
        assert found, "no random point in BLIS's order"


@pytest.mark.parametrize("threads", ["1", "2"])
def test_blis_order_keeps_the_models_tile_rows(threads, monkeypatch):
    # haswell float64 1024^3: the model's 6-row tile gives 60-row blocks, under REUSE_ROWS,
    # and 5-row tiles 85-row ones. In BLIS's order B's panels are copied once per kc block
    # whatever a block's rows, so the model's rows stay; without that rule (the constant off)
    # the 5-row tile comes back
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", threads)
    sizes = {"M": 1024, "N": 1024, "K": 1024}
    text = heuristic_schedule(gemm(tl.float64), sizes, _target("haswell")).to_python()
    assert "'k.o', 'i.o.o', 'j.o'" in text, text
    rows, tiles = _row_split(text)
    assert rows == cm.register_tile(cm.DESCRIBED["haswell"], 8).rows == 6
    assert rows * tiles < heuristic.REUSE_ROWS
    monkeypatch.setattr(heuristic, "BLIS_ORDER_REUSE", 0)
    text = heuristic_schedule(gemm(tl.float64), sizes, _target("haswell")).to_python()
    assert _row_split(text)[0] == 5, text


def test_a_triangle_over_the_columns_keeps_the_narrow_packed_tile(monkeypatch):
    # Zen 4's 4-vector packed tile (CpuModel.packed_vectors) where the reduction's triangle
    # bounds the rows and the reduction only (trmm's k > i: every column of a tile alike),
    # the 2-vector tile where it bounds the columns (syrk's j <= i: a wider tile crosses the
    # diagonal more); both still right on odd sizes
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    trmm = _trmm_product()
    M, N = tl.sizes("M N")
    i, j = tl.vars("i j")
    lanes = 8 * cm.DESCRIBED["znver4"].packed_vectors
    text = heuristic_schedule(trmm, {"M": 1000, "N": 1200}, _target("znver4")).to_python()
    assert f"split('j', {lanes})" in text
    S = tl.Input("S", (M, N), tl.float64)
    t = tl.RDom((0, N), name="t")
    t.where(j <= i)
    syrk = tl.Func("syrk")
    syrk[i, j] = tl.sum(S[i, t] * S[j, t])
    text = heuristic_schedule(syrk, {"M": 1000, "N": 1200}, _target("znver4")).to_python()
    assert f"split('j', {8 * cm.TILE_VECTORS})" in text
    rng = np.random.default_rng(7)
    for f, want in [(trmm, lambda a, b, s: np.tril(a, -1).T @ b),
                    (syrk, lambda a, b, s: np.tril(s @ s.T))]:
        kern = tl.compile(f, heuristic_schedule(f, {"M": 1000, "N": 1200}))
        for m, n in [(131, 67), (1, 5), (40, 33)]:
            a, b, s = rng.random((m, m)), rng.random((m, n)), rng.random((m, n))
            args = {"A": a, "B": b} if f is trmm else {"S": s}
            np.testing.assert_allclose(kern(**args), want(a, b, s), rtol=1e-10)


@pytest.mark.parametrize("threads", [16, 32])
def test_many_threads_take_fewer_larger_row_blocks_not_an_unpacked_tile(threads, monkeypatch):
    # A A^T over the lower triangle (PolyBench's syrk, 1200 rows): two row blocks a thread on
    # 16 threads would hold 24-40 rows at any tile height, so every row count failed
    # MIN_BLOCK_ROWS and the stage ran unpacked, reading A[j, k] a column at a time. Now fewer
    # blocks of at least MIN_BLOCK_ROWS rows, and the transposed panel is packed; a plain GEMM
    # of 1000 rows on 32 threads likewise (on 16 it had 40-row blocks already, and keeps them).
    # FEWER_BLOCKS = 0 gives the old answer on 32 threads; on 16 the divisor up from the
    # threads' share (``row_block``: 30 blocks of five 8-row tiles, one round) gives the new one
    # without it
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", str(threads))
    N, K = tl.sizes("N K")
    A = tl.Input("A", (N, K), tl.float64)
    i, j = tl.vars("i j")
    k = tl.RDom((0, K), name="k")
    k.where(j <= i)
    aat = tl.Func("aat")
    aat[i, j] = A[i, k] * A[j, k]
    target = _target("skylake-avx512")
    for f, sizes in [(aat, {"N": 1200, "K": 1000}), (gemm(tl.float64),
                                                     {"M": 1000, "N": 1100, "K": 1200})]:
        rule = heuristic_schedule(f, sizes, target)
        text = rule.to_python()
        rows, per_block = _row_split(text)
        assert "cache_read(" in text and rows >= 8 and rows * per_block >= heuristic.MIN_BLOCK_ROWS
        # the search space's "model" row block asks the same: the rule stays a point of it
        from tensorlang.autotuner.space import SearchSpace

        assert SearchSpace(f, sizes, target).point(rule) is not None
        monkeypatch.setattr(heuristic, "FEWER_BLOCKS", 0)
        old = heuristic_schedule(f, sizes, target).to_python()
        assert (old == text) == (threads == 16)
        assert old == text or "split('i.o'" not in old
        monkeypatch.setattr(heuristic, "FEWER_BLOCKS", 1)
    kern = tl.compile(aat, heuristic_schedule(aat, {"N": 1200, "K": 1000}))
    rng = np.random.default_rng(7)
    for n, kk in [(1200, 1000), (1201, 997), (7, 3)]:
        a = rng.random((n, kk))
        got, want = kern(a), a @ a.T
        lower = np.tri(n, dtype=bool)
        np.testing.assert_allclose(got[lower], want[lower], rtol=1e-10)


def test_ice_lake_sp_takes_a_wide_tile_of_24_accumulators(monkeypatch):
    # Ice Lake-SP's packed tile: 6 rows x 4 vectors (CpuModel.packed_accumulators = 24) with kc
    # 512, where the model's own tile is 8 x 2; PACKED_ACCUMULATORS = 16 gives 4 x 4, and a
    # described CPU without the field keeps its tile. The 6-row tile leaves 4 of 1024 rows as a
    # remainder piece: the kernel made for it is right on odd sizes on this host
    monkeypatch.setenv("TENSORLANG_NUM_THREADS", "2")
    out, sizes = gemm(tl.float64), {"M": 1024, "N": 1024, "K": 1024}
    ice = cm.DESCRIBED["icelake-server"]
    assert (ice.packed_vectors, ice.packed_accumulators, heuristic.least_kc(ice)) == (4, 24, 512)
    assert cm.register_tile(ice, 8) == cm.RegisterTile(8, 2, 8)
    s = heuristic_schedule(out, sizes, _target("icelake-server"))
    text = s.to_python()
    assert "split('i', 6)" in text and "split('j', 32)" in text and "split('k', 512)" in text
    monkeypatch.setattr(heuristic, "PACKED_ACCUMULATORS", 16)
    text16 = heuristic_schedule(out, sizes, _target("icelake-server")).to_python()
    assert "split('i', 4)" in text16 and "split('j', 32)" in text16
    assert "split('i', 8)" in heuristic_schedule(out, sizes,
                                                 _target("skylake-avx512")).to_python()
    kern = tl.compile(out, s)
    rng = np.random.default_rng(3)
    for m, n, k in [(131, 67, 600), (1, 5, 513), (7, 33, 1)]:
        a, b = rng.random((m, k)), rng.random((k, n))
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-10)
