"""The expected output a tuning candidate is verified against: ``tl.reference`` where it is quick,
else the algorithm's default schedule compiled for the CPU.

``tl.reference`` evaluates a pure definition by broadcasting over its whole domain, but an update
definition one RDom point at a time (its points run in order: a later point may read what an
earlier one wrote), each point a handful of NumPy calls on the pure Vars' grid. An update over
N^3 / 3 points (PolyBench lu at N = 200: 2.7 million) takes minutes there, and the run worker
verifies the rule-based schedule before any candidate is timed, so such a search measured nothing.
Above ``PYTHON_UPDATE_POINTS`` RDom points in all, the expected output comes from the *default
schedule* (``tl.Schedule(output)``: every Func computed at root in its definition's own loop
order, serial, nothing split or reordered) compiled by the LLVM CPU backend: the loop nest every
schedule's legality is proven against, and the kernel the test suite checks against
``tl.reference`` on small sizes. What it gives up is independence from the code generator; a
candidate's transformations (the part a search explores) are still checked.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensorlang.backends.compile import compile as compile_kernel
from tensorlang.pipeline import Binding, Pipeline
from tensorlang.reference import reference
from tensorlang.schedule.schedule import Schedule

PYTHON_UPDATE_POINTS = 100_000
"""RDom points (all update definitions together) up to which ``tl.reference`` gives the expected
output; each point costs tens of microseconds of NumPy calls there."""


def update_points(pipeline: Pipeline, binding: Binding) -> int:
    """How many RDom points ``tl.reference`` steps through for ``pipeline`` bound to ``binding``:
    for each update definition the product of its reduction variables' extents (a ``where``
    condition does not shrink it: the reference tests it at every point)."""
    total = 0
    for f in pipeline.funcs:
        for u in f.updates:
            rng = binding.ranges[f"{f.name}.update({u.number})"]
            total += math.prod(max(rng[r.name][1], 0) for r in u.rvars)
    return total


def expected_output(output: Any, host: dict[str, np.ndarray], extra: dict[str, int],
                    python_points: int = PYTHON_UPDATE_POINTS) -> Any:
    """The output ``output`` must produce on the inputs ``host`` (arrays by Input name) and the
    free sizes ``extra``: an array, or a tuple of them for several outputs (``tl.reference``'s
    result). ``tl.reference`` computes it when the updates have at most ``python_points`` RDom
    points in all, else the default schedule compiled for the CPU (the module docstring says
    why).

    Raises:
        ShapeError: the arrays do not fit the algorithm (as ``tl.reference``).
    """
    pipeline = Pipeline(output)
    binding = pipeline.bind({k: v.shape for k, v in host.items()}, extra)
    if update_points(pipeline, binding) <= python_points:
        return reference(output, **host, **extra)
    kernel = compile_kernel(output, Schedule(output))
    return kernel(**host, **extra)
