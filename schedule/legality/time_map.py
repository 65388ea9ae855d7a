"""A stage's schedule as an isl map from its instances to time vectors mirroring its loop nest.

Each loop contributes the coordinate it has in the lowered nest, as a quasi-affine function of the
stage's original Vars: ``split(v, f)`` gives ``v.o = floor((v - lo_v) / f)`` and
``v.i = (v - lo_v) mod f`` (nested splits compose); a fused loop orders exactly like the
pair of loops it fused, so it contributes both coordinates. Loops appear in the stage's order,
outermost first; comparing two instances' vectors lexicographically is comparing when they run.
See also: isl manual "Schedule trees"/"Lexicographic Optimization"; Tiramisu's layer II maps.
"""

from __future__ import annotations

import islpy as isl

from ..loops import Fuse, Split, StageState
from .model import StageModel, _name, _space


def time_map(model: StageModel, st: StageState) -> tuple[isl.Map, dict[str, list[int]]]:
    """``S[v...] -> [t...]`` for stage ``st``, and the time dimensions of each of its loops."""
    coords: dict[str, list[str]] = {}
    for v in model.vars:
        coords[v] = [f"({_name(v)} - lo_{_name(v)})"]
    for rel in st.relations:
        if isinstance(rel, Split):
            if len(coords[rel.parent]) != 1:
                from .isl_text import Unrepresentable

                raise Unrepresentable(
                    f"{rel.parent} fuses loops of symbolic extent and is then split; its "
                    f"iteration order is not affine — split the loops before fusing them")
            (c,) = coords[rel.parent]
            coords[rel.outer] = [f"floor(({c})/{rel.factor})"]
            coords[rel.inner] = [f"(({c}) mod {rel.factor})"]
        elif isinstance(rel, Fuse):
            coords[rel.fused] = coords[rel.outer] + coords[rel.inner]
    dims: list[str] = []
    where: dict[str, list[int]] = {}
    for leaf in st.loops:
        where[leaf] = list(range(len(dims), len(dims) + len(coords[leaf])))
        dims.extend(coords[leaf])
    tup = ", ".join(_name(v) for v in model.vars)
    text = f"{_space(model.params)} -> {{ S[{tup}] -> [{', '.join(dims) or '0'}] }}"
    return isl.Map(text).intersect_domain(model.domain), where


def carried_at(n_dims: int, level: list[int]) -> isl.Map:
    """Pairs of time vectors equal before ``level`` and different within it."""
    if not level:
        return isl.Map("{ [] -> [] : 1 = 0 }")
    t = [f"t{k}" for k in range(n_dims)]
    u = [f"u{k}" for k in range(n_dims)]
    eq = [f"{t[k]} = {u[k]}" for k in range(level[0])]
    ne = " or ".join(f"{t[k]} != {u[k]}" for k in level)
    cond = " and ".join(eq + [f"({ne})"])
    return isl.Map(f"{{ [{', '.join(t)}] -> [{', '.join(u)}] : {cond} }}")
