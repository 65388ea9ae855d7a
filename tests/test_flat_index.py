"""``schedule.flat_index.flat_offset``: a fused loop's index put back together in an access's
row-major offset. Checked against the offset computed dimension by dimension, over random
buffers, fused groups and values (negative ones too: the identities hold for every integer)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorlang.dtypes import int64
from tensorlang.expr import BinOp, Const, Expr, Size, Var, walk
from tensorlang.schedule.flat_index import flat_offset


def C(v: int) -> Const:
    return Const(v, int64)


def op(name: str, a: Expr, b: Expr) -> BinOp:
    return BinOp(name, a, b, int64)


def value(e: Expr, env: dict[str, int]) -> int:
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, (Var, Size)):
        return env[e.name]
    assert isinstance(e, BinOp), e
    a, b = value(e.a, env), value(e.b, env)
    ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
           "floordiv": lambda: a // b, "mod": lambda: a % b, "min": lambda: min(a, b),
           "max": lambda: max(a, b)}
    return ops[e.op]()


def horner(indices, mins, extents, env) -> int:
    flat = 0
    for ix, lo, ext in zip(indices, mins, extents):
        flat = flat * value(ext, env) + value(ix, env) - value(lo, env)
    return flat


def divisions(e: Expr) -> int:
    return sum(isinstance(n, BinOp) and n.op in ("floordiv", "mod") for n in walk(e))


def test_a_copied_tile_s_four_dimensions_are_one_division():
    # conv2d's weights, 64 x 8 x 3 x 3 a step, copied by a fused loop's index q (rule 3)
    q = op("add", op("min", op("mul", C(224), Var("o")), C(4384)), Var("t"))
    d = lambda e, c: op("floordiv", e, C(c))  # noqa: E731
    m = lambda e, c: op("mod", e, C(c))  # noqa: E731
    co, ci = Var("co0"), Var("ci0")
    read = (op("add", co, d(d(d(q, 3), 3), 8)), op("add", ci, m(d(d(q, 3), 3), 8)),
            m(d(q, 3), 3), m(q, 3))
    extents = (Size("CO"), Size("CI"), C(3), C(3))
    got = flat_offset(read, (C(0),) * 4, extents)
    assert divisions(got) == 2  # q // 72 and q % 72, where the dimensions took 7
    shared = (read[1], read[2], read[3], read[0])  # stored with the channels last, padded
    got_shared = flat_offset(shared, (ci, C(0), C(0), co), (C(8), C(3), C(3), C(68)))
    assert divisions(got_shared) == 2
    for o, t in ((0, 0), (3, 17), (19, 223), (20, 5)):
        env = dict(o=o, t=t, co0=64, ci0=16, CO=128, CI=32)
        assert value(got, env) == horner(read, (C(0),) * 4, extents, env)
        assert value(got_shared, env) == horner(shared, (ci, C(0), C(0), co),
                                                (C(8), C(3), C(3), C(68)), env)
    # an access without a division keeps the caller's own form
    assert flat_offset((Var("i"), Var("j")), (C(0), C(0)), (C(4), C(5))) is None


@st.composite
def accesses(draw):
    n = draw(st.integers(1, 4))
    ext = [draw(st.integers(1, 7)) for _ in range(n)]
    symbolic = [draw(st.booleans()) for _ in range(n)]
    extents = tuple(Size(f"E{d}") if symbolic[d] else C(ext[d]) for d in range(n))
    first = draw(st.integers(0, n - 1))  # dims first..n-1 come from one fused index q
    sub = ext[first:]
    q = op("add", op("mul", C(draw(st.integers(1, 5))), Var("a")), Var("b"))
    nested = draw(st.booleans())  # q // 3 // 3 (the lowering's form) or q // 9
    indices, mins = [], []
    for d in range(n):
        start = Var(f"s{d}")
        if d < first:
            ix: Expr = op("add", Var(f"v{d}"), start)
        else:
            inner = math.prod(sub[d - first + 1:])
            part: Expr = q
            if inner > 1:
                if nested:
                    for f in sub[d - first + 1:][::-1]:
                        part = op("floordiv", part, C(f))
                else:
                    part = op("floordiv", part, C(inner))
            if d > first or draw(st.booleans()):
                part = op("mod", part, C(sub[d - first]))
            ix = op("add", start, part)
        indices.append(ix)
        mins.append(start if draw(st.booleans()) else C(draw(st.integers(-3, 3))))
    env = {f"E{d}": ext[d] for d in range(n)}
    env.update({f"s{d}": draw(st.integers(-20, 20)) for d in range(n)})
    env.update({f"v{d}": draw(st.integers(-20, 20)) for d in range(n)})
    env.update(a=draw(st.integers(-40, 40)), b=draw(st.integers(-40, 40)))
    return tuple(indices), tuple(mins), extents, env


@settings(max_examples=300, deadline=None)
@given(accesses())
def test_the_recombined_offset_is_the_dimension_by_dimension_one(case):
    indices, mins, extents, env = case
    got = flat_offset(indices, mins, extents)
    if got is None:  # (no division: a single dimension's whole q)
        assert not any(isinstance(n, BinOp) and n.op in ("floordiv", "mod")
                       for ix in indices for n in walk(ix))
        return
    assert value(got, env) == horner(indices, mins, extents, env)
    assert divisions(got) <= sum(divisions(ix) for ix in indices)
