"""The primitive registry: every stage method is a registered primitive, a trace replayed from
JSON gets the same argument checks as the Python API, obligations drive the legality report,
and one helper writes every "In schedule for F:" prefix."""

from __future__ import annotations

import ast
import inspect
import json
import os

import numpy as np
import pytest
from algorithms import matmul, skewed

import tensorlang as tl
from tensorlang.schedule import primitives
from tensorlang.schedule.primitives import OBLIGATIONS, PRIMITIVES
from tensorlang.schedule.schedule import Schedule, Stage, steps_to_python
from tensorlang.schedule.trace import Step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = {"loops", "loop kinds", "placement", "staging", "hints"}


#: primitives that add a stage are methods of the Schedule (TVM's s.cache_read, s.rfactor)
SCHEDULE_METHODS = ("cache_read", "cache_write", "rfactor")


def test_every_primitive_has_its_method_and_module():
    for name, prim in PRIMITIVES.items():
        owner = Schedule if name in SCHEDULE_METHODS else Stage
        assert callable(getattr(owner, name, None)), f"{name} has no {owner.__name__} method"
        assert prim.family in FAMILIES and prim.obligations <= set(OBLIGATIONS)
        module = inspect.getmodule(type(prim)).__name__.rsplit(".", 1)[1]
        assert module in ("loops", "kinds", "placement", "staging", "hints")
    methods = {n for n, v in vars(Stage).items() if callable(v) and not n.startswith("_")}
    assert methods - {"update"} == {n for n in PRIMITIVES if n not in SCHEDULE_METHODS}


def _replay(trace):
    C, _ = matmul()
    return Schedule.from_json(C, {"version": 1, "output": "C", "steps": trace})


@pytest.mark.parametrize("step,msg", [
    ({"op": "spilt", "func": "C", "loop": "i", "factor": 4},
     r"unknown schedule primitive 'spilt' \(known: .*split"),
    ({"op": "split", "func": "C", "loop": "i", "factor": 0}, "factor must be a positive int"),
    ({"op": "split", "func": "C", "loop": "i", "factor": True}, "factor must be a positive int"),
    ({"op": "split", "func": "C", "loop": "i"}, "needs its parameter 'factor'"),
    ({"op": "split", "func": "C", "loop": "i", "factor": 4, "width": 2},
     "split has no parameter 'width'"),
    ({"op": "split", "func": "C", "loop": "i", "factor": 4, "tail": "RoundUp"},
     "unknown tail strategy 'RoundUp'"),
    ({"op": "reorder", "func": "C", "loops": []}, "loops must be a non-empty tuple"),
    ({"op": "cache_read", "func": "C", "tensor": "B", "loop": "k", "index": -1},
     "index must be a non-negative int"),
    ({"op": "split", "func": "D", "loop": "i", "factor": 4}, "D is not a Func of this pipeline"),
])
def test_a_replayed_trace_gets_the_api_checks(step, msg):
    """A hand-edited trace is refused with the parameter named, never a KeyError or a
    TypeError deep in a rewrite."""
    with pytest.raises(tl.ScheduleError, match=msg) as err:
        _replay([step])
    assert str(err.value).startswith(f"In schedule for {step['func']}: ")


def test_numpy_integers_are_factors():
    C, _ = matmul()
    s = tl.Schedule(C)
    o, i = s[C].split("i", np.int64(4))
    assert json.loads(s.to_json())["steps"][0]["factor"] == 4 and (o.name, i.name) == (
        "i.o", "i.i")


