"""The expected output candidates are verified against (``autotune/oracle.py``): ``tl.reference``
for short update definitions, the compiled default schedule for long ones."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import lu, lu_loops, matmul

import tensorlang as tl
from tensorlang.autotuner import oracle
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.measure import Measurer


def _lu_input(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    return rng.random((n, n)) + n * np.eye(n)  # diagonally dominant: no pivoting needed


def test_update_points_counts_every_rdom_point_of_every_update():
    out = lu()
    p = tl.Pipeline(out)
    assert oracle.update_points(p, p.bind({"A": (7, 7)})) == 7 ** 3  # where: still tested
    mm, _ = matmul()
    q = tl.Pipeline(mm)
    assert oracle.update_points(q, q.bind({"A": (5, 3), "B": (3, 4)})) == 0


@pytest.mark.parametrize("n", [1, 2, 13])
def test_a_long_update_is_checked_against_the_compiled_default_schedule(n, monkeypatch):
    def no_reference(*args, **kwargs):
        raise AssertionError("tl.reference was called above the point limit")

    monkeypatch.setattr(oracle, "reference", no_reference)
    a = _lu_input(n)
    got = oracle.expected_output(lu(), {"A": a}, {}, python_points=0)
    np.testing.assert_allclose(got, lu_loops(a), rtol=1e-12)


def test_a_short_update_is_checked_against_the_reference(monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("compiled below the point limit")

    monkeypatch.setattr(oracle, "compile_kernel", no_compile)
    a = _lu_input(6)
    got = oracle.expected_output(lu(), {"A": a}, {})
    np.testing.assert_allclose(got, lu_loops(a), rtol=1e-12)


def test_the_run_worker_verifies_a_long_update_quickly_and_still_catches_a_wrong_kernel():
    # lu at N = 101: 1.03 million RDom points, about a minute in tl.reference (tens of
    # microseconds a point); the compiled default schedule compiles and runs in about a second
    n = 101
    out = lu()
    sizes, shapes = {"N": n}, {"A": (n, n)}
    assert oracle.update_points(tl.Pipeline(out), tl.Pipeline(out).bind(shapes)) > \
        oracle.PYTHON_UPDATE_POINTS
    wrong = lu(wrong_sign=True)
    with Measurer(wrong, sizes, shapes, repeats=1, min_seconds=0.0) as m:
        (bad,) = m.compile_many([tl.Schedule(wrong).to_json()])
    assert bad.error is None
    with Measurer(out, sizes, shapes, repeats=1, min_seconds=0.0) as m:
        good = m.measure(heuristic_schedule(out, sizes).to_json(), verify=True, timeout=120)
        caught = m.run("the wrong sign", bad, verify=True, timeout=120)
    assert good.error is None and good.verified is True
    assert caught.error is None and caught.verified is False
