"""What the lowering and the legality check keep per process (``check.check_stage``,
``coverage._covered``, ``cell_reduction._empty``, ``expr.children``) never changes a verdict:
a stage checked before is judged by its loops as they are now (kinds, order, splits), a
report's annotations do not leak into the kept verdict, and ``import tensorlang`` leaves
ml_dtypes unloaded until bfloat16 is used."""

from __future__ import annotations

import subprocess
import sys

from algorithms import matmul

import tensorlang as tl
from tensorlang.expr import Var, children
from tensorlang.schedule.legality import check


def _verdicts(steps_list):
    out, _ = matmul()
    found = []
    for steps in steps_list:
        s = tl.Schedule(out)
        for step in steps:
            step(s, out)
        found.append(s.check().ok)
    return found


def test_a_stage_checked_before_is_judged_by_its_loops_as_they_are_now():
    # the same stage, alternately legal and not: the verdict follows the loops' kinds, order
    # and splits, whatever was checked before
    par_k = [lambda s, f: s[f.name].parallel("k")]
    par_i = [lambda s, f: s[f.name].parallel("i")]
    ser = []
    reordered = [lambda s, f: s[f.name].reorder("k", "i", "j"),
                 lambda s, f: s[f.name].parallel("k")]
    split_k = [lambda s, f: s[f.name].split("k", 4), lambda s, f: s[f.name].parallel("k.o")]
    split_i = [lambda s, f: s[f.name].split("i", 4), lambda s, f: s[f.name].parallel("i.o")]
    runs = [par_k, ser, par_i, par_k, reordered, split_i, split_k, split_i, par_k]
    legal = [False, True, True, False, False, True, False, True, False]
    assert _verdicts(runs) == legal
    for steps, want in zip(runs, legal):
        check._CHECKED.clear()  # the same verdict when checked afresh
        assert _verdicts([steps]) == [want]


def test_a_reports_annotations_do_not_reach_the_kept_verdict():
    out, _ = matmul()
    s = tl.Schedule(out)
    s["C"].split("k", 4)
    s["C"].parallel("k.o")
    first = s.check()
    assert not first.ok and first.problems[0].primitive == "parallel(C, loop='k.o')"
    first.problems[0].primitive = "changed by a caller"
    again = s.check()
    assert again.problems[0].primitive == "parallel(C, loop='k.o')"
    assert again.problems[0] is not first.problems[0]


def test_children_are_kept_on_the_node_and_are_its_fields():
    i, j = Var("i"), Var("j")
    e = (i + 1) * j
    assert children(e) is children(e)  # found once
    assert [c.key for c in children(e)] == [(i + 1).key, j.key]
    assert children(i) == ()


def test_importing_tensorlang_leaves_ml_dtypes_unloaded_until_bfloat16_is_used():
    code = ("import sys, tensorlang as tl\n"
            "from tensorlang.dtypes import as_dtype\n"
            "assert 'ml_dtypes' not in sys.modules\n"
            "assert as_dtype('bfloat16') is tl.bfloat16 and tl.bfloat16.itemsize == 2\n"
            "assert 'ml_dtypes' not in sys.modules\n"
            "assert tl.bfloat16.numpy.name == 'bfloat16' and 'ml_dtypes' in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
