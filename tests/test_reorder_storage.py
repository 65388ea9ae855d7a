"""reorder_storage: an internal Func's buffer stored with its dimensions in another order (Halide's
``Func::reorder_storage``); values against NumPy on odd sizes, the layout in the loop nest, and
the errors."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.schedule.schedule import steps_to_python


def _pipeline():
    """``f = 2 img + 1`` (internal), ``out[y, x] = f[y, x] * f[y, W - 1 - x]``."""
    H, W = tl.sizes("H W")
    img = tl.Input("img", (H, W), tl.float32)
    y, x = tl.vars("y x")
    f, out = tl.Func("f"), tl.Func("out")
    f[y, x] = img[y, x] * 2.0 + 1.0
    out[y, x] = f[y, x] * f[y, W - 1 - x]
    return f, out


def _want(a: np.ndarray) -> np.ndarray:
    f = a * 2 + 1
    return f * f[:, ::-1]


@pytest.mark.parametrize("placement", ["root", "at_rows", "at_tiles"])
@pytest.mark.parametrize("h,w", [(1, 1), (3, 7), (13, 29)])
def test_a_transposed_buffer_gives_the_same_values(placement, h, w, rng):
    f, out = _pipeline()
    s = tl.Schedule(out)
    if placement == "at_rows":
        s[f].compute_at(s[out], "y")
    elif placement == "at_tiles":
        s[out].tile("y", "x", 2, 4)
        s[f].compute_at(s[out], "y.o")
    s[f].reorder_storage("x", "y")
    kern = tl.compile(out, s)
    nest = kern.loop_nest()
    alloc = re.search(r"allocate f\[float32, ([^\]]*)\]", nest)
    assert alloc is not None, nest
    assert alloc.group(1).split(", ")[0] == "W", nest  # x's extent outermost
    assert re.search(r"\n\s*f\[x, (f\.)?y\] = img\[(f\.)?y, x\]", nest), nest  # x's index first
    a = rng.standard_normal((h, w)).astype(np.float32)
    np.testing.assert_allclose(kern(a), _want(a), rtol=1e-6)


def test_the_storage_order_changes_the_layout_only(rng):
    f, out = _pipeline()
    plain = tl.Schedule(out)
    s = tl.Schedule(out)
    s[f].reorder_storage("x", "y")
    assert "allocate f[float32, H, W]" in tl.compile(out, plain).loop_nest()
    assert "allocate f[float32, W, H]" in tl.compile(out, s).loop_nest()
    s2 = tl.Schedule(out)
    s2[f].reorder_storage("y", "x")  # the arguments' own order: nothing changes
    assert "allocate f[float32, H, W]" in tl.compile(out, s2).loop_nest()
    a = rng.standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_allclose(tl.compile(out, s2)(a), _want(a), rtol=1e-6)


def test_reorder_storage_round_trips_through_json_and_python():
    f, out = _pipeline()
    s = tl.Schedule(out)
    s[f].reorder_storage("x", "y")
    text = s.to_json()
    t = tl.Schedule.from_json(out, text)
    assert t.to_json() == text
    assert t.states["f"].storage_order == ("x", "y")
    assert "s[\"f\"].reorder_storage('x', 'y')" in steps_to_python(json.loads(text)["steps"])


def test_reorder_storage_refuses_what_it_cannot_lay_out():
    f, out = _pipeline()
    s = tl.Schedule(out)
    with pytest.raises(tl.ScheduleError, match="out is an output; its storage is the caller's"):
        s[out].reorder_storage("x", "y")
    with pytest.raises(tl.ScheduleError, match=r"name each of f's pure Vars \(y, x\) once"):
        s[f].reorder_storage("x")
    with pytest.raises(tl.ScheduleError, match="name each of f's pure Vars"):
        s[f].reorder_storage("x", "x")
    with pytest.raises(tl.ScheduleError, match="name each of f's pure Vars"):
        s[f].reorder_storage("x", "z")
    t = tl.Schedule(out)
    t[f].storage_align(0, 16)
    with pytest.raises(tl.ScheduleError, match="f has a storage_align; reorder_storage with it"):
        t[f].reorder_storage("x", "y")
    u = tl.Schedule(out)
    u[f].reorder_storage("x", "y")
    with pytest.raises(tl.ScheduleError, match="f has a reorder_storage; storage_align with it"):
        u[f].storage_align(0, 16)
