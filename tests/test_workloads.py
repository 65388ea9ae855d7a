"""The built-in workloads over each element type they are written for: the rule-based and the
default schedule against the workload's NumPy peer, in that dtype, on odd sizes."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autotuner.heuristic import heuristic_schedule
from tensorlang.autotuner.measure import random_inputs
from tensorlang.autotuner.workloads import BUILTIN, get_workload, input_shapes
from tensorlang.errors import DefinitionError
from tensorlang.pipeline import workload_key

ODD_SHAPES = {"matmul": dict(M=7, N=13, K=5), "batch_matmul": dict(B=2, M=17, N=37, K=3),
              "conv2d": dict(Nb=1, CI=3, CO=5, H=7, W=23), "blur": dict(H=19, W=41),
              "softmax": dict(R=3, S=37), "layernorm": dict(R=11, S=53)}


@pytest.mark.parametrize("name", sorted(ODD_SHAPES))
def test_every_builtin_is_written_for_float32_and_float64(name):
    assert BUILTIN[name].dtypes == ("float32", "float64")


@pytest.mark.parametrize("name", sorted(ODD_SHAPES))
@pytest.mark.parametrize("rule_based", [True, False])
def test_a_float64_builtin_matches_numpy_in_float64(name, rule_based):
    work, sizes = BUILTIN[name], ODD_SHAPES[name]
    out = work.build_as("float64")
    a = random_inputs(tl.Pipeline(out), input_shapes(out, sizes))
    assert all(v.dtype == np.float64 for v in a.values())
    k = tl.compile(out, heuristic_schedule(out, sizes) if rule_based else None)
    got, want = k(**a), work.numpy(a)()
    assert got.dtype == want.dtype == np.float64
    # float64 rounding, not float32's: a float32 step anywhere would miss by ~1e-7
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_build_as_none_or_the_first_dtype_is_the_algorithm_as_written():
    w = BUILTIN["matmul"]
    for dtype in (None, "float32"):
        assert workload_key(w.build_as(dtype)) == workload_key(w.build())
    assert workload_key(w.build_as("float64")) != workload_key(w.build())


def test_a_user_workload_has_no_other_dtype(tmp_path):
    (tmp_path / "alg.py").write_text(
        "import tensorlang as tl\n"
        "def double():\n"
        "    (N,) = tl.sizes('N')\n"
        "    X = tl.Input('X', (N,), tl.float32)\n"
        "    (i,) = tl.vars('i')\n"
        "    Y = tl.Func('Y')\n"
        "    Y[i] = X[i] * 2.0\n"
        "    return Y\n")
    w = get_workload(f"{tmp_path / 'alg.py'}:double")
    assert w.build_as(None).name == "Y"
    with pytest.raises(DefinitionError, match="has no float64 version"):
        w.build_as("float64")
