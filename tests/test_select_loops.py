"""The rule that unrolls a pure loop of a few iterations whose Var a ``where`` tests
(``autotune/select_loops.py``: Halide's hist output picks its colour channel so): which stages it
takes, the nest it gives, and the answers against NumPy at odd sizes."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.select_loops import select_loops, unit_loops
from tensorlang.schedule.ir import ForKind

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from common import rule_settings  # noqa: E402
from algorithms import ZEN4  # noqa: E402


def planar(channels: int | None = 3, last: bool = False) -> tl.Func:
    """``out[c, y, x]`` (``out[y, x, c]`` when ``last``): channel 0 a sum, 1 a difference, the
    others a product of two float32 images; ``channels`` None: a size ``C``."""
    H, W = tl.sizes("H W")
    a, b = tl.Input("a", (H, W), tl.float32), tl.Input("b", (H, W), tl.float32)
    c, y, x = tl.vars("c y x")
    n = tl.sizes("C")[0] if channels is None else channels
    out = tl.Func("out", shape=(H, W, n) if last else (n, H, W))
    value = tl.where(c == 0, a[y, x] + b[y, x], tl.where(c == 1, a[y, x] - b[y, x],
                                                          a[y, x] * b[y, x]))
    if last:
        out[y, x, c] = value
    else:
        out[c, y, x] = value
    return out


def planar_numpy(a: np.ndarray, b: np.ndarray, channels: int, last: bool = False) -> np.ndarray:
    planes = [a + b, a - b] + [a * b] * (channels - 2)
    return np.stack(planes, axis=2 if last else 0)


def run(out: tl.Func, s: tl.Schedule, h: int, w: int, **sizes: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(h * 1000 + w)
    a, b = rng.random((h, w), dtype=np.float32), rng.random((h, w), dtype=np.float32)
    return tl.compile(out, s)(a=a, b=b, **sizes), a, b


def loop_kinds(out: tl.Func, s: tl.Schedule) -> dict[str, ForKind]:
    st = s.states[out.name]
    return {lp: st.kinds.get(lp, ForKind.SERIAL) for lp in st.loops}


@pytest.mark.parametrize("h, w", [(1, 1), (7, 13), (31, 67), (64, 101)])
def test_the_channel_loop_is_unrolled_outside_the_vector_loop(h, w):
    out = planar()
    sizes = {"H": h, "W": w}
    s = heuristic_schedule(out, sizes, ZEN4)
    kinds = loop_kinds(out, s)
    assert kinds.get("c.i") == ForKind.UNROLLED, s.to_python()
    loops = s.states[out.name].loops
    assert loops[0] == "c.o"  # one iteration: the split is by the whole extent
    if w >= 16:  # vectorized: c.i right outside the vector loop
        assert loops[-2:] == ["c.i", "x.i"], s.to_python()
        assert kinds["x.i"] == ForKind.VECTORIZED
    else:  # not vectorized: c.i innermost
        assert loops[-1] == "c.i", s.to_python()
    got, a, b = run(out, s, h, w)
    np.testing.assert_allclose(got, planar_numpy(a, b, 3), rtol=1e-6)


def test_the_parallel_loop_is_the_rows_not_the_three_channels():
    out = planar()
    s = heuristic_schedule(out, {"H": 512, "W": 512})
    kinds = loop_kinds(out, s)
    assert kinds.get("y") == ForKind.PARALLEL, s.to_python()
    assert kinds.get("c.i") == ForKind.UNROLLED
    with rule_settings("select_loops.MAX_SELECT_UNROLL=0"):
        old = heuristic_schedule(out, {"H": 512, "W": 512})
    assert loop_kinds(out, old).get("c") == ForKind.PARALLEL  # what the rule replaces


@pytest.mark.parametrize("h, w", [(5, 3), (9, 37)])
def test_channels_innermost_are_unrolled_there(h, w):
    out = planar(last=True)
    s = heuristic_schedule(out, {"H": h, "W": w})
    assert loop_kinds(out, s).get("c.i") == ForKind.UNROLLED, s.to_python()
    assert s.states[out.name].loops[-1] == "c.i"
    got, a, b = run(out, s, h, w)
    np.testing.assert_allclose(got, planar_numpy(a, b, 3, last=True), rtol=1e-6)


def test_a_channel_count_given_as_a_size_is_not_unrolled():
    # its loop's extent is known only when the kernel is called: unrolling it cannot lower
    out = planar(channels=None)
    s = heuristic_schedule(out, {"H": 9, "W": 37, "C": 3})
    assert "c.i" not in s.states[out.name].loops, s.to_python()
    for channels in (3, 5):
        got, a, b = run(out, s, 9, 37, C=channels)
        np.testing.assert_allclose(got, planar_numpy(a, b, channels), rtol=1e-6)


def test_more_channels_than_the_limit_are_not_unrolled():
    from tensorlang.autotuner.select_loops import MAX_SELECT_UNROLL
    out = planar(channels=MAX_SELECT_UNROLL + 1)
    s = heuristic_schedule(out, {"H": 9, "W": 37})
    assert "c.i" not in s.states[out.name].loops, s.to_python()
    got, a, b = run(out, s, 9, 37)
    np.testing.assert_allclose(got, planar_numpy(a, b, MAX_SELECT_UNROLL + 1), rtol=1e-6)


def test_a_channel_loop_no_where_tests_is_left_alone():
    H, W = tl.sizes("H W")
    a = tl.Input("a", (3, H, W), tl.float32)
    c, y, x = tl.vars("c y x")
    out = tl.Func("out")
    out[c, y, x] = a[c, y, x] * 2.0
    ext = {"c": 3, "y": 9, "x": 37}
    assert select_loops(out, ext, vectorized=True) == []


def test_hist_producers_are_computed_per_row_past_the_channel_split():
    import halide_apps as apps
    out = apps.hist()
    sizes = {"H": 101, "W": 131}  # enough points for a parallel loop
    s = heuristic_schedule(out, sizes)
    st = s.states[out.name]
    assert unit_loops(st, out) == {"c.o"}
    for name in ("equalize", "Cr", "Cb"):  # at the parallel row loop inside c.o
        compute = s.states[name].compute
        assert compute.kind == "at" and compute.loop == "y", s.to_python()
    rng = np.random.default_rng(5)
    arrays = {"input": rng.integers(0, 256, (3, 101, 131)).astype(np.uint8)}
    got = tl.compile(out, s)(**arrays)
    assert apps.matches(got, apps.hist_numpy(arrays))


def binned(rows: int = 0) -> tl.Func:
    """Per row, 8 bins of a float32 image in [0, 1): channel 0 sums the values that fall in a
    bin, channel 1 counts them (Halide's bilateral_grid histogram, one dimension less)."""
    H, W = tl.sizes("H W")
    img = tl.Input("img", (H, W), tl.float32)
    y, b, c = tl.vars("y b c")
    h = tl.Func("h", shape=(H, 8, 2))
    h[y, b, c] = 0.0
    r = tl.RDom((0, W), name="r")
    v = img[y, r.x]
    bin_ = tl.clamp(tl.cast(tl.int32, v * 8.0), 0, 7)
    h[y, bin_, c] = h[y, bin_, c] + tl.where(c == 0, v, 1.0)
    return h


def binned_numpy(img: np.ndarray) -> np.ndarray:
    out = np.zeros((img.shape[0], 8, 2), np.float32)
    for y in range(img.shape[0]):
        for v in img[y]:
            k = min(max(int(np.float32(v) * np.float32(8.0)), 0), 7)
            out[y, k, 0] += v
            out[y, k, 1] += 1
    return out


@pytest.mark.parametrize("h, w", [(1, 1), (5, 17), (300, 131)])
def test_an_update_moves_its_channel_loop_inside_and_unrolls_it(h, w):
    out = binned()
    s = heuristic_schedule(out, {"H": h, "W": w})
    st = s.states["h.update(0)"]
    assert st.loops[-1] == "c" and st.kinds.get("c") == ForKind.UNROLLED, s.to_python()
    img = np.random.default_rng(h + w).random((h, w), dtype=np.float32)
    got = tl.compile(out, s)(img=img)
    np.testing.assert_allclose(got, binned_numpy(img), rtol=1e-5)
    with rule_settings("select_loops.UPDATE_SELECTS=0"):
        old = heuristic_schedule(out, {"H": h, "W": w})
    assert old.states["h.update(0)"].loops[-1] != "c"


def test_a_reduction_var_a_where_tests_keeps_its_place():
    # the update's reduction order is the algorithm's: only pure Vars move
    N = tl.sizes("N")[0]
    x = tl.Input("x", (N,), tl.float32)
    k, i = tl.vars("k i")
    f = tl.Func("f", shape=(2, N))
    f[k, i] = 0.0
    r = tl.RDom((0, 2), (1, N), name="r")
    f[r.x, r.y] = f[r.x, r.y - 1] + tl.where(r.x == 0, x[r.y], 1.0)
    s = heuristic_schedule(f, {"N": 37})
    assert "unroll" not in s.to_python(), s.to_python()


def test_an_update_of_the_channel_loop_alone_is_unrolled():
    # no reduction loop to move inside: the channel loop is the whole update
    N = tl.sizes("N")[0]
    x = tl.Input("x", (N,), tl.float32)
    c = tl.vars("c")[0]
    f = tl.Func("f", shape=(3,))
    f[c] = 1.0
    f[c] = f[c] * 2.0 + tl.where(c == 0, x[0], tl.where(c == 1, x[N - 1], 0.5))
    s = heuristic_schedule(f, {"N": 5})
    xs = np.arange(5, dtype=np.float32) + 1
    got = tl.compile(f, s)(x=xs)
    np.testing.assert_allclose(got, [2 + xs[0], 2 + xs[-1], 2.5])
