"""A pipeline: its output Funcs with every Func and Input they depend on, in producer-first order.

Also the two things every consumer of an algorithm needs: its *workload key* (a content hash stable
across processes) and *binding* (concrete sizes from arrays, and the call-time check that every read
stays in bounds, so no schedule or evaluator ever reads outside an array).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .affine import NonAffine, affine_form, eval_size
from .errors import DefinitionError, ShapeError
from .expr import Access, Expr, Size, Var, substitute, walk
from .func import Func, Input
from .intervals import value_range

#: Bumped whenever the canonical text of an algorithm changes meaning (invalidates workload keys).
KEY_VERSION = 1


@dataclass(frozen=True)
class Binding:
    """Concrete sizes for one call, and each Func's concrete ``(min, extent)`` per dimension."""

    sizes: dict[str, int]
    bounds: dict[str, tuple[tuple[int, int], ...]]
    ranges: dict[str, dict[str, tuple[int, int]]]  # Func -> Var -> (min, extent)


def as_outputs(outputs: Any) -> tuple[Func, ...]:
    """The output Funcs of an algorithm handle: one ``Func``, or a list/tuple of distinct Funcs
    (a pipeline with several outputs, Halide's ``Pipeline({f, g})``).

    Raises:
        DefinitionError: not a Func or a non-empty sequence of distinct Funcs.
    """
    if isinstance(outputs, Func):
        return (outputs,)
    if isinstance(outputs, (list, tuple)) and outputs:
        for o in outputs:
            if not isinstance(o, Func):
                raise DefinitionError(f"every output must be a tl.Func, not "
                                      f"{type(o).__name__}")
        if len({id(o) for o in outputs}) != len(outputs):
            names = [o.name for o in outputs]
            dup = next(n for n in names if names.count(n) > 1)
            raise DefinitionError(f"output {dup} is listed twice; list each output Func once")
        return tuple(outputs)
    raise DefinitionError(f"the output must be a tl.Func or a non-empty list of Funcs, not "
                          f"{type(outputs).__name__}"
                          + (" (empty)" if isinstance(outputs, (list, tuple)) else ""))


def outputs_name(outputs: Any) -> str:
    """How messages name an algorithm handle: ``F``, or ``[F, G]`` for several outputs."""
    outs = as_outputs(outputs)
    return outs[0].name if len(outs) == 1 else "[" + ", ".join(o.name for o in outs) + "]"


