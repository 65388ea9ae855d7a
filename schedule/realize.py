"""Lowering pass ``realize``: one loop nest per Func, computed at root, in producer-first order.

Each Func gets a ``produce F:`` block; its pure Vars become loops in left-side order (outermost
first), its reduction Vars inner loops in order of first appearance (DESIGN §1: "loops in
definition order"). A reduction initialises its cell with the reducer's identity, then accumulates.
Internal Funcs are allocated around the whole pipeline. Reads through boundary conditions become
clamped loads (``clamp_edge``) or a select between a clamped load and the constant
(``constant_exterior``), so a load never leaves its buffer.
"""

from __future__ import annotations

import numpy as np

from tensorlang.affine import sadd, sconst, ssub
from tensorlang.dtypes import DType, int64
from tensorlang.expr import Access, BinOp, Cmp, Const, Expr, Select, Var, map_children
from tensorlang.pipeline import Pipeline

from .ir import Allocate, Block, Buffer, For, ForKind, LoweredFunc, ProducerConsumer, Stmt, Store


def identity(op: str, dtype: DType) -> Const:
    """The identity of reducer ``op`` in ``dtype`` (max: -inf or the type's minimum, ...)."""
    if op == "sum":
        v: bool | int | float = 0
    elif op == "prod":
        v = 1
    elif dtype.is_float:
        v = float("-inf") if op == "max" else float("inf")
    else:
        info = np.iinfo(dtype.numpy)
        v = int(info.min) if op == "max" else int(info.max)
    return Const(float(v) if dtype.is_float else int(v), dtype)


def buffers_of(p: Pipeline) -> dict[str, Buffer]:
    """A Buffer for every Input (``input``), the output (``output``) and every other Func."""
    out: dict[str, Buffer] = {}
    for inp in p.inputs:
        out[inp.name] = Buffer(inp.name, inp.dtype, tuple(lo for lo, _ in inp.bounds),
                               tuple(ext for _, ext in inp.bounds), "input")
    for f in p.funcs:
        assert f.dtype is not None
        kind = "output" if f is p.output else "internal"
        out[f.name] = Buffer(f.name, f.dtype, tuple(lo for lo, _ in f.bounds),
                             tuple(ext for _, ext in f.bounds), kind)
    return out


def lower_reads(e: Expr, buffers: dict[str, Buffer]) -> Expr:
    """Replace every Access by a Load, applying boundary conditions as clamps and selects."""
    from .ir import Load

    def go(n: Expr) -> Expr:
        n = map_children(n, go)
        if not isinstance(n, Access):
            return n
        if n.boundary is None:
            return Load(n.name, n.indices, n.dtype)
        buf = buffers[n.name]
        clamped = []
        inside: Expr | None = None
        for ix, lo, ext in zip(n.indices, buf.mins, buf.extents):
            hi = ssub(sadd(lo, ext), sconst(1))
            clamped.append(BinOp("max", BinOp("min", ix, hi, int64), lo, int64))
            c = BinOp("and", Cmp("ge", ix, lo), Cmp("le", ix, hi), DType.bool_)
            inside = c if inside is None else BinOp("and", inside, c, DType.bool_)
        load = Load(n.name, tuple(clamped), n.dtype)
        if n.boundary.kind == "clamp_edge" or inside is None:
            return load
        assert n.boundary.value is not None
        return Select(inside, load, n.boundary.value, n.dtype)

    return go(e)


def realize(p: Pipeline) -> LoweredFunc:
    """Build the default loop nest of pipeline ``p`` (every Func at root, serial loops)."""
    buffers = buffers_of(p)
    stages: list[Stmt] = []
    for f in p.funcs:
        d = f.definition
        assert d is not None and f.dtype is not None
        value = lower_reads(d.value, buffers)
        idx = tuple(Var(a.name) for a in d.args)
        body: Stmt
        if d.reduce_op is None:
            body = Store(f.name, idx, value)
        else:
            update: Stmt = Store(f.name, idx, value, d.reduce_op)
            for r in reversed(d.rvars):
                lo, ext = d.range_of(r.name)
                update = For(r.name, lo, ext, ForKind.SERIAL, update)
            body = Block((Store(f.name, idx, identity(d.reduce_op, f.dtype)), update))
        for a in reversed(d.args):
            lo, ext = d.range_of(a.name)
            body = For(a.name, lo, ext, ForKind.SERIAL, body)
        stages.append(ProducerConsumer(f.name, body))
    stmt: Stmt = Block(tuple(stages)) if len(stages) > 1 else stages[0]
    for f in reversed(p.funcs):
        if f is not p.output:
            stmt = Allocate(buffers[f.name], stmt)
    return LoweredFunc(p.output.name, tuple(buffers[i.name] for i in p.inputs),
                       buffers[p.output.name], p.sizes, buffers, stmt)
