"""Plain-text tables, as ``zmqdata status`` and ``observe.report`` print them."""

from __future__ import annotations

from collections.abc import Sequence


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``title`` over aligned columns; a header starting ``>`` is right-aligned.

    No rows: ``title: none``.

    >>> print(table("T", ["A", ">N"], [["x", "1"], ["yy", "10"]]))
    T
    A    N
    x    1
    yy  10
    """
    if not rows:
        return f"{title}: none"
    names = [h.lstrip(">") for h in header]
    widths = [max(len(r[i]) for r in [names, *rows]) for i in range(len(names))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.rjust(w) if h.startswith(">") else cell.ljust(w)
            for cell, w, h in zip(cells, widths, header, strict=True)
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([title, line(names), *(line(r) for r in rows)])