class Pipeline:
    """The algorithm computing ``outputs`` (one Func, or a list of Funcs).

    Attributes:
        outputs: the output Funcs, in the order given (a kernel returns them in this order);
        funcs: every Func, producers before consumers (each output after what it reads);
        inputs: every Input, in order of first read (the positional order of a kernel's arguments);
        sizes: every size symbol, in order of first appearance in input shapes, then Func shapes;
        name: how messages name the algorithm (``F``, or ``[F, G]``).

    An output may also be read by another Func of the pipeline (it is then computed over its
    whole domain before its readers, as every output is).

    Raises:
        DefinitionError: an output has no definition, or two distinct objects share a name.
    """

    def __init__(self, outputs: Func | Sequence[Func]) -> None:
        outs = as_outputs(outputs)
        for o in outs:
            if o.definition is None:
                raise DefinitionError(f"Func {o.name} has no definition")
        self.outputs: tuple[Func, ...] = outs
        self.name = outputs_name(outs)
        order: list[Func] = []
        inputs: list[Input] = []
        seen: set[int] = set()

        def visit(f: Func) -> None:
            if id(f) in seen:
                return
            seen.add(id(f))
            for p in f.producers:
                if isinstance(p, Func):
                    visit(p)
                elif id(p) not in seen:
                    seen.add(id(p))
                    inputs.append(p)
            order.append(f)

        for o in outs:
            visit(o)
        names: dict[str, Any] = {}
        for obj in [*inputs, *order]:
            other = names.setdefault(obj.name, obj)
            if other is not obj:
                raise DefinitionError(
                    f"two different {type(other).__name__}/{type(obj).__name__} objects are both "
                    f"named {obj.name!r} in the pipeline of {self.name}; names must be unique")
        self.funcs: tuple[Func, ...] = tuple(order)
        self.inputs: tuple[Input, ...] = tuple(inputs)
        sizes: dict[str, None] = {}
        for inp in inputs:
            for s in inp.shape:
                if isinstance(s, Size):
                    sizes.setdefault(s.name)
        for f in order:
            exprs = [e for b in f.bounds for e in b]
            exprs += [e for u in f.updates for r in u.rvars for e in (r.min, r.extent)]
            exprs += [*f.definition.predicate, *(c for u in f.updates for c in u.predicate)]
            for e in exprs:
                for n in walk(e):
                    if isinstance(n, Size):
                        sizes.setdefault(n.name)
        self.sizes: tuple[str, ...] = tuple(sizes)

    @property
    def output(self) -> Func:
        """The output Func of a one-output pipeline.

        Raises:
            DefinitionError: the pipeline has several outputs (use ``outputs``)."""
        if len(self.outputs) != 1:
            raise DefinitionError(f"the pipeline of {self.name} has {len(self.outputs)} outputs; "
                                  f"this operation takes one output Func")
        return self.outputs[0]

    def is_output(self, f: Func | str) -> bool:
        """Whether ``f`` (a Func or its name) is one of the outputs."""
        name = f if isinstance(f, str) else f.name
        return any(o.name == name for o in self.outputs)

    def func(self, name: str) -> Func:
        for f in self.funcs:
            if f.name == name:
                return f
        raise KeyError(name)

    # -- identity -------------------------------------------------------------------------------
    def canonical(self) -> str:
        """Deterministic text of the whole algorithm, with Vars renamed by position."""
        parts: list[str] = [f"tensorlang-algorithm v{KEY_VERSION}"]
        for inp in self.inputs:
            parts.append(repr(("Input", inp.name, inp.dtype.value, tuple(s.key for s in inp.shape))))
        for f in self.funcs:
            d = f.definition
            assert d is not None
            ren: dict[str, Expr] = {v.name: Var(f"v{i}") for i, v in enumerate(d.args)}
            ren.update({v.name: Var(f"r{i}") for i, v in enumerate(d.rvars)})
            shape = None if f.shape is None else tuple(s.key for s in f.shape)
            ranges = tuple((ren[n].name, lo.key, ext.key) for n, lo, ext in d.ranges)  # type: ignore[attr-defined]
            where = tuple(substitute(c, ren).key for c in d.predicate)
            parts.append(repr(("Func", f.name, f.dtype.value, shape, len(d.args), d.reduce_op,
                               substitute(d.value, ren).key, ranges) + ((where,) if where else ())))
            for u in f.updates:
                uren: dict[str, Expr] = {v.name: Var(f"v{i}") for i, v in enumerate(d.args)}
                uren.update({r.name: Var(f"u{i}") for i, r in enumerate(u.rvars)})
                parts.append(repr((
                    "Update", f.name, u.number, tuple(substitute(i, uren).key for i in u.index),
                    substitute(u.value, uren).key,
                    tuple((r.min.key, r.extent.key) for r in u.rvars))
                    + (tuple(substitute(c, uren).key for c in u.predicate),) * bool(u.predicate)))
        if len(self.outputs) > 1:  # (one output: the last Func; the text of v1 keys unchanged)
            parts.append(repr(("Outputs", tuple(o.name for o in self.outputs))))
        return "\n".join(parts)

    def workload_key(self) -> str:
        """SHA-256 (hex) of :meth:`canonical`: equal for the same algorithm in any process.
        Memoized per pipeline while no Func gains a definition or an update."""
        stamp = tuple((id(f.definition), len(f.updates)) for f in self.funcs)
        cached = self.__dict__.get("_key")
        if cached is None or cached[0] != stamp:
            cached = self._key = (stamp, hashlib.sha256(self.canonical().encode()).hexdigest())
        return cached[1]

    # -- binding -------------------------------------------------------------------------------
    def input_shapes(self, sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        """The shape of every Input for concrete ``sizes`` (by size name), by Input name.

        Raises:
            ShapeError: a size an input shape needs is missing from ``sizes``.
        """
        out = {}
        for inp in self.inputs:
            for n in (n for e in inp.shape for n in walk(e) if isinstance(n, Size)):
                if n.name not in sizes:
                    raise ShapeError(f"no value for size {n.name} (input {inp.name}); give it "
                                     f"as --shape {n.name}=...")
            out[inp.name] = tuple(eval_size(e, dict(sizes)) for e in inp.shape)
        return out

    def bind(self, shapes: Mapping[str, tuple[int, ...]], given: Mapping[str, int] | None = None,
             out_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Binding:
        """Bind sizes from the input ``shapes`` (by Input name) and check every read.

        Args:
            shapes: the shape of each input array. given: sizes passed explicitly (``N=...``).
            out_shapes: shapes of caller-provided output arrays (by output name), used to bind
                sizes that no input fixes (only for an output declared with ``shape=``).

        Raises:
            ShapeError: a rank or a fixed dimension differs, two inputs disagree on a size, a size
                is unbound or given below 0, a Func's range is negative for these sizes, or a read
                leaves its array.
        """
        sizes: dict[str, int] = {}
        where: dict[str, str] = {}
        for k, v in (given or {}).items():
            if int(v) < 0:  # (an extent: code generation assumes sizes at least 0)
                raise ShapeError(f"size {k} is {v}; a size is an array's extent, at least 0")
            sizes[k] = int(v)
            where[k] = f"{k}={v}"
        for inp in self.inputs:
            shape = shapes[inp.name]
            if len(shape) != inp.rank:
                raise ShapeError(f"Input {inp.name} has {inp.rank} dimensions "
                                 f"({', '.join(map(str, inp.shape))}) but the array has "
                                 f"{len(shape)} (shape {tuple(shape)})")
            for d, (sym, n) in enumerate(zip(inp.shape, shape)):
                if isinstance(sym, Size):
                    if sym.name in sizes and sizes[sym.name] != n:
                        raise ShapeError(
                            f"size {sym.name} is {sizes[sym.name]} from {where[sym.name]} but "
                            f"{n} from {inp.name}.shape[{d}]; arrays must agree on {sym.name}")
                    sizes[sym.name] = int(n)
                    where.setdefault(sym.name, f"{inp.name}.shape[{d}]")
                elif eval_size(sym, {}) != n:
                    raise ShapeError(f"Input {inp.name} dimension {d} must be {sym} but the array "
                                     f"has {n} (shape {tuple(shape)})")
        for o in self.outputs:
            out_shape = (out_shapes or {}).get(o.name)
            if out_shape is None or o.shape is None:
                continue
            for d, sym in enumerate(o.shape):
                if isinstance(sym, Size) and sym.name not in sizes and d < len(out_shape):
                    sizes[sym.name] = int(out_shape[d])
        missing = [s for s in self.sizes if s not in sizes]
        if missing:
            raise ShapeError(
                f"size {missing[0]} is not fixed by any input array; pass it as {missing[0]}=... "
                f"(or pass out=, when {self.name} was declared with that shape)")
        bounds: dict[str, tuple[tuple[int, int], ...]] = {}
        ranges: dict[str, dict[str, tuple[int, int]]] = {}
        for inp in self.inputs:
            bounds[inp.name] = tuple((0, int(n)) for n in shapes[inp.name])
        for f in self.funcs:
            d = f.definition
            assert d is not None
            r = {n: (eval_size(lo, sizes), eval_size(ext, sizes)) for n, lo, ext in d.ranges}
            for n, (lo, ext) in r.items():
                if ext < 0:
                    raise ShapeError(
                        f"In {d.lhs_str()}: {n} ranges over [{lo}, {lo + ext}) for "
                        f"{_sizes_text(sizes)}: the inputs are too small for the reads of {f.name}")
            ranges[f.name] = r
            bounds[f.name] = tuple(r[a.name] for a in d.args)
        for f in self.funcs:
            self._check_reads(f, ranges[f.name], bounds, sizes)
            for u in f.updates:
                ur = update_ranges(u, ranges[f.name], f, sizes)
                ranges[f"{f.name}.update({u.number})"] = ur
                self._check_access_list(
                    f"update {u.number} of {f.name} ({u.lhs_str()} = ...)", ur, bounds, sizes,
                    [a for a in walk(u.value) if isinstance(a, Access)]
                    + [Access(f.name, u.index, f.dtype, None, f)], write_last=True)
        return Binding(sizes, bounds, ranges)

    def _check_reads(self, f: Func, ranges: dict[str, tuple[int, int]],
                     bounds: dict[str, tuple[tuple[int, int], ...]], sizes: dict[str, int]) -> None:
        d = f.definition
        assert d is not None
        if any(ext == 0 for _, ext in ranges.values()):
            return  # an empty loop reads nothing
        self._check_access_list(d.lhs_str(), ranges, bounds, sizes,
                                [a for a in walk(d.value) if isinstance(a, Access)])

    def _check_access_list(self, where: str, ranges: dict[str, tuple[int, int]],
                           bounds: dict[str, tuple[tuple[int, int], ...]], sizes: dict[str, int],
                           reads: list[Access], write_last: bool = False) -> None:
        if any(ext <= 0 for _, ext in ranges.values()):
            return  # an empty loop touches nothing
        for n, a in enumerate(reads):
            verb = "write" if write_last and n == len(reads) - 1 else "read"
            if a.boundary is not None:
                if a.boundary.kind != "constant_exterior" and \
                        any(e == 0 for _, e in bounds[a.name]):
                    raise ShapeError(f"In {where}: {a.boundary.kind}({a.name}) of an empty "
                                     f"array has no element to read (shape {bounds[a.name]}); "
                                     f"only constant_exterior reads outside an empty array")
                continue
            for dim, ix in enumerate(a.indices):
                pmin, pext = bounds[a.name][dim]
                try:
                    form = affine_form(ix)
                except NonAffine:  # // and %, clamp, where, a gather: interval arithmetic
                    _check_index_range(where, verb, a, dim, ix, ranges, sizes, pmin, pext)
                    continue
                lo = hi = form.const + sum(c * sizes[p] for p, c in form.params)
                for v, c in form.coeffs:
                    vlo, vext = ranges[v]
                    vhi = vlo + vext - 1
                    lo += c * (vlo if c > 0 else vhi)
                    hi += c * (vhi if c > 0 else vlo)
                if lo < pmin or hi > pmin + pext - 1:
                    bad = lo if lo < pmin else hi
                    raise ShapeError(
                        f"In {where}: {verb} {a} reaches index {bad} in dimension {dim} of "
                        f"{a.name}, outside [{pmin}, {pmin + pext}) for {_sizes_text(sizes)}; "
                        f"wrap {a.name} in tl.clamp_edge / tl.constant_exterior, shrink the "
                        f"domain, or fix the RDom bounds")


def _check_index_range(where: str, verb: str, a: Access, dim: int, ix: Expr,
                       ranges: dict[str, tuple[int, int]], sizes: dict[str, int], pmin: int,
                       pext: int) -> None:
    """Prove a non-affine index inside ``[pmin, pmin + pext)`` (``tensorlang.intervals``).

    Raises:
        ShapeError: it may leave the array, with the range found and the fix.
    """
    rng = value_range(ix, {v: (lo, lo + ext - 1) for v, (lo, ext) in ranges.items()}, sizes)
    if rng is not None and pmin <= rng[0] and rng[1] <= pmin + pext - 1:
        return
    data = [n for n in walk(ix) if isinstance(n, Access)]
    found = ("cannot be bounded" if rng is None else
             f"may take values in [{rng[0]}, {rng[1]}]")
    why = (f" (it reads {data[0].name}, whose {data[0].dtype} values are not known before the "
           f"call)" if data else "")
    raise ShapeError(
        f"In {where}: {verb} {a}: index {dim} ({ix}) {found}{why}, but {a.name} has "
        f"[{pmin}, {pmin + pext}) in dimension {dim} for {_sizes_text(sizes)}; limit it with "
        f"tl.clamp(index, {pmin}, {pmin + pext - 1}), or read through tl.clamp_edge / "
        f"tl.constant_exterior")


def update_ranges(u: Any, func_ranges: dict[str, tuple[int, int]], f: Func,
                  sizes: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Concrete ``(min, extent)`` of an update's pure Vars (the Func's domain) and RVars (their
    RDom; a negative extent means no iterations)."""
    out = {p: func_ranges[p] for p in u.pure}
    for r in u.rvars:
        out[r.name] = (eval_size(r.min, sizes), max(0, eval_size(r.extent, sizes)))
    return out


def _sizes_text(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "these sizes"


def workload_key(output: Func | Sequence[Func]) -> str:
    """The workload key of the algorithm computing ``output`` (a Func, or a list of output
    Funcs): a SHA-256 hex digest of its canonical text (Inputs, dtypes, definitions, the outputs;
    Vars renamed by position). Same algorithm text, same key in every process; any change to the
    algorithm, a different key."""
    return Pipeline(output).workload_key()
