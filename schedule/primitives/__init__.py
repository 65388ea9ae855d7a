"""The schedule primitives, one module per family, in one registry.

- ``loops``: split, tile, fuse, reorder;
- ``kinds``: unroll, vectorize, parallel, serial (loop kinds);
- ``placement``: compute_root, compute_inline, compute_at, store_at;
- ``staging``: cache_read, cache_write, rfactor, double_buffer;
- ``hints``: prefetch.

Each primitive (``base.Primitive``) holds its parameters and their checks, its preconditions, its
rewrite of the stage state, its legality obligation and its Python form; ``Schedule.apply``
dispatches to it by the step's ``op`` (``registry.lookup``). ``docs/architecture.md`` ("Adding a
primitive") shows how to add one.
"""

from . import hints, kinds, loops, placement, staging  # noqa: F401  (each registers its primitives)
from .base import OBLIGATIONS, Param, Primitive
from .registry import PRIMITIVES, lookup, register

__all__ = ["OBLIGATIONS", "PRIMITIVES", "Param", "Primitive", "lookup", "register"]
