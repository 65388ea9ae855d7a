"""The polyhedral model of one stage: its instances, the cells it writes and reads of its own Func,
and the order the algorithm defines (isl manual, "Sets and Relations"; the dependence analysis of
Feautrier, and Pugh & Wonnacott's memory-based dependences).

Only stages that touch their own Func across iterations need a model: a pure definition with a
reduction (``C[i, j] = sum_k ...``: iterations with the same cell are *reduction dependences*, free
to reorder, never run at once) and an update definition (``F[r] = F[r - 1] + X[r]``: strict
flow/anti/output dependences in the RDom's lexicographic order). Every other dependence in a
pipeline is between stages, which the lowering orders by construction (producers run before their
consumers; compute_at regions come from conservative bounds inference).

A read inside a ``tl.where`` branch is modelled only at the instances where the branch is taken
(``guarded_reads``): elsewhere its value is thrown away, so it orders nothing there (the
may-reads of PPCG: Verdoolaege et al., "Polyhedral Parallel Code Generation for CUDA", TACO
2013).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import islpy as isl

from tensorlang.expr import Access, BinOp, Expr, Not, Select, children
from tensorlang.func import Definition, Func

from .isl_text import Unrepresentable, condition, lower_bounds, quasi_affine, upper_bounds


@dataclass
class StageModel:
    """isl objects of one stage: ``S[v...]`` instances (``domain``), and its dependences.

    ``vars``: the stage's original Vars in ``S[...]`` order; ``strict``: flow/anti/output
    dependences (update definitions), by kind; ``reduction``: pairs of instances updating the same
    cell (pure definitions with a reduction). Parameters: the sizes, plus ``lo_<v>`` for each
    Var (the origin of its loop: the region minimum, which compute_at makes variable).
    """

    stage: str
    vars: list[str]
    params: list[str]
    domain: isl.Set
    strict: dict[str, isl.Map]
    reduction: isl.Map | None


def _space(params: list[str]) -> str:
    return "[" + ", ".join(params) + "]"


def _name(v: str) -> str:
    return v.replace(".", "_")


def stage_model(f: Func, definition, update, sizes: tuple[str, ...]) -> StageModel | None:
    """The model of ``f``'s pure definition (``update`` None) or of ``update``; None when the
    stage has no dependences between its own iterations."""
    if update is None and (definition.reduce_op is None or not definition.rvars):
        return None
    if update is None:
        pure = [a.name for a in definition.args]
        rv = [r.name for r in definition.rvars]
        ranges = {n: (lo, ext) for n, lo, ext in definition.ranges}
        write_idx = [a for a in definition.args]
        value = definition.value
        predicate = definition.predicate
        stage = f.name
    else:
        pure = list(update.pure)
        rv = [r.name for r in update.rvars]
        dom = dict(zip([a.name for a in definition.args], f.bounds))
        ranges = {p: dom[p] for p in pure}
        ranges.update({r.name: (r.min, r.extent) for r in update.rvars})
        write_idx = list(update.index)
        value = update.value
        predicate = update.predicate
        stage = f"{f.name}.update({update.number})"
    allv = pure + rv
    ren = {v: _name(v) for v in allv}
    params = list(sizes) + [f"lo_{_name(v)}" for v in allv]
    sp = _space(params)
    cons = []
    for v in allv:
        lo, ext = ranges[v]
        from tensorlang.affine import sadd, sconst, ssub

        hi = ssub(sadd(lo, ext), sconst(1))
        try:
            cons += [f"{ren[v]} >= {b}" for b in lower_bounds(lo)]
            cons += [f"{ren[v]} <= {b}" for b in upper_bounds(hi)]
        except Unrepresentable:
            pass  # over-approximate: more instances can only add dependences
    for c in predicate:  # RDom.where: triangles and other polyhedra exactly
        try:
            cons.append(_cond_text(c, True, ren))
        except Unrepresentable:
            pass  # (a condition isl cannot state: the whole box, conservatively)
    tup = ", ".join(ren[v] for v in allv)
    domain = isl.Set(f"{sp} -> {{ S[{tup}] : {' and '.join(cons) or 'true'} }}")

    def acc(idx) -> isl.Map:
        # quasi-affine indices (// and % by constants, min, max) exactly; any other (a read of
        # data: a gather or a scatter) may touch any cell of that dimension
        outs = [f"m{d}" for d in range(len(idx))]
        eqs = []
        for m, i in zip(outs, idx):
            try:
                eqs.append(f"{m} = {quasi_affine(i, lambda v: ren.get(v, v))}")
            except Unrepresentable:
                pass
        cond = f" : {' and '.join(eqs)}" if eqs else ""
        return isl.Map(f"{sp} -> {{ S[{tup}] -> M[{', '.join(outs)}]{cond} }}"
                       ).intersect_domain(domain)

    write = acc(write_idx)
    reads = []
    for a, guards in guarded_reads(value, f.name):
        r = acc(a.indices)
        for g in guards:  # read only where its tl.where branch is taken
            try:
                r = r.intersect_domain(isl.Set(f"{sp} -> {{ S[{tup}] : {g(ren)} }}"))
            except (Unrepresentable, isl.Error):
                pass  # a condition isl cannot state: the read anywhere, conservatively
        reads.append(r)
    if update is None:
        same = write.apply_range(write.reverse())
        ident = isl.Map(f"{sp} -> {{ S[{tup}] -> S[{tup}] }}")
        return StageModel(stage, allv, params, domain, {}, same.subtract(ident))
    # original order: RDom points lexicographically, last RDom dimension outermost; pure Vars are
    # independent (each reads its own Func only at its own value)
    rv_order = [r.name for r in sorted(update.rvars, key=lambda r: -r.dim)]
    order = isl.Map(f"{sp} -> {{ S[{tup}] -> [{', '.join(ren[v] for v in rv_order + pure)}] }}")
    order = order.intersect_domain(domain)
    before = order.lex_lt_map(order)
    strict = {}
    w_inv = write.reverse()
    for r in reads or []:
        strict.setdefault("flow", None)
        dep = write.apply_range(r.reverse()).intersect(before)
        strict["flow"] = dep if strict["flow"] is None else strict["flow"].union(dep)
        anti = r.apply_range(w_inv).intersect(before)
        strict["anti"] = anti if "anti" not in strict else strict["anti"].union(anti)
    strict["output"] = write.apply_range(w_inv).intersect(before)
    strict = {k: v for k, v in strict.items() if v is not None}
    return StageModel(stage, allv, params, domain, strict, None)


def guarded_reads(value: Expr, name: str) -> list[tuple[Access, list]]:
    """Each read of ``name`` in ``value`` with the conditions of the ``tl.where`` branches it
    sits in, each a function of the Var renaming giving isl text (raising Unrepresentable for
    a condition isl cannot state: a read of data, a product of Vars). A read in the branch not
    taken at an iteration gives a value that is thrown away, so it orders nothing there: the
    model restricts each read to the iterations whose conditions hold (PPCG's may-reads)."""
    out: list[tuple[Access, list]] = []

    def go(n: Expr, guards: list) -> None:
        if isinstance(n, Access) and n.name == name:
            out.append((n, guards))
        if isinstance(n, Select):
            go(n.cond, guards)
            go(n.t, guards + [functools.partial(_cond_text, n.cond, True)])
            go(n.f, guards + [functools.partial(_cond_text, n.cond, False)])
            return
        for c in children(n):
            go(c, guards)

    go(value, [])
    return out


def _cond_text(c: Expr, holds: bool, ren: dict[str, str]) -> str:
    """``c`` (``&``, ``|``, ``~`` of affine comparisons) or its negation as isl text."""
    if isinstance(c, Not):
        return _cond_text(c.a, not holds, ren)
    if isinstance(c, BinOp) and c.op in ("and", "or") and c.dtype.is_bool:
        a, b = _cond_text(c.a, holds, ren), _cond_text(c.b, holds, ren)
        conj = (c.op == "and") == holds  # De Morgan when negated
        return f"(({a}) {'and' if conj else 'or'} ({b}))"
    text = condition(c, ren)
    return text if holds else f"not ({text})"


@functools.lru_cache(maxsize=256)
def _cached(key: tuple, f: Func, number: int, sizes: tuple[str, ...],
            d: Definition) -> StageModel | None:
    return stage_model(f, d, None if number < 0 else f.updates[number], sizes)


def model_for(workload: str, f: Func, number: int, sizes: tuple[str, ...],
              definition: Definition | None = None) -> StageModel | None:
    """Cached per algorithm (workload key), stage and definition: the dependence analysis is
    done once. ``definition``: the pure definition as the schedule sees it (``rfactor`` and
    ``cache_write`` rewrite it; default the Func's own); ``f``'s updates likewise (the view's
    Func, whose update ``rfactor`` may have rewritten)."""
    d = definition if definition is not None else f.definition
    u = None if number < 0 else f.updates[number].key  # (rfactor rewrites an update too)
    return _cached((workload, f.name, number, d.key, u), f, number, sizes, d)
