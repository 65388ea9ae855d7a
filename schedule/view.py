"""The algorithm as a schedule sees it: the pipeline's Funcs plus the stages that ``cache_read``
and ``cache_write`` add, with the affected reads redirected. The user's Funcs are never mutated."""

from __future__ import annotations

import copy
import dataclasses

from tensorlang.errors import ScheduleError
from tensorlang.expr import Access, Expr, map_children, walk
from tensorlang.func import Definition, Func, Input, Update
from tensorlang.pipeline import Pipeline


class AlgorithmView:
    """Funcs in producer-first order and each one's (possibly rewritten) definition."""

    def __init__(self, p: Pipeline) -> None:
        self.pipeline = p
        self.inputs = p.inputs
        self.sizes = p.sizes
        self.funcs: list[Func] = list(p.funcs)
        self.defs: dict[str, Definition] = {f.name: f.definition for f in p.funcs}  # type: ignore
        self._reads: dict[str, list[str]] = {}  # memo of reads(), cleared by every change

    def copy(self) -> AlgorithmView:
        """An independent view (a schedule's copy may add stages without changing this one)."""
        v = AlgorithmView.__new__(AlgorithmView)
        v.pipeline, v.inputs, v.sizes = self.pipeline, self.inputs, self.sizes
        v.funcs, v.defs, v._reads = list(self.funcs), dict(self.defs), dict(self._reads)
        return v

    def func(self, name: str) -> Func:
        for f in self.funcs:
            if f.name == name:
                return f
        raise KeyError(name)

    def definition(self, name: str) -> Definition:
        return self.defs[name]

    def producer(self, name: str) -> Func | Input:
        for obj in (*self.inputs, *self.funcs):
            if obj.name == name:
                return obj
        raise ScheduleError(f"{name} is neither an Input nor a Func of this pipeline")

    def reads(self, name: str) -> list[str]:
        """Names of the Inputs and Funcs that ``name``'s definition reads, in order."""
        got = self._reads.get(name)
        if got is None:
            seen: dict[str, None] = {}
            for a in walk(self.defs[name].value):
                if isinstance(a, Access):
                    seen.setdefault(a.name)
            got = self._reads[name] = list(seen)
        return list(got)

    def readers(self, name: str) -> list[str]:
        return [f.name for f in self.funcs if name in self.reads(f.name)]

    def unique_name(self, base: str) -> str:
        taken = {o.name for o in (*self.inputs, *self.funcs)}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}{n}"
        return name

    def add_before(self, f: Func, consumer: str) -> None:
        self.funcs.insert(self.funcs.index(self.func(consumer)), f)
        assert f.definition is not None
        self.defs[f.name] = f.definition
        self._reads.clear()

    def redirect(self, consumer: str, old: str, new: Func, index: int | None = None,
                 layout: tuple[int, ...] | None = None,
                 panel: tuple[int, int] | None = None) -> None:
        """Make ``consumer`` read ``new`` wherever it read ``old`` (same indices, boundary), or
        only at its ``index``-th read of ``old`` (0-based, in ``walk`` order). With ``layout``
        (``new``'s dimension ``d`` is ``old``'s dimension ``layout[d]``), the read's indices are
        permuted to match; with ``panel`` ``(dim, size)``, ``old``'s index ``x`` of dimension
        ``dim`` becomes ``x // size`` and ``x % size`` is appended."""
        count = 0

        def go(e: Expr) -> Expr:
            nonlocal count
            if isinstance(e, Access) and e.name == old:
                hit = index is None or count == index
                count += 1
                e = map_children(e, go)
                if not hit:
                    return e
                order = layout or tuple(range(len(e.indices)))
                indices = tuple(e.indices[d] for d in order)
                if panel is not None:
                    x = e.indices[panel[0]]
                    indices = tuple(x // panel[1] if order[n] == panel[0] else v
                                    for n, v in enumerate(indices)) + (x % panel[1],)
                return dataclasses.replace(e, name=new.name, producer=new, indices=indices)
            return map_children(e, go)

        d = self.defs[consumer]
        self.defs[consumer] = dataclasses.replace(d, value=go(d.value))
        self._reads.clear()

    def replace_definition(self, name: str, d: Definition) -> None:
        self.defs[name] = d
        self._reads.clear()

    def replace_update(self, name: str, update: Update) -> None:
        """Make ``update`` the view's update definition number ``update.number`` of Func
        ``name``: the view then holds a copy of the Func with that update (the user's Func and
        other views keep theirs)."""
        k = self.funcs.index(self.func(name))
        f = copy.copy(self.funcs[k])
        f.updates = list(f.updates)
        f.updates[update.number] = update
        self.funcs[k] = f
        self._reads.clear()
