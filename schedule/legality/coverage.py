"""Coverage of compute_at / store_at regions, proven with isl set inclusion.

For a producer ``P`` computed at loop ``L`` of a consumer, every cell of ``P`` that one iteration of
``L`` reads — the consumer's reads over its tile, plus the reads of the other producers computed
there — must lie in the region the lowering computes (bounds inference, ``schedule/bounds.py``). The
tile and the region are parametric in the enclosing loops' variables and the sizes; the enclosing
loops' ranges are the context. Reads outside P's domain are excluded: the call-time check refuses
shapes for which the algorithm would make them. A failure is a tensorlang bug (bounds inference
under-approximated a region) and is reported with a witness cell.
See also: isl manual "Subset checks"; Halide's bounds inference for compute_at (Ragan-Kelley
et al., PLDI 2013).
"""

from __future__ import annotations

import functools
import re

import islpy as isl

from tensorlang.errors import CompileError
from tensorlang.expr import Access, Expr, walk

from .isl_text import Unrepresentable, quasi_affine

Range = tuple[Expr, Expr]  # inclusive

#: isl operations one proof may take (``isl_ctx_set_max_operations``, isl manual "Memory
#: Management and Resource Limits"); past it the placement is left unproven, as one isl cannot
#: state. A placement nested several compute_at levels deep (a search's draw: four Funcs of
#: PolyBench covariance each inside the next's innermost tile) has bounds of nested min / max /
#: floor divisions whose set difference took isl minutes; a tuner proposing it stalled with it
MAX_OPERATIONS = 1_000_000


def _name(n: str, size: bool) -> str:
    return ("s_" if size else "v_") + n.replace(".", "_")


def isl_expr(e: Expr) -> str:
    """``e`` as an isl quasi-affine expression (see ``isl_text.quasi_affine``), Vars named
    ``v_...`` and sizes ``s_...``. Raises Unrepresentable otherwise."""
    return quasi_affine(e, lambda n: _name(n, False), lambda n: _name(n, True))


def _params(texts: list[str]) -> str:
    names = sorted(set(re.findall(r"\b[sv]_[A-Za-z0-9_]+\b", " ".join(texts))))
    return "[" + ", ".join(n for n in names if not n.endswith("__t")) + "]"


def _rename(text: str, ren: dict[str, str]) -> str:
    return re.sub(r"\b[sv]_[A-Za-z0-9_]+\b", lambda m: ren.get(m.group(0), m.group(0)), text)


def verify_coverage(producer: str, domain: tuple[tuple[Expr, Expr], ...],
                    region: tuple[tuple[Expr, Expr], ...],
                    readers: list[tuple[Expr, dict[str, Range]]],
                    context: dict[str, Range], where: str) -> bool:
    """Prove that ``readers`` (expression, ranged Vars) read ``producer`` only inside ``region``
    (``(min, extent)`` per dimension). Returns False when isl cannot state the problem or
    does not decide it within ``MAX_OPERATIONS`` operations.

    Raises:
        CompileError: a read cell lies outside the region (a bounds-inference bug).
    """
    ctx = isl.DEFAULT_CONTEXT
    ctx.reset_operations()
    ctx.set_max_operations(MAX_OPERATIONS)
    try:
        return _verify(producer, domain, region, readers, context, where)
    finally:
        ctx.set_max_operations(0)  # no limit for the rest of the compiler
        ctx.reset_operations()


