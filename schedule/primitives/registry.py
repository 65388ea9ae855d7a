"""The table of schedule primitives, by name: what ``Schedule.apply`` dispatches on and what
``steps_to_python`` prints with. A family module adds its primitives with :func:`register`."""

from __future__ import annotations

from tensorlang.errors import ScheduleError

from .base import Primitive

PRIMITIVES: dict[str, Primitive] = {}


def register(cls: type[Primitive]) -> type[Primitive]:
    """Class decorator: add one instance of ``cls`` to :data:`PRIMITIVES` under ``cls.name``."""
    if cls.name in PRIMITIVES:
        raise AssertionError(f"two schedule primitives named {cls.name!r}")
    PRIMITIVES[cls.name] = cls()
    return cls


def lookup(op: str, func: str = "?", step: object = None) -> Primitive:
    """The primitive named ``op``.

    Raises:
        ScheduleError: no primitive has that name (a trace from another version, or a typo).
    """
    try:
        return PRIMITIVES[op]
    except KeyError:
        raise ScheduleError.in_schedule(
            func, f"unknown schedule primitive {op!r} (known: {', '.join(sorted(PRIMITIVES))})",
            step) from None
