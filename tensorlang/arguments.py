"""Matching call arguments (positional or by name) to a pipeline's Inputs, with clear errors."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .errors import ShapeError


def collect_arrays(pipeline: Any, args: tuple, kwargs: Mapping[str, Any],
                   copy_noncontiguous: bool = True) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Map ``args`` (in Input order) and ``kwargs`` (by Input name, or size name) to arrays.

    Every array must be a ``numpy.ndarray`` of exactly the Input's dtype (no silent conversion:
    a float64 array passed for a float32 Input is refused). A non-C-contiguous array is copied
    into a C-contiguous one (one extra pass over it) when ``copy_noncontiguous``.

    Returns:
        (arrays by Input name, sizes passed explicitly by keyword).

    Raises:
        ShapeError: too many positional arguments, an unknown or duplicate name, a missing Input,
            a non-array, or a dtype mismatch; each names the Input and the fix.
    """
    inputs = pipeline.inputs
    if len(args) > len(inputs):
        raise ShapeError(f"{len(args)} positional arrays given but {pipeline.name} has "
                         f"{len(inputs)} inputs ({', '.join(i.name for i in inputs)})")
    arrays: dict[str, Any] = {}
    for inp, a in zip(inputs, args):
        arrays[inp.name] = a
    sizes: dict[str, int] = {}
    names = {i.name for i in inputs}
    for k, v in kwargs.items():
        if k in names:
            if k in arrays:
                raise ShapeError(f"Input {k} given both positionally and by keyword")
            arrays[k] = v
        elif k in pipeline.sizes:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ShapeError(f"size {k} must be an int, got {v!r}")
            sizes[k] = int(v)
        else:
            raise ShapeError(f"unknown argument {k!r}; {pipeline.name} takes inputs "
                             f"{', '.join(sorted(names)) or '(none)'}")
    out: dict[str, np.ndarray] = {}
    for inp in inputs:
        if inp.name not in arrays:
            raise ShapeError(f"missing Input {inp.name} (a {inp.dtype.value} array of shape "
                             f"({', '.join(map(str, inp.shape))}))")
        a = arrays[inp.name]
        if not isinstance(a, np.ndarray):
            raise ShapeError(f"Input {inp.name} must be a numpy.ndarray, got "
                             f"{type(a).__name__}; wrap it with np.asarray(..., dtype="
                             f"{_numpy_name(inp.dtype)})")
        if a.dtype != inp.dtype.numpy:
            raise ShapeError(f"Input {inp.name} expects dtype {inp.dtype.value} but the array "
                             f"has {a.dtype}; convert it with .astype({_numpy_name(inp.dtype)})")
        if copy_noncontiguous and not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        out[inp.name] = a
    return out, sizes


def _numpy_name(d) -> str:
    """How a user spells dtype ``d`` in NumPy code (bfloat16 comes from ml_dtypes)."""
    return "ml_dtypes.bfloat16" if d.value == "bfloat16" else f"np.{d.value}"
