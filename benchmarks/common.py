"""Helpers shared by the benchmarks: ``median_seconds`` (the package's, ``autotune.measure``) and a
plain-text table."""

from __future__ import annotations

from autotune.measure import median_seconds

__all__ = ["median_seconds", "table"]


def table(rows: list[tuple], head: tuple[str, ...]) -> str:
    """A plain-text table."""
    cols = list(zip(head, *rows))
    widths = [max(len(str(c)) for c in col) for col in cols]
    line = "  ".join(str(h).rjust(w) if k else str(h).ljust(w) for k, (h, w) in
                     enumerate(zip(head, widths)))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(c).rjust(w) if k else str(c).ljust(w) for k, (c, w) in
                             enumerate(zip(r, widths))))
    return "\n".join(out)
