"""compute_at coverage is proven by isl set inclusion; an under-approximated region is caught."""

from __future__ import annotations

import pytest
from algorithms import blur

import tensorlang as tl
from tensorlang.schedule.legality.coverage import verify_coverage
from tensorlang.affine import sconst
from tensorlang.expr import Var


def _blur_reader():
    out, _ = blur()
    bx = tl.Pipeline(out).func("bx")
    y, x = out.definition.args
    # one iteration of a y-tile of 4 rows starting at 4 * yo: y in [4*yo + 1, 4*yo + 4]
    yo = Var("yo")
    xlo, xext = out.bounds[1]
    ranges = {"y": (yo * 4 + 1, yo * 4 + 4), "x": (xlo, xlo + xext - 1)}
    return out, bx, ranges, {"yo": (sconst(0), sconst(100))}


def test_exact_region_is_proven():
    out, bx, ranges, ctx = _blur_reader()
    yo = Var("yo")
    # rows 4*yo .. 4*yo + 5 are read (y - 1 .. y + 1): a 6-row region covers them
    region = ((yo * 4, sconst(6)), bx.bounds[1])
    assert verify_coverage("bx", bx.bounds, region, [(out.definition.value, ranges)], ctx,
                           "test")


def test_missing_row_is_caught_with_a_witness():
    out, bx, ranges, ctx = _blur_reader()
    yo = Var("yo")
    region = ((yo * 4, sconst(5)), bx.bounds[1])  # one row short
    with pytest.raises(tl.CompileError, match=r"misses cell bx\[\d+, \d+\]"):
        verify_coverage("bx", bx.bounds, region, [(out.definition.value, ranges)], ctx, "test")


def test_a_proof_past_the_operation_budget_is_left_unproven(monkeypatch):
    # isl gets at most MAX_OPERATIONS per proof (a deep compute_at nest took minutes): past
    # it the placement is unproven, never an error; the budget is lifted afterwards
    from tensorlang.schedule.legality import coverage

    out, bx, ranges, ctx = _blur_reader()
    yo = Var("yo")
    region = ((yo * 4, sconst(6)), bx.bounds[1])
    args = ("bx", bx.bounds, region, [(out.definition.value, ranges)], ctx, "test")
    monkeypatch.setattr(coverage, "MAX_OPERATIONS", 1)
    assert verify_coverage(*args) is False
    monkeypatch.undo()
    assert verify_coverage(*args) is True
    import islpy as isl

    assert isl.DEFAULT_CONTEXT.get_max_operations() == 0
