"""Halide's apps ported to tensorlang (benchmarks/halide_apps.py), at small odd sizes, under the
default and the rule-based schedule, against NumPy references written from Halide's sources."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import halide_apps as apps  # noqa: E402

CASES = {
    # name: (builder keyword arguments, sizes, inputs)
    "hist": ({}, {"H": 37, "W": 53},
             lambda s, rng: {"input": rng.integers(0, 256, (3, s["H"], s["W"])).astype(np.uint8)}),
    "interpolate": ({"levels": 4}, {"H": 29, "W": 43},
                    lambda s, rng: {"input": np.concatenate([
                        rng.random((3, s["H"], s["W"]), dtype=np.float32),
                        (rng.random((1, s["H"], s["W"])) > 0.7).astype(np.float32)])}),
    "local_laplacian": ({"pyramid_levels": 3}, {"H": 23, "W": 37},
                        lambda s, rng: {"input": rng.integers(0, 65536, (3, s["H"], s["W"]))
                                        .astype(np.uint16)}),
    "camera_pipe": ({}, {"H": 41, "W": 57},
                    lambda s, rng: {"input": rng.integers(0, 1024, (s["H"], s["W"])).astype(
                        np.uint16), **apps._camera_matrices()}),
    "bilateral_grid": ({"s_sigma": 4}, {"H": 31, "W": 45},
                       lambda s, rng: {"input": rng.random((s["H"], s["W"]), dtype=np.float32)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("schedule", ["default", "rule-based"])
def test_halide_app_matches_numpy(name, schedule):
    kwargs, sizes, make = CASES[name]
    build, numpy_ref = apps.APPS[name][:2]
    out = build(**kwargs)
    arrays = make(sizes, np.random.default_rng(3))
    want = numpy_ref(arrays, **kwargs)
    s = None if schedule == "default" else heuristic_schedule(out, sizes)
    got = tl.compile(out, s)(**arrays)
    assert apps.matches(got, want), np.abs(got.astype(float) - want.astype(float)).max()
    if schedule == "default":
        assert apps.matches(tl.reference(out, **arrays), want)


def test_bilateral_grid_scatter_is_a_serial_update():
    # the grid's update scatters into data-dependent z: its RDom loops carry a dependence
    out = apps.bilateral_grid(s_sigma=4)
    hist = next(f for f in tl.Pipeline(out).funcs if f.name == "histogram")
    s = tl.Schedule(out)
    s[hist].update(0).parallel(hist.updates[0].rvars[0].name)
    with pytest.raises(tl.IllegalScheduleError):
        tl.compile(out, s)
