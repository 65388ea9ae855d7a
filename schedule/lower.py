"""Lowering: algorithm (and, later, schedule) to loop-nest IR, as a flat list of named passes.

Reading this file tells the whole story (Halide ``src/Lower.cpp``):

1. ``realize``  — one loop nest per Func at root, loops in definition order, boundary conditions as
   clamped loads, intermediates allocated (``schedule/realize.py``);
2. ``simplify`` — integer constant folding and identities (``schedule/simplify.py``).

Set ``TENSORLANG_DUMP=1`` to print the loop nest after each pass (on standard error).
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from tensorlang.func import Func
from tensorlang.pipeline import Pipeline

from .ir import LoweredFunc
from .realize import realize
from .simplify import simplify

PASSES: list[tuple[str, Callable[[LoweredFunc], LoweredFunc]]] = [
    ("simplify", simplify),
]


def lower(output: Func | Pipeline) -> LoweredFunc:
    """Lower the algorithm computing ``output`` to loop-nest IR (default schedule).

    Raises:
        DefinitionError: ``output`` is not a defined Func, or the pipeline has name clashes.
    """
    p = output if isinstance(output, Pipeline) else Pipeline(output)
    dump = os.environ.get("TENSORLANG_DUMP", "") not in ("", "0")
    f = realize(p)
    if dump:
        print(f"--- after realize ---\n{f}", file=sys.stderr)
    for name, run in PASSES:
        f = run(f)
        if dump:
            print(f"--- after {name} ---\n{f}", file=sys.stderr)
    return f
