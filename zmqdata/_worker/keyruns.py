"""``KeyRuns``: what a task's buffered elements stand for, and what it dropped.

Exactly once (``_wire/lineage.py``): a task notes the keys it is handed
(``handed``) and the lineage of every element it buffers (``put``). Elements
mostly stand for the next keys, one or a batch's worth each, so lineages are
kept as runs (``count`` elements of ``width`` consecutive keys each): putting
an element usually extends the last run, and a reply's ``Coverage`` is built
run by run (``take``). Keys handed and not taken yet stay ``open``; at the end,
those no buffered element stands for were dropped (filtered, cut by ``take``,
never read) and go with the end of sequence. Not thread-safe: ``TaskBuffer``
calls it under its lock.

>>> runs = KeyRuns()
>>> runs.handed(0, 10)
>>> for k in (0, 1, 2, 5, 6): runs.put((k, k + 1))
>>> reply = Coverage(); runs.take(4, reply); reply.keys, reply.widths
([0, 3, 5, 6], [4, 1])
>>> runs.dropped()
(3, 5, 7, 10)
"""

from __future__ import annotations

from collections import deque
from typing import Any

from zmqdata._wire.lineage import Coverage, Lineage, Ranges

_GENERAL = -1
"""The width of a run of one element whose lineage is not one range."""


class KeyRuns:
    """Handed keys not taken yet, and the buffered elements' lineages as runs."""

    __slots__ = ("_count", "_hi", "_lo", "_open", "_runs", "_width")

    def __init__(self) -> None:
        self._open = Ranges()
        self._runs: deque[list[Any]] = deque()
        """Closed runs ``[count, lo, hi, width]`` (``[1, lineage, None, -1]``)."""
        self._count = self._width = 0  # the run being extended
        self._lo: int | None = None
        self._hi: int | None = None

    def handed(self, lo: int, hi: int) -> None:
        """The task was handed the keys ``[lo, hi)``."""
        self._open.add(lo, hi)

    def put(self, lineage: Lineage) -> None:
        """An element standing for ``lineage`` was buffered."""
        if len(lineage) == 2:
            lo, hi = lineage
            if lo == self._hi and hi - lo == self._width:
                self._count += 1
                self._hi = hi
                return
            self._close()
            self._count, self._lo, self._hi, self._width = 1, lo, hi, hi - lo
        elif not lineage:
            if self._count and not self._width:
                self._count += 1
                return
            self._close()
            self._count, self._lo, self._hi, self._width = 1, None, None, 0
        else:
            self._close()
            self._runs.append([1, lineage, None, _GENERAL])

    def take(self, count: int, coverage: Coverage) -> None:
        """The next ``count`` buffered elements were taken: into ``coverage``."""
        self._close()
        runs, left = self._runs, count
        while left:
            run = runs[0]
            n, lo, _, width = run
            k = min(left, n)
            if width == _GENERAL:
                coverage.add(lo)
                self._open.remove_all(lo)
            elif width:
                end = lo + k * width
                coverage.add_run(k, lo, end, width)
                self._open.discard(lo, end)
                run[1] = end
            else:
                coverage.add_run(k, 0, 0, 0)
            if k == n:
                runs.popleft()
            else:
                run[0] = n - k
            left -= k

    def dropped(self) -> Lineage:
        """The keys handed that no element taken or buffered stands for."""
        self._close()
        rest = Ranges(self._open)
        for _, lo, hi, width in self._runs:
            if width == _GENERAL:
                rest.remove_all(lo)
            elif width:
                rest.discard(lo, hi)
        return tuple(rest)

    def _close(self) -> None:
        if self._count:
            self._runs.append([self._count, self._lo, self._hi, self._width])
            self._count, self._lo, self._hi, self._width = 0, None, None, 0