def test_serial_undoes_a_loop_kind_and_obliges_nothing():
    """The worked example of docs/architecture.md ("Adding a primitive")."""
    C, make_arrays = matmul()
    arrays = make_arrays(np.random.default_rng(0), 13, 7, 5)
    s = tl.Schedule(C)
    s[C].parallel("k")
    assert not tl.check(C, s).ok  # a parallel reduction loop is refuted ...
    s[C].serial("k")
    report = tl.check(C, s)
    assert report.ok, report  # ... and serial makes it legal again
    kern = tl.compile(C, s)
    assert "parallel" not in kern.loop_nest()
    np.testing.assert_allclose(kern(**arrays), arrays["A"] @ arrays["B"], rtol=1e-5)
    assert 's["C"].serial(\'k\')' in s.to_python()
    assert tl.Schedule.from_json(C, s.to_json()).to_json() == s.to_json()
    with pytest.raises(tl.ScheduleError, match="has no parameter 'factor'"):
        _replay([{"op": "serial", "func": "C", "loop": "i", "factor": 2}])


def test_blame_goes_to_the_obliged_primitive():
    """The interchange that runs a recurrence backwards is blamed on reorder (obliged to
    "order"); the split before it (not obliged to it) stays proven."""
    F, _ = skewed()
    s = tl.Schedule(F)
    stage = s[F].update(0)
    stage.split("r_x", 4)
    stage.reorder("r_x.o", "r_x.i", "r_y")
    report = tl.check(F, s)
    assert [status for _, status in report.primitives] == ["proven", "refuted"], str(report)
    assert "reorder(F.update(0)" in report.problems[0].message()
    with pytest.raises(tl.IllegalScheduleError, match="would run backwards"):
        tl.compile(F, s)


def test_steps_to_python_is_the_primitives_python():
    C, _ = matmul()
    s = tl.Schedule(C)
    s[C].tile("i", "j", 4, 8, tail="ShiftInwards")
    s[C].vectorize("j.i")
    s.cache_read("B", s[C], "i.o", layout=(1, 0))
    text = steps_to_python([st.to_dict() for st in s.steps])
    assert text == s.to_python()
    assert text.splitlines() == [
        's["C"].tile(\'i\', \'j\', 4, 8, tail=\'ShiftInwards\')',
        's["C"].vectorize(\'j.i\')',
        's.cache_read(\'B\', s["C"], \'i.o\', layout=(1, 0))']
    with pytest.raises(tl.ScheduleError, match="unknown schedule primitive 'warp'"):
        steps_to_python([Step("warp", "C")])


def test_one_helper_writes_every_schedule_error_prefix():
    """No module but tensorlang/errors.py spells "In schedule for": every schedule error goes
    through ScheduleError.in_schedule / schedule_message."""
    offenders = []
    for folder in ("tensorlang", "schedule", "backends", "autotune"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                path = os.path.join(dirpath, f)
                if not f.endswith(".py") or path.endswith(os.path.join("tensorlang", "errors.py")):
                    continue
                for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                            "In schedule for" in node.value:
                        offenders.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not offenders, offenders
    assert primitives.lookup("split").name == "split"


def test_check_refuses_what_lowering_cannot_realize_and_blames_the_unroll():
    # tl.check is tl.compile's verdict: an unrolled loop of symbolic extent is refused by both,
    # with the same message, as a ScheduleError (not illegal: it would not change the result)
    out, _ = matmul()
    s = tl.Schedule(out)
    s[out].split("j", 4)
    s[out].unroll("i")
    report = tl.check(out, s)
    assert not report.ok and report.problems[0].kind == "realize"
    assert [status for _, status in report.primitives] == ["proven", "refuted"]
    err = report.error()
    assert type(err) is tl.ScheduleError
    assert str(err).startswith("In schedule for C: unroll(C, loop='i'): cannot unroll loop i")
    with pytest.raises(tl.ScheduleError) as info:
        tl.compile(out, s)
    assert str(info.value) == str(err) and type(info.value) is tl.ScheduleError
    ok = tl.Schedule(out)
    ok[out].split("i", 4)
    ok[out].unroll("i.i")  # constant extent 4
    assert tl.check(out, ok).ok and tl.check(out, ok).primitives[-1][1] == "proven"
    assert not s.check(realize=False).problems  # the isl proof alone has nothing against it
