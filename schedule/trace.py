"""Schedule records: the trace of primitive applications, tail strategies and loop handles.

A schedule is a list of frozen :class:`Step` records; replaying them on the algorithm rebuilds the
same loop nest (TVM ``s_tir/schedule/trace.py``; tinygrad ``Opt``). A step serialises to one JSON
object, e.g. ``{"op": "split", "func": "C", "loop": "k", "factor": 8, "tail": "GuardWithIf"}``;
loop names are deterministic (``k.o``, ``k.i``, ``i.o.j.o.fused``), so a step needs no handles.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class TailStrategy(enum.Enum):
    """What a split does when the factor does not divide the extent (Halide ``TailStrategy``).

    - ``GuardWithIf`` (default): the last outer iteration runs only the remaining inner iterations
      (a tightened loop bound, or an ``if`` where a bound cannot express it). Always legal; costs a
      non-constant inner extent in the last tile.
    - ``ShiftInwards``: the last tile is shifted back to end at the extent, so inner extents stay
      constant (full vectors, unrolled register tiles); some points are computed twice. Legal only
      where recomputing is harmless: pure loops, and for a reduction only when the split's outer
      loop is outside every reduction loop (each cell is then re-initialised and fully reduced in
      the tile that recomputes it). When the extent is smaller than the factor at run time the
      kernel takes a GuardWithIf version of the loop nest.

    Halide's ``RoundUp`` (compute whole tiles past the extent into a rounded-up internal buffer) is
    deliberately not offered: the extra points lie outside the Func's domain, where its own reads
    are not proven in bounds, so it could read past the end of an input. ``ShiftInwards`` gives
    the same constant tiles without leaving the domain.
    """

    GuardWithIf = "GuardWithIf"
    ShiftInwards = "ShiftInwards"


@dataclass(frozen=True)
class Step:
    """One primitive application: ``op`` on ``func`` with JSON-able ``params`` (name, value)."""

    op: str
    func: str
    params: tuple[tuple[str, Any], ...] = ()

    def get(self, name: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == name:
                return v
        return default

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "func": self.func}
        for k, v in self.params:
            d[k] = list(v) if isinstance(v, tuple) else v
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Step:
        d = dict(d)
        op, func = d.pop("op"), d.pop("func")
        return Step(op, func, tuple((k, tuple(v) if isinstance(v, list) else v)
                                    for k, v in d.items()))

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"{self.op}({self.func}{', ' if args else ''}{args})"


@dataclass(frozen=True)
class LoopRef:
    """A handle to a loop of a Func's stage, by its deterministic name (``i.o``, ``k.i``).

    Handles stay valid across later primitives; using one whose loop a primitive has consumed
    (split, fused) raises ``ScheduleError`` naming that primitive.
    """

    func: str
    name: str

    def __str__(self) -> str:
        return self.name
