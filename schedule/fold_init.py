"""A reduction's initialisation folded into its first reduction iteration.

A pure reduction ``C[i, j] = sum(A[i, k] * B[k, j])`` is lowered as an initialisation (the
identity stored to every cell) before its outermost reduction loop, then the updates. Where pure
loops sit inside that reduction loop — a packed GEMM's ``k.o`` around its column panels and
register tiles — the initialisation is a pass of its own over the whole block of ``C``: a sweep
that can leave the cache, whose cells the first ``k`` block then reads back. Folded, each cell
takes the identity as its old value at its first update (every reduction loop at its first
iteration) and the pass runs only for an empty reduction, which updates nothing.
``promote_accumulators`` turns this into a register tile that starts from the identity in the
first ``k`` block instead of loading ``C`` (BLIS's micro-kernel with ``beta = 0``).

It is done where a pure loop sits between the first and the last reduction loop (a pass to
save: one tile's initialisation right before its loop is still in cache) and the loops inside
the last reduction loop are a register tile (unrolled or vectorized: ``promote_accumulators``
then starts the tile from the identity, no select per update). It is sound where every cell is
updated in the first iteration of every reduction loop: no ``RDom.where``, reduction loops
whose bounds do not depend on the pure loops, no guard that mixes pure and reduction loops, no
loop peeled on such a guard. GPU-mapped stages keep their
initialisation (their private accumulators are made elsewhere).

See also: TVM ``decompose_reduction`` (the initialisation moved to a chosen loop); BLIS's
``beta = 0`` micro-kernel, which never reads C.
"""

from __future__ import annotations

from tensorlang.affine import sconst
from tensorlang.dtypes import DType
from tensorlang.expr import BinOp, Cmp, Expr, Var, walk

from .ir import ForKind
from .nest import StageNest

#: fold where it is sound and saves a pass; 0: never (the initialisation a pass of its own).
#: An int, for ``benchmarks/gemm_packed.py``'s ``auto:tensorlang.schedule.fold_init.FOLD_INIT=0``
FOLD_INIT = 1

#: loop kinds that map a loop onto a GPU grid (their stages keep the initialisation pass)
_GPU_KINDS = {ForKind.GPU_BLOCK, ForKind.GPU_THREAD}


def fold_conditions(nest: StageNest, rvar_extents: list[Expr], kinds, predicate: bool
                    ) -> tuple[tuple[Expr, ...], Expr] | None:
    """``(first, empty)`` where the initialisation of ``nest``'s reduction can be folded:
    ``first`` the conditions of a cell's first update (each reduction loop at its minimum),
    ``empty`` the condition under which the reduction updates nothing (an RDom extent below 1)
    and the initialisation pass must still run; None where it cannot be folded, or would save
    no pass (no pure loop between the first and the last reduction loop).

    ``rvar_extents``: the RDom's extents; ``kinds``: the stage's loop kinds; ``predicate``:
    whether the RDom has a condition (``RDom.where``)."""
    k = nest.first_reduction
    if not FOLD_INIT or k is None or predicate or nest.core_guards or nest.peel is not None:
        return None
    if any(kind in _GPU_KINDS for kind in kinds):
        return None
    pure = {lf.var for lf in nest.leaves if not lf.reduction}
    red = [lf for lf in nest.leaves if lf.reduction]
    last = max(n for n, lf in enumerate(nest.leaves) if lf.reduction)
    if not any(not lf.reduction for lf in nest.leaves[k:last]):
        # no pure loop between the first and the last reduction loop: the initialisation
        # is one tile, right before its updates and still in cache (doitgen's tile ran
        # 6-16% slower folded, two runs)
        return None
    tile = nest.leaves[last + 1:]
    if not tile or any(lf.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED) for lf in tile):
        return None  # no register tile inside the reduction (promote_accumulators' form)
    if any(lf.init_range is not None for lf in nest.leaves):
        return None
    for lf in red:
        if _names(lf.min) & pure or _names(lf.extent) & pure:
            return None
    red_vars = {lf.var for lf in red}
    for lf in nest.leaves:
        for g in lf.guards:
            names = _names(g)
            if names & pure and names & red_vars:
                return None
    first = tuple(Cmp("eq", Var(lf.var), lf.min) for lf in red)
    empty: Expr | None = None
    for ext in rvar_extents:
        c = Cmp("le", ext, sconst(0))
        empty = c if empty is None else BinOp("or", empty, c, DType.bool_)
    if empty is None:
        return None
    return first, empty


def folding() -> int:
    """``FOLD_INIT`` now (part of ``lower``'s cache key: a benchmark switches it)."""
    return FOLD_INIT


def _names(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var)}