def _verify(producer: str, domain: tuple[tuple[Expr, Expr], ...],
            region: tuple[tuple[Expr, Expr], ...], readers: list[tuple[Expr, dict[str, Range]]],
            context: dict[str, Range], where: str) -> bool:
    try:
        rank = len(domain)
        pvars = [f"p{d}" for d in range(rank)]
        dom_c, reg_c = [], []
        for p, (lo, ext), (rlo, rext) in zip(pvars, domain, region):
            dom_c.append(f"{isl_expr(lo)} <= {p} <= {isl_expr(lo)} + {isl_expr(ext)} - 1")
            reg_c.append(f"{isl_expr(rlo)} <= {p} <= {isl_expr(rlo)} + {isl_expr(rext)} - 1")
        ctx = [f"{isl_expr(lo)} <= {_name(v, False)} <= {isl_expr(hi)}"
               for v, (lo, hi) in context.items()]
        texts: list[str] = dom_c + reg_c + ctx
        reads_txt = []
        for expr, ranges in readers:
            tvars = list(ranges)
            # the tile's own Vars get private names: their bounds may mention enclosing loops
            # that share a name with them (a producer's x inside its consumer's loop x)
            ren = {_name(v, False): _name(v, False) + "__t" for v in tvars}
            tup = ", ".join(ren.values())
            cons = [f"{isl_expr(lo)} <= {ren[_name(v, False)]} <= {isl_expr(hi)}"
                    for v, (lo, hi) in ranges.items()]
            for a in walk(expr):
                if not isinstance(a, Access) or a.name != producer:
                    continue
                idx = []
                for d, ix in enumerate(a.indices):
                    t = _rename(isl_expr(ix), ren)
                    if a.boundary is not None:
                        lo, ext = domain[d]
                        t = f"max(min({t}, {isl_expr(lo)} + {isl_expr(ext)} - 1), {isl_expr(lo)})"
                    idx.append(t)
                body = ", ".join(idx)
                reads_txt.append((tup, cons, body))
                texts += cons + [body]
        if not reads_txt:
            return True
        sp = _params(texts)
    except (Unrepresentable, isl.Error):
        return False
    args = (sp, tuple(pvars), tuple(dom_c), tuple(reg_c), tuple(ctx),
            tuple((tup, tuple(cons), body) for tup, cons, body in reads_txt))
    covered = _covered(*args, MAX_OPERATIONS)
    if covered is not None:
        return covered
    try:
        pt = _missing(*args).sample_point()
        cell = [pt.get_coordinate_val(isl.dim_type.set, d).to_python() for d in range(rank)]
        witness = f"cell {producer}{cell} (isl witness)"
    except isl.Error:  # the budget ran out finding one
        witness = "cells"
    raise CompileError(
        f"internal error in bounds inference for {where}: the region computed for {producer} "
        f"misses {witness} that the consumer reads; please report this with the schedule "
        f"(s.to_python())")


@functools.lru_cache(maxsize=4096)
def _covered(sp: str, pvars: tuple[str, ...], dom_c: tuple[str, ...], reg_c: tuple[str, ...],
             ctx: tuple[str, ...], reads: tuple[tuple[str, tuple[str, ...], str], ...],
             budget: int) -> bool | None:
    """True: the footprint of ``reads`` is inside the region; False: isl cannot tell (the text
    is not quasi-affine, or the operation ``budget`` ran out); None: cells are missing. Cached
    by text and budget: the variants the rule-based schedule lowers repeat the same
    questions."""
    try:
        return True if _missing(sp, pvars, dom_c, reg_c, ctx, reads).is_empty() else None
    except isl.Error:
        return False


def _missing(sp: str, pvars: tuple[str, ...], dom_c: tuple[str, ...], reg_c: tuple[str, ...],
             ctx: tuple[str, ...], reads: tuple[tuple[str, tuple[str, ...], str], ...]
             ) -> isl.Set:
    """The cells of the domain that ``reads`` touch and the region (``reg_c``) leaves out."""
    dom_set = isl.Set(f"{sp} -> {{ P[{', '.join(pvars)}] : {' and '.join(dom_c)} }}")
    reg_set = isl.Set(f"{sp} -> {{ P[{', '.join(pvars)}] : {' and '.join(reg_c)} }}")
    ctx_set = isl.Set(f"{sp} -> {{ : {' and '.join(ctx) or 'true'} }}")
    foot = None
    for tup, cons, body in reads:
        tile = isl.Set(f"{sp} -> {{ T[{tup}] : {' and '.join(cons) or 'true'} }}")
        m = isl.Map(f"{sp} -> {{ T[{tup}] -> P[{body}] }}")
        img = tile.apply(m)
        foot = img if foot is None else foot.union(img)
    assert foot is not None
    return foot.intersect(dom_set).intersect_params(ctx_set).subtract(reg_set)
