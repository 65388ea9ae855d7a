from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import tensorlang as tl

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=40,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def run_both(F: tl.Func, *args, **kwargs):
    """(reference result, compiled-kernel result) for the same arguments."""
    ref = tl.reference(F, *args, **kwargs)
    got = tl.compile(F)(*args, **kwargs)
    return ref, got


def check(F: tl.Func, expected: np.ndarray, *args, rtol: float = 1e-5, atol: float = 1e-6,
          **kwargs) -> None:
    """Reference and compiled kernel both equal hand-written NumPy ``expected`` (shape, dtype,
    values; exact for integers and bools)."""
    ref, got = run_both(F, *args, **kwargs)
    for name, r in (("reference", ref), ("compiled", got)):
        assert r.shape == expected.shape, f"{name}: shape {r.shape} != {expected.shape}"
        assert r.dtype == expected.dtype, f"{name}: dtype {r.dtype} != {expected.dtype}"
        if expected.dtype.kind in "iub":
            np.testing.assert_array_equal(r, expected, err_msg=name)
        else:
            np.testing.assert_allclose(r, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=name)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/*.txt from the current loop nests")


GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


@pytest.fixture
def golden(request):
    """``golden(name, text)``: compare ``text`` with tests/golden/<name>.txt (or rewrite it with
    --update-golden)."""

    def check_golden(name: str, text: str) -> None:
        path = os.path.join(GOLDEN, f"{name}.txt")
        if request.config.getoption("--update-golden") or not os.path.exists(path):
            os.makedirs(GOLDEN, exist_ok=True)
            with open(path, "w") as fh:
                fh.write(text)
            if not request.config.getoption("--update-golden"):
                pytest.fail(f"golden file {path} was missing and has been written; re-run")
            return
        with open(path) as fh:
            expected = fh.read()
        assert text == expected, f"loop nest differs from {path} (run with --update-golden)"

    return check_golden


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own tuned-kernel cache (never the user's ~/.cache/tensorlang)."""
    monkeypatch.setenv("TENSORLANG_CACHE", str(tmp_path_factory.mktemp("tlcache")))
